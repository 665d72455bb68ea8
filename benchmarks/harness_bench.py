"""Runner of Ax's benchmark harness: records one JSON per replication under
``OUT/runs/PROBLEM/METHOD/seed_S.json`` (a record that exists and matches the
configuration is reused, so an interrupted run resumes; see
:mod:`benchmarks.records` for packing them), and summarizes them.
Problems and methods come from :mod:`ax_chaining.test_functions.harness`."""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ax_chaining.test_functions.harness import (
    FULL_CONFIG,
    LABELS,
    METHODS,
    PROBLEMS,
    SMALL_CONFIG,
    SMALL_PROBLEMS,
    HarnessConfig,
    get_method,
    get_problem,
)
from benchmarks._tables import check_names, common_seed_groups, mean_se, num, paired, pm
from benchmarks.records import run_resumable

__all__ = [
    "FULL_CONFIG",
    "LABELS",
    "METHODS",
    "PROBLEMS",
    "SMALL_CONFIG",
    "SMALL_PROBLEMS",
    "HarnessConfig",
    "format_markdown",
    "get_method",
    "get_problem",
    "plot_scores",
    "run_harness",
    "summarize",
]


# ---------------------------------------------------------------------------
# Running and resuming.
# ---------------------------------------------------------------------------


def _replicate(
    problem: str, method: str, seed: int, config: HarnessConfig
) -> dict[str, Any]:
    import logging

    from ax.benchmark.benchmark import benchmark_replication

    bp = get_problem(problem, config.num_trials)
    bm = get_method(method, config)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = benchmark_replication(
            problem=bp,
            method=bm,
            seed=seed,
            orchestrator_logging_level=logging.WARNING,
        )
    wall = time.perf_counter() - start
    return {
        "problem": problem,
        "problem_name": bp.name,
        "method": method,
        "seed": seed,
        "config": config.key(),
        "score_trace": [float(s) for s in result.score_trace],
        "oracle_trace": [float(s) for s in result.oracle_trace],
        "optimal_value": float(bp.optimal_value),
        "baseline_value": float(bp.baseline_value),
        "fit_time": float(result.fit_time),
        "gen_time": float(result.gen_time),
        "wall_time": wall,
        "num_trials": config.num_trials,
    }


def run_harness(
    problems: Sequence[str],
    methods: Sequence[str],
    config: HarnessConfig,
    out: str | Path,
    progress: bool = True,
    force: bool = False,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    jobs: int = 1,
) -> list[dict[str, Any]]:
    """Run (or resume) every replication; returns all records.

    Replications are run seed by seed (seed 0 of every problem and method,
    then seed 1, ...), so a run stopped early has balanced results.

    Args:
        problems: Names from :data:`PROBLEMS`.
        methods: Names from :data:`METHODS`.
        config: Trials, initial trials, replications.
        out: Output folder.
        progress: Show a tqdm bar.
        force: Recompute records that exist.
        on_record: Called with each new record.
        jobs: Worker processes (see :func:`run_resumable`).
    """
    check_names(problems, PROBLEMS, "problem")
    check_names(methods, METHODS, "method")
    tasks = [
        (p, m, s) for s in range(config.replications) for p in problems for m in methods
    ]
    return run_resumable(
        tasks,
        out,
        "harness",
        config.key(),
        functools.partial(_replicate, config=config),
        force=force,
        progress=progress,
        desc="harness",
        on_record=on_record,
        jobs=jobs,
    )


