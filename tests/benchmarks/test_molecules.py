"""The `molecules` subcommand: Ax Client loops over a molecule library."""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rdkit")

from benchmarks import molecules_bench  # noqa: E402
from benchmarks.__main__ import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::Warning")]

CONFIG = molecules_bench.MoleculeConfig(
    datasets=("freesolv",), runs=1, queries=3, n_init=4
)


HAS_BAYBE_CHEM = all(
    importlib.util.find_spec(name) is not None for name in ("baybe", "skfp")
)


@pytest.mark.parametrize(
    "method",
    [
        "chaining",
        "logei",
        "random",
        pytest.param(
            "baybe",
            marks=pytest.mark.skipif(
                not HAS_BAYBE_CHEM, reason="needs baybe[chem] (SubstanceParameter)"
            ),
        ),
    ],
)
def test_run_one_is_a_valid_screen(method):
    rec = molecules_bench.run_one("freesolv", method, seed=3, config=CONFIG)
    data, _ = molecules_bench.library("freesolv")
    items = rec["items"]
    assert len(items) == 4 + 3 == len(set(items))  # no molecule tested twice
    assert items[:4] == molecules_bench.initial_items(len(data), 4, seed=3)
    assert rec["values"] == [float(data.y[i]) for i in items]
    best = float(data.y.max())
    assert rec["regret"][0] == pytest.approx(best - max(rec["values"][:4]))
    assert rec["regret"][-1] == pytest.approx(best - max(rec["values"]))
    assert all(a >= b for a, b in zip(rec["regret"], rec["regret"][1:], strict=False))
    assert len(rec["step_seconds"]) == 3


@pytest.mark.parametrize(
    ("method", "model"),
    [
        (
            "qlognei@rdkit2d-botorch",
            {"encoding": "rdkit2d", "prior": "botorch", "kernel": "rbf"},
        ),
        (
            "qlognei@rdkit2d-baybe",
            {"encoding": "rdkit2d", "prior": "baybe", "kernel": "matern52"},
        ),
        pytest.param(
            "chaining@mordred-baybe",
            {
                "encoding": "mordred",
                "prior": "baybe",
                "kernel": "matern52",
                "cleaning": {"max_correlation": 0.7},
            },
            marks=pytest.mark.skipif(
                importlib.util.find_spec("mordred") is None,
                reason="needs the chem extra",
            ),
        ),
    ],
)
def test_a_model_variant_runs_the_method_on_that_model(method, model):
    """``method@variant``: the same initial molecules as the method on the
    Tanimoto Gram, on the descriptor model the record names; the variant's
    spec is molecule_surrogate_spec's with those options, its features
    cached (the same table as computed without a cache)."""
    from ax_chaining.molecules import molecule_features, molecule_surrogate_spec
    from ax_chaining.test_functions.molecules import load_dataset
    from benchmarks.testbeds import default_cache_dir

    rec = molecules_bench.run_one("freesolv", method, seed=3, config=CONFIG)
    assert rec["model"] == model
    assert rec["items"][:4] == molecules_bench.initial_items(642, 4, seed=3)
    assert len(set(rec["items"])) == 7
    variant = method.split("@")[1]
    spec, _ = molecules_bench.model_variant("freesolv", variant)
    options = {k: v for k, v in model.items() if k != "kernel"}
    smiles = load_dataset("freesolv").smiles
    path = default_cache_dir() / "features" / f"freesolv-{variant}"
    expected = molecule_surrogate_spec(smiles, duplicates="map", path=path, **options)
    got, want = spec.model_configs[0], expected.model_configs[0]
    assert got.covar_module_class is want.covar_module_class
    assert got.covar_module_options == want.covar_module_options
    if options["encoding"] == "mordred":
        return  # the cache is the same code for every encoding; Mordred's is slow
    cleaning = {"cleaning": options["cleaning"]} if "cleaning" in options else {}
    fresh = molecule_features(smiles, options["encoding"], duplicates="map", **cleaning)
    np.testing.assert_array_equal(np.load(path / "features.npy"), fresh.values)


