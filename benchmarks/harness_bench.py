r"""Chaining-UCB in Ax's own benchmark harness (``ax.benchmark``).

Each replication is Ax's ``benchmark_replication(problem, method, seed)``; the
scores are Ax's (``score_trace``, ``fit_time``, ``gen_time``). The methods and
problems are described on the docs' page ``docs/results/harness.md``.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ax_chaining.checks import check_choice, check_delta, check_int
from benchmarks._tables import (
    COLORS,
    band,
    check_names,
    common_seed_groups,
    md_row,
    mean_se,
    num,
    package_strategy,
    paired,
    pm,
    pyplot,
    save_figure,
)
from benchmarks.records import run_resumable

FORMAT_VERSION = 1
LABELS: dict[str, str] = {
    "chaining": "Chaining-UCB",
    "chaining-continuous": "Chaining-UCB (continuous bonus)",
    "gp-ucb": "GP-UCB",
    "ucb": "UCB (beta=0.2)",
    "qlognei-table": "qLogNEI over the candidate set",
    "ax-default": "Ax default (Sobol + qLogNEI)",
    "sobol": "Sobol",
}
METHODS: tuple[str, ...] = tuple(LABELS)
# name -> (BoTorch class name, dim, points per dimension); None: Ax's registry.
_GRIDS: dict[str, tuple[str, int, int] | None] = {
    "discrete-hartmann": None,
    "hartmann3": ("Hartmann", 3, 10),
    "branin": ("Branin", 2, 41),
    "hartmann6": ("Hartmann", 6, 4),
    "ackley4": ("Ackley", 4, 11),
}
PROBLEMS: tuple[str, ...] = tuple(_GRIDS)
SMALL_PROBLEMS: tuple[str, ...] = ("hartmann3", "branin")
_COLORS = {
    **COLORS,
    "ax-default": "tab:purple",
    "qlognei-table": "tab:red",
    "sobol": "tab:gray",
}


@dataclass(frozen=True)
class HarnessConfig:
    """Trials per replication (initial ones included), initial trials,
    replications (seeds ``0..R-1``), Chaining-UCB's and GP-UCB's ``delta``,
    BoTorch UCB's ``beta``."""

    num_trials: int = 20
    init_trials: int = 5
    replications: int = 10
    delta: float = 0.05
    beta: float = 0.2

    def __post_init__(self) -> None:
        for name in ("num_trials", "init_trials", "replications"):
            check_int(name, getattr(self, name), 1)
        if self.init_trials >= self.num_trials:
            raise ValueError(
                f"`init_trials` ({self.init_trials}) must be below `num_trials` "
                f"({self.num_trials})."
            )
        check_delta(self.delta)

    def key(self) -> dict[str, Any]:
        """What a stored record must match to be reused."""
        d = asdict(self)
        d.pop("replications")
        return {**d, "format": FORMAT_VERSION}


FULL_CONFIG = HarnessConfig()
SMALL_CONFIG = HarnessConfig(num_trials=6, init_trials=3, replications=2)


def expected_best_of_uniform(values: Sequence[float], draws: int = 5) -> float:
    r"""Exact expected minimum of ``draws`` uniform draws with replacement:
    :math:`\sum_j v_{(j)} [((N-j+1)/N)^d - ((N-j)/N)^d]` over sorted values.

    Example:
        >>> expected_best_of_uniform([0.0, 1.0], draws=2)  # P(min = 1) = 1/4
        0.25
    """
    v = sorted(float(x) for x in values)
    n = len(v)
    if n == 0 or draws < 1:
        raise ValueError(f"need values and draws >= 1, got {n} values, {draws=}.")
    return sum(
        vj * (((n - j) / n) ** draws - ((n - j - 1) / n) ** draws)
        for j, vj in enumerate(v)
    )


def get_problem(name: str, num_trials: int) -> Any:
    """The Ax ``BenchmarkProblem`` called ``name`` (see :data:`PROBLEMS`): Ax's
    Discrete Hartmann, or a BoTorch test function on an integer grid (index
    ``0..k-1`` mapped onto its domain); optimum: the best grid point;
    baseline: the expected best of 5 uniform grid points."""
    check_choice("name", name, PROBLEMS)
    if _GRIDS[name] is None:
        from ax.benchmark.problems.registry import get_benchmark_problem

        return get_benchmark_problem("Discrete Hartmann", num_trials=num_trials)
    import botorch.test_functions.synthetic as synthetic
    import torch
    from ax.benchmark.benchmark_problem import BenchmarkProblem, get_soo_opt_config
    from ax.benchmark.benchmark_test_functions.botorch_test import (
        BoTorchTestFunction,
    )
    from ax.core.parameter import ParameterType, RangeParameter
    from ax.core.search_space import SearchSpace
    from botorch.utils.transforms import normalize, unnormalize

    cls_name, dim, k = _GRIDS[name]  # type: ignore[misc]
    cls = getattr(synthetic, cls_name)
    botorch_problem = cls() if cls_name == "Branin" else cls(dim=dim)
    metric, modified = f"{cls_name}{dim}", [(0, k - 1)] * dim
    parameters = [
        RangeParameter(f"x{i + 1}", ParameterType.INT, lower=0, upper=k - 1)
        for i in range(dim)
    ]
    # Every grid point through the same map BoTorchTestFunction applies.
    grid = torch.cartesian_prod(*[torch.arange(k, dtype=torch.float64)] * dim)
    X = unnormalize(
        normalize(grid.reshape(-1, dim), torch.tensor(modified, dtype=torch.float64).T),
        botorch_problem.bounds.to(torch.float64),
    )
    with torch.no_grad():
        values = botorch_problem.evaluate_true(X).to(torch.float64)
    opt_config, metrics = get_soo_opt_config(
        outcome_names=[metric], lower_is_better=True
    )
    return BenchmarkProblem(
        name=f"{cls_name}-{dim} on {'x'.join([str(k)] * dim)} grid",
        search_space=SearchSpace(parameters=parameters),
        optimization_config=opt_config,
        test_function=BoTorchTestFunction(
            botorch_problem=botorch_problem,
            modified_bounds=modified,
            outcome_names=[metric],
        ),
        num_trials=num_trials,
        optimal_value=float(values.min()),
        baseline_value=expected_best_of_uniform(values.tolist(), draws=5),
        opt_config_metrics=metrics,
    )


