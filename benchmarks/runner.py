r"""The experiments of Contal, Malherbe & Vayatis (2015), Section 4, with BoTorch.

Protocol (the paper's, with the choices it leaves open written down):

* A finite search space of ``N`` candidates (``N = 10^4`` in the paper), from
  :func:`~ax_chaining.test_functions.problems.se_problem`,
  :func:`~ax_chaining.test_functions.problems.himmelblau_problem` or
  :func:`~ax_chaining.test_functions.problems.graph_problem`; run ``r`` uses problem
  seed ``r``.
* Observations ``y = f(x) + 0.05 * eps`` with ``eps ~ N(0, 1)``; ``delta = 0.05``
  for Chaining-UCB and GP-UCB.
* ``n_init = 10`` initial points drawn uniformly from the candidates, without
  replacement, and observed with noise. Every method of a run starts from the
  same initial points and observations.
* Every method uses the same GP: an exact ``SingleTaskGP`` with the fixed noise
  variance ``0.05^2``, no input or outcome transform, and the problem's kernel
  from :meth:`~ax_chaining.test_functions.problems.DiscreteProblem.get_covar_module`
  (the true prior for SE and graphs; for Himmelblau an isotropic SE kernel
  learned once per run by marginal likelihood on 500 random noisy candidates,
  seed ``r``). Nothing is refitted during a run. The prior mean is the constant
  0 (the true one) when the kernel is the true prior; when it is learned
  (Himmelblau) the prior mean is the constant mean of the ``n_init`` initial
  observations, the same for every method.
* ``T`` queries per method. Acquisition methods maximize over the ``N``
  candidates with ``optimize_acqf_discrete`` and may re-query a candidate (the
  observations are noisy). ``random`` draws uniformly among the candidates not
  evaluated yet (initial points included), as the paper's Random search.
* Methods (:data:`METHODS`): ``chaining`` is
  :class:`~ax_chaining.acquisition.ChainingUCB` with ``delta``; ``gp-ucb`` is
  :class:`~ax_chaining.acquisition.GPUCB` (Srinivas et al.'s
  :math:`\beta_t` for a finite set) with ``delta``; ``ucb`` is BoTorch's
  ``UpperConfidenceBound(beta=0.2)``; ``logei`` is BoTorch's
  ``LogExpectedImprovement`` with ``best_f`` the largest posterior mean at the
  observed points (with noisy data the largest observation is biased upwards by
  the noise); ``random`` as above. ``t`` (in :math:`H_i` and
  :math:`\beta_t`) is the number of observations plus one, initial points
  included.
* Randomness: three ``torch.Generator`` per run, seeded from ``r`` and
  independent of the method: one for the initial design and its noise
  (``10_000 + r``), one for the noise of the queries (``20_000 + r``; query ``n``
  of every method gets the same standard normal draw) and one for the choices of
  ``random`` (``30_000 + r``).

Recorded per run and query ``n = 1..T`` (``x_n`` is the ``n``-th query after the
initial design):

* ``simple_regret[n-1]`` :math:`S_n = \max_X f - \max f(x)` over the initial
  points and ``x_1..x_n``: the initial points count as observations (they were
  evaluated), the index ``n`` counts queries only. ``simple_regret_init`` is
  :math:`S_0` (initial design alone) and ``simple_regret_queries`` the same
  quantity with the maximum over ``x_1..x_n`` only (the paper's literal
  definition on the queried points).
* ``cumulative_regret[n-1]`` :math:`R_n = \sum_{t \le n} (\max_X f - f(x_t))`
  over the queries (the initial design is not charged).
* ``step_seconds[n-1]``: wall time to build the model and the acquisition
  function and to maximize it (or to draw the random point); the observation is
  not timed.

Example:
    >>> results = run_benchmark(
    ...     problems=["se"], methods=["chaining", "random"], runs=2, iters=5,
    ...     n=200, out="results/tiny",
    ... )
    >>> summary = summarize(results)
    >>> print(format_summary_markdown(summary))
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from itertools import product
from pathlib import Path
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
from benchmarks._tables import check_names, mean_se, paired, pm
from benchmarks.moved_kernels import BenchmarkProblem as DiscreteProblem
from benchmarks.moved_kernels import graph_problem, himmelblau_problem, se_problem
from benchmarks.records import LAYOUTS, load_json, load_records, write_json

__all__ = [
    "CHECKPOINTS",
    "METHODS",
    "PAPER_CONFIG",
    "PROBLEMS",
    "SMALL_CONFIG",
    "BenchmarkConfig",
    "fixed_model",
    "format_summary_markdown",
    "load_results",
    "make_problem",
    "paired_comparison",
    "result_path",
    "run_benchmark",
    "run_method",
    "select_results",
    "summarize",
]

#: Methods, in the order of tables and legends.
METHODS: tuple[str, ...] = (
    "chaining",
    "chaining-continuous",
    "gp-ucb",
    "ucb",
    "logei",
    "random",
)
#: The paper's three problems.
PROBLEMS: tuple[str, ...] = ("se", "himmelblau", "graph")
#: Query numbers at which the summary reports :math:`S_n` (those ``<= T``; ``T``
#: itself is added when it is not one of them).
CHECKPOINTS: tuple[int, ...] = (10, 25, 50, 100)
#: Version of the per-run JSON layout; files of another version are recomputed.
FORMAT_VERSION = 1
#: Labels for tables and figures.
METHOD_LABELS: dict[str, str] = {
    "chaining": "Chaining-UCB",
    "chaining-continuous": "Chaining-UCB (continuous bonus)",
    "gp-ucb": "GP-UCB",
    "ucb": "UCB (beta=0.2)",
    "logei": "LogEI",
    "random": "Random",
}
PROBLEM_LABELS: dict[str, str] = {
    "se": "SE kernel",
    "himmelblau": "Himmelblau",
    "graph": "Graph kernel",
}

_INIT_SEED_OFFSET = 10_000
_NOISE_SEED_OFFSET = 20_000
_RANDOM_SEED_OFFSET = 30_000
_DTYPE = torch.float64


@dataclass(frozen=True)
class BenchmarkConfig:
    r"""Size and constants of one experiment (one ``--out`` directory).

    Args:
        n: Number of candidates ``N``.
        iters: Number of queries ``T`` after the initial design.
        runs: Number of runs (seeds ``0..runs-1``).
        n_init: Size of the initial design.
        noise_std: Observation noise standard deviation.
        delta: Confidence parameter of Chaining-UCB and GP-UCB.
        ucb_beta: ``beta`` of the stock BoTorch ``UpperConfidenceBound``.
        kernel_subset: Candidates used to learn the kernel when the problem
            needs it (Himmelblau).
    """

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


#: The paper's experiment: ``N = 10^4``, 32 runs, 100 queries.
PAPER_CONFIG = BenchmarkConfig()
#: The ``--small`` preset: a few minutes per problem on two cores.
SMALL_CONFIG = BenchmarkConfig(n=1000, iters=40, runs=8)


# ---------------------------------------------------------------------------
# Problems and models
# ---------------------------------------------------------------------------


def make_problem(
    name: str, n: int, seed: int, cache_dir: str | os.PathLike | None = None
) -> DiscreteProblem:
    r"""Build one of the paper's problems.

    Args:
        name: ``"se"``, ``"himmelblau"`` or ``"graph"``.
        n: Number of candidates.
        seed: Problem seed (the run index in :func:`run_benchmark`).
        cache_dir: Cache directory of the SE samples (default: the problem
            module's, ``$AX_CHAINING_CACHE`` or ``~/.cache/ax_chaining``).

    Returns:
        The :class:`~ax_chaining.test_functions.problems.DiscreteProblem`.
    """
    if name == "se":
        return se_problem(n=n, seed=seed, cache_dir=cache_dir)
    if name == "himmelblau":
        return himmelblau_problem(n=n, seed=seed)
    if name == "graph":
        return graph_problem(n=n, seed=seed)
    raise ValueError(f"Unknown problem {name!r}; expected one of {PROBLEMS}.")


def _engine_fingerprint() -> dict[str, str]:
    """Short SHA-256 of each source file the results depend on.

    Stored with every run so that results made with different versions of the
    engine (e.g. in a working tree being edited) can be told apart.
    """
    import hashlib
    import importlib

    digests = {}
    for name in (
        "ax_chaining.acquisition",
        "ax_chaining.chaining",
        "ax_chaining.covers",
        "ax_chaining.distances",
        "ax_chaining.posterior",
        "ax_chaining.kernels",
        "ax_chaining.test_functions.problems",
        "benchmarks.runner",
    ):
        path = getattr(importlib.import_module(name), "__file__", None)
        try:
            with open(path, "rb") as fh:
                digests[name] = hashlib.sha256(fh.read()).hexdigest()[:12]
        except (OSError, TypeError):
            digests[name] = "unknown"
    return digests


def _kernel_description(kernel: Kernel) -> dict[str, Any]:
    """JSON-serializable hyperparameters of the (fixed) kernel."""
    desc: dict[str, Any] = {"class": type(kernel).__name__}
    base = getattr(kernel, "base_kernel", None)
    if base is not None:
        desc["base"] = type(base).__name__
        desc["outputscale"] = float(kernel.outputscale)
        if getattr(base, "lengthscale", None) is not None:
            desc["lengthscale"] = base.lengthscale.detach().reshape(-1).tolist()
    elif getattr(kernel, "lengthscale", None) is not None:
        desc["lengthscale"] = kernel.lengthscale.detach().reshape(-1).tolist()
    return desc


def fixed_model(
    train_X: Tensor, train_Y: Tensor, kernel: Kernel, noise_std: float, mean: float
) -> SingleTaskGP:
    """Exact GP with fixed kernel, fixed noise and fixed constant mean (nothing
    is fitted: the prior is given)."""
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


def _acquisition(
    method: str, model: SingleTaskGP, candidates: Tensor, config: BenchmarkConfig
) -> AcquisitionFunction:
    if method == "chaining":
        return ChainingUCB(model, candidates, delta=config.delta)
    if method == "chaining-continuous":
        return ChainingUCB(model, candidates, delta=config.delta, bonus="continuous")
    if method == "gp-ucb":
        return GPUCB(model, num_candidates=candidates.shape[0], delta=config.delta)
    if method == "ucb":
        return UpperConfidenceBound(model, beta=config.ucb_beta)
    if method == "logei":
        # Noisy observations: the incumbent is the best posterior mean at the
        # observed points, not the best (noise-inflated) observation.
        with torch.no_grad():
            best_f = model.posterior(model.train_inputs[0]).mean.max()
        return LogExpectedImprovement(model, best_f=best_f)
    raise ValueError(f"Unknown method {method!r}; expected one of {METHODS}.")


def _row_index(X: Tensor, x: Tensor) -> int:
    """Index of the first candidate equal to ``x``."""
    hits = (X == x.reshape(1, -1)).all(dim=-1).nonzero()
    if hits.numel() == 0:  # pragma: no cover - optimize_acqf_discrete returns rows
        raise RuntimeError("The optimizer returned a point outside the candidates.")
    return int(hits[0, 0])


# ---------------------------------------------------------------------------
# One run of one method
# ---------------------------------------------------------------------------


@dataclass
class _RunSetup:
    """What every method of one run shares."""

    problem: DiscreteProblem
    kernel: Kernel
    init_idx: list[int]
    init_y: list[float]
    prior_mean: float
    kernel_seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


def _setup_run(
    problem: DiscreteProblem, seed: int, config: BenchmarkConfig
) -> _RunSetup:
    start = time.perf_counter()
    kernel = problem.get_covar_module(n_subset=config.kernel_subset, seed=seed)
    kernel_seconds = time.perf_counter() - start
    if config.n_init > problem.n:
        raise ValueError(f"n_init={config.n_init} exceeds N={problem.n}.")
    gen = torch.Generator().manual_seed(_INIT_SEED_OFFSET + seed)
    init_idx = torch.randperm(problem.n, generator=gen)[: config.n_init]
    init_y = problem.f[init_idx] + config.noise_std * torch.randn(
        config.n_init, generator=gen, dtype=_DTYPE
    )
    # With a learned kernel the true prior mean is unknown; centre on the mean
    # of the initial design (the same for every method) rather than at 0.
    prior_mean = float(init_y.mean()) if problem.learn_hyperparameters else 0.0
    return _RunSetup(
        problem=problem,
        kernel=kernel,
        init_idx=init_idx.tolist(),
        init_y=init_y.tolist(),
        prior_mean=prior_mean,
        kernel_seconds=kernel_seconds,
    )


def run_method(
    problem: DiscreteProblem,
    method: str,
    seed: int,
    config: BenchmarkConfig,
    setup: _RunSetup | None = None,
    callback: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    r"""Run one method on one problem instance for ``config.iters`` queries.

    Args:
        problem: The problem instance (built with seed ``seed``).
        method: One of :data:`METHODS`.
        seed: Run index; seeds the initial design and the noise.
        config: Sizes and constants.
        setup: Shared kernel and initial design (computed when None; pass it to
            reuse the Himmelblau kernel fit across methods).
        callback: Called with the query number after each query.

    Returns:
        A JSON-serializable record (see the module docstring for the fields).

    Example:
        >>> problem = make_problem("graph", n=200, seed=0)
        >>> record = run_method(problem, "chaining", 0, BenchmarkConfig(n=200))
        >>> record["simple_regret"][-1]
    """
    if method not in METHODS:
        raise ValueError(f"Unknown method {method!r}; expected one of {METHODS}.")
    if setup is None:
        setup = _setup_run(problem, seed, config)
    X, f = problem.X, problem.f
    f_max = float(f.max())
    noise_gen = torch.Generator().manual_seed(_NOISE_SEED_OFFSET + seed)
    random_gen = torch.Generator().manual_seed(_RANDOM_SEED_OFFSET + seed)
    idx = list(setup.init_idx)
    ys = list(setup.init_y)
    evaluated = torch.zeros(problem.n, dtype=torch.bool)
    evaluated[idx] = True
    best_init = float(f[idx].max())
    best, best_queries, cum = best_init, -math.inf, 0.0
    queries: list[int] = []
    y_queries: list[float] = []
    simple, simple_q, cumulative, seconds = [], [], [], []
    diagnostics: dict[str, list[float]] = {}
    for step in range(1, config.iters + 1):
        start = time.perf_counter()
        if method == "random":
            free = (~evaluated).nonzero().squeeze(-1)
            if free.numel() == 0:  # every candidate evaluated: draw from all
                free = torch.arange(problem.n)
            nxt = int(free[torch.randint(free.numel(), (1,), generator=random_gen)])
        else:
            train_X = X[torch.tensor(idx)]
            train_Y = torch.tensor(ys, dtype=_DTYPE).unsqueeze(-1)
            model = fixed_model(
                train_X, train_Y, setup.kernel, config.noise_std, setup.prior_mean
            )
            acqf = _acquisition(method, model, X, config)
            with torch.no_grad():
                x, _ = optimize_acqf_discrete(acqf, q=1, choices=X, unique=False)
            nxt = _row_index(X, x[0])
            if method == "chaining":
                diagnostics.setdefault("num_levels", []).append(
                    acqf.chaining.num_levels
                )
                # The paper's Eq. (ucb) at the query (the runs before the
                # any-point certificate recorded it too): O(L) per step,
                # so the timed step stays the acquisition alone.
                sigma = acqf.candidate_sigma[nxt].reshape(1)
                diagnostics.setdefault("regret_bound", []).append(
                    float(acqf.chaining.regret_bound(sigma))
                )
            elif method == "gp-ucb":
                diagnostics.setdefault("beta", []).append(float(acqf.beta))
        seconds.append(time.perf_counter() - start)
        y = float(f[nxt]) + config.noise_std * float(
            torch.randn(1, generator=noise_gen, dtype=_DTYPE)
        )
        idx.append(nxt)
        ys.append(y)
        evaluated[nxt] = True
        queries.append(nxt)
        y_queries.append(y)
        fx = float(f[nxt])
        best = max(best, fx)
        best_queries = max(best_queries, fx)
        cum += f_max - fx
        simple.append(f_max - best)
        simple_q.append(f_max - best_queries)
        cumulative.append(cum)
        if callback is not None:
            callback(step)
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
        "y": y_queries,
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


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------


def result_path(out: str | os.PathLike, problem: str, method: str, seed: int) -> Path:
    """Where the record of ``(problem, method, seed)`` is stored under ``out``."""
    return LAYOUTS["paper"].path(out, problem, method, seed)


def _is_complete(record: Any, config: BenchmarkConfig) -> bool:
    """Whether ``record`` is a complete run made with ``config``."""
    return (
        isinstance(record, dict)
        and record.get("format_version") == FORMAT_VERSION
        and record.get("complete") is True
        and record.get("config") == config.run_key()
        and len(record.get("simple_regret", ())) == config.iters
    )


def _load_complete(path: Path, config: BenchmarkConfig) -> dict[str, Any] | None:
    """The stored record if it is complete and matches ``config``, else None."""
    record = load_json(path)
    return record if _is_complete(record, config) else None


def _check_no_conflict(path: Path, config: BenchmarkConfig) -> None:
    """Refuse to overwrite a complete run made with another configuration."""
    record = load_json(path)
    if not isinstance(record, dict):
        return  # unreadable or partial: recompute it
    if record.get("complete") and record.get("config") != config.run_key():
        raise ValueError(
            f"{path} holds a run with another configuration "
            f"({record.get('config')}); use another --out directory or --force."
        )


# ---------------------------------------------------------------------------
# The experiment
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Task:
    problem: str
    seed: int
    methods: tuple[str, ...]
    config: BenchmarkConfig
    out: str
    cache_dir: str | None
    threads: int | None


def _run_task(task: _Task) -> list[tuple[str, str, int, float]]:
    """Build one problem instance and run the missing methods on it."""
    if task.threads is not None:
        torch.set_num_threads(task.threads)
    warnings.filterwarnings("ignore", category=InputDataWarning)
    problem = make_problem(task.problem, task.config.n, task.seed, task.cache_dir)
    setup = _setup_run(problem, task.seed, task.config)
    done = []
    for method in task.methods:
        start = time.perf_counter()
        record = run_method(problem, method, task.seed, task.config, setup=setup)
        write_json(record, result_path(task.out, task.problem, method, task.seed))
        done.append((task.problem, method, task.seed, time.perf_counter() - start))
    return done


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
    cache_dir: str | os.PathLike | None = None,
    config: BenchmarkConfig | None = None,
) -> list[dict[str, Any]]:
    r"""Run (or resume) the paper's experiment and return every run's record.

    One JSON file is written per ``(problem, method, run)`` (see
    :func:`result_path`), atomically and only once the run is complete; a file
    that exists, is complete and was made with the same configuration is
    reused, so an interrupted call can simply be repeated.

    Args:
        problems: Problem names, a subset of :data:`PROBLEMS`.
        methods: Method names, a subset of :data:`METHODS`.
        runs: Number of runs (problem seeds ``0..runs-1``).
        iters: Queries per run after the initial design.
        n: Number of candidates.
        out: Output directory.
        jobs: Worker processes; each runs whole ``(problem, seed)`` tasks (all
            methods of a run share the problem instance and the kernel fit).
        threads: Torch threads per process (default: 1 when ``jobs > 1``, else
            torch's default).
        force: Recompute runs even when a complete file exists.
        progress: Show a ``tqdm`` progress bar (one tick per method and run).
        cache_dir: SE problem cache directory.
        config: Full configuration; when given, ``runs``, ``iters`` and ``n``
            are ignored.

    Returns:
        The list of records of the requested runs, in problem, method, seed
        order.

    Example:
        >>> records = run_benchmark(["graph"], ["chaining", "random"], runs=2,
        ...                         iters=5, n=150, out="/tmp/bench")
    """
    from tqdm.auto import tqdm

    config = config or BenchmarkConfig(n=n, iters=iters, runs=runs)
    problems = check_names(problems, PROBLEMS, "problem")
    methods = check_names(methods, METHODS, "method")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}.")
    if threads is None and jobs > 1:
        threads = 1
    out = Path(out)
    tasks: list[_Task] = []
    for problem in problems:
        for seed in range(config.runs):
            todo = []
            for method in methods:
                path = result_path(out, problem, method, seed)
                if not force and _load_complete(path, config) is not None:
                    continue
                if not force:
                    _check_no_conflict(path, config)
                todo.append(method)
            if todo:
                tasks.append(
                    _Task(
                        problem,
                        seed,
                        tuple(todo),
                        config,
                        str(out),
                        None if cache_dir is None else str(cache_dir),
                        threads,
                    )
                )
    total = sum(len(t.methods) for t in tasks)
    bar = tqdm(total=total, desc="runs", unit="run", disable=not progress or not total)
    try:
        if jobs == 1:
            for task in tasks:
                for prob, method, seed, sec in _run_task(task):
                    bar.set_postfix_str(f"{prob}/{method}/run{seed} {sec:.0f}s")
                    bar.update(1)
        else:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
                futures = [pool.submit(_run_task, task) for task in tasks]
                for future in as_completed(futures):
                    for prob, method, seed, sec in future.result():
                        bar.set_postfix_str(f"{prob}/{method}/run{seed} {sec:.0f}s")
                        bar.update(1)
    finally:
        bar.close()
    return load_results(out, problems, methods, config)


def select_results(
    records: Iterable[dict[str, Any]],
    problems: Sequence[str] = PROBLEMS,
    methods: Sequence[str] = METHODS,
    config: BenchmarkConfig | None = None,
) -> list[dict[str, Any]]:
    r"""The complete records of ``problems`` and ``methods`` among ``records``.

    Args:
        records: Run records, e.g. those of a packed file
            (:func:`benchmarks.records.read_packed`).
        problems: Problems to keep.
        methods: Methods to keep.
        config: If given, only seeds ``0..config.runs-1`` whose configuration
            matches; otherwise every complete record.

    Returns:
        The records, in ``problems``, ``methods``, seed order.
    """
    order = {(p, m): i for i, (p, m) in enumerate(product(problems, methods))}

    def keep(r: dict[str, Any]) -> bool:
        if (r.get("problem"), r.get("method")) not in order:
            return False
        if config is None:
            return r.get("complete") is True
        return _is_complete(r, config) and r["seed"] < config.runs

    return sorted(
        (r for r in records if keep(r)),
        key=lambda r: (order[(r["problem"], r["method"])], r["seed"]),
    )


def load_results(
    out: str | os.PathLike,
    problems: Sequence[str] = PROBLEMS,
    methods: Sequence[str] = METHODS,
    config: BenchmarkConfig | None = None,
) -> list[dict[str, Any]]:
    r"""The complete records stored under the working directory ``out``
    (:func:`select_results` of its files)."""
    return select_results(load_records(out, "paper"), problems, methods, config)


# ---------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------


def summarize(
    records: Sequence[dict[str, Any]], checkpoints: Sequence[int] = CHECKPOINTS
) -> dict[str, Any]:
    r"""Mean and standard error of :math:`S_n` per problem and method.

    Args:
        records: Run records of :func:`run_method` (any mix of problems and
            methods; each ``(problem, method)`` group must share its ``T``).
        checkpoints: Query numbers ``n`` at which :math:`S_n` is reported; those
            above ``T`` are dropped and ``T`` is added.

    Returns:
        ``{"rows": [...], "curves": {...}}``. Each row has ``problem``,
        ``method``, ``runs``, ``n`` (candidates), ``T``, ``S_{k}_mean`` and
        ``S_{k}_se`` for each checkpoint ``k``, ``auc_mean`` / ``auc_se`` (area
        under the :math:`S_n` curve, :math:`\sum_{n=1}^T S_n`, whose run mean is
        the area under the mean curve), ``R_T_mean`` / ``R_T_se`` (cumulative
        regret after ``T`` queries), ``seconds_per_step`` (mean wall time) and
        ``checkpoints``. ``curves[problem][method]`` holds ``mean`` and ``se``
        of :math:`S_n` for ``n = 0..T`` (``n = 0``: initial design alone) and of
        :math:`R_n` for ``n = 1..T``.
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["problem"], r["method"]), []).append(r)
    problem_order = {p: i for i, p in enumerate(PROBLEMS)}
    method_order = {m: i for i, m in enumerate(METHODS)}
    keys = sorted(
        groups,
        key=lambda k: (problem_order.get(k[0], 99), k[0], method_order.get(k[1], 99)),
    )
    rows, curves = [], {}
    for problem, method in keys:
        group = sorted(groups[(problem, method)], key=lambda r: r["seed"])
        lengths = {len(r["simple_regret"]) for r in group}
        if len(lengths) != 1:
            raise ValueError(
                f"Runs of {problem}/{method} have different lengths {lengths}."
            )
        T = lengths.pop()
        S = np.array([[r["simple_regret_init"], *r["simple_regret"]] for r in group])
        R = np.array([r["cumulative_regret"] for r in group])
        secs = np.array([r["step_seconds"] for r in group])
        cps = [k for k in checkpoints if k <= T]
        if T not in cps:
            cps.append(T)
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
        row["seconds_per_step"] = float(secs.mean())
        rows.append(row)
        s_mean, s_se = mean_se(S)
        r_mean, r_se = mean_se(R)
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
    r"""Per-run differences between ``reference`` and every other method.

    All methods of a run share the problem instance, the initial design and the
    noise, so run-by-run differences remove most of the between-instance
    variance that makes the per-method standard errors wide.

    Args:
        records: Run records of :func:`run_method`.
        reference: The method compared with the others.

    Returns:
        One dict per ``(problem, method != reference)`` with ``problem``,
        ``method``, ``runs`` (seeds run by both), ``T``, ``dS_T_mean`` /
        ``dS_T_se`` (:math:`S_T` of ``reference`` minus that of ``method``;
        negative: ``reference`` better), ``dauc_mean`` / ``dauc_se`` (same for the
        area :math:`\sum_n S_n`), and ``wins`` / ``ties`` / ``losses`` of
        ``reference`` on :math:`S_T` (ties: equal within ``1e-12``).
    """
    by_key = {(r["problem"], r["method"], r["seed"]): r for r in records}
    problems = list(dict.fromkeys(r["problem"] for r in records))
    methods = [m for m in METHODS if m != reference]
    methods += sorted({r["method"] for r in records} - set(METHODS) - {reference})
    out = []
    for problem in problems:
        for method in methods:
            seeds = sorted(
                seed
                for (p, m, seed) in by_key
                if p == problem and m == method and (p, reference, seed) in by_key
            )
            if not seeds:
                continue
            ref = [by_key[(problem, reference, s)] for s in seeds]
            other = [by_key[(problem, method, s)] for s in seeds]
            if {len(r["simple_regret"]) for r in ref + other} != {
                len(ref[0]["simple_regret"])
            }:
                continue  # different horizons: not comparable run by run
            final = paired(
                [r["simple_regret"][-1] for r in ref],
                [r["simple_regret"][-1] for r in other],
                higher_is_better=False,
            )
            auc = paired(
                [sum(r["simple_regret"]) for r in ref],
                [sum(r["simple_regret"]) for r in other],
                higher_is_better=False,
            )
            out.append(
                {
                    "problem": problem,
                    "reference": reference,
                    "method": method,
                    "runs": len(seeds),
                    "T": len(ref[0]["simple_regret"]),
                    "dS_T_mean": final["mean"],
                    "dS_T_se": final["se"],
                    "dauc_mean": auc["mean"],
                    "dauc_se": auc["se"],
                    "wins": final["wins"],
                    "ties": final["ties"],
                    "losses": final["losses"],
                }
            )
    return out


