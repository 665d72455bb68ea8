"""The validity benchmark's summary, by hand on made-up records: what counts as
a violation, a refusal, the first query below a fraction of the range, and when
each stopping rule fires."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.validity import (
    FORMAT_VERSION,
    RULES,
    as_current,
    format_markdown,
    summarize,
)


def _step(
    bound,
    regret,
    valid=True,
    *,
    best_regret=1.0,
    improvement=False,
    rank_bound=None,
    rank=None,
):
    step = {
        "best_regret": best_regret,
        "ucb_lcb_bound": None,
        "ucb_lcb_regret": regret,
        "ax_improvement_stop": improvement,
    }
    for rule in RULES:
        step[f"{rule}_bound"] = bound
        step[f"{rule}_valid"] = valid
        step[f"{rule}_regret"] = regret
        step[f"{rule}_rank_bound"] = rank_bound
        step[f"{rule}_rank"] = rank
    return step


def _record(steps, seed=0):
    return {
        "problem": "freesolv",
        "method": "chaining",
        "seed": seed,
        "config": {"format": FORMAT_VERSION},
        "f_range": 10.0,
        "num_candidates": 200,
        "steps": steps,
    }


def test_violations_refusals_and_first_queries_by_hand() -> None:
    run0 = [
        _step(5.0, 6.0),  # violated: regret 6 > bound 5
        _step(math.inf, 9.0, valid=False),  # refused: neither counted nor violated
        _step(0.9, 0.5),  # first <= 10% of the range (1.0), at query 3
        _step(0.4, 0.1),  # first <= 5% (0.5), at query 4
    ]
    run1 = [_step(4.0, 1.0), _step(3.0, 1.0), _step(2.0, 1.0), _step(2.0, 1.0)]
    rows = summarize([_record(run0), _record(run1, seed=1)])["rows"]
    robust = next(r for r in rows if r["rule"] == "robust")
    assert robust["runs_violated"] == 1
    # 8 checks, 1 refused, 1 violated among the 7 others.
    assert robust["refused_rate"] == pytest.approx(1 / 8)
    assert robust["step_violation_rate"] == pytest.approx(1 / 7)
    assert robust["first_10pct"] == [3, None]
    assert robust["first_5pct"] == [4, None]
    assert robust["regret_at_10pct"] == [pytest.approx(0.05)]
    # The plain certificate is never refused: the refused step's bound (inf)
    # is a bound like any other and is not violated.
    plain = next(r for r in rows if r["rule"] == "plain")
    assert plain["refused_rate"] == 0 and plain["runs_violated"] == 1


def test_stopping_rules_fire_or_run_to_the_budget() -> None:
    steps = [
        _step(3.0, 2.0, best_regret=2.0),
        _step(0.8, 0.5, best_regret=0.5, improvement=True),  # certificate fires
        _step(0.7, 0.5, best_regret=0.5),
    ]
    stopping = summarize([_record(steps)])["stopping"]
    by_rule = {r["rule"]: r for r in stopping}
    current = by_rule["certificate (LOO point estimate)"]
    assert (current["fired"], current["median_queries"]) == (1, 2)
    assert current["median_regret_over_range"] == pytest.approx(0.05)
    assert current["stopped_above_tolerance"] == 0
    ax_rule = by_rule["Ax ImprovementGlobalStoppingStrategy"]
    assert (ax_rule["fired"], ax_rule["median_queries"]) == (1, 2)
    budget = by_rule["fixed budget"]
    assert (budget["fired"], budget["median_queries"]) == (0, 3)
    ucb_lcb = by_rule["UCB - LCB"]  # no bound recorded: never fires
    assert ucb_lcb["fired"] == 0
    text = format_markdown(summarize([_record(steps)]))
    row = "| FreeSolv | Chaining-UCB | certificate (LOO point estimate) | 1/1 | 2.000 |"
    assert row in text


def test_oracle_factor_and_rank_statements_by_hand() -> None:
    # The plain bound times 2 covers every regret (1.0 / 0.5 is the worst).
    run0 = [
        _step(0.5, 1.0, rank_bound=3, rank=2),
        _step(2.0, 1.0, rank_bound=1, rank=2),
    ]
    run1 = [
        _step(4.0, 1.0, rank_bound=5, rank=5),
        _step(1.0, 0.0, rank_bound=2, rank=1),
    ]
    records = [_record(run0 * 50), _record(run1 * 50, seed=1)]
    summary = summarize(records)
    assert summary["oracle"] == [
        {"problem": "freesolv", "method": "chaining", "factor": 2.0}
    ]
    robust = next(r for r in summary["rows"] if r["rule"] == "robust")
    # Run 0 violates both (regret 1 > 0.5; rank 2 > 1), run 1 neither.
    assert (robust["runs_violated"], robust["rank_runs_violated"]) == (1, 1)
    # Query 50 is the second step of each pair: the bound is its own plain
    # bound, so bound / oracle = 1 / 2; rank bounds 1 and 2 of 200.
    assert robust["median_bound_over_oracle"][50] == pytest.approx(0.5)
    assert robust["median_rank_bound_over_n"][50] == pytest.approx(1.5 / 200)
    assert robust["median_rank"][100] == pytest.approx(1.5)
    # The rank rule stops at rank_bound <= 1% of 200 = 2: run 0 at query 2
    # (true rank 2: in the top 1%), run 1 at query 2 (true rank 1).
    by_rule = {r["rule"]: r for r in summary["stopping"]}
    rank_rule = by_rule["rank in top 1% (LOO point estimate)"]
    assert (rank_rule["fired"], rank_rule["top_when_fired"]) == (2, 2)
    assert rank_rule["median_queries"] == 2
    text = format_markdown(summary)
    assert "| FreeSolv | Chaining-UCB | 2.000 |" in text


def test_small_preset_runs_real_loops_and_resumes(tmp_path, capsys) -> None:
    """``python -m benchmarks validity --small``: real Ax loops (FreeSolv and
    the grid, both methods); every step records each certificate beside the
    true regret of its point, the summary (printed, and written under
    ``--out``) has a row per rule, and a second call reuses the stored runs."""
    import json
    import shlex

    from benchmarks.__main__ import main
    from benchmarks.records import load_records
    from benchmarks.validity import SMALL_CONFIG

    out = tmp_path / "validity"
    args = ["validity", "--small", "--out", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    records = load_records(out, "validity")
    pairs = {(p, m) for p in SMALL_CONFIG.problems for m in SMALL_CONFIG.methods}
    assert {(r["problem"], r["method"]) for r in records} == pairs
    assert len(records) == len(pairs)
    for r in records:
        assert len(r["steps"]) == SMALL_CONFIG.queries
        assert len(set(r["items"])) == SMALL_CONFIG.n_init + SMALL_CONFIG.queries
        for s in r["steps"]:
            for rule in (
                "robust",
                "loo_upper",
                "loo_light20",
                "forecast",
                "loo_capped",
                "loo_student",
                "loo_gaussian",
                "plain",
            ):
                assert s[f"{rule}_bound"] is None or s[f"{rule}_bound"] >= 0
                assert 0 <= s[f"{rule}_regret"] <= r["f_range"]
                # The rank statement and the realized rank of its point.
                n = r["num_candidates"]
                assert 1 <= s[f"{rule}_rank_bound"] <= n
                assert 1 <= s[f"{rule}_rank"] <= n
            assert s["audit_bound"] is None  # no audits in these loops
            # Student-t tails are heavier than the Gaussian at the same model,
            # and capped degrees of freedom heavier than n - 1.
            if s["robust_valid"] and s["loo_gaussian_valid"]:
                assert s["robust_bound"] >= s["loo_gaussian_bound"] - 1e-9
                assert s["loo_student_bound"] >= s["loo_gaussian_bound"] - 1e-9
            # The scale's upper limit and lighter-tail caps only widen.
            if s["robust_valid"]:
                for wider in ("loo_upper", "loo_light20"):
                    assert s[f"{wider}_bound"] >= s["robust_bound"] - 1e-9
    summary = json.loads((out / "summary.json").read_text())
    assert summary["command"] == "python -m benchmarks " + shlex.join(args)
    assert {(r["problem"], r["method"], r["rule"]) for r in summary["rows"]} == {
        (p, m, rule) for p, m in pairs for rule in RULES if rule != "audit"
    }
    for row in summary["rows"]:
        assert row["runs"] == 1 and 0 <= row["step_violation_rate"] <= 1
        assert 0 <= row["refused_rate"] <= 1
    assert {r["method"] for r in summary["stopping"]} == set(SMALL_CONFIG.methods)
    # What is printed is the summary's markdown, a row per problem, method
    # and rule.
    md = (out / "summary.md").read_text().split("```\n\n", 1)[1]
    assert md.rstrip() == text.rstrip()
    assert text.count("| FreeSolv | Chaining-UCB |") >= len(RULES) - 1
    # A second call reuses the stored runs: the same items, the same table.
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("seed_*.json")}
    assert len(stamps) == len(pairs)
    assert main(args) == 0
    assert capsys.readouterr().out == text
    assert {p: p.stat().st_mtime_ns for p in out.rglob("seed_*.json")} == stamps
    again = load_records(out, "validity")
    assert [r["items"] for r in again] == [r["items"] for r in records]


def test_default_model_problems_run_on_the_descriptor_model(tmp_path, capsys) -> None:
    """``freesolv@rdkit2d-botorch`` and ``freesolv@rdkit2d-baybe``: the same
    library, initial molecules and values as ``freesolv``, on RDKit's
    descriptors under BoTorch's and BayBE's priors instead of the Tanimoto Gram
    (the plain certificates of the first step differ); their rows are labelled
    as such; an unknown problem is refused with the allowed names."""
    pytest.importorskip("rdkit")
    from benchmarks.__main__ import main
    from benchmarks.records import load_records

    out = tmp_path / "v"
    base = ["validity", "--runs", "1", "--queries", "2", "--n-init", "5"]
    base += ["--methods", "qlognei", "--out", str(out)]
    problems = "freesolv,freesolv@rdkit2d-botorch,freesolv@rdkit2d-baybe"
    assert main([*base, "--problems", problems]) == 0
    text = capsys.readouterr().out
    label = "| FreeSolv, RDKit descriptors, BoTorch priors | qLogNEI over the table |"
    assert label in text
    label = (
        "| FreeSolv, RDKit descriptors, BayBE's EDBO priors | qLogNEI over the table |"
    )
    assert label in text
    runs = {r["problem"]: r for r in load_records(out, "validity")}
    tanimoto = runs["freesolv"]
    firsts = {tanimoto["steps"][0]["plain_bound"]}
    for name in ("freesolv@rdkit2d-botorch", "freesolv@rdkit2d-baybe"):
        other = runs[name]
        assert tanimoto["items"][:5] == other["items"][:5]
        assert tanimoto["f_max"] == other["f_max"]
        firsts.add(other["steps"][0]["plain_bound"])
    # Three models, three plain certificates at the first step.
    assert len({round(b, 3) for b in firsts}) == 3
    with pytest.raises(SystemExit, match="freesolv@rdkit2d-botorch"):
        main([*base, "--problems", "freesolv@tanimoto"])


def test_tails_small_preset_refits_the_committed_loops(capsys) -> None:
    """``tails --small``: the first steps of a FreeSolv and a grid run of the
    committed validity records, refitted; each tail law's bound is finite, and
    the capped default's tails are at least as heavy as the uncapped n - 1."""
    from benchmarks.__main__ import main

    assert main(["tails", "--small"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["problem"] for r in rows} == {"freesolv", "grid"}
    for r in rows:
        assert r["steps"] == [10, 13, 16]
        auto, uncapped = r["tails"]["auto"], r["tails"]["n-1"]
        for a, b in zip(
            auto["bound_over_range"], uncapped["bound_over_range"], strict=True
        ):
            assert 0 < b <= a + 1e-12
    from benchmarks.tails_bench import table_from_rows

    assert "| freesolv | chaining | auto | 0/1 | 0/3 | never (0/1) | 0/1 |" in (
        table_from_rows(rows)
    )
    # Where the model is exactly right (the true prior, nothing fitted).
    assert main(["tails", "--small", "--problems", "grid-true"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["problem"] == "grid-true" and row["steps"] == [10, 11, 12]
    assert set(row["tails"]) == {"auto", "n-1"}


def test_records_from_before_the_minimum_are_read_as_the_current_code_makes_them():
    """A format-5 record: its LOO-checked certificates below 20 observations
    count as refused (the forecast one only where it fell back to the check),
    the plain one and every later step stay as recorded; a current record is
    read as it is."""
    steps = []
    for n, forecast_scale in ((19, None), (19, 1.3), (20, None)):
        step = _step(2.0, 5.0)  # violated, if issued
        step.update(n=n, forecast_scale=forecast_scale)
        steps.append(step)
    old = {**_record(steps), "config": {"format": 5}}
    now = as_current(old)
    assert old["steps"][0]["robust_valid"]  # the record itself is not changed
    first, second, third = now["steps"]
    for rule in ("robust", "geometric", "loo_gaussian", "loo_student", "loo_capped"):
        assert first[f"{rule}_valid"] is False and second[f"{rule}_valid"] is False
        assert third[f"{rule}_valid"] is True
    assert first["forecast_valid"] is False  # fell back to the check
    assert second["forecast_valid"] is True  # its own residuals
    assert first["plain_bound"] == 2.0 and first["plain_regret"] == 5.0
    assert as_current(_record(steps)) == _record(steps)  # current format
    (row,) = [r for r in summarize([old])["rows"] if r["rule"] == "robust"]
    assert row["runs_violated"] == 1  # the step with 20 observations
    assert row["refused_rate"] == pytest.approx(2 / 3)


def test_reading_old_records_as_current_agrees_with_a_rerun() -> None:
    """The committed re-run of the first 6 queries of FreeSolv's default-model
    Chaining-UCB loops under the current code (benchmarks/results/
    validity_minobs.jsonl.gz) made the same queries as the older records, and
    its certificates are what as_current reads the older records as."""
    from pathlib import Path

    from benchmarks.records import read_packed

    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    rerun = read_packed(results / "validity_minobs.jsonl.gz")
    old = {
        r["seed"]: as_current(r)
        for r in read_packed(results / "validity.jsonl.gz")
        if (r["problem"], r["method"]) == ("freesolv@default", "chaining")
    }
    assert sorted(r["seed"] for r in rerun) == list(range(10))
    for r in rerun:
        assert r["config"]["format"] == FORMAT_VERSION
        before = old[r["seed"]]
        # The variant's old name is read under its new one.
        assert before["problem"] == "freesolv@rdkit2d-botorch"
        assert r["items"] == before["items"][: len(r["items"])]
        for now, then in zip(r["steps"], before["steps"], strict=False):
            assert now["n"] == then["n"] < 20
            for rule in ("robust", "loo_capped", "loo_student", "forecast"):
                assert now[f"{rule}_valid"] is then[f"{rule}_valid"] is False
            assert now["plain_bound"] == pytest.approx(then["plain_bound"], rel=1e-6)


def test_the_protocol_runs_repeat_the_committed_shorter_loops() -> None:
    """The committed 100-query loops on the default molecule model (and on
    the grid) from 10 initial points (benchmarks/results/
    validity_protocol.jsonl.gz) made the same queries as the committed
    60-query loops of the same seeds (validity_baybe_model.jsonl.gz; the
    grid: validity.jsonl.gz) and recorded the same certificates at their
    common steps: a seed fixes the trials, whatever the budget or the
    variants recorded beside them."""
    from pathlib import Path

    from benchmarks.records import read_packed

    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    longer = read_packed(results / "validity_protocol.jsonl.gz")
    shorter = {
        (r["problem"], r["method"], r["seed"]): r
        for name in ("validity_baybe_model", "validity")
        for r in map(as_current, read_packed(results / f"{name}.jsonl.gz"))
    }
    assert len(longer) == 80
    for r in longer:
        assert r["config"]["queries"] == 100 and r["config"]["n_init"] == 10
        before = shorter[(r["problem"], r["method"], r["seed"])]
        common = len(before["steps"])
        assert common in (60, 100)
        assert r["items"][: 10 + common] == before["items"]
        for now, then in zip(r["steps"], before["steps"], strict=False):
            assert now["n"] == then["n"]
            for rule in ("plain", "robust"):
                a, b = now[f"{rule}_bound"], then[f"{rule}_bound"]
                assert (a is None) == (b is None)
                if a is not None and math.isfinite(a):
                    assert a == pytest.approx(b, rel=1e-6)


def test_first_seed_adds_seeds_beside_stored_ones(tmp_path) -> None:
    """``--first-seed 1 --runs 1`` runs seed 1 alone (its initial points are
    seed 1's), beside a stored seed 0 that it neither reruns nor changes."""
    import numpy as np

    from benchmarks.__main__ import main
    from benchmarks.records import load_records

    out = tmp_path / "v"
    base = ["validity", "--problems", "grid", "--methods", "qlognei", "--queries", "1"]
    base += ["--n-init", "5", "--out", str(out)]
    assert main([*base, "--runs", "1"]) == 0
    (first,) = load_records(out, "validity")
    stored = (out / "grid" / "qlognei" / "seed_0.json").read_bytes()
    assert main([*base, "--runs", "1", "--first-seed", "1"]) == 0
    records = {r["seed"]: r for r in load_records(out, "validity")}
    assert sorted(records) == [0, 1]
    assert (out / "grid" / "qlognei" / "seed_0.json").read_bytes() == stored
    seed_1 = np.random.default_rng(1).choice(900, 5, replace=False)
    assert records[1]["items"][:5] == [int(i) for i in seed_1]
    assert records[1]["items"][:5] != first["items"][:5]
    with pytest.raises(ValueError, match="`first_seed` must be"):
        main([*base, "--first-seed", "-1"])


def _scaled(n, bound, regret, scale):
    """A step with ``n`` observations, a plain bound and regret, and both
    residual scales equal to ``scale``."""
    step = _step(bound, regret)
    step.update(n=n, robust_scale=scale, forecast_scale=scale)
    return step


def _limits_records():
    def rec(problem, seed, steps):
        return {**_record(steps, seed=seed), "problem": problem}

    # (bound, regret, scale) per step; need = regret / bound.
    return [
        rec("freesolv", 0, [_scaled(20, 1, 2, 0.5), _scaled(21, 1, 0.5, 1.0)]),
        rec("freesolv", 1, [_scaled(20, 2, 1, 0.8), _scaled(21, 1, 1.5, 1.2)]),
        rec("esol", 0, [_scaled(20, 1, 0.2, 1.0), _scaled(21, 2, 0.2, 1.0)]),
        rec("esol", 1, [_scaled(20, 1, 0.4, 0.6), _scaled(21, 1, 0.1, 0.9)]),
        # Below the LOO minimum of 20 observations: not a constraint.
        # A zero plain bound with a zero regret needs nothing.
        rec(
            "esol",
            2,
            [_scaled(19, 1, 9.0, 2.0), _scaled(20, 1, 0.1, 1.0), _scaled(21, 0, 0, 3)],
        ),
    ]


def test_calibration_limits_by_hand() -> None:
    """The smallest calibration non-decreasing in the residual scale and valid
    on every run of both libraries (or on all but one run of each), read at
    each run's queries 1 and 2, over each library's oracle factor."""
    from benchmarks.validity import calibration_limits, format_calibration_limits

    records = _limits_records()
    rows = {
        r["problem"]: r
        for r in calibration_limits(records, "robust_scale", (1, 2), spared_runs=0)
    }
    # Oracles on steps with n >= 20: FreeSolv 2 (run 0, query 1), ESOL 0.4.
    assert rows["freesolv"]["oracle"] == pytest.approx(2.0)
    assert rows["esol"]["oracle"] == pytest.approx(0.4)
    # The need 2 at scale 0.5 forces c = 2 at every larger scale: every ESOL
    # step gets 2, five times its oracle.
    assert rows["esol"]["median_over_oracle"] == {1: 5.0, 2: 5.0}
    assert rows["freesolv"]["median_over_oracle"] == {1: 1.0, 2: 1.0}
    assert rows["esol"]["best_constant_over_oracle"] == pytest.approx(5.0)

    spared = {
        r["problem"]: r
        for r in calibration_limits(records, "forecast_scale", (1, 2), spared_runs=1)
    }
    # Best for ESOL at query 1: spare FreeSolv run 0 and ESOL run 1; then
    # c(1.0) = 0.5 (FreeSolv run 1, scale 0.8) and c(0.6) = 0: median 0.25.
    assert spared["esol"]["median_over_oracle"][1] == pytest.approx(0.25 / 0.4)
    # At query 2 (scales 1.0, 0.9, and run 2's 1.0): c = 0.5 whatever is spared.
    assert spared["esol"]["median_over_oracle"][2] == pytest.approx(0.5 / 0.4)
    assert spared["freesolv"]["median_over_oracle"] == {
        1: pytest.approx(0.25 / 2),
        2: pytest.approx(1.0 / 2),
    }
    # Sparing FreeSolv run 0 leaves 1.5 as the largest need.
    assert spared["esol"]["best_constant_over_oracle"] == pytest.approx(1.5 / 0.4)
    text = format_calibration_limits(list(spared.values()), (1, 2))
    assert "| forecast residuals' scale | ESOL | Chaining-UCB | 0.400 | 0.625 |" in text
    with pytest.raises(ValueError, match="`statistic` must be"):
        calibration_limits(records, "plain_bound")
    with pytest.raises(ValueError, match="`spared_runs` must be 0 or 1"):
        calibration_limits(records, "robust_scale", spared_runs=2)


@pytest.mark.parametrize(
    "records",
    [
        "benchmarks/results/validity_protocol.jsonl.gz",
        "benchmarks/results/validity_protocol_init5.jsonl.gz",
    ],
)
def test_the_documented_calibration_limits_come_from_the_committed_records(
    records, capsys
) -> None:
    """The tables of docs/results/validity.md ("How tight any calibration of
    the plain bound can be") are the command's output on the records."""
    from pathlib import Path

    from benchmarks.validity import main

    root = Path(__file__).resolve().parents[2]
    assert main(["--records", str(root / records), "--calibration-limits"]) == 0
    table = capsys.readouterr().out
    assert table.count("\n") > 10
    assert table in (root / "docs/results/validity.md").read_text()
