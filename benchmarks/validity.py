r"""Do the certificates hold when the hyperparameters are fitted, and can a user
stop on them? Ax ``Client`` loops on real molecule libraries and on GP samples.

``python -m benchmarks validity`` runs, for each problem, method and seed, an
ordinary Ax ``Client`` loop (``n_init`` random initial candidates attached,
then ``queries`` sequential queries, hyperparameters refitted by Ax at every
step) and records at every step:

* the certificate the strategy itself records (``robust``: made with
  ``CertificateOptions(scale_level=None)``, the default for fitted models until
  2026-11-27, :mod:`ax_chaining.certificate`'s LOO check with its refusals
  and the scale's point estimate, and Student-t tails with ``n - 1`` degrees
  of freedom for the candidates the data have reached and ``min(n - 1, 10)``
  for the others),
  and, from the same step's model, the plain certificate (``plain``:
  ``calibration="none"``, Gaussian tails, i.e. the model taken as true: what
  the package recorded before the calibration existed), the LOO check with
  Gaussian tails (``loo_gaussian``: the first calibrated default), with
  Student-t tails of ``n - 1`` degrees of freedom everywhere (``loo_student``:
  the previous default) and of ``min(n - 1, 10)`` everywhere (``loo_capped``),
  and ``robust`` with the LOO scale at its upper 95% confidence limit
  (``loo_upper``: ``scale_level=0.05``, the package's default since) or with
  at most 20 degrees of freedom for the reached candidates too
  (``loo_light20``);
* the default certificate on a geometric schedule of checks (after 10, 20, 40
  and 80 observations);
* the certificate calibrated on the loop's own forecast residuals
  (``forecast``: :class:`~ax_chaining.certificate.residuals.ResidualCalibration` on the
  residuals the steps recorded, falling back to the LOO check while they are
  too few) and, for ``chaining_audit`` (Chaining-UCB with one query in
  :data:`AUDIT_EVERY` an audit, :mod:`ax_chaining.ax.audit`), on the audits'
  residuals (``audit``);
* every certificate's rank statement (``rank_bound``) and the realized rank
  of its point (1 + the candidates truly better);
* the true regret ``max f - f(x)`` of each certified point;
* the UCB - LCB bound of Makarova et al. (2022) with GP-UCB's
  :math:`\beta_t` over the candidates (the rule behind BoFire's
  ``UCBLCBRegretTermination``), its point and that point's regret;
* whether Ax's ``ImprovementGlobalStoppingStrategy`` (Ax's defaults) would
  stop, at every fifth query (from the finished experiment, with Ax's
  ``trial_to_check``: one call costs more than a model step).

Problems: ``esol``, ``freesolv``, ``lipo`` (the vendored libraries, item index
and precomputed Tanimoto kernel of Morgan fingerprints, noise-free values,
``exclude_evaluated=True``) and ``grid`` (the 30 x 30 grid on ``[0, 6]^2``
with an exact SE GP sample of lengthscale 1, observations with noise sd 0.05,
as a candidate table with Ax's default GP). ``esol@mordred-chen``,
``freesolv@mordred-chen`` and ``lipo@mordred-chen`` are the same libraries on
:func:`~ax_chaining.ax.molecule_surrogate_spec`'s default model (BayBE 0.15's
own model: Mordred descriptors decorrelated at 0.7, ARD Matern-5/2 under its
``CHEN`` priors, hyperparameters fitted by Ax); ``esol@rdkit2d-botorch`` (the
default before it: RDKit 2D descriptors, ARD RBF under BoTorch's priors; its
records, made as ``esol@default``, are read under this name),
``esol@rdkit2d-baybe``, ... on the molecule benchmark's other models
(:data:`MODEL_SUFFIXES`).
Methods: ``chaining`` (Chaining-UCB), ``qlognei`` (Ax's default acquisition
over the table) and, on request, ``chaining_audit`` (Chaining-UCB with
audits).

The summary gives, per library and method: the runs violated at any step
(bound, and rank statement), the median bound over the range, the median
bound over the **oracle bound** (the smallest single factor by which the
plain bound can be multiplied so that no run of that library and method is
violated at any step, times the plain bound: it needs the true regrets, so
no user has it), the median ``rank_bound`` over ``N`` and the median realized
rank, and the stopping rules side by side (the regret rules at 10% of the
range, the rank rules at the top 1%, with how often the point they stopped
on is truly in the top 1%).

``--calibration-limits`` (with ``--records``) gives instead how near the
oracle bound any calibration that multiplies the plain bound by a
non-decreasing function of a recorded residual scale could come
(:func:`calibration_limits`: a lower limit over the whole class).

Example::

    python -m benchmarks validity --small --out results/validity_small
    python -m benchmarks validity --out results/validity --jobs 2
    python -m benchmarks pack validity results/validity \
        benchmarks/results/validity.jsonl.gz
    python -m benchmarks validity --records benchmarks/results/validity.jsonl.gz \
        --summary-only --out docs/results/validity
    python -m benchmarks validity --records \
        benchmarks/results/validity_protocol.jsonl.gz --calibration-limits
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ax_chaining.checks import check_int
from benchmarks._tables import num, parse_names
from benchmarks.molecules_bench import MODEL_LABELS, current_name
from benchmarks.records import (
    command_line,
    load_records,
    read_packed,
    run_resumable,
    write_summary,
)

#: 6: the LOO check's minimum number of observations (records of format 5
#: and before are read through :func:`as_current`).
FORMAT_VERSION = 6
#: Checks after 10, 20, 40, 80 observations: the declared-schedule variant.
GEOMETRIC_START, GEOMETRIC_RATIO = 10, 2.0
PROBLEMS: tuple[str, ...] = ("esol", "freesolv", "lipo", "grid")
#: Suffixes of a library on a descriptor model: the molecule benchmark's
#: model variants (:data:`benchmarks.molecules_bench.MODEL_VARIANTS`), with
#: their labels.
MODEL_SUFFIXES: dict[str, str] = {
    f"@{variant}": label for variant, label in MODEL_LABELS.items()
}
MOLECULE_PROBLEMS: tuple[str, ...] = ("esol", "freesolv", "lipo")
#: Every problem name the benchmark accepts.
ALL_PROBLEMS: tuple[str, ...] = (
    *PROBLEMS,
    *(name + suffix for suffix in MODEL_SUFFIXES for name in MOLECULE_PROBLEMS),
)
METHODS: tuple[str, ...] = ("chaining", "qlognei")
#: One query in this many is an audit in ``chaining_audit``.
AUDIT_EVERY = 10
LABELS = {
    "chaining": "Chaining-UCB",
    "qlognei": "qLogNEI over the table",
    "chaining_audit": f"Chaining-UCB, 1 query in {AUDIT_EVERY} an audit",
}
RULE_LABELS = {
    "robust": "robust, the LOO scale's point estimate (previous default: LOO "
    "check, Student-t tails n - 1 near the data, min(n - 1, 10) away)",
    "loo_upper": "robust, the LOO scale at its upper 95% confidence limit (default)",
    "loo_light20": "robust, Student-t tails min(n - 1, 20) near the data",
    "loo_capped": "LOO check, Student-t tails min(n - 1, 10) everywhere",
    "loo_student": "LOO check, Student-t tails n - 1 (an earlier default)",
    "loo_gaussian": "LOO check, Gaussian tails (first calibrated default)",
    "plain": "plain (model taken as true)",
    "geometric": "robust, geometric checks",
    "forecast": "forecast residuals (scale and tails from the loop's forecasts)",
    "audit": "audit residuals (conformal scale from the audits)",
}
PROBLEM_LABELS = {
    "esol": "ESOL",
    "freesolv": "FreeSolv",
    "lipo": "Lipophilicity",
    "grid": "30 x 30 grid, GP samples",
}
PROBLEM_LABELS.update(
    {
        name + suffix: f"{PROBLEM_LABELS[name]}, {label}"
        for suffix, label in MODEL_SUFFIXES.items()
        for name in MOLECULE_PROBLEMS
    }
)


@dataclass(frozen=True)
class ValidityConfig:
    """Size of a run.

    Attributes:
        problems, methods: Which (see :data:`PROBLEMS`, :data:`METHODS`; a
            molecule library with a suffix of :data:`MODEL_SUFFIXES` runs on
            that descriptor model of
            :func:`~ax_chaining.ax.molecule_surrogate_spec`).
        runs: Seeds ``first_seed .. first_seed + runs - 1``.
        queries: Sequential queries after the initial points.
        n_init: Initial points, uniform without replacement.
        delta: Confidence parameter of every certificate.
        side: Grid side (``grid``).
    """

    problems: tuple[str, ...] = PROBLEMS
    methods: tuple[str, ...] = METHODS
    runs: int = 10
    first_seed: int = 0
    queries: int = 100
    n_init: int = 10
    delta: float = 0.05
    side: int = 30

    def __post_init__(self) -> None:
        for name in ("runs", "queries", "n_init", "side"):
            check_int(name, getattr(self, name), 1)
        check_int("first_seed", self.first_seed, 0)

    def key(self) -> dict[str, Any]:
        """What a stored record must match to be reused."""
        d = asdict(self)
        for name in ("problems", "methods", "runs", "first_seed"):
            d.pop(name)
        return {**d, "format": FORMAT_VERSION}


FULL_CONFIG = ValidityConfig()
SMALL_CONFIG = ValidityConfig(
    problems=("freesolv", "grid"), runs=1, queries=3, n_init=5, side=8
)


def _geometric():
    from ax_chaining.certificate import CheckSchedule

    return CheckSchedule("geometric", start=GEOMETRIC_START, ratio=GEOMETRIC_RATIO)


def _problem(name: str, seed: int, config: ValidityConfig):
    """(parameters, strategy kwargs, candidate rows, noise-free values, noise sd)."""
    import torch

    from ax_chaining import ax as axc

    if name == "grid":
        from ax.api.configs import RangeParameterConfig

        from ax_chaining.test_functions.problems import grid_problem

        X, f = grid_problem(config.side, seed)
        rows = [{"x": float(a), "y": float(b)} for a, b in X.tolist()]
        params = [
            RangeParameterConfig(name=n, bounds=(0.0, 6.0), parameter_type="float")
            for n in ("x", "y")
        ]
        return params, {"candidates": rows}, rows, f.numpy(), 0.05
    from ax_chaining.test_functions.molecules import library, load_dataset

    if "@" in name:
        # The same spec (and features, computed once per process) as the
        # molecule benchmark's methods with that suffix.
        from benchmarks.molecules_bench import model_variant

        base, variant = name.split("@")
        data = load_dataset(base)
        spec = model_variant(data.name, variant)[0]
    else:
        data, gram = library(name)
        spec = axc.precomputed_kernel_surrogate_spec(gram)
    n = len(data)
    rows = [{"item": i} for i in range(n)]
    kwargs = {"surrogate_spec": spec, "exclude_evaluated": True}
    del torch
    return [axc.candidate_index_parameter(n)], kwargs, rows, data.y.numpy(), 0.0


def _strategy(method: str, kwargs: dict[str, Any], config: ValidityConfig):
    from ax_chaining import ax as axc

    # `robust` is the LOO scale's point estimate, as in every record made
    # before the upper limit (`loo_upper`) became the package's default.
    from ax_chaining.certificate import CertificateOptions

    kwargs = {**kwargs, "certificate": CertificateOptions(scale_level=None)}
    if method in ("chaining", "chaining_audit"):
        audit = {"audit_every": AUDIT_EVERY} if method == "chaining_audit" else {}
        return axc.chaining_generation_strategy(
            init_trials=config.n_init, delta=config.delta, **kwargs, **audit
        )
    return axc.qlognei_generation_strategy(init_trials=config.n_init, **kwargs)


def _model_view(gs: Any, rows: list[dict[str, Any]], experiment: Any):
    """The step's fitted model, the candidates in its space, and the scale."""
    import torch
    from ax.core import ObservationFeatures

    from ax_chaining.ax.certificates import objective_scale

    adapter = gs.adapter
    model = adapter.generator.surrogate.model
    X = adapter.transform_observation_features(
        [ObservationFeatures(parameters=dict(r)) for r in rows]
    )
    weights = torch.ones(1, dtype=X.dtype)
    return model, X, objective_scale(adapter, experiment, weights)


