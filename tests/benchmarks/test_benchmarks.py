"""The paper-experiment harness: output files, summary, resume and CLI.

Problem-independent checks on tiny instances (N = 150, two runs, five queries):
they test the bookkeeping, not the relative merit of the methods.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from benchmarks import runner
from benchmarks.__main__ import main
from benchmarks.records import LAYOUTS, load_records
from benchmarks.runner import (
    METHODS,
    BenchmarkConfig,
    format_summary_markdown,
    run_benchmark,
    select_results,
    summarize,
)

N, RUNS, ITERS = 150, 2, 5

pytestmark = pytest.mark.filterwarnings("ignore::Warning:botorch")


@pytest.fixture(autouse=True)
def _se_cache(tmp_path_factory, monkeypatch):
    # Keep SE samples out of the user's cache directory.
    monkeypatch.setenv("AX_CHAINING_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def graph_job(tmp_path_factory):
    """Every method, two runs of five queries on a 150-graph problem."""
    out = tmp_path_factory.mktemp("graph_job")
    records = run_benchmark(
        problems=["graph"],
        methods=METHODS,
        runs=RUNS,
        iters=ITERS,
        n=N,
        out=out,
        progress=False,
    )
    return out, records


def test_output_files_are_well_formed(graph_job):
    out, records = graph_job
    assert len(records) == RUNS * len(METHODS)
    for method in METHODS:
        for seed in range(RUNS):
            path = LAYOUTS["paper"].path(out, "graph", method, seed)
            record = json.loads(path.read_text())
            assert record["complete"] is True
            assert (record["problem"], record["method"]) == ("graph", method)
            assert record["seed"] == seed
            assert record["config"]["n"] == N
            assert len(record["init_indices"]) == 10
            for key in (
                "queries",
                "y",
                "f_queries",
                "simple_regret",
                "simple_regret_queries",
                "cumulative_regret",
                "step_seconds",
            ):
                assert len(record[key]) == ITERS, key
            assert all(0 <= q < N for q in record["queries"])
            S = [record["simple_regret_init"], *record["simple_regret"]]
            assert all(s >= 0 for s in S)
            assert all(b <= a + 1e-12 for a, b in zip(S, S[1:], strict=False))
            # Counting the initial design can only lower S_n.
            assert all(
                s <= q + 1e-12
                for s, q in zip(
                    record["simple_regret"],
                    record["simple_regret_queries"],
                    strict=True,
                )
            )
            R = record["cumulative_regret"]
            assert R[0] >= 0
            assert all(b >= a - 1e-12 for a, b in zip(R, R[1:], strict=False))
            assert all(t >= 0 for t in record["step_seconds"])


def test_methods_share_the_initial_design(graph_job):
    _, records = graph_job
    for seed in range(RUNS):
        inits = {
            (tuple(r["init_indices"]), tuple(r["init_y"]))
            for r in records
            if r["seed"] == seed
        }
        assert len(inits) == 1
    seed0 = {r["method"]: r for r in records if r["seed"] == 0}
    # Random search never re-queries, nor queries an initial point.
    q = seed0["random"]["queries"]
    assert len(set(q)) == len(q)
    assert not set(q) & set(seed0["random"]["init_indices"])
    assert seed0["chaining"]["diagnostics"]["num_levels"]


def test_summary_rows_and_columns(graph_job):
    _, records = graph_job
    summary = summarize(records)
    rows = summary["rows"]
    assert [r["method"] for r in rows] == list(METHODS)
    for row in rows:
        assert row["runs"] == RUNS and row["T"] == ITERS and row["n"] == N
        # Checkpoints 10, 25, ... exceed T = 5: only T itself is reported.
        assert row["checkpoints"] == [ITERS]
        for key in ("S_5_mean", "S_5_se", "auc_mean", "R_T_mean", "seconds_per_step"):
            assert key in row and row[key] >= 0
        curve = summary["curves"]["graph"][row["method"]]
        assert len(curve["simple_regret_mean"]) == ITERS + 1
        assert len(curve["cumulative_regret_mean"]) == ITERS
    paired = summary["paired"]
    assert [r["method"] for r in paired] == [m for m in METHODS if m != "chaining"]
    for r in paired:
        assert r["wins"] + r["ties"] + r["losses"] == r["runs"] == RUNS
    md = format_summary_markdown(summary)
    first, second = md.split("**Paired differences")
    assert second.count("| Graph kernel |") == len(METHODS) - 1
    table = [line for line in first.splitlines() if line.startswith("|")]
    assert table[0].split("|")[1:-1] == [
        " method ",
        " S_5 ",
        " AUC (sum S_n) ",
        " R_T ",
        " s/step ",
        " runs ",
    ]
    assert len(table) == 2 + len(METHODS)


def test_resume_skips_finished_runs(tmp_path, monkeypatch):
    kwargs = dict(
        problems=["himmelblau"], runs=2, iters=3, n=60, out=tmp_path, progress=False
    )
    run_benchmark(methods=["random", "ucb"], **kwargs)
    paths = [
        LAYOUTS["paper"].path(tmp_path, "himmelblau", m, s)
        for m in ("random", "ucb")
        for s in (0, 1)
    ]
    mtimes = {p: os.stat(p).st_mtime_ns for p in paths}
    calls = []
    real = runner.run_method

    def counting(problem, method, seed, *args, **kw):
        calls.append((method, seed))
        return real(problem, method, seed, *args, **kw)

    monkeypatch.setattr(runner, "run_method", counting)
    # A truncated file (interrupted write by another tool) is recomputed.
    paths[1].write_text('{"complete": tr')
    records = run_benchmark(methods=["random", "ucb", "logei"], **kwargs)
    assert sorted(calls) == [("logei", 0), ("logei", 1), ("random", 1)]
    assert len(records) == 6
    for p in paths:
        if p != paths[1]:
            assert os.stat(p).st_mtime_ns == mtimes[p]
    # Nothing left to do: no run at all.
    calls.clear()
    run_benchmark(methods=["random", "ucb", "logei"], **kwargs)
    assert calls == []
    # Another configuration in the same directory is refused, not overwritten.
    with pytest.raises(ValueError, match="another configuration"):
        run_benchmark(methods=["random"], **{**kwargs, "iters": 4})
    assert (
        len(
            select_results(
                load_records(tmp_path, "paper"),
                ["himmelblau"],
                ["random", "ucb", "logei"],
            )
        )
        == 6
    )


def test_same_seed_same_result(tmp_path):
    config = BenchmarkConfig(n=80, iters=3, runs=1)
    problem = runner.make_problem("se", 80, 0)
    a = runner.run_method(problem, "chaining", 0, config)
    b = runner.run_method(problem, "chaining", 0, config)
    assert a["queries"] == b["queries"] and a["y"] == b["y"]


def test_cli_paper_small_with_overrides(
    tmp_path, capsys, monkeypatch, summary_from_packed
):
    out = tmp_path / "cli"
    argv = ["paper", "--small", "--problem", "se", "--methods", "chaining,random"]
    argv += ["--runs", "2", "--iters", "3", "--n", "100"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "N=100 runs=2 iters=3" in text
    lines = [json.loads(x) for x in text.splitlines() if x.startswith('{"summary_row"')]
    assert {row["summary_row"]["method"] for row in lines} == {"chaining", "random"}
    assert (out / "summary.md").read_text().count("| Chaining-UCB |") == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["runs"] == 2 and summary["config"]["n"] == 100
    assert summary["command"] == "python -m benchmarks " + " ".join(
        [*argv, "--out", str(out), "--no-progress"]
    )
    assert (out / "simple_regret.png").stat().st_size > 0
    record = json.loads((out / "se" / "random" / "run001.json").read_text())
    rows = {r["method"]: r for r in summary["rows"]}
    assert rows["random"]["S_3_mean"] == pytest.approx(
        sum(
            r["simple_regret"][-1]
            for r in select_results(load_records(out, "paper"), ["se"], ["random"])
        )
        / 2
    )
    assert record["seed"] == 1 and len(record["simple_regret"]) == 3

    packed = summary_from_packed("paper", out, argv, ("rows", "curves", "paired"))
    remade = tmp_path / "paper_from_packed"
    assert (remade / "simple_regret.png").stat().st_size > 0
    assert (remade / "cumulative_regret.png").stat().st_size > 0
    # Only the runs of the requested configuration enter, as from --out.
    fewer = [*argv[:-6], "--runs", "1", "--iters", "3", "--n", "100"]
    assert (
        main(
            [
                *fewer,
                "--records",
                str(packed),
                "--summary-only",
                "--out",
                str(tmp_path / "one"),
            ]
        )
        == 0
    )
    one = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert {r["runs"] for r in one["rows"]} == {1}

    # Unpacked, the records resume a run: nothing is recomputed.
    again = tmp_path / "unpacked"
    assert main(["unpack", "paper", str(packed), str(again)]) == 0
    assert json.loads((again / "se" / "random" / "run001.json").read_text()) == record

    def fail(*args, **kwargs):
        raise AssertionError("a stored run was recomputed")

    monkeypatch.setattr(runner, "run_method", fail)
    assert main([*argv, "--out", str(again), "--no-progress", "--no-plot"]) == 0
    assert json.loads((again / "summary.json").read_text())["rows"] == summary["rows"]


def test_cli_figure1_and_errors(tmp_path, capsys):
    assert main(["figure1", "--out", str(tmp_path), "--n", "120"]) == 0
    assert (tmp_path / "figure1.png").stat().st_size > 0
    info = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert info["cover_sizes"] and info["beta"] > 0
    with pytest.raises(SystemExit):
        main(["paper", "--problem", "rosenbrock", "--out", str(tmp_path)])


def test_figure1_targets_are_shifted():
    from benchmarks.plots import figure1_data

    data = figure1_data(n=100, num_obs=4)
    for key in ("chaining", "gp_ucb"):
        # Exploration term minus its minimum over X is >= 0, and 0 somewhere.
        explore = data[key] - data["mean"]
        assert float(explore.min()) == pytest.approx(0.0, abs=1e-12)


def test_cli_speed_dispatch(monkeypatch, capsys):
    import benchmarks as package

    calls = []
    fake = type(sys)("benchmarks.speed")
    fake.main = lambda argv: calls.append(argv) or 0
    monkeypatch.setitem(sys.modules, "benchmarks.speed", fake)
    monkeypatch.setattr(package, "speed", fake, raising=False)
    assert main(["speed", "--n", "100"]) == 0
    assert calls == [["--n", "100"]]
    # Without the module: a clear message and a non-zero status.
    monkeypatch.delattr(package, "speed")
    monkeypatch.setitem(sys.modules, "benchmarks.speed", None)
    assert main(["speed"]) == 2
    assert "not available" in capsys.readouterr().err


def test_cli_help_lists_harness_and_molecules(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "harness" in text and "molecules" in text
    for command in ("harness", "molecules"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--small" in capsys.readouterr().out