def get_method(name: str, config: HarnessConfig) -> Any:
    """The Ax ``BenchmarkMethod`` called ``name`` (see :data:`METHODS`)."""
    from ax.benchmark.benchmark_method import BenchmarkMethod

    check_choice("name", name, METHODS)
    if name == "sobol":
        from ax.benchmark.methods.sobol import get_sobol_generation_strategy

        gs = get_sobol_generation_strategy()
    elif name == "ax-default":
        from ax.benchmark.methods.modular_botorch import (
            get_sobol_mbm_generation_strategy,
        )
        from botorch.acquisition.logei import qLogNoisyExpectedImprovement
        from botorch.models import SingleTaskGP

        gs = get_sobol_mbm_generation_strategy(
            model_cls=SingleTaskGP,
            acquisition_cls=qLogNoisyExpectedImprovement,
            num_sobol_trials=config.init_trials,
        )
    else:
        # seed None: the candidate set and initial points follow the harness;
        # exclude_evaluated: noise-free problems.
        common = {"init_trials": config.init_trials, "seed": None}
        common["exclude_evaluated"] = True
        gs = package_strategy(name, config.delta, config.beta, **common)
    return BenchmarkMethod(name=LABELS[name], generation_strategy=gs)


def _replicate(
    problem: str, method: str, seed: int, config: HarnessConfig
) -> dict[str, Any]:
    import logging

    from ax.benchmark.benchmark import benchmark_replication

    bp, bm = get_problem(problem, config.num_trials), get_method(method, config)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = benchmark_replication(
            problem=bp, method=bm, seed=seed, orchestrator_logging_level=logging.WARNING
        )
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
        "wall_time": time.perf_counter() - start,
        "num_trials": config.num_trials,
    }


def run_harness(
    problems: Sequence[str],
    methods: Sequence[str],
    config: HarnessConfig,
    out: str | Path,
    **options: Any,
) -> list[dict[str, Any]]:
    """Run (or resume) every replication, seed by seed; ``options`` of
    :func:`~benchmarks.records.run_resumable`."""
    check_names(problems, PROBLEMS, "problem")
    check_names(methods, METHODS, "method")
    tasks = [
        (p, m, s) for s in range(config.replications) for p in problems for m in methods
    ]
    run = functools.partial(_replicate, config=config)
    return run_resumable(tasks, out, "harness", config.key(), run, **options)


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Final score, score area, time per trial and paired differences against
    Chaining-UCB, over the seeds every method of a problem ran."""
    rows, pairs = [], []
    for problem, methods, seeds, by_method in common_seed_groups(
        records, "problem", PROBLEMS, METHODS
    ):
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
        for m in methods if "chaining" in final else []:
            if m != "chaining":
                pair = paired(final["chaining"], final[m], True)
                pairs.append({"problem": problem, "method": m, **pair})
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
            md_row(
                r["problem_name"],
                LABELS[r["method"]],
                cell,
                pm(*r["mean_score"], digits=1),
                num(r["fit_gen_s_per_trial"], 2),
                num(r["wall_s_per_trial"], 2),
                r["replications"],
            )
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
                md_row(
                    names[p["problem"]],
                    LABELS[p["method"]],
                    pm(p["mean"], p["se"], digits=1, sign=True),
                    f"{p['wins']} / {p['ties']} / {p['losses']}",
                    p["n"],
                )
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
    """Mean score trace ± SE, one panel per problem, one legend."""
    problems = list(dict.fromkeys(r["problem"] for r in summary["rows"]))
    ncols = min(3, len(problems))
    nrows = math.ceil(len(problems) / ncols)
    fig, axes = pyplot().subplots(
        nrows, ncols, figsize=(4.2 * ncols, 3.3 * nrows), squeeze=False
    )
    for ax, problem in zip(axes.flat, problems, strict=False):
        for r in (r for r in summary["rows"] if r["problem"] == problem):
            x = range(1, len(r["curve_mean"]) + 1)
            m = r["method"]
            band(ax, x, r["curve_mean"], r["curve_se"], _COLORS[m], LABELS[m])
            ax.set_title(f"{r['problem_name']} ({r['replications']} reps)", fontsize=9)
        ax.set_xlabel("trial")
        ax.set_ylabel("score (Ax)")
        # Early scores can be far below the baseline (Branin): show 0..100.
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, -50.0), max(high, 105.0))
    # One legend, from the panel with every method: in the first spare cell
    # of the grid, else below the panels.
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
    return save_figure(fig, path)
