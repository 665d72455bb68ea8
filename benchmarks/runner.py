r"""The experiments of Contal, Malherbe & Vayatis (2015), Section 4, with BoTorch.

The protocol (problems, noise, initial design, the shared fixed GP, methods,
seeds) and the recorded fields are described on the docs' paper pages
(``docs/results/paper-n2000.md``); :func:`run_benchmark` runs or resumes it.
"""

from __future__ import annotations

import functools
import math
import os
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import product
from typing import Any

import numpy as np
import torch
from botorch.acquisition import (
    AcquisitionFunction,
    LogExpectedImprovement,
    UpperConfidenceBound,
)
from botorch.exceptions import InputDataWarning
from botorch.models import SingleTaskGP
from botorch.optim import optimize_acqf_discrete
from gpytorch.kernels import Kernel
from torch import Tensor

from ax_chaining.acquisition import GPUCB, ChainingUCB
from ax_chaining.test_functions.problems import DEFAULT_NOISE_STD
from benchmarks._tables import check_names, md_row, mean_se, paired, pm
from benchmarks.records import run_resumable
from benchmarks.testbeds import BenchmarkProblem as DiscreteProblem
from benchmarks.testbeds import graph_problem, himmelblau_problem, se_problem

#: Methods, in the order of tables and legends, with their labels.
METHOD_LABELS: dict[str, str] = {
    "chaining": "Chaining-UCB",
    "chaining-continuous": "Chaining-UCB (continuous bonus)",
    "gp-ucb": "GP-UCB",
    "ucb": "UCB (beta=0.2)",
    "logei": "LogEI",
    "random": "Random",
}
METHODS: tuple[str, ...] = tuple(METHOD_LABELS)
PROBLEM_LABELS = {
    "se": "SE kernel",
    "himmelblau": "Himmelblau",
    "graph": "Graph kernel",
}
PROBLEMS: tuple[str, ...] = tuple(PROBLEM_LABELS)
#: Query numbers at which the summary reports :math:`S_n` (and ``T``).
CHECKPOINTS: tuple[int, ...] = (10, 25, 50, 100)
FORMAT_VERSION = 1
_INIT_SEED, _NOISE_SEED, _RANDOM_SEED = 10_000, 20_000, 30_000
_DTYPE = torch.float64


@dataclass(frozen=True)
class BenchmarkConfig:
    """Size and constants of one experiment: ``n`` candidates, ``iters``
    queries after ``n_init`` initial points, ``runs`` seeds, ``delta`` of
    Chaining-UCB and GP-UCB, ``ucb_beta`` of BoTorch's UCB, and the candidates
    that learn the kernel where the problem needs it (``kernel_subset``)."""

    n: int = 10_000
    iters: int = 100
    runs: int = 32
    n_init: int = 10
    noise_std: float = DEFAULT_NOISE_STD
    delta: float = 0.05
    ucb_beta: float = 0.2
    kernel_subset: int = 500

    def run_key(self) -> dict[str, Any]:
        """The fields a stored run must match to be reused (all but ``runs``)."""
        d = asdict(self)
        d.pop("runs")
        return d


PAPER_CONFIG = BenchmarkConfig()
SMALL_CONFIG = BenchmarkConfig(n=1000, iters=40, runs=8)


def make_problem(name: str, n: int, seed: int) -> DiscreteProblem:
    """One of the paper's problems (``se``, ``himmelblau``, ``graph``)."""
    problems = {
        "se": se_problem,
        "himmelblau": himmelblau_problem,
        "graph": graph_problem,
    }
    if name not in problems:
        raise ValueError(f"Unknown problem {name!r}; expected one of {PROBLEMS}.")
    return problems[name](n=n, seed=seed)


def _engine_fingerprint() -> dict[str, str]:
    """Short SHA-256 of the source files the results depend on."""
    import hashlib
    import importlib

    digests = {}
    modules = "acquisition chaining covers distances posterior kernels"
    names = [f"ax_chaining.{m}" for m in (*modules.split(), "test_functions.problems")]
    for name in (*names, "benchmarks.runner"):
        try:
            path = importlib.import_module(name).__file__
            with open(path, "rb") as fh:  # type: ignore[arg-type]
                digests[name] = hashlib.sha256(fh.read()).hexdigest()[:12]
        except (ImportError, OSError, TypeError):
            digests[name] = "unknown"
    return digests