def test_same_seed_same_run():
    a = molecules_bench.run_one("freesolv", "chaining", seed=1, config=CONFIG)
    b = molecules_bench.run_one("freesolv", "chaining", seed=1, config=CONFIG)
    assert a["items"] == b["items"]


def test_worker_processes_give_the_same_records(tmp_path):
    # --jobs spreads runs over processes; each run seeds itself, so the
    # records equal those made in this process.
    argv = ["molecules", "--small", "--queries", "2", "--methods", "chaining,random"]
    out = tmp_path / "jobs"
    assert main([*argv, "--out", str(out), "--jobs", "2", "--no-progress"]) == 0
    paths = sorted((out / "runs").glob("*/*/seed_*.json"))
    assert len(paths) == 2 * molecules_bench.SMALL_CONFIG.runs
    for path in paths:
        rec = json.loads(path.read_text())
        method, seed = path.parent.name, int(path.stem.split("_")[1])
        small = molecules_bench.SMALL_CONFIG
        config = molecules_bench.MoleculeConfig(
            datasets=small.datasets, runs=small.runs, queries=2, n_init=small.n_init
        )
        again = molecules_bench.run_one("freesolv", method, seed=seed, config=config)
        assert rec["items"] == again["items"]


def test_top1_and_summary_on_hand_made_records():
    def rec(method, seed, regret, hit):
        return {
            "dataset": "esol",
            "method": method,
            "seed": seed,
            "num_molecules": 100,
            "regret": regret,
            "step_seconds": [0.1] * (len(regret) - 1),
            "queries_to_top1": hit,
        }

    records = [
        rec("chaining", 0, [2.0, 1.0, 0.0], 2),
        rec("chaining", 1, [2.0, 0.0, 0.0], 1),
        rec("random", 0, [2.0, 2.0, 1.0], None),
        rec("random", 1, [2.0, 2.0, 2.0], None),
    ]
    s = molecules_bench.summarize(records)
    chain, rand = s["rows"]
    assert chain["regret"]["2"] == (0.0, 0.0)
    assert rand["regret"]["2"][0] == pytest.approx(1.5)
    assert chain["auc"][0] == pytest.approx((1 + 0 + 0 + 0) / 2)
    assert chain["top1_reached"] == 2 and chain["top1_median"] == 1.5
    assert rand["top1_reached"] == 0 and rand["top1_median"] is None
    (p,) = s["paired"]
    assert p["final"]["mean"] == pytest.approx(-1.5)
    assert (p["final"]["wins"], p["final"]["ties"], p["final"]["losses"]) == (2, 0, 0)
    assert "> T" in molecules_bench.format_markdown(s)


def test_records_of_a_renamed_variant_are_read_under_its_new_name():
    """A record made as ``qlognei@default`` (the default model was then RDKit's
    descriptors under BoTorch's priors) is summarized as
    ``qlognei@rdkit2d-botorch``; other names are unchanged."""
    base = {"dataset": "esol", "seed": 0, "num_molecules": 100}
    base |= {"regret": [1.0, 0.0], "step_seconds": [0.1], "queries_to_top1": 1}
    records = [{**base, "method": m} for m in ("qlognei@default", "chaining")]
    s = molecules_bench.summarize(records)
    assert [r["method"] for r in s["rows"]] == ["chaining", "qlognei@rdkit2d-botorch"]
    assert molecules_bench.current_name("esol@default") == "esol@rdkit2d-botorch"
    assert molecules_bench.current_name("esol@mordred-chen") == "esol@mordred-chen"
    assert molecules_bench.current_name("chaining") == "chaining"


