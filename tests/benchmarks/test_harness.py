"""The `harness` subcommand: Ax's own benchmark harness around this package.

Bookkeeping on a tiny preset (two replications, a few trials): well-formed
records and summary, resume, problem definitions. Not the methods' merit.
"""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import harness_bench
from benchmarks.__main__ import main
from benchmarks.harness_bench import expected_best_of_uniform

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::Warning")]


def test_expected_best_of_uniform_hand_computed():
    # Two values, two draws: min is 0 unless both draws are 1 (prob 1/4).
    assert expected_best_of_uniform([1.0, 0.0], draws=2) == pytest.approx(0.25)
    # One draw: the plain mean.
    assert expected_best_of_uniform([3.0, 1.0, 2.0], draws=1) == pytest.approx(2)
    with pytest.raises(ValueError):
        expected_best_of_uniform([], draws=5)


def test_grid_problem_optimum_is_the_best_grid_point():
    problem = harness_bench.get_problem("hartmann3", num_trials=5)
    tf = problem.test_function
    values = torch.stack(
        [
            tf.evaluate_true({"x1": a, "x2": b, "x3": c}).flatten()[0]
            for a in range(10)
            for b in range(10)
            for c in range(10)
        ]
    )
    assert len(values) == 1000
    assert problem.optimal_value == pytest.approx(float(values.min()))
    assert problem.baseline_value > problem.optimal_value  # minimized
    assert harness_bench.get_problem("ackley4", 5).optimal_value == pytest.approx(
        0, abs=1e-9
    )


def test_unknown_names():
    with pytest.raises(ValueError, match="hartmann3"):
        harness_bench.get_problem("rosenbrock", 5)
    with pytest.raises(ValueError, match="chaining"):
        harness_bench.get_method("ei", harness_bench.FULL_CONFIG)
    with pytest.raises(ValueError, match="init_trials"):
        harness_bench.HarnessConfig(num_trials=3, init_trials=3)
    with pytest.raises(ValueError, match=r"`delta` must be in \(0, 1\), got 1.5"):
        harness_bench.HarnessConfig(delta=1.5)
    with pytest.raises(TypeError, match="`delta` must be a float, got str"):
        harness_bench.HarnessConfig(delta="0.1")


def test_cli_harness_small_end_to_end(
    tmp_path, capsys, monkeypatch, summary_from_packed
):
    argv = ["harness", "--small", "--problem", "hartmann3", "--trials", "4"]
    argv += ["--init", "2"]
    out = tmp_path / "work"
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    runs = sorted((out / "runs").glob("*/*/seed_*.json"))
    assert len(runs) == len(harness_bench.METHODS) * 2
    for path in runs:
        rec = json.loads(path.read_text())
        assert len(rec["score_trace"]) == 4
        assert all(
            a <= b + 1e-9
            for a, b in zip(rec["score_trace"], rec["score_trace"][1:], strict=False)
        )
        assert rec["score_trace"][-1] <= 100 + 1e-9
        assert rec["fit_time"] >= 0 and rec["gen_time"] >= 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["command"].startswith("python -m benchmarks harness")
    assert [r["method"] for r in summary["rows"]] == list(harness_bench.METHODS)
    assert all(r["replications"] == 2 for r in summary["rows"])
    # Values: the row's final score is the mean over seeds of the last score.
    chaining = [
        json.loads(p.read_text())["score_trace"][-1]
        for p in sorted((out / "runs" / "hartmann3" / "chaining").glob("*.json"))
    ]
    assert summary["rows"][0]["final_score"][0] == pytest.approx(sum(chaining) / 2)
    assert {p["method"] for p in summary["paired"]} == set(harness_bench.METHODS) - {
        "chaining"
    }
    assert (out / "scores.png").stat().st_size > 0
    assert "Chaining-UCB" in (out / "summary.md").read_text()

    # Resume: nothing is recomputed, so no record is rewritten.
    mtimes = {p: p.stat().st_mtime_ns for p in runs}
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    assert {p: p.stat().st_mtime_ns for p in runs} == mtimes

    packed = summary_from_packed("harness", out, argv, ("rows", "paired"))
    assert (tmp_path / "harness_from_packed" / "scores.png").stat().st_size > 0
    # Unpacked elsewhere, the same command resumes from the records.
    again = tmp_path / "unpacked"
    assert main(["unpack", "harness", str(packed), str(again)]) == 0

    def fail(*args, **kwargs):
        raise AssertionError("a stored replication was recomputed")

    monkeypatch.setattr(harness_bench, "_replicate", fail)
    assert main([*argv, "--out", str(again), "--no-progress", "--no-plot"]) == 0
    assert json.loads((again / "summary.json").read_text())["rows"] == summary["rows"]


def test_cli_harness_rejects_bad_arguments(tmp_path):
    with pytest.raises(SystemExit, match="problem"):
        main(["harness", "--problem", "nope", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="init_trials"):
        main(["harness", "--trials", "2", "--init", "5", "--out", str(tmp_path)])


def test_replications_follow_the_harness_seed(tmp_path):
    config = harness_bench.HarnessConfig(num_trials=4, init_trials=2, replications=2)
    runs = [
        harness_bench.run_harness(
            ["hartmann3"], ["chaining"], config, tmp_path / str(i)
        )
        for i in range(2)
    ]
    traces = [[r["oracle_trace"] for r in recs] for recs in runs]
    assert traces[0] == traces[1]  # same seeds, same runs
    assert traces[0][0] != traces[0][1]  # seeds 0 and 1 differ