def _kernel_description(kernel: Kernel) -> dict[str, Any]:
    """The (fixed) kernel's hyperparameters, JSON-ready."""
    desc: dict[str, Any] = {"class": type(kernel).__name__}
    base = getattr(kernel, "base_kernel", None)
    if base is not None:
        desc["base"] = type(base).__name__
        desc["outputscale"] = float(kernel.outputscale)
    lengthscale = getattr(base if base is not None else kernel, "lengthscale", None)
    if lengthscale is not None:
        desc["lengthscale"] = lengthscale.detach().reshape(-1).tolist()
    return desc


def fixed_model(
    train_X: Tensor, train_Y: Tensor, kernel: Kernel, noise_std: float, mean: float
) -> SingleTaskGP:
    """Exact GP with a given kernel, noise and constant mean (nothing fitted)."""
    with warnings.catch_warnings():
        # The data are deliberately not standardized: the prior is fixed.
        warnings.simplefilter("ignore", InputDataWarning)
        model = SingleTaskGP(
            train_X,
            train_Y,
            train_Yvar=torch.full_like(train_Y, noise_std**2),
            covar_module=kernel,
            outcome_transform=None,
            input_transform=None,
        )
    model.mean_module.constant = mean
    model.requires_grad_(False)
    return model.eval()


def acquisition(
    method: str, model: SingleTaskGP, candidates: Tensor, config: BenchmarkConfig
) -> AcquisitionFunction:
    """The acquisition function of a model-based ``method`` of :data:`METHODS`."""
    if method == "chaining":
        return ChainingUCB(model, candidates, delta=config.delta)
    if method == "chaining-continuous":
        return ChainingUCB(model, candidates, delta=config.delta, bonus="continuous")
    if method == "gp-ucb":
        return GPUCB(model, num_candidates=candidates.shape[0], delta=config.delta)
    if method == "ucb":
        return UpperConfidenceBound(model, beta=config.ucb_beta)
    # LogEI, noisy observations: the incumbent is the best posterior mean at
    # the observed points, not the best (noise-inflated) observation.
    with torch.no_grad():
        best_f = model.posterior(model.train_inputs[0]).mean.max()
    return LogExpectedImprovement(model, best_f=best_f)


@dataclass
class _RunSetup:
    """What every method of one run shares."""

    kernel: Kernel
    init_idx: list[int]
    init_y: list[float]
    prior_mean: float
    kernel_seconds: float


def _setup_run(
    problem: DiscreteProblem, seed: int, config: BenchmarkConfig
) -> _RunSetup:
    start = time.perf_counter()
    kernel = problem.get_covar_module(n_subset=config.kernel_subset, seed=seed)
    kernel_seconds = time.perf_counter() - start
    if config.n_init > problem.n:
        raise ValueError(f"n_init={config.n_init} exceeds N={problem.n}.")
    gen = torch.Generator().manual_seed(_INIT_SEED + seed)
    init_idx = torch.randperm(problem.n, generator=gen)[: config.n_init]
    noise = torch.randn(config.n_init, generator=gen, dtype=_DTYPE)
    init_y = problem.f[init_idx] + config.noise_std * noise
    # A learned kernel's prior mean is unknown: the initial design's mean
    # (the same for every method), not 0.
    prior_mean = float(init_y.mean()) if problem.learn_hyperparameters else 0.0
    return _RunSetup(
        kernel, init_idx.tolist(), init_y.tolist(), prior_mean, kernel_seconds
    )


