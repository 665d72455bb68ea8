"""The stopping benchmark's bookkeeping, by hand: each rule's first stop, the
row it keeps, and whether its claim held."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from benchmarks import stopping_bench as stopping

CONFIG = stopping.StoppingConfig(eps_fractions=(0.1,), top_fractions=(0.2,))


def _step(t, bound, rank_bound, ucb, ucb_index, prb_stop, prb_index, ax_stop):
    return {
        "t": t,
        "best_observed": 3,
        "certificate": {"bound": bound, "rank_bound": rank_bound, "valid": True},
        "ucb-lcb": {"bound": ucb, "index": ucb_index},
        "prb": {"0.1": {"stop": prb_stop, "value": 0.0, "index": prb_index}},
        "ax-improvement": ax_stop,
    }


def _by_rule(record):
    """A record's first stops, by rule and tolerance."""
    return {
        (s["rule"], s["tolerance"]): s for s in stopping.first_stops(record, CONFIG)
    }


def test_truth_ranks_ties_together():
    y = np.array([1.0, 3.0, 3.0, 2.0])
    assert stopping.truth(y, 1) == (0.0, 1) and stopping.truth(y, 2) == (0.0, 1)
    assert stopping.truth(y, 3) == (1.0, 3)


def test_first_stops_and_their_claims_by_hand():
    # 10 rows, range 10: eps 0.1 -> regret 1.0; top 0.2 -> the 2 best rows.
    # Row 3: regret 0.5, rank 2 (kept by the certificate, rank and Ax's
    # rule); row 7: regret 4.0, rank 6 (kept by UCB-LCB and PRB).
    record = {
        "dataset": "toy",
        "acquisition": "qlognei",
        "n_init": 5,
        "num_items": 10,
        "span": 10.0,
        "items": [0, 1, 2, 3, 4, 7],
        "truth": {"3": [0.5, 2], "7": [4.0, 6]},
        "steps": [
            _step(6, 2.0, 5, 3.0, 7, False, 3, False),
            _step(7, 1.0, 2, 0.9, 7, True, 7, False),  # bound <= 1.0 stops
            _step(8, 0.5, 1, 0.1, 3, True, 3, True),
        ],
    }
    stops = _by_rule(record)
    assert stops["certificate", "eps 0.1"] == {
        "rule": "certificate",
        "tolerance": "eps 0.1",
        "query": 2,
        "true": True,
    }
    assert stops["rank", "top 0.2"]["query"] == 2 and stops["rank", "top 0.2"]["true"]
    # UCB-LCB and PRB stop at query 2 too, keeping row 7: 4.0 away, false.
    assert (
        stops["ucb-lcb", "eps 0.1"]["query"],
        stops["ucb-lcb", "eps 0.1"]["true"],
    ) == (2, False)
    assert (stops["prb", "eps 0.1"]["query"], stops["prb", "eps 0.1"]["true"]) == (
        2,
        False,
    )
    assert (
        stops["ax-improvement", "eps 0.1"]["query"],
        stops["ax-improvement", "eps 0.1"]["true"],
    ) == (3, True)
    # PRB checked: the same stop where the step's model passed the check; a
    # step whose check refused (or could not yet run) does not stop it.
    assert stops["prb-checked", "eps 0.1"] == dict(
        stops["prb", "eps 0.1"], rule="prb-checked"
    )
    unchecked = dict(record, steps=[dict(st) for st in record["steps"]])
    unchecked["steps"][1]["certificate"] = dict(
        unchecked["steps"][1]["certificate"], valid=False
    )
    late = _by_rule(unchecked)
    assert late["prb-checked", "eps 0.1"] == {
        "rule": "prb-checked",
        "tolerance": "eps 0.1",
        "query": 3,
        "true": True,  # the third step keeps row 3, 0.5 from the best
    }
    assert late["prb", "eps 0.1"]["query"] == 2
    # PRB under the calibrated law: its own check decides, not the certificate's.
    assert ("prb-t", "eps 0.1") not in stops  # a record made before the rule
    widened = dict(unchecked, steps=[dict(st) for st in unchecked["steps"]])
    for st, valid in zip(widened["steps"], (False, True, True), strict=True):
        st["prb-t"] = {"valid": valid, "0.1": {"stop": True, "value": 0.0, "index": 3}}
    calibrated = _by_rule(widened)
    assert calibrated["prb-t", "eps 0.1"] == {
        "rule": "prb-t",
        "tolerance": "eps 0.1",
        "query": 2,  # the first step's check refused; the second's passed
        "true": True,
    }
    # Under the forecast calibration: no statement until enough residuals.
    for st, usable in zip(widened["steps"], (False, False, True), strict=True):
        st["prb-forecast"] = {"valid": usable}
        if usable:
            st["prb-forecast"]["0.1"] = {"stop": True, "value": 0.0, "index": 7}
    forecast = _by_rule(widened)
    assert forecast["prb-forecast", "eps 0.1"]["query"] == 3
    assert forecast["prb-forecast", "eps 0.1"]["true"] is False  # row 7: 4.0 off
    # Held at scale 1 or more, it may stop later, on another row.
    for st, stop in zip(widened["steps"], (False, False, True), strict=True):
        st["prb-widened"] = {"valid": stop, "scale": 1.0, "dof": 4.0}
        if stop:
            st["prb-widened"]["0.1"] = {"stop": True, "value": 0.0, "index": 3}
    held = _by_rule(widened)
    assert held["prb-widened", "eps 0.1"] == {
        "rule": "prb-widened",
        "tolerance": "eps 0.1",
        "query": 3,
        "true": True,
    }
    never = dict(record, steps=record["steps"][:1])
    assert all(s["query"] is None for s in stopping.first_stops(never, CONFIG))

    rows = stopping.summarize([record, dict(never, seed=1)], CONFIG)
    cert = next(r for r in rows if r["rule"] == "certificate")
    assert (cert["runs"], cert["stopped"], cert["median_query"], cert["true"]) == (
        2,
        1,
        2.0,
        1,
    )
    text = stopping.format_markdown(rows)
    assert "| ucb-lcb | eps 0.1 | 1 / 2 | 2 | 0 / 1 |" in text
    # Pooled over acquisitions and starts: one group per dataset.
    other = dict(record, acquisition="chaining", n_init=10, seed=2)
    pooled = stopping.summarize([record, dict(never, seed=1), other], CONFIG, True)
    cert = next(r for r in pooled if r["rule"] == "certificate")
    assert (cert["acquisition"], cert["n_init"], cert["runs"]) == ("all", "all", 3)
    # The same steps from 10 initial rows stop 5 queries earlier in the count.
    assert (cert["stopped"], cert["median_query"], cert["true"]) == (2, -0.5, 2)
    assert "**toy**, all runs" in stopping.format_markdown(pooled)