#: The variants recorded beside the strategy's own certificate (``robust``),
#: from the same step's model (the module docstring).
RECORDED = (
    "loo_gaussian",
    "loo_student",
    "loo_capped",
    "loo_upper",
    "loo_light20",
    "geometric",
    "forecast",
)


def _variants(n: int, experiment: Any, audits: bool) -> dict[str, Any]:
    """``certify_model`` options (``CertificateOptions``) of each variant at a
    step with ``n`` observations (the geometric schedule's only at its checks;
    the audits' only in a loop with audits)."""
    from ax_chaining.ax.certificates import residual_calibration
    from ax_chaining.certificate import (
        AUTO_DOF_CAP,
        GAUSSIAN,
        CertificateOptions,
        ExplorationTail,
        StudentTail,
    )

    light = max(1, n - 1)
    heavy = min(light, AUTO_DOF_CAP)
    out: dict[str, dict[str, Any]] = {
        "plain": {"calibration": "none"},
        "loo_gaussian": {"tail": GAUSSIAN},
        "loo_student": {"tail": StudentTail(max(1, n - 1))},
        "loo_capped": {"tail": StudentTail(max(1, min(n - 1, AUTO_DOF_CAP)))},
        "loo_upper": {"scale_level": 0.05},
        "loo_light20": {"tail": ExplorationTail(heavy, min(light, 20))},
        "forecast": {"calibration": residual_calibration(experiment, "forecast")},
    }
    if audits:
        out["audit"] = {"calibration": residual_calibration(experiment, "audit")}
    if _geometric().index(n) is not None:
        out["geometric"] = {"schedule": _geometric()}
    # Every variant but `loo_upper` on the LOO scale's point estimate, as the
    # records made before the upper limit became the default.
    return {k: CertificateOptions(**{"scale_level": None, **v}) for k, v in out.items()}