def run_method(
    problem: DiscreteProblem,
    method: str,
    seed: int,
    config: BenchmarkConfig,
    setup: _RunSetup | None = None,
) -> dict[str, Any]:
    """The record of one method on one problem instance for ``config.iters``
    queries (``setup``: the kernel and initial design its methods share)."""
    if method not in METHODS:
        raise ValueError(f"Unknown method {method!r}; expected one of {METHODS}.")
    setup = setup or _setup_run(problem, seed, config)
    X, f = problem.X, problem.f
    f_max = float(f.max())
    noise_gen = torch.Generator().manual_seed(_NOISE_SEED + seed)
    random_gen = torch.Generator().manual_seed(_RANDOM_SEED + seed)
    idx, ys = list(setup.init_idx), list(setup.init_y)
    evaluated = torch.zeros(problem.n, dtype=torch.bool)
    evaluated[idx] = True
    best_init = float(f[idx].max())
    best, best_queries, cum = best_init, -math.inf, 0.0
    simple, simple_q, cumulative, seconds = [], [], [], []
    diagnostics: dict[str, list[float]] = {}
    for _ in range(config.iters):
        start = time.perf_counter()
        if method == "random":  # uniform among the candidates not evaluated yet
            free = (~evaluated).nonzero().squeeze(-1)
            if free.numel() == 0:
                free = torch.arange(problem.n)
            nxt = int(free[torch.randint(free.numel(), (1,), generator=random_gen)])
        else:
            train_Y = torch.tensor(ys, dtype=_DTYPE).unsqueeze(-1)
            model = fixed_model(
                X[idx], train_Y, setup.kernel, config.noise_std, setup.prior_mean
            )
            acqf = acquisition(method, model, X, config)
            with torch.no_grad():
                x, _ = optimize_acqf_discrete(acqf, q=1, choices=X, unique=False)
            nxt = int((X == x[0].reshape(1, -1)).all(dim=-1).nonzero()[0, 0])
            if method == "chaining":
                levels = acqf.chaining.num_levels
                diagnostics.setdefault("num_levels", []).append(levels)
                # The paper's Eq. (ucb) at the query: O(L), outside the step.
                sigma = acqf.candidate_sigma[nxt].reshape(1)
                bound = float(acqf.chaining.regret_bound(sigma))
                diagnostics.setdefault("regret_bound", []).append(bound)
            elif method == "gp-ucb":
                diagnostics.setdefault("beta", []).append(float(acqf.beta))
        seconds.append(time.perf_counter() - start)
        noise = float(torch.randn(1, generator=noise_gen, dtype=_DTYPE))
        y = float(f[nxt]) + config.noise_std * noise
        idx.append(nxt)
        ys.append(y)
        evaluated[nxt] = True
        fx = float(f[nxt])
        best, best_queries, cum = max(best, fx), max(best_queries, fx), cum + f_max - fx
        simple.append(f_max - best)
        simple_q.append(f_max - best_queries)
        cumulative.append(cum)
    queries = idx[len(setup.init_idx) :]
    return {
        "format_version": FORMAT_VERSION,
        "complete": True,
        "problem": problem.name,
        "method": method,
        "seed": int(seed),
        "config": config.run_key(),
        "f_max": f_max,
        "argmax": problem.argmax,
        "init_indices": setup.init_idx,
        "init_y": setup.init_y,
        "prior_mean": setup.prior_mean,
        "kernel": _kernel_description(setup.kernel),
        "kernel_seconds": setup.kernel_seconds,
        "queries": queries,
        "y": ys[len(setup.init_y) :],
        "f_queries": [float(f[i]) for i in queries],
        "simple_regret_init": f_max - best_init,
        "simple_regret": simple,
        "simple_regret_queries": simple_q,
        "cumulative_regret": cumulative,
        "step_seconds": seconds,
        "diagnostics": diagnostics,
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "engine": _ENGINE,
    }


# Hashed once per process, when this module is imported (the code that runs).
_ENGINE = _engine_fingerprint()


@functools.lru_cache(maxsize=1)
def _instance(
    name: str, seed: int, config: BenchmarkConfig
) -> tuple[DiscreteProblem, _RunSetup]:
    """A run's problem and setup, kept for the next method of the same run."""
    problem = make_problem(name, config.n, seed)
    return problem, _setup_run(problem, seed, config)


def _run_task(
    problem: str, method: str, seed: int, config: BenchmarkConfig
) -> dict[str, Any]:
    warnings.filterwarnings("ignore", category=InputDataWarning)
    instance, setup = _instance(problem, seed, config)
    return run_method(instance, method, seed, config, setup=setup)


def run_benchmark(
    problems: Sequence[str] = PROBLEMS,
    methods: Sequence[str] = METHODS,
    runs: int = 32,
    iters: int = 100,
    n: int = 10_000,
    out: str | os.PathLike = "results/paper",
    jobs: int = 1,
    threads: int | None = None,
    force: bool = False,
    progress: bool = True,
    config: BenchmarkConfig | None = None,
) -> list[dict[str, Any]]:
    """Run (or resume) the paper's experiment: one record per problem, method
    and seed under ``out`` (a stored run of another configuration refused
    unless ``force``); ``config`` overrides ``runs``, ``iters`` and ``n``.
    Returns the records in problem, method, seed order.

    Example:
        >>> records = run_benchmark(["graph"], ["chaining", "random"], runs=2,
        ...                         iters=5, n=150, out="/tmp/bench")
    """
    config = config or BenchmarkConfig(n=n, iters=iters, runs=runs)
    problems = check_names(problems, PROBLEMS, "problem")
    methods = check_names(methods, METHODS, "method")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}.")
    # Seed by seed, the methods of a run in a row: they share its instance.
    tasks = [(p, m, s) for p, s, m in product(problems, range(config.runs), methods)]
    run = functools.partial(_run_task, config=config)
    options = {"force": force, "progress": progress, "desc": "runs", "jobs": jobs}
    options["threads"] = threads or (1 if jobs > 1 else None)
    options["complete"] = functools.partial(_is_complete, config=config)
    key = config.run_key()
    records = run_resumable(tasks, out, "paper", key, run, refuse_other=True, **options)
    return select_results(records, problems, methods, config)