def format_summary_markdown(summary: dict[str, Any]) -> str:
    r"""One markdown table per problem: :math:`S_n` mean ± s.e., AUC, ``R_T``.

    Args:
        summary: The output of :func:`summarize`.

    Returns:
        Markdown text.
    """
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for row in summary["rows"]:
        by_problem.setdefault(row["problem"], []).append(row)
    blocks = []
    for problem, rows in by_problem.items():
        cps = rows[0]["checkpoints"]
        head = (
            ["method"]
            + [f"S_{k}" for k in cps]
            + ["AUC (sum S_n)", "R_T", "s/step", "runs"]
        )
        lines = [
            f"**{PROBLEM_LABELS.get(problem, problem)}** (N = {rows[0]['n']}, "
            f"T = {rows[0]['T']} queries after 10 initial points)",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|",
        ]
        best = {k: min(r[f"S_{k}_mean"] for r in rows) for k in cps}
        for r in rows:
            cells = [METHOD_LABELS.get(r["method"], r["method"])]
            for k in cps:
                text = pm(r[f"S_{k}_mean"], r[f"S_{k}_se"])
                # Bold the lowest mean of each column (ties included).
                cells.append(f"**{text}**" if r[f"S_{k}_mean"] == best[k] else text)
            cells.append(pm(r["auc_mean"], r["auc_se"], 2))
            cells.append(f"{r['R_T_mean']:.1f} ± {r['R_T_se']:.1f}")
            cells.append(f"{r['seconds_per_step']:.3f}")
            cells.append(str(r["runs"]))
            lines.append("| " + " | ".join(cells) + " |")
        blocks.append("\n".join(lines))
    note = (
        "S_n: simple regret max f - max f(x) over the 10 initial points and the "
        "first n queries, mean ± standard error over runs (lower is better; bold: "
        "lowest mean). AUC: sum of S_n over n = 1..T. R_T: cumulative regret of "
        "the T queries. s/step: mean wall time of one query. Paired: mean ± "
        "standard error over runs of the run-by-run difference."
    )
    paired = summary.get("paired") or []
    if paired:
        ref = METHOD_LABELS.get(paired[0]["reference"], paired[0]["reference"])
        lines = [
            f"**Paired differences, {ref} minus each method** (same instance, "
            "initial points and noise in each run; negative: "
            f"{ref} better)",
            "",
            "| problem | method | Δ S_T | Δ AUC | wins / ties / losses (S_T) | runs |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for r in paired:
            lines.append(
                f"| {PROBLEM_LABELS.get(r['problem'], r['problem'])} "
                f"| {METHOD_LABELS.get(r['method'], r['method'])} "
                f"| {pm(r['dS_T_mean'], r['dS_T_se'], sign=True)} "
                f"| {pm(r['dauc_mean'], r['dauc_se'], 2, True)} "
                f"| {r['wins']} / {r['ties']} / {r['losses']} | {r['runs']} |"
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n\n" + note + "\n"


def summary_json_lines(summary: dict[str, Any]) -> list[str]:
    """One compact JSON object per summary row (machine-readable output)."""
    return [json.dumps({"summary_row": row}, sort_keys=True) for row in summary["rows"]]