def _realized_rank(f: np.ndarray, index: int) -> int:
    """1 + the number of candidates truly better than ``index``."""
    return 1 + int((f > f[index]).sum())


def _record(cert: Any, scale: float | None, f: np.ndarray, f_max: float) -> dict:
    """A variant's ``bound`` (objective units), ``valid``, the true ``regret``
    of its point, its ``rank_bound`` and the point's realized ``rank``; None
    each where it was not computed."""
    if cert is None:
        keys = ("bound", "valid", "regret", "rank_bound", "rank")
        return dict.fromkeys(keys)
    return {
        "bound": None if scale is None else cert.bound * scale,
        "valid": cert.valid,
        "regret": f_max - float(f[cert.index]),
        "rank_bound": cert.rank_bound,
        "rank": _realized_rank(f, cert.index),
    }


def run_one(
    problem: str, method: str, seed: int, config: ValidityConfig
) -> dict[str, Any]:
    """One loop; per step the certificates, their points' regrets and the
    stopping rules' decisions (see the module docstring)."""
    import torch
    from ax.api.client import Client
    from ax.global_stopping.strategies.improvement import (
        ImprovementGlobalStoppingStrategy,
    )
    from ax.utils.common.logger import set_stderr_log_level
    from botorch.acquisition.objective import ScalarizedPosteriorTransform

    from ax_chaining.acquisition import gp_ucb_beta
    from ax_chaining.ax import GEN_METADATA_KEY
    from ax_chaining.ax.candidates import row_key
    from ax_chaining.certificate import certify_model, ucb_lcb_bound
    from ax_chaining.posterior import candidate_posterior

    # Ax's Client logs every trial at INFO; the progress bar says enough.
    set_stderr_log_level(logging.WARNING)
    params, kwargs, rows, f, noise = _problem(problem, seed, config)
    n = len(rows)
    names = list(rows[0])
    index_of = {row_key(r, names): i for i, r in enumerate(rows)}
    f_max, f_range = float(f.max()), float(f.max() - f.min())
    rng = np.random.default_rng(seed)
    noise_rng = np.random.default_rng(10_000 + seed)
    client = Client(random_seed=seed)
    client.configure_experiment(parameters=params, name=f"{problem}_{method}_{seed}")
    client.configure_optimization(objective="y")
    gs = _strategy(method, kwargs, config)
    client.set_generation_strategy(gs)
    items: list[int] = []

    def observe(trial: int, i: int) -> None:
        items.append(i)
        y = float(f[i]) + (noise * float(noise_rng.standard_normal()) if noise else 0.0)
        client.complete_trial(trial, raw_data={"y": y})

    for i in rng.choice(n, size=config.n_init, replace=False):
        observe(client.attach_trial(parameters=dict(rows[int(i)])), int(i))
    # Ax's defaults, from 5 trials past the initial points; the trial just
    # generated is still running, so pending trials must not silence it.
    improvement = ImprovementGlobalStoppingStrategy(
        min_trials=config.n_init + 5, inactive_when_pending_trials=False
    )
    steps = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(config.queries):
            start = time.perf_counter()
            ((trial, p),) = client.get_next_trials(max_trials=1).items()
            seconds = time.perf_counter() - start
            experiment = gs.experiment
            meta = experiment.trials[trial].generator_runs[0].gen_metadata
            cert = (meta or {}).get(GEN_METADATA_KEY, {}).get("certificate") or {}
            model, X, scale = _model_view(gs, rows, experiment)
            evaluated = torch.zeros(n, dtype=torch.bool)
            evaluated[items] = True
            transform = ScalarizedPosteriorTransform(torch.ones(1, dtype=X.dtype))
            certs = {
                name: certify_model(
                    model,
                    X,
                    among=evaluated,
                    delta=config.delta,
                    posterior_transform=transform,
                    options=options,
                )
                for name, options in _variants(
                    len(items), experiment, method == "chaining_audit"
                ).items()
            }
            post = candidate_posterior(model, X, transform, path="dense")
            beta = gp_ucb_beta(n, len(items) + 1, config.delta)
            index = evaluated.nonzero().squeeze(-1)
            sigma = post.distance.sigma.to(torch.float64)
            ucb_lcb = ucb_lcb_bound(post.mean, sigma, index, beta)
            lcb_pick = int(
                index[torch.argmax(post.mean[index] - beta**0.5 * sigma[index])]
            )
            robust_index = (
                index_of[row_key(cert["parameters"], names)] if cert else None
            )
            step = {
                "n": len(items),
                "seconds": seconds,
                "best_regret": f_max - float(f[items].max()),
                "robust_bound": cert.get("bound") if cert else None,
                "robust_valid": bool(cert.get("valid", True)) if cert else None,
                "robust_regret": None
                if robust_index is None
                else f_max - float(f[robust_index]),
                "robust_scale": (cert.get("checks") or {}).get("mean_z2"),
                "robust_rank_bound": cert.get("rank_bound") if cert else None,
                "robust_rank": None
                if robust_index is None
                else _realized_rank(f, robust_index),
                "audit": bool((meta or {}).get(GEN_METADATA_KEY, {}).get("audit")),
                "forecast_scale": certs["forecast"].checks.get("forecast_scale"),
                "forecast_dof": certs["forecast"].checks.get("forecast_dof"),
                **{
                    f"{name}_{key}": value
                    for name in ("plain", *RECORDED, "audit")
                    for key, value in _record(certs.get(name), scale, f, f_max).items()
                },
                "ucb_lcb_bound": None
                if scale is None
                else float(ucb_lcb[index.tolist().index(lcb_pick)]) * scale,
                "ucb_lcb_regret": f_max - float(f[lcb_pick]),
                "ax_improvement_stop": None,  # filled in after the loop
            }
            steps.append(step)
            observe(trial, index_of[row_key(p, names)])
    # Ax's rule at every fifth query, from the finished experiment (one call
    # costs more than a model step; its trial_to_check looks back in time).
    experiment = gs.experiment
    for k, step in enumerate(steps, start=1):
        if k % 5 == 0:
            trial = config.n_init + k - 1  # the trial of the k-th query
            stop, _ = improvement.should_stop_optimization(
                experiment, trial_to_check=trial
            )
            step["ax_improvement_stop"] = bool(stop)
    return {
        "problem": problem,
        "method": method,
        "seed": seed,
        "config": config.key(),
        "num_candidates": n,
        "f_max": f_max,
        "f_range": f_range,
        "items": items,
        "steps": steps,
    }