def test_the_gap_rule_stops_from_the_tenth_observation_on():
    step = _step(10, 0.0, 1, 3.0, 7, False, 3, False)
    step["gap"] = {"stop": True, "value": 0.1, "threshold": 0.2, "index": 7}
    assert stopping.decision(step, "gap", 1.0) == (False, 3)  # 10 observations
    assert stopping.decision(dict(step, t=11), "gap", 1.0) == (True, 7)
    assert stopping.decision(dict(step, t=11, gap=None), "gap", 1.0) == (False, 3)
    # A record made before the rule was measured has no gap row at all.
    record = {
        "n_init": 5,
        "num_items": 10,
        "span": 10.0,
        "truth": {"3": [0.5, 2], "7": [4.0, 6]},
        "steps": [_step(11, 9.0, 9, 9.0, 7, False, 3, False)],
    }
    assert "gap" not in {s["rule"] for s in stopping.first_stops(record, CONFIG)}
    record["steps"][0]["gap"] = step["gap"]
    stops = {s["rule"]: s for s in stopping.first_stops(record, CONFIG)}
    assert (stops["gap"]["query"], stops["gap"]["true"]) == (6, False)


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="unknown rule"):
        stopping.decision(_step(1, 0, 0, 0, 0, False, 0, False), "oracle", 1.0)


