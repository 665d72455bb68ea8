"""The `reactions` subcommand: Ax Client loops over the Buchwald-Hartwig table."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

pytest.importorskip("rdkit")

from ax_chaining.test_functions.reactions import load_reactions  # noqa: E402
from benchmarks import reactions_bench  # noqa: E402
from benchmarks.__main__ import main  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::Warning")

TINY = reactions_bench.ReactionConfig(runs=1, queries=2, n_init=5)
Y = load_reactions().y.numpy()


def _check_record(rec, method, seed):
    """What every record must hold, against numbers computed here."""
    items = rec["items"]
    assert (rec["dataset"], rec["method"], rec["seed"]) == (
        "buchwald-hartwig",
        method,
        seed,
    )
    assert rec["num_reactions"] == 3955 and rec["config"] == TINY.key()
    # The protocol's initial reactions, then two new ones.
    rng = np.random.default_rng(seed)
    assert items[:5] == rng.choice(3955, 5, replace=False).tolist()
    assert len(items) == 7 == len(set(items))
    assert rec["values"] == [float(Y[i]) for i in items]
    # Regret after the initial reactions and after each query: max y minus the
    # best tested so far.
    best = np.maximum.accumulate(rec["values"])[4:]
    assert rec["regret"] == [float(Y.max() - b) for b in best]
    # Top 1%: the 40th best yield of 3,955 (ceil(39.55)).
    assert rec["top1_threshold"] == float(np.sort(Y)[-40])
    hits = [q for q, b in enumerate(best) if b >= rec["top1_threshold"]]
    assert rec["queries_to_top1"] == (hits[0] if hits else None)
    assert len(rec["step_seconds"]) == 2


def test_random_run_by_hand():
    rec = reactions_bench.run_one("buchwald-hartwig", "random", seed=0, config=TINY)
    _check_record(rec, "random", 0)
    # Seed 0 starts from 89.08% (row 1217): the best yield, 99.99999%, is
    # 10.92 points away until a query beats it.
    assert rec["items"][:5] == [2517, 2020, 1066, 1217, 3360]
    assert rec["regret"][0] == pytest.approx(99.99999 - 89.07661609)
    assert rec["step_seconds"] == [0.0, 0.0]


def test_onehot_run_is_a_valid_screen_and_follows_its_seed():
    rec = reactions_bench.run_one(
        "buchwald-hartwig", "qlognei@onehot", seed=1, config=TINY
    )
    _check_record(rec, "qlognei@onehot", 1)
    # One indicator per distinct component: 4 + 22 + 3 + 15.
    assert rec["encoding"] == "onehot" and rec["num_features"] == 44
    assert rec["features_per_component"] == {
        "ligand": 4,
        "additive": 22,
        "base": 3,
        "aryl halide": 15,
    }
    assert rec["model"] == {"kernel": "rbf", "prior": "botorch"}
    again = reactions_bench.run_one(
        "buchwald-hartwig", "qlognei@onehot", seed=1, config=TINY
    )
    assert again["items"] == rec["items"]


def test_bad_configs_and_methods_are_refused():
    with pytest.raises(ValueError, match="dataset"):
        reactions_bench.ReactionConfig(datasets=("suzuki",))
    with pytest.raises(ValueError, match="`queries` must be a positive int"):
        reactions_bench.ReactionConfig(queries=0)
    with pytest.raises(ValueError, match="method"):
        reactions_bench.run_one("buchwald-hartwig", "chaining", 0, TINY)
    big = reactions_bench.ReactionConfig(queries=3951, n_init=5)
    with pytest.raises(ValueError, match="exceeds the 3955 reactions"):
        reactions_bench.run_one("buchwald-hartwig", "random", 0, big)


def test_summary_pairs_every_method_with_the_default_model():
    def rec(method, seed, regret, step=0.5):
        return {
            "dataset": "buchwald-hartwig",
            "method": method,
            "seed": seed,
            "num_reactions": 3955,
            "config": TINY.key(),
            "regret": regret,
            "step_seconds": [step] * (len(regret) - 1),
            "queries_to_top1": None,
        }

    records = [
        rec("qlognei@mordred", 0, [5.0, 1.0, 0.0]),
        rec("qlognei@mordred", 1, [5.0, 5.0, 2.0]),
        rec("random", 0, [5.0, 5.0, 3.0], step=0.0),
        rec("random", 1, [5.0, 4.0, 4.0], step=0.0),
        rec("baybe@substance", 0, [5.0, 0.0, 0.0], step=0.25),
        rec("baybe@substance", 1, [5.0, 1.0, 1.0], step=0.25),
    ]
    summary = reactions_bench.summarize(records)
    assert [r["method"] for r in summary["rows"]] == [
        "qlognei@mordred",
        "baybe@substance",
        "random",
    ]
    assert summary["rows"][0]["num_reactions"] == 3955
    pair = {p["method"]: p for p in summary["paired"]}["random"]
    assert pair["final"]["mean"] == pytest.approx(((0 - 3) + (2 - 4)) / 2)
    text = reactions_bench.format_markdown(summary)
    assert "**Buchwald-Hartwig** (3955 reactions, T = 2 queries" in text
    assert (
        "Paired differences, qLogNEI, Mordred (default model) minus each method" in text
    )
    # Each run's final regret, and "-" for a run that never reached the top 1%.
    assert "| qLogNEI, Mordred (default model) | 0.00, 2.00 | -, - |" in text
    # Seconds per step over BayBE's default's in the same runs; random has none.
    assert "| s/step | ÷ ref | runs |" in text
    assert "| 0.500 | 2.00 | 2 |" in text and "| 0.000 | - | 2 |" in text
    assert "| Random | 3.00, 4.00 | -, - |" in text
    # Records that hold each step's certificate seconds: the step without them.
    for r in records[:2]:
        r["certificate_seconds"] = [0.1, 0.1]
    text = reactions_bench.format_markdown(reactions_bench.summarize(records))
    assert "| ÷ ref | certificate s/step | ÷ ref without it | runs |" in text
    assert "| 0.500 | 2.00 | 0.100 | 1.60 | 2 |" in text
    assert "| 0.250 | 1.00 | - | - | 2 |" in text


@pytest.mark.slow
def test_cli_reactions_small_end_to_end(tmp_path, summary_from_packed):
    argv = ["reactions", "--small", "--methods", "random,chaining@onehot"]
    out = tmp_path / "work"
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    runs = sorted((out / "runs" / "buchwald-hartwig").glob("*/seed_0.json"))
    assert [p.parent.name for p in runs] == ["chaining@onehot", "random"]
    summary = json.loads((out / "summary.json").read_text())
    final = json.loads(runs[0].read_text())["regret"][-1]
    row = summary["rows"][0]
    assert row["method"] == "chaining@onehot" and row["regret"]["2"][0] == final
    assert (out / "simple_regret.png").stat().st_size > 0
    summary_from_packed("reactions", out, argv, ("rows", "paired"))
    # A second call finds every run stored and reuses it.
    before = runs[0].read_bytes()
    assert main([*argv, "--out", str(out), "--no-progress", "--no-plot"]) == 0
    assert runs[0].read_bytes() == before


@pytest.mark.slow
@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("baybe", "skfp")),
    reason="needs baybe[chem]",
)
@pytest.mark.parametrize("method", ["baybe@onehot", "baybe@substance"])
def test_baybe_runs_from_the_same_initial_reactions(method):
    rec = reactions_bench.run_one("buchwald-hartwig", method, seed=2, config=TINY)
    _check_record(rec, method, 2)
    assert rec["encoding"] == method.split("@")[1] and rec["num_features"] > 0