def run_validity(
    config: ValidityConfig, out: str | Path, jobs: int = 1, progress: bool = True
) -> list[dict[str, Any]]:
    """Run (or resume) every (problem, method, seed); returns the records."""
    tasks = [
        (p, m, s)
        for s in range(config.first_seed, config.first_seed + config.runs)
        for p in config.problems
        for m in config.methods
    ]
    return run_resumable(
        tasks,
        out,
        "validity",
        config.key(),
        functools.partial(run_one, config=config),
        force=False,
        progress=progress,
        desc="validity",
        jobs=jobs,
    )


# ---------------------------------------------------------------------------
# Summary.
# ---------------------------------------------------------------------------

RULES = (
    "robust",
    "loo_upper",
    "loo_light20",
    "forecast",
    "audit",
    "loo_capped",
    "loo_student",
    "loo_gaussian",
    "plain",
    "geometric",
)
#: Queries at which the medians are taken (and at half the budget and at
#: the budget: the table's columns).
AT = (25, 50, 100)
#: The rank rules stop at the top ``TOP_FRACTION`` of the candidate set.
TOP_FRACTION = 0.01


def _first(steps: list[dict], ok) -> tuple[int | None, dict | None]:
    for k, s in enumerate(steps, start=1):
        if ok(s):
            return k, s
    return None, None


def oracle_factor(runs: Sequence[dict[str, Any]]) -> float | None:
    """The smallest factor ``c`` with ``regret <= c * plain bound`` at every
    step of every run (the plain certificate's point and bound); None where
    no step has a plain bound. ``c`` times the plain bound is the oracle bound."""
    needs = [
        step_need(s)
        for r in runs
        for s in r["steps"]
        if s.get("plain_bound") is not None and s.get("plain_regret") is not None
    ]
    return max(needs) if needs else None


def step_need(step: dict[str, Any]) -> float:
    """The factor on a step's plain bound that its regret needs (a zero bound
    with a positive regret needs an infinite one)."""
    bound, regret = step["plain_bound"], step["plain_regret"]
    if bound > 0:
        return regret / bound
    return math.inf if regret > 1e-12 else 0.0


#: The statistics of the loop's own data that a calibration of the plain
#: bound can follow (:func:`calibration_limits`): the LOO check's scale (point
#: estimate) and the forecast residuals' scale, as each step recorded them.
CALIBRATION_STATISTICS = {
    "robust_scale": "LOO scale (point estimate)",
    "forecast_scale": "forecast residuals' scale",
}