def test_an_unchecked_certificate_never_stops():
    # Below the check's minimum the certificate holds the model's own numbers,
    # marked not valid: neither the bound nor the rank rule acts on them.
    step = _step(6, 0.0, 1, 3.0, 7, False, 3, False)
    step["certificate"]["valid"] = False
    assert stopping.decision(step, "certificate", 1.0) == (False, 3)
    assert stopping.decision(step, "rank", 2) == (False, 3)
    step["certificate"]["valid"] = True
    assert stopping.decision(step, "certificate", 1.0) == (True, 3)


def test_cost_table_takes_medians_of_the_timed_records():
    def timed(step_seconds, prb):
        parts = {"fit": 1.0, "certificate": 0.5, "ucb-lcb": 0.0, "ax-improvement": 0}
        steps = [{"seconds": {**parts, "prb": p}} for p in prb]
        return {
            "dataset": "toy",
            "acquisition": "qlognei",
            "steps": steps,
            "step_seconds": step_seconds,
        }

    untimed = {"dataset": "toy", "acquisition": "chaining", "steps": [{}]}
    # Only the newer record times the gap rule: its median is that record's.
    newer = timed([2.0], [0.6])
    newer["steps"][0]["seconds"]["gap"] = 0.004
    newer["steps"][0]["seconds"]["prb-t"] = 0.7
    rows = stopping.cost_rows([timed([1.0, 3.0], [0.1, 0.2]), newer, untimed])
    assert rows == [
        {
            "dataset": "toy",
            "acquisition": "qlognei",
            "runs": 2,
            "step": 2.0,
            "fit": 1.0,
            "certificate": 0.5,
            "ucb-lcb": 0.0,
            "prb": 0.2,
            "prb-t": 0.7,
            "prb-forecast": None,
            "prb-widened": None,
            "gap": 0.004,
            "ax-improvement": 0.0,
        }
    ]
    text = stopping.format_costs(rows)
    row = "| toy | qlognei | 2 | 2 | 1 | 0.5 | 0 | 0.2 | 0.7 | - | - | 0.004 | 0 |"
    assert row in text
    rows = stopping.cost_rows([timed([1.0], [0.1])])  # no record times the gap
    assert rows[0]["gap"] is None
    assert "| 0.1 | - | - | - | - | 0 |" in stopping.format_costs(rows)
    assert stopping.format_costs([]) == ""


def test_final_statement_table_by_hand():
    # Range 10, 10 rows. Run 0 holds the best row with a usable statement
    # (bound 1.5 <= 2.0, rank 1 <= 1); run 1 holds row 7 with a false bound;
    # run 2 holds the best row under an unchecked statement (counts as 1).
    def run(kept, bound, rank_bound, valid, truth):
        step = _step(40, bound, rank_bound, 0.0, kept, False, kept, False)
        step["best_observed"] = kept
        step["certificate"]["valid"] = valid
        return {
            "dataset": "toy",
            "acquisition": "qlognei",
            "n_init": 5,
            "num_items": 10,
            "span": 10.0,
            "truth": truth,
            "steps": [step],
        }

    rows = stopping.final_rows(
        [
            run(3, 1.5, 1, True, {"3": [0.0, 1]}),
            run(7, 2.0, 3, True, {"7": [4.0, 6]}),
            run(3, 0.1, 1, False, {"3": [0.0, 1]}),
        ]
    )
    assert rows == [
        {
            "dataset": "toy",
            "acquisition": "qlognei",
            "n_init": 5,
            "runs": 3,
            "holding_best": 2,
            "usable": 1,
            "median_bound_fraction": 0.2,
            "median_rank_fraction": 0.3,
            "false": 1,
        }
    ]
    assert "| toy | qlognei | 5 | 3 | 2 | 1 | 0.20 | 0.300 | 1 |" in (
        stopping.format_final(rows)
    )