def _is_complete(record: Any, config: BenchmarkConfig) -> bool:
    return (
        isinstance(record, dict)
        and record.get("format_version") == FORMAT_VERSION
        and record.get("complete") is True
        and record.get("config") == config.run_key()
        and len(record.get("simple_regret", ())) == config.iters
    )


def select_results(
    records: Iterable[dict[str, Any]],
    problems: Sequence[str] = PROBLEMS,
    methods: Sequence[str] = METHODS,
    config: BenchmarkConfig | None = None,
) -> list[dict[str, Any]]:
    """The complete records of ``problems`` and ``methods`` (with ``config``:
    made with it, seeds below ``config.runs``), in problem, method, seed order."""
    order = {key: i for i, key in enumerate(product(problems, methods))}

    def keep(r: dict[str, Any]) -> bool:
        if (r.get("problem"), r.get("method")) not in order:
            return False
        if config is None:
            return r.get("complete") is True
        return _is_complete(r, config) and r["seed"] < config.runs

    return sorted(
        filter(keep, records),
        key=lambda r: (order[(r["problem"], r["method"])], r["seed"]),
    )


def summarize(
    records: Sequence[dict[str, Any]], checkpoints: Sequence[int] = CHECKPOINTS
) -> dict[str, Any]:
    r"""Per problem and method: mean ± SE of :math:`S_n` at ``checkpoints``
    (and ``T``), of its sum over ``n`` (AUC) and of :math:`R_T`, seconds per
    step (``rows``); the mean curves (``curves``); :func:`paired_comparison`."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["problem"], r["method"]), []).append(r)
    p_order = {p: i for i, p in enumerate(PROBLEMS)}
    m_order = {m: i for i, m in enumerate(METHODS)}
    rows, curves = [], {}
    for problem, method in sorted(
        groups, key=lambda k: (p_order.get(k[0], 99), k[0], m_order.get(k[1], 99))
    ):
        group = sorted(groups[(problem, method)], key=lambda r: r["seed"])
        if len(lengths := {len(r["simple_regret"]) for r in group}) != 1:
            message = f"Runs of {problem}/{method} have different lengths {lengths}."
            raise ValueError(message)
        T = lengths.pop()
        S = np.array([[r["simple_regret_init"], *r["simple_regret"]] for r in group])
        R = np.array([r["cumulative_regret"] for r in group])
        cps = [k for k in checkpoints if k <= T]
        cps += [] if T in cps else [T]
        row: dict[str, Any] = {
            "problem": problem,
            "method": method,
            "runs": len(group),
            "n": group[0]["config"]["n"],
            "T": T,
            "checkpoints": cps,
        }
        for k in cps:
            row[f"S_{k}_mean"], row[f"S_{k}_se"] = mean_se(S[:, k])
        row["auc_mean"], row["auc_se"] = mean_se(S[:, 1:].sum(axis=1))
        row["R_T_mean"], row["R_T_se"] = mean_se(R[:, -1])
        row["seconds_per_step"] = float(np.mean([r["step_seconds"] for r in group]))
        rows.append(row)
        (s_mean, s_se), (r_mean, r_se) = mean_se(S), mean_se(R)
        curves.setdefault(problem, {})[method] = {
            "simple_regret_mean": np.asarray(s_mean).tolist(),
            "simple_regret_se": np.asarray(s_se).tolist(),
            "cumulative_regret_mean": np.asarray(r_mean).tolist(),
            "cumulative_regret_se": np.asarray(r_se).tolist(),
        }
    return {"rows": rows, "curves": curves, "paired": paired_comparison(records)}


def paired_comparison(
    records: Sequence[dict[str, Any]], reference: str = "chaining"
) -> list[dict[str, Any]]:
    r"""Run-by-run differences of :math:`S_T` and of the AUC, ``reference``
    minus every other method (negative: ``reference`` better), over the seeds
    both ran with the same horizon, with wins, ties and losses on :math:`S_T`."""
    by_key = {(r["problem"], r["method"], r["seed"]): r for r in records}
    methods = [m for m in METHODS if m != reference]
    methods += sorted({r["method"] for r in records} - set(METHODS) - {reference})
    out = []
    for problem in dict.fromkeys(r["problem"] for r in records):
        for method in methods:
            seeds = sorted(
                s
                for (p, m, s) in by_key
                if (p, m) == (problem, method) and (p, reference, s) in by_key
            )
            ref = [by_key[(problem, reference, s)]["simple_regret"] for s in seeds]
            other = [by_key[(problem, method, s)]["simple_regret"] for s in seeds]
            if not seeds or len({len(r) for r in ref + other}) != 1:
                continue  # none, or different horizons: not comparable
            final = paired([r[-1] for r in ref], [r[-1] for r in other], False)
            auc = paired([sum(r) for r in ref], [sum(r) for r in other], False)
            out.append(
                {
                    "problem": problem,
                    "reference": reference,
                    "method": method,
                    "runs": len(seeds),
                    "T": len(ref[0]),
                    "dS_T_mean": final["mean"],
                    "dS_T_se": final["se"],
                    "dauc_mean": auc["mean"],
                    "dauc_se": auc["se"],
                    **{k: final[k] for k in ("wins", "ties", "losses")},
                }
            )
    return out


def format_summary_markdown(summary: dict[str, Any]) -> str:
    r"""One markdown table per problem (:math:`S_n`, AUC, ``R_T``), then the
    paired differences."""
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for row in summary["rows"]:
        by_problem.setdefault(row["problem"], []).append(row)
    blocks = []
    for problem, rows in by_problem.items():
        cps = rows[0]["checkpoints"]
        head = ["method", *(f"S_{k}" for k in cps), "AUC (sum S_n)", "R_T", "s/step"]
        lines = [
            f"**{PROBLEM_LABELS.get(problem, problem)}** (N = {rows[0]['n']}, "
            f"T = {rows[0]['T']} queries after 10 initial points)",
            "",
            md_row(*head, "runs"),
            "|" + "|".join(["---"] + ["---:"] * len(head)) + "|",
        ]
        best = {k: min(r[f"S_{k}_mean"] for r in rows) for k in cps}
        for r in rows:
            cells = [METHOD_LABELS.get(r["method"], r["method"])]
            for k in cps:  # bold: the lowest mean of the column (ties too)
                text = pm(r[f"S_{k}_mean"], r[f"S_{k}_se"])
                cells.append(f"**{text}**" if r[f"S_{k}_mean"] == best[k] else text)
            cells.append(pm(r["auc_mean"], r["auc_se"], 2))
            cells.append(f"{r['R_T_mean']:.1f} ± {r['R_T_se']:.1f}")
            lines.append(md_row(*cells, f"{r['seconds_per_step']:.3f}", r["runs"]))
        blocks.append("\n".join(lines))
    if pairs := summary.get("paired") or []:
        ref = METHOD_LABELS.get(pairs[0]["reference"], pairs[0]["reference"])
        lines = [
            f"**Paired differences, {ref} minus each method** (same instance, "
            f"initial points and noise in each run; negative: {ref} better)",
            "",
            "| problem | method | Δ S_T | Δ AUC | wins / ties / losses (S_T) | runs |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for r in pairs:
            lines.append(
                md_row(
                    PROBLEM_LABELS.get(r["problem"], r["problem"]),
                    METHOD_LABELS.get(r["method"], r["method"]),
                    pm(r["dS_T_mean"], r["dS_T_se"], sign=True),
                    pm(r["dauc_mean"], r["dauc_se"], 2, True),
                    f"{r['wins']} / {r['ties']} / {r['losses']}",
                    r["runs"],
                )
            )
        blocks.append("\n".join(lines))
    note = (
        "S_n: simple regret max f - max f(x) over the 10 initial points and the "
        "first n queries, mean ± standard error over runs (lower is better; bold: "
        "lowest mean). AUC: sum of S_n over n = 1..T. R_T: cumulative regret of "
        "the T queries. s/step: mean wall time of one query. Paired: mean ± "
        "standard error over runs of the run-by-run difference."
    )
    return "\n\n".join(blocks) + "\n\n" + note + "\n"