def calibration_limits(
    records: Sequence[dict[str, Any]],
    statistic: str,
    queries: Sequence[int] = (50, 100),
    min_obs: int | None = None,
    spared_runs: int = 1,
) -> list[dict[str, Any]]:
    """What the best calibration of the plain bound that follows ``statistic``
    could reach: per problem and method, its median bound over the oracle
    bound at ``queries``.

    A calibration here multiplies each step's plain bound by ``c(s)``, a
    non-decreasing function of the step's recorded ``statistic`` (a residual
    scale: the larger the model's residuals, the wider the bound). It must
    hold at every step with at least ``min_obs`` observations (default: the
    LOO check's minimum, where the certificate starts), a plain bound and the
    statistic, of every run of every problem in ``records`` under the same
    method, but for ``spared_runs`` runs per problem (0 or 1; the protocol's
    bar allows 1 violated run in 10). For given spared runs, the pointwise
    smallest such ``c`` is ``c*(s) = max {regret_k / bound_k : s_k <= s}``
    over the other runs' steps, and every other valid ``c`` is at least as
    wide at every step. Each entry is the smallest over every choice of
    spared runs, so no calibration of the class does better: a lower limit.
    Each problem's oracle factor is taken on the same steps, no run spared
    (the smallest constant valid on that problem alone); a run whose step at
    a query lacks the statistic is left out of that query's median (all
    runs count otherwise, spared or not). Also given: the smallest constant
    valid on the same steps of every problem (``c*`` without the statistic),
    over each problem's oracle, with the same spared runs.
    """
    from ax_chaining.certificate.certify import LOO_MIN_OBSERVATIONS

    if statistic not in CALIBRATION_STATISTICS:
        raise ValueError(
            f"`statistic` must be one of {sorted(CALIBRATION_STATISTICS)}, "
            f"got {statistic!r}."
        )
    if spared_runs not in (0, 1):
        raise ValueError(f"`spared_runs` must be 0 or 1, got {spared_runs!r}.")
    floor = LOO_MIN_OBSERVATIONS if min_obs is None else int(min_obs)

    def usable(step: dict[str, Any]) -> bool:
        bound, regret = step.get("plain_bound"), step.get("plain_regret")
        return (
            step["n"] >= floor
            and bound is not None
            and regret is not None
            and bound < math.inf
        )

    groups: dict[tuple[str, str], list[dict]] = {}
    for r in map(as_current, records):
        groups.setdefault((r["problem"], r["method"]), []).append(r)
    rows = []
    for method in sorted({m for _, m in groups}):
        problems = sorted(p for p, m in groups if m == method)
        runs = {p: groups[(p, method)] for p in problems}
        oracle = {}
        for p in problems:
            needs = [step_need(s) for r in runs[p] for s in r["steps"] if usable(s)]
            oracle[p] = max(needs) if needs else None
        # The points where c* is read: each run's statistic at each query.
        where: list[tuple[str, int, int]] = []  # (problem, query, run)
        values: list[float] = []
        for p in problems:
            for q in queries:
                for i, r in enumerate(runs[p]):
                    if len(r["steps"]) < q:
                        continue
                    step = r["steps"][q - 1]
                    if usable(step) and step.get(statistic) is not None:
                        where.append((p, q, i))
                        values.append(float(step[statistic]))
        at = np.array(values)

        def envelope(
            steps: list[tuple[float, float]], at: np.ndarray = at
        ) -> tuple[np.ndarray, float]:
            # c* of these (statistic, need) points, read at every point of
            # `at`, and the largest need (the best constant).
            if not steps:
                return np.zeros(at.size), 0.0
            pts = sorted(steps)
            stats = np.array([x[0] for x in pts])
            running = np.maximum.accumulate(np.array([x[1] for x in pts]))
            k = np.searchsorted(stats, at, side="right")
            return np.where(k > 0, running[np.maximum(k - 1, 0)], 0.0), running[-1]

        # Per problem and per choice of spared run (None: none), the envelope
        # of its other runs' steps.
        choices = []
        for p in problems:
            per_run = [
                [
                    (float(s[statistic]), step_need(s))
                    for s in r["steps"]
                    if usable(s) and s.get(statistic) is not None
                ]
                for r in runs[p]
            ]
            spare = [None, *range(len(per_run))] if spared_runs else [None]
            choices.append(
                [
                    envelope(
                        [x for i, pts in enumerate(per_run) if i != j for x in pts]
                    )
                    for j in spare
                ]
            )
        combos = math.prod(len(c) for c in choices)
        if combos * max(1, at.size) > 50_000_000:
            raise ValueError(
                f"{combos:,} choices of spared runs for method {method!r}: too "
                "many to search; pass fewer problems or spared_runs=0."
            )
        # Every choice at once: axis j of `c_at` is problem j's spared run,
        # the last axis the points of `at`; c* is the largest envelope.
        dims = len(choices)
        c_at = np.zeros([1] * dims + [at.size])
        const = np.zeros([1] * dims)
        for j, options in enumerate(choices):
            shape = [1] * dims
            shape[j] = len(options)
            env = np.stack([e for e, _ in options]).reshape(*shape, at.size)
            c_at = np.maximum(c_at, env)
            const = np.maximum(const, np.array([m for _, m in options]).reshape(shape))
        best: dict[tuple[str, int], float] = {}
        for p in problems:
            for q in queries:
                cols = [k for k, (pp, qq, _) in enumerate(where) if (pp, qq) == (p, q)]
                if oracle[p] and math.isfinite(oracle[p]) and cols:
                    med = np.median(c_at[..., cols], axis=-1) / oracle[p]
                    best[(p, q)] = float(med.min())
        best_const = {
            p: float(const.min()) / oracle[p]
            for p in problems
            if oracle[p] and math.isfinite(oracle[p])
        }
        for p in problems:
            if not oracle[p]:
                continue
            rows.append(
                {
                    "problem": p,
                    "method": method,
                    "statistic": statistic,
                    "spared_runs": spared_runs,
                    "oracle": oracle[p],
                    "best_constant_over_oracle": best_const.get(p),
                    "median_over_oracle": {q: best.get((p, q)) for q in queries},
                }
            )
    return sorted(rows, key=lambda r: (r["problem"], r["method"]))


