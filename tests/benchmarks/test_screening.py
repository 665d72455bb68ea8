"""The screening benchmark: nested libraries, MolPAL's top-k fractions by hand,
and a real Ax loop over a small fingerprint library."""

from __future__ import annotations

import numpy as np
import pytest

from ax_chaining.kernels import PackedFingerprints
from benchmarks.screening import (
    SMALL_CONFIG,
    SMALL_METHODS,
    SMALL_SIZE,
    ScreeningConfig,
    feature_cache,
    format_markdown,
    library_rows,
    prepare,
    run_one,
    source_smiles,
    summarize,
)


def test_libraries_are_nested_and_sorted() -> None:
    small, large = library_rows(1000, 30), library_rows(1000, 200)
    assert np.all(np.diff(small) > 0) and len(small) == 30
    assert set(small) <= set(large)
    assert not np.array_equal(small, np.arange(30))  # a permutation, not a prefix


@pytest.fixture(scope="module")
def tiny_library(tmp_path_factory):
    """40 molecules of 64 random bits, and scores of the largest (30) library."""
    path = tmp_path_factory.mktemp("screen")
    rng = np.random.default_rng(0)
    bits = (rng.random((40, 64)) < 0.3).astype(np.uint8)
    bits[:, 0] = 1  # no empty fingerprint
    fingerprints = PackedFingerprints.from_bits(bits).save(path / "fp.npy")
    scores = rng.normal(size=30)
    np.save(path / "mpo_30.npy", scores)
    return str(fingerprints), str(path / "mpo_30.npy"), scores


def test_random_run_counts_the_top_k_by_hand(tiny_library) -> None:
    fingerprints, scores_path, scores = tiny_library
    config = ScreeningConfig(queries=6, n_init=3, top_k=(2, 5))
    rec = run_one(20, "random", 4, config, fingerprints, scores_path, max_size=30)
    # The size-20 library's scores are those of its rows within the size-30 one.
    rows20, rows30 = library_rows(40, 20), library_rows(40, 30)
    y = scores[[list(rows30).index(r) for r in rows20]]
    items = rec["items"]
    assert len(items) == len(set(items)) == 9
    for k in (2, 5):
        top = set(np.argsort(-y)[:k].tolist())
        by_hand = np.cumsum([i in top for i in items]).tolist()
        assert rec["found"][str(k)] == by_hand
    assert rec["steps"] == []


def test_greedy_ax_loop_records_and_is_reproducible(tiny_library) -> None:
    fingerprints, scores_path, _ = tiny_library
    config = ScreeningConfig(queries=2, n_init=3, top_k=(2,))
    one = run_one(30, "greedy", 1, config, fingerprints, scores_path, max_size=30)
    assert len(set(one["items"])) == 5 and max(one["items"]) < 30
    assert [set(s) for s in one["steps"]] == [
        {"total", "fit", "acquisition", "certificate", "checked"}
    ] * 2
    assert all(s["checked"] for s in one["steps"])  # every step by default
    assert all(
        sum(v for k, v in s.items() if k not in ("total", "checked")) <= s["total"]
        for s in one["steps"]
    )
    two = run_one(30, "greedy", 1, config, fingerprints, scores_path, max_size=30)
    assert two["items"] == one["items"]


def test_summary_fractions_by_hand() -> None:
    config = ScreeningConfig(queries=2, n_init=1, top_k=(2,)).key()
    recs = [
        {
            "size": 10,
            "method": m,
            "seed": s,
            "config": config,
            "items": [0, 1, 2],
            "found": {"2": f},
            "steps": [],
            "peak_rss_mb": 100.0 + s,
        }
        for m, s, f in [("random", 0, [0, 1, 2]), ("random", 1, [0, 0, 1])]
    ]
    (row,) = summarize(recs)["rows"]
    # After 0, 1, 2 queries: (0 + 0) / 2 / 2, (1 + 0) / 2 / 2, (2 + 1) / 2 / 2.
    assert row["found"]["2"]["mean"] == [0.0, 0.25, 0.75]
    assert row["peak_rss_mb"] == 101.0 and row["queries"] == 2
    table = format_markdown(summarize(recs))
    assert "| random | 0.0% | 75.0% | - | 101 | 2 |" in table


def test_config_names_its_library() -> None:
    # MOSES records name no library (as before the field), so stored runs
    # stay reusable; the small preset's name ESOL. Likewise the model: the
    # Tanimoto runs name none.
    assert "library" not in ScreeningConfig().key()
    assert SMALL_CONFIG.key()["library"] == "esol"
    with pytest.raises(ValueError, match="`library` must be 'moses' or 'esol'"):
        ScreeningConfig(library="zinc")
    assert "model" not in ScreeningConfig().key()
    assert ScreeningConfig(model="default").key()["model"] == "default"
    with pytest.raises(ValueError, match="`model` must be"):
        ScreeningConfig(model="mordred")


