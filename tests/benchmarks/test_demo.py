"""The demo: its reading of the table, and a tiny end-to-end run."""

from __future__ import annotations

import pytest

from benchmarks import demo
from benchmarks._tables import mean_se


def test_reading_separates_by_two_standard_errors():
    final = {
        "Chaining-UCB": [0.1, 0.2, 0.1, 0.2],
        "GP-UCB": [0.5, 0.6, 0.5, 0.6],  # diff -0.4 exactly: separated, better
        "LogEI": [0.0, 0.1, 0.0, 0.1],  # diff +0.1 exactly: separated, worse
        "Random": [0.1, 0.3, 0.0, 0.2],  # diffs 0, -0.1, 0.1, 0: not separated
    }
    rows, sentence = demo.reading(final, iters=20)
    by = {m: (mean, se, sep) for m, mean, se, sep in rows}
    assert by["GP-UCB"][0] == pytest.approx(-0.4) and by["GP-UCB"][2]
    assert by["LogEI"][0] == pytest.approx(0.1) and by["LogEI"][2]
    assert by["Random"][0] == pytest.approx(0.0) and not by["Random"][2]
    assert sentence == (
        "After 20 queries, Chaining-UCB's simple regret is lower than GP-UCB and "
        "higher than LogEI by at least two standard errors of the paired "
        "difference; against Random the runs do not separate the methods."
    )


def test_reading_when_nothing_separates():
    final = {"Chaining-UCB": [0.1, 0.3], "GP-UCB": [0.2, 0.2], "LogEI": [0.3, 0.1]}
    _, sentence = demo.reading(final, iters=5)
    assert "do not separate Chaining-UCB from GP-UCB or LogEI" in sentence


def test_demo_small_preset_end_to_end(capsys):
    assert demo.main(["--small"]) == 0
    out = capsys.readouterr().out
    n, runs, iters = demo.SMALL["n"], demo.SMALL["runs"], demo.SMALL["iters"]
    assert f"N={n} candidates" in out and f"{runs} runs x {iters} queries" in out
    for name in ("Chaining-UCB", "GP-UCB", "UCB(beta=0.2)", "LogEI", "Random"):
        assert name in out
    # Values: random search's S_3 row is the mean ± SE of its runs' regrets.
    finals = [
        demo.run("Random", *demo.make_problem(n, seed), iters, seed)[0][-1]
        for seed in range(runs)
    ]
    mean, se = mean_se(finals)
    row = next(line for line in out.splitlines() if line.startswith("Random "))
    assert row.split()[-4:-1] == [f"{mean:.3f}", "±", f"{se:.3f}"]
    assert f"Paired difference of S_{iters}" in out
    assert f"After {iters} queries" in out
    assert "Certificate for the recommended point" in out and "max f - f(x) <=" in out


def test_demo_explicit_options_override_the_preset(capsys):
    assert demo.main(["--small", "--iters", "2"]) == 0
    assert "2 runs x 2 queries" in capsys.readouterr().out


def test_demo_rejects_bad_arguments():
    with pytest.raises(SystemExit):
        demo.main(["--runs", "0"])