def format_calibration_limits(
    rows: Sequence[dict[str, Any]], queries: Sequence[int] = (50, 100)
) -> str:
    """The table of :func:`calibration_limits` rows (Markdown)."""
    cols = " | ".join(f"best monotone / oracle @{q}" for q in queries)
    lines = [
        f"| statistic | problem | method | oracle factor (n >= 20) | {cols} | "
        "best constant / oracle |",
        "|---|---|---|---:|" + "---:|" * (len(queries) + 1),
    ]
    for r in rows:
        at = " | ".join(_fmt(_at(r["median_over_oracle"], q)) for q in queries)
        lines.append(
            f"| {CALIBRATION_STATISTICS[r['statistic']]} | "
            f"{PROBLEM_LABELS[r['problem']]} | {LABELS[r['method']]} | "
            f"{_fmt(r['oracle'])} | {at} | {_fmt(r['best_constant_over_oracle'])} |"
        )
    return "\n".join(lines) + "\n"


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _key(rule: str, what: str) -> str:
    return f"{rule}_{what}"


#: The recorded certificates whose calibration is the LOO check (the
#: ``forecast`` one too, where it fell back to it: no ``forecast_scale``).
LOO_RULES = ("robust", "geometric", "loo_gaussian", "loo_student", "loo_capped")


def as_current(record: dict[str, Any]) -> dict[str, Any]:
    """A record as the current code would have made it.

    Records of format 5 and before were made before the LOO check refused
    below :data:`~ax_chaining.certificate.certify.LOO_MIN_OBSERVATIONS`
    observations. The refusal depends on the number of observations alone and
    the loop's queries do not depend on the certificate, so such a record's
    LOO-checked certificates (:data:`LOO_RULES`, and ``forecast`` where it
    fell back to the check) at steps with fewer observations are marked
    refused (``valid`` False); the rest is unchanged (``audit``'s, which
    records no sign of a fallback, too). Newer records are returned as they
    are. Every record's problem is named as the current code names it
    (:func:`benchmarks.molecules_bench.current_name`: ``esol@default`` is
    ``esol@rdkit2d-botorch``)."""
    from ax_chaining.certificate.certify import LOO_MIN_OBSERVATIONS

    record = {**record, "problem": current_name(record["problem"])}
    if record["config"].get("format", 0) >= 6:
        return record
    steps = []
    for s in record["steps"]:
        s = dict(s)
        if s["n"] < LOO_MIN_OBSERVATIONS:
            rules = [
                *LOO_RULES,
                *(["forecast"] if s.get("forecast_scale") is None else []),
            ]
            for rule in rules:
                if s.get(_key(rule, "bound")) is not None:
                    s[_key(rule, "valid")] = False
        steps.append(s)
    return {**record, "steps": steps}


def summarize(records: Sequence[dict[str, Any]], delta: float = 0.05) -> dict[str, Any]:
    """Validity, tightness, rank and stopping, per problem and method (of the
    records :func:`as_current`)."""
    out: dict[str, Any] = {"rows": [], "stopping": [], "oracle": []}
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in map(as_current, records):
        groups.setdefault((r["problem"], r["method"]), []).append(r)
    for (problem, method), runs in sorted(groups.items()):
        oracle = oracle_factor(runs)
        out["oracle"].append({"problem": problem, "method": method, "factor": oracle})
        for rule in RULES:
            row = _rule_row(rule, runs, oracle)
            if row is not None:
                out["rows"].append({"problem": problem, "method": method, **row})
        out["stopping"] += _stopping(problem, method, runs)
    return out