# ---------------------------------------------------------------------------
# Summary, table, figure.
# ---------------------------------------------------------------------------


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Final score, score area, time per trial and paired differences.

    Only seeds present for every method of a problem enter the summary, so each
    table row and each paired difference uses the same replications.
    """
    rows, pairs = [], []
    groups = common_seed_groups(records, "problem", PROBLEMS, METHODS)
    for problem, methods, seeds, by_method in groups:
        final: dict[str, list[float]] = {}
        for m in methods:
            recs = by_method[m]
            final[m] = [r["score_trace"][-1] for r in recs]
            area = [sum(r["score_trace"]) / len(r["score_trace"]) for r in recs]
            per_trial = [
                (r["fit_time"] + r["gen_time"]) / r["num_trials"] for r in recs
            ]
            wall = [r["wall_time"] / r["num_trials"] for r in recs]
            length = min(len(r["score_trace"]) for r in recs)
            curve_mean, curve_se = mean_se([r["score_trace"][:length] for r in recs])
            rows.append(
                {
                    "problem": problem,
                    "problem_name": recs[0]["problem_name"],
                    "method": m,
                    "replications": len(seeds),
                    "num_trials": recs[0]["num_trials"],
                    "final_score": mean_se(final[m]),
                    "mean_score": mean_se(area),
                    "fit_gen_s_per_trial": mean_se(per_trial)[0],
                    "wall_s_per_trial": mean_se(wall)[0],
                    "curve_mean": curve_mean.tolist(),
                    "curve_se": curve_se.tolist(),
                }
            )
        if "chaining" in final:
            for m in methods:
                if m != "chaining":
                    pairs.append(
                        {
                            "problem": problem,
                            "method": m,
                            **paired(
                                final["chaining"], final[m], higher_is_better=True
                            ),
                        }
                    )
    return {"rows": rows, "paired": pairs}


def format_markdown(summary: dict[str, Any]) -> str:
    """Markdown tables of a :func:`summarize` result."""
    lines = [
        "| problem | method | final score | mean score over trials | s/trial "
        "(fit + gen) | s/trial (wall) | replications |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    best: dict[str, float] = {}
    for r in summary["rows"]:
        best[r["problem"]] = max(best.get(r["problem"], -math.inf), r["final_score"][0])
    for r in summary["rows"]:
        cell = pm(*r["final_score"], digits=1)
        if r["final_score"][0] == best[r["problem"]]:
            cell = f"**{cell}**"
        lines.append(
            f"| {r['problem_name']} | {LABELS[r['method']]} | {cell} | "
            f"{pm(*r['mean_score'], digits=1)} | {num(r['fit_gen_s_per_trial'], 2)} | "
            f"{num(r['wall_s_per_trial'], 2)} | {r['replications']} |"
        )
    if summary["paired"]:
        names = {r["problem"]: r["problem_name"] for r in summary["rows"]}
        lines += [
            "",
            "**Paired differences of the final score, Chaining-UCB minus each "
            "method** (same seed; positive: Chaining-UCB better)",
            "",
            "| problem | method | Δ final score | wins / ties / losses "
            "| replications |",
            "|---|---|---:|---:|---:|",
        ]
        for p in summary["paired"]:
            lines.append(
                f"| {names[p['problem']]} | {LABELS[p['method']]} | "
                f"{pm(p['mean'], p['se'], digits=1, sign=True)} | "
                f"{p['wins']} / {p['ties']} / {p['losses']} | {p['n']} |"
            )
    lines += [
        "",
        "Score: Ax's `BenchmarkResult.score_trace`, 0 = the problem's baseline "
        "value, 100 = its optimum, for the best point evaluated so far (true, "
        "noise-free values); mean ± standard error over replications (bold: "
        "highest mean). Mean score over trials: the average of the score trace "
        "(an area under the curve). s/trial: Ax's fit + gen time, and wall time "
        "of the whole replication, per trial.",
    ]
    return "\n".join(lines)


def plot_scores(summary: dict[str, Any], path: str | Path) -> Path:
    """Mean score trace ± SE per problem, one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problems = list(dict.fromkeys(r["problem"] for r in summary["rows"]))
    ncols = min(3, len(problems))
    nrows = math.ceil(len(problems) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(4.2 * ncols, 3.3 * nrows), squeeze=False
    )
    colors = {
        "chaining": "tab:green",
        "chaining-continuous": "tab:olive",
        "gp-ucb": "tab:blue",
        "ucb": "tab:orange",
        "ax-default": "tab:purple",
        "qlognei-table": "tab:red",
        "sobol": "tab:gray",
    }
    for ax, problem in zip(axes.flat, problems, strict=False):
        for r in (r for r in summary["rows"] if r["problem"] == problem):
            x = range(1, len(r["curve_mean"]) + 1)
            lo = [m - s for m, s in zip(r["curve_mean"], r["curve_se"], strict=True)]
            hi = [m + s for m, s in zip(r["curve_mean"], r["curve_se"], strict=True)]
            ax.plot(
                x, r["curve_mean"], color=colors[r["method"]], label=LABELS[r["method"]]
            )
            ax.fill_between(x, lo, hi, color=colors[r["method"]], alpha=0.15)
            ax.set_title(f"{r['problem_name']} ({r['replications']} reps)", fontsize=9)
        ax.set_xlabel("trial")
        ax.set_ylabel("score (Ax)")
    # Early scores can be far below the baseline (Branin): show 0..100 well.
    for ax in list(axes.flat)[: len(problems)]:
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, -50.0), max(high, 105.0))
    # One legend, at a readable size, from the panel where every method is
    # drawn: in the grid's first spare cell (5 problems in a 2 x 3 grid), else
    # below the panels; it covers no curve either way.
    counts = [sum(r["problem"] == p for r in summary["rows"]) for p in problems]
    handles, labels = axes.flat[counts.index(max(counts))].get_legend_handles_labels()
    spare = list(axes.flat)[len(problems) :]
    for ax in spare:
        ax.axis("off")
    if spare:
        spare[0].legend(handles, labels, loc="center", fontsize=10, frameon=False)
        fig.tight_layout()
    else:
        fig.legend(handles, labels, loc="lower center", ncols=3, fontsize=10)
        fig.tight_layout(rect=(0, 0.12, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
