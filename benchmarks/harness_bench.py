r"""Chaining-UCB in Ax's own benchmark harness (``ax.benchmark``).

Every replication is one call of Ax's ``benchmark_replication(problem, method,
seed)``: Ax builds the experiment, runs its ``Orchestrator`` under
``with_rng_seed(seed)``, and scores the run. Nothing here computes a score: the
numbers are Ax's ``BenchmarkResult.score_trace`` (0 = the problem's baseline
value, 100 = its optimal value, from the true noise-free objective of the best
point evaluated so far) and its ``fit_time`` / ``gen_time``.

Methods (``METHODS``), each an Ax ``BenchmarkMethod`` around a
``GenerationStrategy``:

=======================  =====================================================
``chaining``             :func:`ax_chaining.ax.chaining_generation_strategy`
                         (delta 0.05)
``chaining-continuous``  the same with ``bonus="continuous"``
``gp-ucb``               :func:`ax_chaining.ax.gp_ucb_generation_strategy`
                         (delta 0.05)
``ucb``                  :func:`ax_chaining.ax.ucb_generation_strategy` (BoTorch's
                         ``UpperConfidenceBound``, beta 0.2)
``qlognei-table``        :func:`ax_chaining.ax.qlognei_generation_strategy`: Ax's
                         default acquisition over the same candidate set as this
                         package's
``ax-default``           Ax's ``get_sobol_mbm_generation_strategy(SingleTaskGP,
                         qLogNoisyExpectedImprovement)``: Sobol, then Ax's modular
                         BoTorch generator (Ax's own optimizer of the acquisition)
``sobol``                Ax's ``get_sobol_generation_strategy()``
=======================  =====================================================

The three strategies of this package use ``seed=None``, so their candidate set
and initial points follow the seed Ax's harness sets for each replication;
they start with ``init_trials`` points drawn uniformly from the candidate set
(Ax's default starts with as many Sobol points), and pass
``exclude_evaluated=True`` because the problems are noise-free (Ax's own
discrete optimizer likewise avoids observed points).

Problems (``PROBLEMS``): Ax's registry problem ``"Discrete Hartmann"`` (4
integer and 2 continuous parameters: this package's strategies search a fixed
Sobol design of 1,024 points there), and BoTorch test functions on integer
grids, evaluated through Ax's ``BoTorchTestFunction`` with ``modified_bounds``
(grid index ``0 .. k-1`` mapped linearly onto the function's domain):

=================  ======================  =========
name               grid                    points
=================  ======================  =========
``hartmann3``      10 x 10 x 10            1,000
``branin``         41 x 41                 1,681
``hartmann6``      4^6                     4,096
``ackley4``        11^4 (contains 0)       14,641
=================  ======================  =========

For the grid problems, ``optimal_value`` is the best value on the grid (so a
score of 100 means the best grid point was found) and ``baseline_value`` is the
exact expectation of the best of 5 uniform draws from the grid. Ax computes its
registry baselines as the mean best of 5 Sobol points over 50 replications;
the exact expectation is used here because it needs no run and no seed.

The runner records one JSON per replication under
``OUT/runs/PROBLEM/METHOD/seed_S.json`` (a record that exists and matches the
configuration is reused, so an interrupted run resumes; see
:mod:`benchmarks.records` for packing them), and summarizes them.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ax_chaining.checks import check_choice, check_delta, check_int
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

FORMAT_VERSION = 1

METHODS: tuple[str, ...] = (
    "chaining",
    "chaining-continuous",
    "gp-ucb",
    "ucb",
    "qlognei-table",
    "ax-default",
    "sobol",
)
LABELS: dict[str, str] = {
    "chaining": "Chaining-UCB",
    "chaining-continuous": "Chaining-UCB (continuous bonus)",
    "gp-ucb": "GP-UCB",
    "ucb": "UCB (beta=0.2)",
    "qlognei-table": "qLogNEI over the candidate set",
    "ax-default": "Ax default (Sobol + qLogNEI)",
    "sobol": "Sobol",
}
# name -> (BoTorch class name, dim, points per dimension); None: Ax's registry.
_GRIDS: dict[str, tuple[str, int, int] | None] = {
    "discrete-hartmann": None,
    "hartmann3": ("Hartmann", 3, 10),
    "branin": ("Branin", 2, 41),
    "hartmann6": ("Hartmann", 6, 4),
    "ackley4": ("Ackley", 4, 11),
}
PROBLEMS: tuple[str, ...] = tuple(_GRIDS)
_REGISTRY_NAMES = {"discrete-hartmann": "Discrete Hartmann"}


@dataclass(frozen=True)
class HarnessConfig:
    """Size of a harness run.

    Attributes:
        num_trials: Trials per replication, initial ones included.
        init_trials: Initial (uniform or Sobol) trials.
        replications: Seeds ``0 .. replications - 1``.
        delta: Confidence parameter of Chaining-UCB and GP-UCB.
        beta: BoTorch UCB's beta.
    """

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
SMALL_PROBLEMS: tuple[str, ...] = ("hartmann3", "branin")


# ---------------------------------------------------------------------------
# Problems and methods.
# ---------------------------------------------------------------------------


def _grid_problem(name: str, num_trials: int) -> Any:
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
    metric = f"{cls_name}{dim}"
    modified = [(0, k - 1)] * dim
    search_space = SearchSpace(
        parameters=[
            RangeParameter(
                name=f"x{i + 1}",
                parameter_type=ParameterType.INT,
                lower=0,
                upper=k - 1,
            )
            for i in range(dim)
        ]
    )
    # Every grid point through the same map BoTorchTestFunction applies.
    axes = [torch.arange(k, dtype=torch.float64)] * dim
    grid = torch.cartesian_prod(*axes).reshape(-1, dim)
    X = unnormalize(
        normalize(grid, torch.tensor(modified, dtype=torch.float64).T),
        botorch_problem.bounds.to(torch.float64),
    )
    with torch.no_grad():
        values = botorch_problem.evaluate_true(X).to(torch.float64)
    opt_config, metrics = get_soo_opt_config(
        outcome_names=[metric], lower_is_better=True
    )
    return BenchmarkProblem(
        name=f"{cls_name}-{dim} on {'x'.join([str(k)] * dim)} grid",
        search_space=search_space,
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


def expected_best_of_uniform(values: Sequence[float], draws: int = 5) -> float:
    r"""Exact expected minimum of ``draws`` uniform draws (with replacement).

    With ascending values :math:`v_{(1)} \le \dots \le v_{(N)}`,
    :math:`P(\min \ge v_{(j)}) = ((N - j + 1) / N)^{d}`, so
    :math:`E[\min] = \sum_j v_{(j)} [((N-j+1)/N)^d - ((N-j)/N)^d]`.

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
    """The Ax ``BenchmarkProblem`` called ``name`` (see :data:`PROBLEMS`)."""
    check_choice("name", name, PROBLEMS)
    if _GRIDS[name] is None:
        from ax.benchmark.problems.registry import get_benchmark_problem

        return get_benchmark_problem(_REGISTRY_NAMES[name], num_trials=num_trials)
    return _grid_problem(name, num_trials)


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
        from ax_chaining import ax as axc

        common = {
            "init_trials": config.init_trials,
            "seed": None,  # follow the harness's seed for this replication
            "exclude_evaluated": True,
        }
        if name == "chaining":
            gs = axc.chaining_generation_strategy(delta=config.delta, **common)
        elif name == "chaining-continuous":
            gs = axc.chaining_generation_strategy(
                delta=config.delta, bonus="continuous", **common
            )
        elif name == "gp-ucb":
            gs = axc.gp_ucb_generation_strategy(delta=config.delta, **common)
        elif name == "qlognei-table":
            gs = axc.qlognei_generation_strategy(**common)
        else:
            gs = axc.ucb_generation_strategy(beta=config.beta, **common)
    return BenchmarkMethod(name=LABELS[name], generation_strategy=gs)


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