def test_unchecked_statements_table_by_hand():
    # Two unchecked steps (finite, not valid): one bound false (regret 4.0 >
    # 2.0), no rank false; a refused (inf) and a checked step are not counted.
    def step(bound, rank_bound, valid, kept):
        out = _step(6, bound, rank_bound, 0.0, kept, False, kept, False)
        out["best_observed"] = kept
        out["certificate"]["valid"] = valid
        return out

    record = {
        "dataset": "toy",
        "acquisition": "qlognei",
        "truth": {"3": [0.5, 2], "7": [4.0, 6]},
        "steps": [
            step(1.0, 2, False, 3),
            step(2.0, 8, False, 7),
            step(float("inf"), 10, False, 7),
            step(0.1, 1, True, 7),
        ],
    }
    rows = stopping.unchecked_rows([record, dict(record, steps=[])])
    assert rows == [
        {
            "dataset": "toy",
            "acquisition": "qlognei",
            "runs": 1,
            "steps": 2,
            "bound_false": 1,
            "rank_false": 0,
        }
    ]
    assert "| toy | qlognei | 1 | 2 | 1 | 0 |" in stopping.format_unchecked(rows)
    assert stopping.format_unchecked([]) == ""


def test_bofire_stops_are_tabulated_like_the_rules(tmp_path):
    # Two runs of one criterion at eps 0.1: one stopped at query 4 (true), one
    # never; a second group's run stopped at query 2 (false).
    lines = [
        {"dataset": "toy", "acquisition": "qlognei", "n_init": 5, "seed": 0},
        {"dataset": "toy", "acquisition": "qlognei", "n_init": 5, "seed": 1},
        {"dataset": "toy", "acquisition": "chaining", "n_init": 5, "seed": 0},
    ]
    stops = [(4, True), (None, None), (2, False)]
    path = tmp_path / "bofire.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(
            "".join(
                json.dumps({**line, "rule": "r", "eps": 0.1, "query": q, "true": t})
                + "\n"
                for line, (q, t) in zip(lines, stops, strict=True)
            )
        )
    rows = stopping.bofire_summary(str(path))
    assert [(r["acquisition"], r["runs"], r["stopped"], r["true"]) for r in rows] == [
        ("qlognei", 2, 1, 1),
        ("chaining", 1, 1, 0),
    ]
    assert rows[0]["tolerance"] == "eps 0.1" and rows[0]["median_query"] == 4.0
    (pooled,) = stopping.bofire_summary(str(path), pool=True)
    assert (pooled["runs"], pooled["stopped"], pooled["median_query"]) == (3, 2, 3.0)
    assert "| r | eps 0.1 | 2 / 3 | 3 | 1 / 2 |" in stopping.format_markdown([pooled])
    # Per run, beside the package's rules: only the runs of the records.
    record = {
        "dataset": "toy",
        "acquisition": "qlognei",
        "n_init": 5,
        "seed": 0,
        "num_items": 10,
        "span": 10.0,
        "truth": {"3": [0.5, 2]},
        "steps": [_step(6, 0.5, 1, 3.0, 3, False, 3, False)],
    }
    runs = stopping.run_stops([record], CONFIG, str(path))
    assert list(runs) == [("toy", "qlognei", 5, 0)]
    assert runs["toy", "qlognei", 5, 0]["r", "eps 0.1"] == 4
    assert runs["toy", "qlognei", 5, 0]["certificate", "eps 0.1"] == 1