def test_cli_molecules_small_end_to_end(tmp_path, summary_from_packed):
    argv = ["molecules", "--small", "--queries", "2"]
    out = tmp_path / "work"
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    runs = sorted((out / "runs").glob("*/*/seed_*.json"))
    # Without --methods: every method but BayBE (an extra).
    assert len(runs) == len(molecules_bench.DEFAULT_METHODS) * 2
    summary = json.loads((out / "summary.json").read_text())
    assert [r["method"] for r in summary["rows"]] == list(
        molecules_bench.DEFAULT_METHODS
    )
    assert all(r["runs"] == 2 and r["queries"] == 2 for r in summary["rows"])
    # Values: the final regret of a row is the mean over its runs.
    finals = [json.loads(p.read_text())["regret"][-1] for p in runs[:2]]
    method = runs[0].parent.name
    row = next(r for r in summary["rows"] if r["method"] == method)
    assert row["regret"]["2"][0] == pytest.approx(sum(finals) / 2)
    assert (out / "simple_regret.png").stat().st_size > 0
    summary_from_packed("molecules", out, argv, ("rows", "paired"))
    assert (tmp_path / "molecules_from_packed" / "simple_regret.png").exists()
    with pytest.raises(SystemExit, match="dataset"):
        main(["molecules", "--dataset", "qm9", "--out", str(tmp_path)])