@pytest.mark.slow  # Mordred on 30 molecules, then two Ax loops
def test_default_model_runs_over_its_own_features(tmp_path) -> None:
    """``--model default``: each library size gets its own cached features
    (the size-20 library's rows, not the size-30 one's), the scores are the
    MPO of the largest library's molecules, and a loop over the size-20
    library on the default molecule model is reproducible and says which
    model it ran."""
    pytest.importorskip("mordred")
    from benchmarks.testbeds import mpo

    config = ScreeningConfig(
        queries=2, n_init=3, top_k=(2,), library="esol", model="default"
    )
    library, scores_path = prepare(tmp_path, [20, 30], config, progress=False)
    smiles = source_smiles(tmp_path, config)
    for size in (20, 30):
        table = np.load(feature_cache(tmp_path, config, size) / "features.npy")
        assert table.shape[0] == size and np.isfinite(table).all()
    rows30 = library_rows(len(smiles), 30)
    np.testing.assert_allclose(
        np.load(scores_path), [mpo(smiles[i]) for i in rows30], equal_nan=True
    )
    one = run_one(20, "greedy", 1, config, str(library), str(scores_path), 30)
    assert len(set(one["items"])) == 5 and max(one["items"]) < 20
    assert one["config"]["model"] == "default"
    two = run_one(20, "greedy", 1, config, str(library), str(scores_path), 30)
    assert two["items"] == one["items"]
    table = format_markdown(summarize([one]))
    assert "| greedy (posterior mean), default model (Mordred, CHEN priors) |" in table


@pytest.mark.slow  # RDKit featurizing, then one process per run
def test_cli_small_preset_end_to_end(tmp_path, capsys) -> None:
    """``screening --small``: the vendored ESOL molecules (featurized and
    scored with RDKit), Chaining-UCB and random search, one seed, three
    queries, each run in its own process; the summary printed and written,
    the figure drawn, and a second call reuses the runs."""
    import json
    import shlex

    pytest.importorskip("rdkit")
    from benchmarks.__main__ import main
    from benchmarks.records import load_records

    out, cache = tmp_path / "out", tmp_path / "cache"
    args = ["screening", "--small", "--cache", str(cache), "--out", str(out)]
    args.append("--no-progress")
    assert main(args) == 0
    text = capsys.readouterr().out
    n_init, queries = SMALL_CONFIG.n_init, SMALL_CONFIG.queries
    records = load_records(out, "screening")
    assert sorted(r["method"] for r in records) == sorted(SMALL_METHODS)
    for r in records:
        assert (r["size"], r["seed"]) == (SMALL_SIZE, 0)
        assert r["config"] == SMALL_CONFIG.key()
        items = r["items"]
        assert len(set(items)) == len(items) == n_init + queries
        assert all(0 <= i < SMALL_SIZE for i in items)
        assert r["peak_rss_mb"] > 0
    # Every method of a run starts from the same molecules.
    assert len({tuple(r["items"][:n_init]) for r in records}) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["command"] == "python -m benchmarks " + shlex.join(args)
    rows = {r["method"]: r for r in summary["rows"]}
    assert set(rows) == set(SMALL_METHODS)
    for row in rows.values():
        assert (row["size"], row["runs"], row["queries"]) == (SMALL_SIZE, 1, queries)
        assert row["top_k"] == list(SMALL_CONFIG.top_k)
        for k in SMALL_CONFIG.top_k:
            mean = row["found"][str(k)]["mean"]
            assert len(mean) == queries + 1
            assert all(0 <= a <= b <= 1 for a, b in zip(mean, mean[1:], strict=False))
    seconds = rows["chaining"]["median_seconds"]
    parts = [seconds[p] for p in ("fit", "acquisition", "certificate")]
    # Medians over steps: each part's is at most the whole step's.
    assert all(0 < p <= seconds["total"] for p in parts)
    assert set(rows["random"]["median_seconds"].values()) == {None}
    assert f"**N = {SMALL_SIZE}** (after {n_init} initial molecules)" in text
    assert "| Chaining-UCB |" in text and "| random |" in text
    md = (out / "summary.md").read_text().split("```\n\n", 1)[1]
    assert md.rstrip() == text.rstrip()
    assert (out / "screening.png").stat().st_size > 0
    # A second call reuses the stored runs.
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("seed_*.json")}
    assert len(stamps) == len(SMALL_METHODS)
    assert main(args) == 0
    assert capsys.readouterr().out == text
    assert {p: p.stat().st_mtime_ns for p in out.rglob("seed_*.json")} == stamps