def test_measured_keeps_only_the_runs_with_the_rule(tmp_path):
    from benchmarks.records import write_packed

    def record(seed, with_rule):
        step = _step(6, 2.0, 5, 3.0, 7, False, 3, False)
        step["seconds"] = {}
        if with_rule:
            step["prb-t"] = {
                "valid": True,
                "0.1": {"stop": True, "value": 0, "index": 3},
            }
        return {
            "dataset": "toy",
            "acquisition": "qlognei",
            "n_init": 5,
            "seed": seed,
            "config": {},
            "num_items": 10,
            "span": 10.0,
            "items": [0, 1, 2, 3, 4, 7],
            "truth": {"3": [0.5, 2], "7": [4.0, 6]},
            "steps": [step],
            "step_seconds": [1.0],
        }

    packed = tmp_path / "runs.jsonl.gz"
    write_packed([record(0, True), record(1, False)], packed, "stopping")
    out = tmp_path / "out"
    argv = ["--records", str(packed), "--summary-only", "--no-progress"]
    assert stopping.main([*argv, "--out", str(out), "--measured", "prb-t"]) == 0
    rows = json.loads((out / "summary.json").read_text())["pooled"]
    assert {r["runs"] for r in rows} == {1}
    assert stopping.main([*argv, "--out", str(out)]) == 0
    rows = json.loads((out / "summary.json").read_text())["pooled"]
    runs = {r["rule"]: r["runs"] for r in rows}
    assert runs["prb"] == 2 and runs["prb-t"] == 1  # the rule only where measured


def test_the_package_stop_is_judged_against_the_correct_peers_run_by_run():
    def row(rule, stopped, median, true, tol="eps 0.1"):
        return {
            "dataset": "toy",
            "acquisition": "all",
            "n_init": "all",
            "rule": rule,
            "tolerance": tol,
            "runs": 4,
            "stopped": stopped,
            "median_query": median,
            "true": true,
        }

    pooled = [
        row("certificate", 3, 20.0, 3),
        row("prb", 4, 10.0, 3),  # 3 of 4 true: not correct, never compared
        row("ucb-lcb", 2, 15.0, 2),
        row("bofire-improvement n_lookback=10", 1, 30.0, 1),
        row("certificate", 1, 30.0, 0, "eps 0.01"),  # its one stop was false
    ]
    runs = {
        ("toy", "qlognei", 5, seed): {("certificate", "eps 0.1"): q}
        for seed, q in enumerate([20, 12, 25, None])
    }
    runs["toy", "qlognei", 5, 0]["ucb-lcb", "eps 0.1"] = 15  # the package later
    runs["toy", "qlognei", 5, 3]["ucb-lcb", "eps 0.1"] = 18  # it never stopped
    runs["toy", "qlognei", 5, 1]["bofire-improvement n_lookback=10", "eps 0.1"] = 30
    runs["toy", "qlognei", 5, 0]["certificate", "eps 0.01"] = 30
    loose, tight = stopping.verdict_rows(pooled, runs)
    peers = {p["rule"]: (p["later"], p["no_later"]) for p in loose["correct_peers"]}
    assert peers == {"ucb-lcb": (2, 0), "bofire-improvement n_lookback=10": (0, 1)}
    assert loose["verdict"] == "loses to ucb-lcb"
    assert tight["verdict"] == "the package's stop was wrong"
    text = stopping.format_verdicts([loose])
    assert "ucb-lcb: 2 / 4, query 15, 2 true, package later in 2 of 2" in text
    # Without UCB-LCB the package wins against the one correct peer left.
    (alone,) = stopping.verdict_rows([pooled[0], pooled[3]], runs)
    assert alone["verdict"] == "wins"
    (none,) = stopping.verdict_rows([pooled[0], pooled[1]], runs)
    assert none["verdict"] == "wins: no peer correct"


def test_widths_table_takes_medians_per_dataset_and_acquisition():
    def line(seed, scale, bound, rank):
        out = {"dataset": "toy", "acquisition": "qlognei", "n_init": 10}
        out |= {"seed": seed, "loo_scale": scale}
        return out | {w: {"bound": bound, "rank": rank} for w in stopping.WIDTHS}

    lines = [line(0, 1.0, 0.2, 0.1), line(1, 2.0, 0.4, 0.3), line(2, 3.0, 0.9, 0.2)]
    lines[0]["default"] = {"bound": 0.5, "rank": 0.5}
    text = stopping.format_widths(lines)
    row = "| toy | qlognei | 3 | 2.00 | 0.500, 0.300 | 0.400, 0.200 |"
    assert row in text  # default: medians of (0.5, 0.4, 0.9) and (0.5, 0.3, 0.2)