def test_cli_bonus_small(tmp_path, capsys):
    """``bonus --small``: FreeSolv, seed 0, a JSON line at each of the first
    two queries, with Algorithm 1's levels and the two bonuses at that step;
    ``--table`` tabulates the lines."""
    import math

    from ax_chaining.acquisition import gp_ucb_beta

    assert main(["bonus", "--small"]) == 0
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines()]
    data, _ = molecules_bench.library("freesolv")
    y, n = data.y, len(data.y)
    assert [r["queries"] for r in lines] == [1, 2]
    for r in lines:
        assert (r["dataset"], r["seed"]) == ("freesolv", 0)
        assert r["t"] == 10 + r["queries"]  # 10 initial molecules, then queries
        assert r["levels"] == len(r["eps"]) == len(r["H"]) == len(r["cover_sizes"])
        assert (
            r["cover_sizes"] == sorted(r["cover_sizes"]) and r["cover_sizes"][-1] <= n
        )
        assert r["sigma_min_used"] >= r["sigma"]["min"] * (1 - 1e-9) > 0
        assert r["sqrt_beta"] == pytest.approx(math.sqrt(gp_ucb_beta(n, r["t"], 0.05)))
        for q in (r["sigma"], r["bonus"], r["bonus_over_gp_ucb"], r["mean"]):
            assert q["min"] <= q["p10"] <= q["median"] <= q["p90"] <= q["max"]
        assert r["value_chaining_pick"] == float(y[r["pick_chaining"]])
        assert r["value_gp_ucb_pick"] == float(y[r["pick_gp_ucb"]])
        assert r["value_mean_pick"] == float(y[r["pick_mean"]])
        assert r["best_value"] == float(y.max())
        assert 0 <= r["best_rank_chaining"] < n and 0 <= r["best_rank_gp_ucb"] < n
        # Chaining-UCB's pick maximizes mean + bonus, with every bonus >= 0:
        # its value is at least the largest posterior mean; it is the molecule
        # the loop's own step picked.
        pick = r["posterior_at_chaining_pick"]
        assert pick["bonus"] >= 0 and pick["sigma"] > 0
        assert pick["mean"] + pick["bonus"] >= r["mean"]["max"] - 1e-9
        assert r["loop_pick"] == r["pick_chaining"]
    # Tested: the 10 initial molecules, then each step's pick.
    initial = molecules_bench.initial_items(n, 10, seed=0)
    tested_sets = (initial, [*initial, lines[0]["loop_pick"]])
    for r, tested in zip(lines, tested_sets, strict=True):
        assert r["pick_mean"] not in tested  # greedy over the untested
        ranks = r["untested_rank_of_best"]
        # Counting only untested molecules never ranks the best lower.
        assert ranks["chaining"] <= r["best_rank_chaining"]
        assert ranks["gp_ucb"] <= r["best_rank_gp_ucb"]
        assert all(0 <= v < n - len(tested) for v in ranks.values())
        # The mean ranks the best molecule first exactly when greedy picks it.
        assert (ranks["mean"] == 0) == (r["pick_mean"] == int(y.argmax()))
    path = tmp_path / "bonus.jsonl"
    path.write_text(out)
    assert main(["bonus", "--table", str(path)]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| dataset | seed | queries | prior sd s | cover sizes |")
    assert "the best molecule among the untested: mean / chaining / GP-UCB |" in table
    sizes = ", ".join(map(str, lines[1]["cover_sizes"]))
    assert f"| freesolv | 0 | 2 | {lines[1]['scale']:.2f} | {sizes} |" in table
    got = lines[1]["untested_rank_of_best"]
    ranks = [got[k] + 1 for k in ("mean", "chaining", "gp_ucb")]
    assert table.splitlines()[-1].endswith(" | {} / {} / {} |".format(*ranks))


def test_untested_ranks_by_hand():
    """Only molecules not yet tested count above the best one: a tested
    molecule with a larger score does not, an untested one does."""
    from benchmarks.bonus import untested_ranks

    scores = {"mean": np.array([3.0, 1.0, 2.0, 2.5]), "ucb": np.array([0, 5, 4, 1.0])}
    tested = np.array([True, False, False, False])
    assert untested_ranks(scores, 2, tested) == {"mean": 1, "ucb": 1}
    assert untested_ranks(scores, 2, np.zeros(4, bool)) == {"mean": 2, "ucb": 1}
    assert untested_ranks(scores, 1, tested) == {"mean": 2, "ucb": 0}


def test_cli_bonus_on_a_model_variant(tmp_path, capsys):
    """``bonus --model``: the same diagnostic on a descriptor model of the
    molecule benchmark (its rows name it, and the table shows it after the
    library), a different posterior from the Tanimoto Gram's; an unknown
    model is refused with the allowed names."""
    pytest.importorskip("rdkit")
    assert main(["bonus", "--small"]) == 0
    gram = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["bonus", "--small", "--model", "rdkit2d-botorch"]) == 0
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines()]
    assert [r["model"] for r in lines] == ["rdkit2d-botorch"] * 2
    assert "model" not in gram[0]
    assert lines[0]["sigma"] != gram[0]["sigma"]
    path = tmp_path / "bonus.jsonl"
    path.write_text(out)
    assert main(["bonus", "--table", str(path)]) == 0
    assert "| freesolv@rdkit2d-botorch | 0 | 1 |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["bonus", "--small", "--model", "tanimoto"])
    assert "mordred-chen" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name",
    [
        "baybe",
        "default_model",
        "bonus_shape",
        "baybe_priors",
        "baybe_priors_chaining",
        "baybe_model",
        "baybe_model_acquisitions",
    ],
)
def test_committed_baybe_summaries_are_remade_from_the_committed_records(
    name, tmp_path, monkeypatch
):
    """Each summary of the comparison with BayBE is what its stored command
    makes from the committed records alone (byte for byte), and its tables are
    on the page."""
    committed = ROOT / "docs" / "results" / "molecules" / name
    command = json.loads((committed / "summary.json").read_text())["command"]
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "benchmarks"]
    argv = argv[3:]
    records = argv[argv.index("--records") + 1]
    assert records == "benchmarks/results/molecules.jsonl.gz"
    assert argv[argv.index("--out") + 1] == f"docs/results/molecules/{name}"
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / records).symlink_to(ROOT / records)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    for file in ("summary.md", "summary.json"):
        made = tmp_path / "docs" / "results" / "molecules" / name / file
        assert made.read_bytes() == (committed / file).read_bytes(), file
    summary = (committed / "summary.md").read_text()
    page = (ROOT / "docs" / "results" / "molecules.md").read_text()
    tables = [b for b in summary.split("\n\n") if b.startswith("|")]
    assert tables
    for table in tables:
        assert table in page, table.splitlines()[0]
