r"""Do the certificates hold with fitted hyperparameters, and can a user stop
on them? Ax ``Client`` loops on molecule libraries and GP samples, each step
recording the certificate variants of :data:`RECORDED` beside the true regret
(protocol and measures: ``docs/results/validity.md``).
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
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig
from ax.core import ObservationFeatures
from ax.global_stopping.strategies.improvement import ImprovementGlobalStoppingStrategy
from ax.utils.common.logger import set_stderr_log_level
from botorch.acquisition.objective import ScalarizedPosteriorTransform

from ax_chaining import ax as axc
from ax_chaining.acquisition import gp_ucb_beta
from ax_chaining.ax import GEN_METADATA_KEY
from ax_chaining.ax.candidates import row_key
from ax_chaining.ax.certificates import objective_scale, residual_calibration
from ax_chaining.certificate import (
    AUTO_DOF_CAP,
    GAUSSIAN,
    CertificateOptions,
    CheckSchedule,
    ExplorationTail,
    StudentTail,
    certify_model,
    ucb_lcb_bound,
)
from ax_chaining.certificate.certify import LOO_MIN_OBSERVATIONS
from ax_chaining.checks import check_int
from ax_chaining.posterior import candidate_posterior
from ax_chaining.test_functions.molecules import library, load_dataset
from ax_chaining.test_functions.problems import grid_problem
from benchmarks._tables import md_row, num, parse_names
from benchmarks.molecules_bench import MODEL_LABELS, current_name, model_variant
from benchmarks.records import (
    add_record_options,
    command_line,
    read_packed,
    resume,
    write_summary,
)

#: 6: the LOO check's minimum number of observations (older records are read
#: through :func:`as_current`).
FORMAT_VERSION = 6
PROBLEMS: tuple[str, ...] = ("esol", "freesolv", "lipo", "grid")
#: A library on one of the molecule benchmark's descriptor models.
MODEL_SUFFIXES: dict[str, str] = {f"@{v}": label for v, label in MODEL_LABELS.items()}
MOLECULE_PROBLEMS: tuple[str, ...] = ("esol", "freesolv", "lipo")
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
PROBLEM_LABELS |= {
    name + suffix: f"{PROBLEM_LABELS[name]}, {label}"
    for suffix, label in MODEL_SUFFIXES.items()
    for name in MOLECULE_PROBLEMS
}


@dataclass(frozen=True)
class ValidityConfig:
    """Which ``problems`` and ``methods``, seeds ``first_seed .. first_seed +
    runs - 1``, ``queries`` after ``n_init`` uniform initial points, every
    certificate's ``delta``, and the grid's ``side``."""

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


#: Checks after 10, 20, 40 and 80 observations.
GEOMETRIC = CheckSchedule("geometric", start=10, ratio=2.0)


def _problem(name: str, seed: int, config: ValidityConfig) -> tuple:
    """(parameters, strategy kwargs, candidate rows, noise-free values, noise sd)."""
    if name == "grid":
        X, f = grid_problem(config.side, seed)
        rows = [{"x": float(a), "y": float(b)} for a, b in X.tolist()]
        params = [
            RangeParameterConfig(name=n, bounds=(0.0, 6.0), parameter_type="float")
            for n in ("x", "y")
        ]
        return params, {"candidates": rows}, rows, f.numpy(), 0.05
    if "@" in name:  # the molecule benchmark's spec of that model
        base, variant = name.split("@")
        data = load_dataset(base)
        spec = model_variant(data.name, variant)[0]
    else:
        data, gram = library(name)
        spec = axc.precomputed_kernel_surrogate_spec(gram)
    n = len(data)
    kwargs = {"surrogate_spec": spec, "exclude_evaluated": True}
    rows = [{"item": i} for i in range(n)]
    return [axc.candidate_index_parameter(n)], kwargs, rows, data.y.numpy(), 0.0


def _strategy(method: str, kwargs: dict[str, Any], config: ValidityConfig) -> Any:
    # `robust`: the LOO scale's point estimate, as every record made before
    # the upper limit (`loo_upper`) became the package's default.
    kwargs = {**kwargs, "certificate": CertificateOptions(scale_level=None)}
    if method in ("chaining", "chaining_audit"):
        audit = {"audit_every": AUDIT_EVERY} if method == "chaining_audit" else {}
        return axc.chaining_generation_strategy(
            init_trials=config.n_init, delta=config.delta, **kwargs, **audit
        )
    return axc.qlognei_generation_strategy(init_trials=config.n_init, **kwargs)


#: The variants recorded beside the strategy's own certificate (``robust``).
RECORDED = tuple(
    "loo_gaussian loo_student loo_capped loo_upper loo_light20 geometric "
    "forecast".split()
)


def _variants(n: int, experiment: Any, audits: bool) -> dict[str, Any]:
    """The ``CertificateOptions`` of each variant at a step with ``n``
    observations (the geometric schedule's at its checks only; the audits' in
    a loop with audits only), all but ``loo_upper`` on the LOO scale's point
    estimate, as the records made before the upper limit became the default."""
    light = max(1, n - 1)
    heavy = min(light, AUTO_DOF_CAP)
    out: dict[str, dict[str, Any]] = {
        "plain": {"calibration": "none"},
        "loo_gaussian": {"tail": GAUSSIAN},
        "loo_student": {"tail": StudentTail(light)},
        "loo_capped": {"tail": StudentTail(heavy)},
        "loo_upper": {"scale_level": 0.05},
        "loo_light20": {"tail": ExplorationTail(heavy, min(light, 20))},
        "forecast": {"calibration": residual_calibration(experiment, "forecast")},
    }
    if audits:
        out["audit"] = {"calibration": residual_calibration(experiment, "audit")}
    if GEOMETRIC.index(n) is not None:
        out["geometric"] = {"schedule": GEOMETRIC}
    return {k: CertificateOptions(**{"scale_level": None, **v}) for k, v in out.items()}


def _realized_rank(f: np.ndarray, index: int) -> int:
    """1 + the number of candidates truly better than ``index``."""
    return 1 + int((f > f[index]).sum())


def _record(cert: Any, scale: float | None, f: np.ndarray, f_max: float) -> dict:
    """A variant's ``bound`` (objective units), ``valid``, its point's true
    ``regret``, ``rank_bound`` and realized ``rank`` (None if not computed)."""
    if cert is None:
        return dict.fromkeys(("bound", "valid", "regret", "rank_bound", "rank"))
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
    stopping rules' decisions."""
    set_stderr_log_level(logging.WARNING)  # Ax logs every trial at INFO
    params, kwargs, rows, f, noise = _problem(problem, seed, config)
    n, names = len(rows), list(rows[0])
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

    for i in map(int, rng.choice(n, size=config.n_init, replace=False)):
        observe(client.attach_trial(parameters=dict(rows[i])), i)
    # Ax's defaults, from 5 trials past the initial points; the trial just
    # generated is still running, so pending trials must not silence it.
    improvement = ImprovementGlobalStoppingStrategy(
        min_trials=config.n_init + 5, inactive_when_pending_trials=False
    )
    features = [ObservationFeatures(parameters=dict(r)) for r in rows]
    steps = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(config.queries):
            start = time.perf_counter()
            ((trial, p),) = client.get_next_trials(max_trials=1).items()
            seconds = time.perf_counter() - start
            experiment = gs.experiment
            meta = experiment.trials[trial].generator_runs[0].gen_metadata or {}
            ours = meta.get(GEN_METADATA_KEY, {})
            cert = ours.get("certificate") or {}
            # The step's fitted model, the candidates in its space, the scale.
            model = gs.adapter.generator.surrogate.model
            X = gs.adapter.transform_observation_features(features)
            transform = ScalarizedPosteriorTransform(torch.ones(1, dtype=X.dtype))
            scale = objective_scale(gs.adapter, experiment, transform.weights)
            evaluated = torch.zeros(n, dtype=torch.bool)
            evaluated[items] = True
            kw = {"among": evaluated, "delta": config.delta}
            kw["posterior_transform"] = transform
            variants = _variants(len(items), experiment, method == "chaining_audit")
            certs = {
                name: certify_model(model, X, options=options, **kw)
                for name, options in variants.items()
            }
            post = candidate_posterior(model, X, transform, path="dense")
            beta = gp_ucb_beta(n, len(items) + 1, config.delta)
            index = evaluated.nonzero().squeeze(-1)
            sigma = post.distance.sigma.to(torch.float64)
            ucb_lcb = ucb_lcb_bound(post.mean, sigma, index, beta)
            lcb = post.mean[index] - beta**0.5 * sigma[index]
            lcb_pick = int(index[torch.argmax(lcb)])
            robust = index_of[row_key(cert["parameters"], names)] if cert else None
            step = {
                "n": len(items),
                "seconds": seconds,
                "best_regret": f_max - float(f[items].max()),
                "robust_bound": cert.get("bound") if cert else None,
                "robust_valid": bool(cert.get("valid", True)) if cert else None,
                "robust_regret": None if robust is None else f_max - float(f[robust]),
                "robust_scale": (cert.get("checks") or {}).get("mean_z2"),
                "robust_rank_bound": cert.get("rank_bound") if cert else None,
                "robust_rank": None if robust is None else _realized_rank(f, robust),
                "audit": bool(ours.get("audit")),
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
    for k, step in enumerate(steps, start=1):
        if k % 5 == 0:
            trial = config.n_init + k - 1  # the trial of the k-th query
            stop, _ = improvement.should_stop_optimization(
                gs.experiment, trial_to_check=trial
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


# Summary.

RULES = tuple(
    "robust loo_upper loo_light20 forecast audit loo_capped loo_student "
    "loo_gaussian plain geometric".split()
)
#: Queries at which the medians are taken (and half the budget, the budget).
AT = (25, 50, 100)
#: The rank rules stop at the top ``TOP_FRACTION`` of the candidate set.
TOP_FRACTION = 0.01


def oracle_factor(runs: Sequence[dict[str, Any]]) -> float | None:
    """The smallest ``c`` with ``regret <= c * plain bound`` at every step of
    every run (None without a plain bound); ``c`` times the plain bound is the
    oracle bound."""
    needs = [
        step_need(s)
        for r in runs
        for s in r["steps"]
        if s.get("plain_bound") is not None and s.get("plain_regret") is not None
    ]
    return max(needs) if needs else None


def step_need(step: dict[str, Any]) -> float:
    """The factor on a step's plain bound that its regret needs."""
    bound, regret = step["plain_bound"], step["plain_regret"]
    if bound > 0:
        return regret / bound
    return math.inf if regret > 1e-12 else 0.0


#: The recorded statistics a calibration of the plain bound can follow.
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
    """How near the oracle bound the best calibration that follows
    ``statistic`` could come: per problem and method, its median bound over
    the oracle bound at ``queries``, a lower limit over the whole class.

    A calibration multiplies each step's plain bound by ``c(s)``, a
    non-decreasing function of the step's ``statistic``, valid at every step
    with at least ``min_obs`` observations (default: the LOO check's minimum)
    of every run of every problem under the same method, but ``spared_runs``
    (0 or 1) per problem. For given spared runs the pointwise smallest is
    ``c*(s) = max {regret_k / bound_k : s_k <= s}`` over the other runs'
    steps; each entry is the smallest over every choice of spared runs. Also
    given: the smallest constant valid on the same steps
    (``best_constant_over_oracle``).
    """
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
        known = regret is not None and bound is not None
        return step["n"] >= floor and known and bound < math.inf

    def ok(s: dict[str, Any]) -> bool:
        return usable(s) and s.get(statistic) is not None

    groups, rows = _groups(records), []
    for method in sorted({m for _, m in groups}):
        problems = sorted(p for p, m in groups if m == method)
        runs = {p: groups[(p, method)] for p in problems}
        oracle = {}
        for p in problems:
            needs = [step_need(s) for r in runs[p] for s in r["steps"] if usable(s)]
            oracle[p] = max(needs) if needs else None
        # The points where c* is read: each run's statistic at each query.
        where = [  # (problem, query, step)
            (p, q, r["steps"][q - 1])
            for p in problems
            for q in queries
            for r in runs[p]
            if len(r["steps"]) >= q and ok(r["steps"][q - 1])
        ]
        at = np.array([float(s[statistic]) for _, _, s in where])

        def envelope(
            steps: list[tuple[float, float]], at: np.ndarray = at
        ) -> tuple[np.ndarray, float]:
            # c* of these (statistic, need) points at every point of `at`,
            # and the largest need (the best constant).
            if not steps:
                return np.zeros(at.size), 0.0
            pts = sorted(steps)
            stats = np.array([x[0] for x in pts])
            running = np.maximum.accumulate(np.array([x[1] for x in pts]))
            k = np.searchsorted(stats, at, side="right")
            return np.where(k > 0, running[np.maximum(k - 1, 0)], 0.0), running[-1]

        # Per problem and choice of spared run (None: none), the envelope of
        # its other runs' steps.
        choices = []
        for p in problems:
            per_run = [
                [(float(s[statistic]), step_need(s)) for s in r["steps"] if ok(s)]
                for r in runs[p]
            ]
            spare = [None, *range(len(per_run))] if spared_runs else [None]
            others = (
                [x for i, pts in enumerate(per_run) if i != j for x in pts]
                for j in spare
            )
            choices.append([envelope(steps) for steps in others])
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
        for p in problems:
            if not oracle[p]:
                continue
            finite = math.isfinite(oracle[p])
            rows.append(
                {
                    "problem": p,
                    "method": method,
                    "statistic": statistic,
                    "spared_runs": spared_runs,
                    "oracle": oracle[p],
                    "best_constant_over_oracle": float(const.min()) / oracle[p]
                    if finite
                    else None,
                    "median_over_oracle": {q: best.get((p, q)) for q in queries},
                }
            )
    return sorted(rows, key=lambda r: (r["problem"], r["method"]))


def format_calibration_limits(
    rows: Sequence[dict[str, Any]], queries: Sequence[int] = (50, 100)
) -> str:
    """The markdown table of :func:`calibration_limits` rows."""
    cols = " | ".join(f"best monotone / oracle @{q}" for q in queries)
    lines = [
        f"| statistic | problem | method | oracle factor (n >= 20) | {cols} | "
        "best constant / oracle |",
        "|---|---|---|---:|" + "---:|" * (len(queries) + 1),
    ]
    for r in rows:
        lines.append(
            md_row(
                CALIBRATION_STATISTICS[r["statistic"]],
                PROBLEM_LABELS[r["problem"]],
                LABELS[r["method"]],
                num(r["oracle"]),
                *(num(_at(r["median_over_oracle"], q)) for q in queries),
                num(r["best_constant_over_oracle"]),
            )
        )
    return "\n".join(lines) + "\n"


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


#: The recorded certificates whose calibration is the LOO check (``forecast``
#: too, where it fell back to it: no ``forecast_scale``).
LOO_RULES = ("robust", "geometric", "loo_gaussian", "loo_student", "loo_capped")


def as_current(record: dict[str, Any]) -> dict[str, Any]:
    """A record as the current code would have made it: its problem under its
    current name and, in records of format 5 and before, the LOO-checked
    certificates of the steps below ``LOO_MIN_OBSERVATIONS`` marked refused."""
    record = {**record, "problem": current_name(record["problem"])}
    if record["config"].get("format", 0) >= 6:
        return record
    steps = []
    for s in record["steps"]:
        s = dict(s)
        if s["n"] < LOO_MIN_OBSERVATIONS:
            fallback = ["forecast"] if s.get("forecast_scale") is None else []
            for rule in (*LOO_RULES, *fallback):
                if s.get(f"{rule}_bound") is not None:
                    s[f"{rule}_valid"] = False
        steps.append(s)
    return {**record, "steps": steps}


def _groups(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], list[dict]]:
    """The records :func:`as_current`, by problem and method."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in map(as_current, records):
        groups.setdefault((r["problem"], r["method"]), []).append(r)
    return groups


def summarize(records: Sequence[dict[str, Any]], delta: float = 0.05) -> dict[str, Any]:
    """Validity, tightness, rank and stopping per problem and method (of the
    records :func:`as_current`)."""
    out: dict[str, Any] = {"rows": [], "stopping": [], "oracle": []}
    for (problem, method), runs in sorted(_groups(records).items()):
        oracle = oracle_factor(runs)
        out["oracle"].append({"problem": problem, "method": method, "factor": oracle})
        for rule in RULES:
            if (row := _rule_row(rule, runs, oracle)) is not None:
                out["rows"].append({"problem": problem, "method": method, **row})
        out["stopping"] += _stopping(problem, method, runs)
    return out


def _first(steps: list[dict], ok: Any) -> tuple[int | None, dict | None]:
    return next(((k, s) for k, s in enumerate(steps, 1) if ok(s)), (None, None))


def _rule_row(
    rule: str, runs: list[dict[str, Any]], oracle: float | None
) -> dict[str, Any] | None:
    """One certificate's row; None where the records do not hold it."""
    steps = [s for r in runs for s in r["steps"]]
    if not any(f"{rule}_bound" in s for s in steps):
        return None
    if rule == "audit" and not any(s.get("audit") for s in steps):
        return None
    ranked = any(f"{rule}_rank_bound" in s for s in steps)
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
        # The certificate in force at query k: the last check at or before it.
        current: dict[str, Any] | None = None
        for k, s in enumerate(r["steps"], start=1):
            bound = s.get(f"{rule}_bound")
            if bound is not None:
                steps_n += 1
                if not (rule == "plain" or s[f"{rule}_valid"]):
                    refused += 1  # a refused certificate says nothing: among all N
                    current = {"bound": math.inf, "rank_bound": n if ranked else None}
                    current["rank"] = None
                else:
                    current = {
                        "bound": bound,
                        "rank_bound": s.get(f"{rule}_rank_bound"),
                        "rank": s.get(f"{rule}_rank"),
                    }
                    if s[f"{rule}_regret"] > bound + 1e-9:
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

        k10, s10 = _first(r["steps"], lambda s, at=0.10 * rng: _within(rule, s, at))
        k5, _ = _first(r["steps"], lambda s, at=0.05 * rng: _within(rule, s, at))
        first10.append(k10)
        first5.append(k5)
        if s10 is not None:
            regret10.append(s10[f"{rule}_regret"] / rng)
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


def _within(rule: str, s: dict, limit: float, bound: str = "bound") -> bool:
    """Whether step ``s`` holds a valid ``rule`` bound (the plain one and UCB -
    LCB are never refused) whose ``bound`` (or ``rank_bound``) is at most
    ``limit``."""
    value = s.get(f"{rule}_{bound}")
    valid = rule in ("plain", "ucb_lcb") or s.get(f"{rule}_valid")
    return value is not None and bool(valid) and value <= limit


def _regret_rule(rule: str) -> Any:
    return lambda s, r: _within(rule, s, 0.10 * r["f_range"])


def _rank_rule(rule: str) -> Any:
    return lambda s, r: _within(
        rule, s, int(TOP_FRACTION * r["num_candidates"]), "rank_bound"
    )


_DEFAULT = "LOO scale's upper limit, default"
#: Stopping rules: name, when it stops, and the variant whose realized rank a
#: rank rule reports. The plain bound's running minimum first reaches 10% of
#: the range at the first step whose plain bound does.
_RULES = (
    ("certificate (LOO point estimate)", _regret_rule("robust"), None),
    ("certificate (forecast residuals)", _regret_rule("forecast"), None),
    ("certificate (geometric checks)", _regret_rule("geometric"), None),
    (f"certificate ({_DEFAULT})", _regret_rule("loo_upper"), None),
    ("certificate (running minimum, plain)", _regret_rule("plain"), None),
    ("UCB - LCB", _regret_rule("ucb_lcb"), None),
    (
        "Ax ImprovementGlobalStoppingStrategy",
        lambda s, r: s["ax_improvement_stop"],
        None,
    ),
    ("rank in top 1% (LOO point estimate)", _rank_rule("robust"), "robust"),
    ("rank in top 1% (forecast residuals)", _rank_rule("forecast"), "forecast"),
    ("rank in top 1% (geometric checks)", _rank_rule("geometric"), "geometric"),
    (f"rank in top 1% ({_DEFAULT})", _rank_rule("loo_upper"), "loo_upper"),
    ("fixed budget", lambda s, r: False, None),
)


def _stopping(problem: str, method: str, runs: list[dict]) -> list[dict]:
    """Queries and true regret at stop for each rule (the regret rules at 10%
    of the range, the rank rules at the top :data:`TOP_FRACTION`); a rule that
    never fires stops at the budget (``fired``: the runs in which it fired;
    ``top_when_fired``: those of a rank rule whose point is truly top)."""
    rows = []
    upper = any("loo_upper_bound" in s for r in runs for s in r["steps"])
    for name, stops, rank_of in _RULES:
        if _DEFAULT in name and not upper:
            continue  # older records lack the variant
        queries, regrets, above, fired, top = [], [], 0, 0, 0
        for r in runs:
            tol, steps = 0.10 * r["f_range"], r["steps"]
            k_stop = next((k for k, s in enumerate(steps, 1) if stops(s, r)), None)
            fired += k_stop is not None
            if k_stop is not None and rank_of is not None:
                rank = steps[k_stop - 1].get(f"{rank_of}_rank")
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


def format_markdown(summary: dict[str, Any]) -> str:
    """The oracle factors, the certificates' table and the stopping rules'."""
    lines = [
        "Oracle factor (the smallest factor on the plain bound with no run "
        "violated at any step):",
        "",
        "| problem | method | oracle factor |",
        "|---|---|---:|",
    ]
    oracle = summary.get("oracle", [])
    factors = {(o["problem"], o["method"]): o["factor"] for o in oracle}
    for (problem, method), factor in sorted(factors.items()):
        lines.append(md_row(PROBLEM_LABELS[problem], LABELS[method], num(factor)))
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
        "|---|---|---|" + "---:|" * 14,
    ]
    for r in summary["rows"]:
        med, ora = r["median_bound_over_range"], r.get("median_bound_over_oracle", {})
        rank, real = r.get("median_rank_bound_over_n", {}), r.get("median_rank", {})
        regret10 = r["regret_at_10pct"]
        ranked = r.get("rank_runs_violated")
        lines.append(
            md_row(
                PROBLEM_LABELS[r["problem"]],
                LABELS[r["method"]],
                RULE_LABELS[r["rule"]],
                f"{r['runs_violated']}/{r['runs']}",
                "-" if ranked is None else f"{ranked}/{r['runs']}",
                num(r["step_violation_rate"], 3),
                num(r["refused_rate"], 3),
                *(num(_at(m, k)) for m in (med, ora, rank) for k in (half, end)),
                num(_at(real, end)),
                _fmt_firsts(r["first_10pct"], r["runs"]),
                _fmt_firsts(r["first_5pct"], r["runs"]),
                num(float(np.median(regret10)), 3) if regret10 else "-",
            )
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
        lines.append(
            md_row(
                PROBLEM_LABELS[r["problem"]],
                LABELS[r["method"]],
                r["rule"],
                f"{r['fired']}/{r['runs']}",
                num(r["median_queries"], 3),
                num(r["median_regret_over_range"], 3),
                f"{r['stopped_above_tolerance']}/{r['runs']}",
                "-" if top is None else f"{top}/{r['fired']}",
            )
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks validity")
    add_record_options(parser, "results/validity", "the tiny preset", plot=False)
    add = parser.add_argument
    add("--problems", help="comma-separated subset")
    add("--methods", help="comma-separated subset")
    add("--runs", type=int)
    add("--first-seed", type=int, help="seeds first-seed .. first-seed + runs - 1")
    add("--queries", type=int)
    add("--n-init", type=int)
    text = "with --records: calibration_limits instead of the summary"
    add("--calibration-limits", action="store_true", help=text)
    args = parser.parse_args(argv)
    changes: dict[str, Any] = {
        k: getattr(args, k)
        for k in ("runs", "first_seed", "queries", "n_init")
        if getattr(args, k) is not None
    }
    if args.problems:
        changes["problems"] = tuple(parse_names(args.problems, ALL_PROBLEMS, "problem"))
    if args.methods:
        methods = (*METHODS, "chaining_audit")
        changes["methods"] = tuple(parse_names(args.methods, methods, "method"))
    config = replace(SMALL_CONFIG if args.small else FULL_CONFIG, **changes)
    if args.calibration_limits:
        if not args.records:
            parser.error("--calibration-limits reads --records (a packed file)")
        records = read_packed(args.records)
        rows = [
            r for s in CALIBRATION_STATISTICS for r in calibration_limits(records, s)
        ]
        print(format_calibration_limits(rows), end="")
        return 0
    seeds = range(config.first_seed, config.first_seed + config.runs)
    tasks = [(p, m, s) for s in seeds for p in config.problems for m in config.methods]
    run = functools.partial(run_one, config=config)
    summary = summarize(resume(args, "validity", tasks, config.key(), run))
    text = format_markdown(summary)
    write_summary(args.out, command_line(["validity", *argv]), text, summary)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