def _rule_row(
    rule: str, runs: list[dict[str, Any]], oracle: float | None
) -> dict[str, Any] | None:
    """One certificate's row of the summary; None where the records do not
    hold it (records from before it, and the audits' in loops without any)."""
    steps = [s for r in runs for s in r["steps"]]
    if not any(_key(rule, "bound") in s for s in steps):
        return None
    if rule == "audit" and not any(s.get("audit") for s in steps):
        return None
    ranked = any(_key(rule, "rank_bound") in s for s in steps)
    queries = max(len(r["steps"]) for r in runs)
    at = sorted({*AT, max(1, queries // 2), queries})
    any_viol, rank_viol, step_viol, steps_n, refused = 0, 0, 0, 0, 0
    first10, first5, regret10 = [], [], []
    bound_at: dict[int, list[float]] = {k: [] for k in at}
    over_oracle: dict[int, list[float]] = {k: [] for k in at}
    rank_at: dict[int, list[float]] = {k: [] for k in at}
    realized_at: dict[int, list[float]] = {k: [] for k in at}
    for r in runs:
        rng, n = r["f_range"], r["num_candidates"]
        viol_run, rank_run = False, False
        # The certificate in force at query k: the last check at or before it
        # (a geometric schedule has none at k itself).
        current: dict[str, Any] | None = None
        for k, s in enumerate(r["steps"], start=1):
            bound = s.get(_key(rule, "bound"))
            if bound is not None:
                steps_n += 1
                valid = rule == "plain" or s[_key(rule, "valid")]
                if not valid:
                    refused += 1
                    # A refused certificate says nothing: among all N.
                    current = {
                        "bound": math.inf,
                        "rank_bound": n if ranked else None,
                        "rank": None,
                    }
                else:
                    current = {
                        "bound": bound,
                        "rank_bound": s.get(_key(rule, "rank_bound")),
                        "rank": s.get(_key(rule, "rank")),
                    }
                    if s[_key(rule, "regret")] > bound + 1e-9:
                        step_viol += 1
                        viol_run = True
                    rb, rank = current["rank_bound"], current["rank"]
                    if rb is not None and rank is not None and rank > rb:
                        rank_run = True
            if k in bound_at and current is not None:
                bound_at[k].append(current["bound"] / rng)
                plain = s.get("plain_bound")
                if oracle and plain and math.isfinite(oracle):
                    over_oracle[k].append(current["bound"] / (oracle * plain))
                if current["rank_bound"] is not None:
                    rank_at[k].append(current["rank_bound"] / n)
                if current["rank"] is not None:
                    realized_at[k].append(current["rank"])
        any_viol += viol_run
        rank_viol += rank_run

        def ok(s, frac, rng=rng):
            bound = s.get(_key(rule, "bound"))
            valid = rule == "plain" or s.get(_key(rule, "valid"))
            return bound is not None and bool(valid) and bound <= frac * rng

        k10, s10 = _first(r["steps"], lambda s, ok=ok: ok(s, 0.10))
        k5, _ = _first(r["steps"], lambda s, ok=ok: ok(s, 0.05))
        first10.append(k10)
        first5.append(k5)
        if s10 is not None:
            regret10.append(s10[_key(rule, "regret")] / rng)
    return {
        "rule": rule,
        "runs": len(runs),
        "queries": queries,
        "runs_violated": any_viol,
        "rank_runs_violated": rank_viol if ranked else None,
        "step_violation_rate": step_viol / max(1, steps_n - refused),
        "refused_rate": refused / max(1, steps_n),
        "first_10pct": first10,
        "first_5pct": first5,
        "regret_at_10pct": regret10,
        "median_bound_over_range": {k: _median(v) for k, v in bound_at.items()},
        "median_bound_over_oracle": {k: _median(v) for k, v in over_oracle.items()},
        "median_rank_bound_over_n": {k: _median(v) for k, v in rank_at.items()},
        "median_rank": {k: _median(v) for k, v in realized_at.items()},
    }


def _regret_rule(rule: str):
    def stops(s: dict, r: dict) -> bool:
        bound = s.get(_key(rule, "bound"))
        return (
            bound is not None
            and bool(s.get(_key(rule, "valid")))
            and bound <= 0.10 * r["f_range"]
        )

    return stops


def _rank_rule(rule: str):
    def stops(s: dict, r: dict) -> bool:
        rb = s.get(_key(rule, "rank_bound"))
        limit = int(TOP_FRACTION * r["num_candidates"])
        return rb is not None and bool(s.get(_key(rule, "valid"))) and rb <= limit

    return stops


def _stopping(problem: str, method: str, runs: list[dict]) -> list[dict]:
    """Queries and true regret at stop for each rule: the regret rules at 10%
    of the range, the rank rules at the top :data:`TOP_FRACTION`.

    A rule that never fires stops at the budget (``fired`` counts the runs in
    which it fired before); ``top_when_fired`` counts the fired runs of a rank
    rule whose point is truly in the top fraction."""
    rows = []
    # Rules on a variant that older records lack: rows only where recorded.
    needs = {
        "certificate (LOO scale's upper limit, default)": "loo_upper",
        "rank in top 1% (LOO scale's upper limit, default)": "loo_upper",
    }
    for name, stops, rank_of in (
        ("certificate (LOO point estimate)", _regret_rule("robust"), None),
        ("certificate (forecast residuals)", _regret_rule("forecast"), None),
        ("certificate (geometric checks)", _regret_rule("geometric"), None),
        (
            "certificate (LOO scale's upper limit, default)",
            _regret_rule("loo_upper"),
            None,
        ),
        ("certificate (running minimum, plain)", None, None),
        (
            "UCB - LCB",
            lambda s, r: (
                s["ucb_lcb_bound"] is not None
                and s["ucb_lcb_bound"] <= 0.10 * r["f_range"]
            ),
            None,
        ),
        (
            "Ax ImprovementGlobalStoppingStrategy",
            lambda s, r: s["ax_improvement_stop"],
            None,
        ),
        ("rank in top 1% (LOO point estimate)", _rank_rule("robust"), "robust"),
        ("rank in top 1% (forecast residuals)", _rank_rule("forecast"), "forecast"),
        ("rank in top 1% (geometric checks)", _rank_rule("geometric"), "geometric"),
        (
            "rank in top 1% (LOO scale's upper limit, default)",
            _rank_rule("loo_upper"),
            "loo_upper",
        ),
        ("fixed budget", lambda s, r: False, None),
    ):
        if name in needs and not any(
            _key(needs[name], "bound") in s for r in runs for s in r["steps"]
        ):
            continue
        queries, regrets, above, fired, top = [], [], 0, 0, 0
        for r in runs:
            tol = 0.10 * r["f_range"]
            steps = r["steps"]
            if stops is None:  # running minimum of the plain bound
                low, k_stop = math.inf, None
                for k, s in enumerate(steps, start=1):
                    if s["plain_bound"] is not None:
                        low = min(low, s["plain_bound"])
                    if low <= tol:
                        k_stop = k
                        break
            else:
                k_stop = next((k for k, s in enumerate(steps, 1) if stops(s, r)), None)
            fired += k_stop is not None
            if k_stop is not None and rank_of is not None:
                rank = steps[k_stop - 1].get(_key(rank_of, "rank"))
                limit = int(TOP_FRACTION * r["num_candidates"])
                top += rank is not None and rank <= limit
            k_stop = k_stop or len(steps)
            regret = steps[k_stop - 1]["best_regret"]
            queries.append(k_stop)
            regrets.append(regret / r["f_range"])
            above += regret > tol
        rows.append(
            {
                "problem": problem,
                "method": method,
                "rule": name,
                "median_queries": float(np.median(queries)),
                "median_regret_over_range": float(np.median(regrets)),
                "stopped_above_tolerance": above,
                "fired": fired,
                "top_when_fired": top if rank_of is not None else None,
                "runs": len(runs),
            }
        )
    return rows


def _fmt_firsts(values: list[int | None], total: int) -> str:
    reached = sorted(v for v in values if v is not None)
    if not reached:
        return f"never (0/{total})"
    return f"{int(np.median(reached))} ({len(reached)}/{total})"


def _at(medians: dict, k: int) -> float | None:
    """The median at query ``k`` (keys are ints, or strings from JSON)."""
    return medians.get(k, medians.get(str(k)))


def _fmt_count(value: int | None, total: int) -> str:
    return "-" if value is None else f"{value}/{total}"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else num(value, digits)


def format_markdown(summary: dict[str, Any]) -> str:
    factors = {
        (o["problem"], o["method"]): o["factor"] for o in summary.get("oracle", [])
    }
    lines = [
        "Oracle factor (the smallest factor on the plain bound with no run "
        "violated at any step):",
        "",
        "| problem | method | oracle factor |",
        "|---|---|---:|",
    ]
    for (problem, method), factor in sorted(factors.items()):
        lines.append(
            f"| {PROBLEM_LABELS[problem]} | {LABELS[method]} | {_fmt(factor)} |"
        )
    end = max((r.get("queries", 100) for r in summary["rows"]), default=100)
    half = max(1, end // 2)
    lines += [
        "",
        f"Medians at queries {half} and {end} (the certificate in force then; "
        "a refused one counts as an infinite bound and a rank bound of N).",
        "",
        "| problem | method | certificate | runs violated | rank violated | "
        f"step violations | refused | B/range @{half} | @{end} | B/oracle @{half} | "
        f"@{end} | rank bound/N @{half} | @{end} | realized rank @{end} | "
        "first <= 10% (runs) | first <= 5% (runs) | regret/range at 10% |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|---:|",
    ]
    for r in summary["rows"]:
        med = r["median_bound_over_range"]
        ora = r.get("median_bound_over_oracle", {})
        rank = r.get("median_rank_bound_over_n", {})
        real = r.get("median_rank", {})
        regret = (
            num(float(np.median(r["regret_at_10pct"])), 3)
            if r["regret_at_10pct"]
            else "-"
        )
        lines.append(
            f"| {PROBLEM_LABELS[r['problem']]} | {LABELS[r['method']]} | "
            f"{RULE_LABELS[r['rule']]} | {r['runs_violated']}/{r['runs']} | "
            f"{_fmt_count(r.get('rank_runs_violated'), r['runs'])} | "
            f"{num(r['step_violation_rate'], 3)} | {num(r['refused_rate'], 3)} | "
            f"{_fmt(_at(med, half))} | {_fmt(_at(med, end))} | "
            f"{_fmt(_at(ora, half))} | {_fmt(_at(ora, end))} | "
            f"{_fmt(_at(rank, half))} | {_fmt(_at(rank, end))} | "
            f"{_fmt(_at(real, end))} | "
            f"{_fmt_firsts(r['first_10pct'], r['runs'])} | "
            f"{_fmt_firsts(r['first_5pct'], r['runs'])} | {regret} |"
        )
    lines += [
        "",
        "| problem | method | stopping rule | fired (runs) | median queries at stop | "
        "median regret/range at stop | regret above 10% at stop | truly top 1% "
        "when fired |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in summary["stopping"]:
        top = r.get("top_when_fired")
        top_text = "-" if top is None else f"{top}/{r['fired']}"
        lines.append(
            f"| {PROBLEM_LABELS[r['problem']]} | {LABELS[r['method']]} | {r['rule']} | "
            f"{r['fired']}/{r['runs']} | {num(r['median_queries'], 3)} | "
            f"{num(r['median_regret_over_range'], 3)} | "
            f"{r['stopped_above_tolerance']}/{r['runs']} | "
            f"{top_text} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks validity")
    parser.add_argument("--small", action="store_true", help="the tiny preset")
    parser.add_argument("--out", default="results/validity")
    parser.add_argument("--records", help="a packed file to summarize")
    parser.add_argument("--summary-only", action="store_true")
    parser.add_argument("--problems", default=None, help="comma-separated subset")
    parser.add_argument("--methods", default=None, help="comma-separated subset")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument(
        "--first-seed",
        type=int,
        default=None,
        help="seeds first-seed .. first-seed + runs - 1 (adds seeds to stored ones)",
    )
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--n-init", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--calibration-limits",
        action="store_true",
        help="with --records: the best calibration monotone in a residual scale "
        "(calibration_limits), instead of the summary",
    )
    args = parser.parse_args(argv)
    config = SMALL_CONFIG if args.small else FULL_CONFIG
    changes: dict[str, Any] = {}
    if args.problems:
        changes["problems"] = tuple(parse_names(args.problems, ALL_PROBLEMS, "problem"))
    if args.methods:
        changes["methods"] = tuple(
            parse_names(args.methods, (*METHODS, "chaining_audit"), "method")
        )
    if args.runs:
        changes["runs"] = args.runs
    if args.first_seed is not None:
        changes["first_seed"] = args.first_seed
    if args.queries:
        changes["queries"] = args.queries
    if args.n_init:
        changes["n_init"] = args.n_init
    if changes:
        config = ValidityConfig(**{**asdict(config), **changes})
    if args.calibration_limits:
        if not args.records:
            parser.error("--calibration-limits reads --records (a packed file)")
        records = read_packed(args.records)
        rows = [
            row
            for statistic in CALIBRATION_STATISTICS
            for row in calibration_limits(records, statistic)
        ]
        print(format_calibration_limits(rows), end="")
        return 0
    if args.records:
        records = read_packed(args.records)
    elif args.summary_only:
        records = load_records(args.out, "validity")
    else:
        records = run_validity(config, args.out, jobs=args.jobs)
    summary = summarize(records)
    text = format_markdown(summary)
    write_summary(args.out, command_line(["validity", *argv]), text, summary)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
