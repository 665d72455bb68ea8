r"""Do the certificates hold when the hyperparameters are fitted, and can a user
stop on them? Ax ``Client`` loops on real molecule libraries and on GP samples.

``python -m benchmarks validity`` runs, for each problem, method and seed, an
ordinary Ax ``Client`` loop (``n_init`` random initial candidates attached,
then ``queries`` sequential queries, hyperparameters refitted by Ax at every
step) and records at every step:

* the certificate the strategy itself records (``robust``: the default for
  fitted models, :mod:`ax_chaining.certificate`'s LOO check with its
  refusals and Student-t tails with ``n - 1`` degrees of freedom for the
  candidates the data have reached and ``min(n - 1, 10)`` for the others),
  and, from the same step's model, the plain certificate (``plain``:
  ``calibration="none"``, Gaussian tails, i.e. the model taken as true: what
  the package recorded before the calibration existed), the LOO check with
  Gaussian tails (``loo_gaussian``: the first calibrated default), with
  Student-t tails of ``n - 1`` degrees of freedom everywhere (``loo_student``:
  the previous default) and of ``min(n - 1, 10)`` everywhere (``loo_capped``);
* the default certificate on a geometric schedule of checks (after 10, 20, 40
  and 80 observations);
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
as a candidate table with Ax's default GP). Methods: ``chaining``
(Chaining-UCB) and ``qlognei`` (Ax's default acquisition over the table).

Example::

    python -m benchmarks validity --small --out results/validity_small
    python -m benchmarks validity --out results/validity --jobs 2
    python -m benchmarks pack validity results/validity \
        benchmarks/results/validity.jsonl.gz
    python -m benchmarks validity --records benchmarks/results/validity.jsonl.gz \
        --summary-only --out docs/results/validity
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
from benchmarks._tables import num
from benchmarks.records import (
    command_line,
    load_records,
    read_packed,
    run_resumable,
    write_summary,
)

FORMAT_VERSION = 4
#: Checks after 10, 20, 40, 80 observations: the declared-schedule variant.
GEOMETRIC_START, GEOMETRIC_RATIO = 10, 2.0
PROBLEMS: tuple[str, ...] = ("esol", "freesolv", "lipo", "grid")
METHODS: tuple[str, ...] = ("chaining", "qlognei")
LABELS = {"chaining": "Chaining-UCB", "qlognei": "qLogNEI over the table"}
RULE_LABELS = {
    "robust": "robust (default: LOO check, Student-t tails n - 1 near the data, "
    "min(n - 1, 10) away)",
    "loo_capped": "LOO check, Student-t tails min(n - 1, 10) everywhere",
    "loo_student": "LOO check, Student-t tails n - 1 (previous default)",
    "loo_gaussian": "LOO check, Gaussian tails (first calibrated default)",
    "plain": "plain (model taken as true)",
    "geometric": "robust, geometric checks",
}
PROBLEM_LABELS = {
    "esol": "ESOL",
    "freesolv": "FreeSolv",
    "lipo": "Lipophilicity",
    "grid": "30 x 30 grid, GP samples",
}


@dataclass(frozen=True)
class ValidityConfig:
    """Size of a run.

    Attributes:
        problems, methods: Which (see :data:`PROBLEMS`, :data:`METHODS`).
        runs: Seeds ``0 .. runs - 1``.
        queries: Sequential queries after the initial points.
        n_init: Initial points, uniform without replacement.
        delta: Confidence parameter of every certificate.
        side: Grid side (``grid``).
    """

    problems: tuple[str, ...] = PROBLEMS
    methods: tuple[str, ...] = METHODS
    runs: int = 10
    queries: int = 100
    n_init: int = 10
    delta: float = 0.05
    side: int = 30

    def __post_init__(self) -> None:
        for name in ("runs", "queries", "n_init", "side"):
            check_int(name, getattr(self, name), 1)

    def key(self) -> dict[str, Any]:
        """What a stored record must match to be reused."""
        d = asdict(self)
        for name in ("problems", "methods", "runs"):
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
    from ax_chaining.test_functions.molecules import library

    data, gram = library(name)
    n = len(data)
    rows = [{"item": i} for i in range(n)]
    spec = axc.precomputed_kernel_surrogate_spec(gram)
    kwargs = {"surrogate_spec": spec, "exclude_evaluated": True}
    del torch
    return [axc.candidate_index_parameter(n)], kwargs, rows, data.y.numpy(), 0.0


def _strategy(method: str, kwargs: dict[str, Any], config: ValidityConfig):
    from ax_chaining import ax as axc

    if method == "chaining":
        return axc.chaining_generation_strategy(
            init_trials=config.n_init, delta=config.delta, **kwargs
        )
    return axc.qlognei_generation_strategy(init_trials=config.n_init, **kwargs)


def _model_view(gs: Any, rows: list[dict[str, Any]], experiment: Any):
    """The step's fitted model, the candidates in its space, and the scale."""
    import torch
    from ax.core import ObservationFeatures

    from ax_chaining.ax.metadata import objective_scale

    adapter = gs.adapter
    model = adapter.generator.surrogate.model
    X = adapter.transform_observation_features(
        [ObservationFeatures(parameters=dict(r)) for r in rows]
    )
    weights = torch.ones(1, dtype=X.dtype)
    return model, X, objective_scale(adapter, experiment, weights)


#: The variants recorded beside the strategy's own certificate (``robust``),
#: from the same step's model (the module docstring).
RECORDED = ("loo_gaussian", "loo_student", "loo_capped", "geometric")


def _variants(n: int) -> dict[str, dict[str, Any]]:
    """``certify_model`` keywords of each variant at a step with ``n``
    observations (the geometric schedule's only at its checks)."""
    from ax_chaining.certificate import AUTO_DOF_CAP, StudentTail

    out: dict[str, dict[str, Any]] = {
        "plain": {"calibration": "none"},
        "loo_gaussian": {"tail": "gaussian"},
        "loo_student": {"tail": "student"},
        "loo_capped": {"tail": StudentTail(max(1, min(n - 1, AUTO_DOF_CAP)))},
    }
    if _geometric().index(n) is not None:
        out["geometric"] = {"schedule": _geometric()}
    return out


def _record(cert: Any, scale: float | None, f: np.ndarray, f_max: float) -> dict:
    """A variant's ``bound`` (objective units), ``valid`` and the true
    ``regret`` of its point; None each where it was not computed."""
    if cert is None:
        return {"bound": None, "valid": None, "regret": None}
    return {
        "bound": None if scale is None else cert.bound * scale,
        "valid": cert.valid,
        "regret": f_max - float(f[cert.index]),
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
                    **kwargs,
                )
                for name, kwargs in _variants(len(items)).items()
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
                **{
                    f"{name}_{key}": value
                    for name in ("plain", *RECORDED)
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
        for s in range(config.runs)
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

RULES = ("robust", "loo_capped", "loo_student", "loo_gaussian", "plain", "geometric")


def _first(steps: list[dict], ok) -> tuple[int | None, dict | None]:
    for k, s in enumerate(steps, start=1):
        if ok(s):
            return k, s
    return None, None


def summarize(records: Sequence[dict[str, Any]], delta: float = 0.05) -> dict[str, Any]:
    """Validity, usefulness and stopping, per problem and method."""
    out: dict[str, Any] = {"rows": [], "stopping": []}
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        groups.setdefault((r["problem"], r["method"]), []).append(r)
    for (problem, method), runs in sorted(groups.items()):
        for rule in RULES:
            any_viol, step_viol, steps_n, refused = 0, 0, 0, 0
            first10, first5, regret10, bound_at = [], [], [], {25: [], 50: [], 100: []}
            for r in runs:
                rng = r["f_range"]
                viol_run = False
                # The certificate in force at query k: the last check at or
                # before it (a geometric schedule has none at k itself).
                current_bound = None
                for k, s in enumerate(r["steps"], start=1):
                    bound = s[f"{rule}_bound"]
                    if bound is not None:
                        steps_n += 1
                        if rule != "plain" and not s[f"{rule}_valid"]:
                            refused += 1
                            current_bound = math.inf
                        else:
                            current_bound = bound
                            if s[f"{rule}_regret"] > bound + 1e-9:
                                step_viol += 1
                                viol_run = True
                    if k in bound_at and current_bound is not None:
                        bound_at[k].append(current_bound / rng)
                any_viol += viol_run

                def current(s, frac, rng=rng, rule=rule):
                    return (
                        s[f"{rule}_bound"] is not None
                        and (rule == "plain" or s[f"{rule}_valid"])
                        and s[f"{rule}_bound"] <= frac * rng
                    )

                k10, s10 = _first(r["steps"], lambda s, c=current: c(s, 0.10))
                k5, _ = _first(r["steps"], lambda s, c=current: c(s, 0.05))
                first10.append(k10)
                first5.append(k5)
                if s10 is not None:
                    regret10.append(s10[f"{rule}_regret"] / rng)
            out["rows"].append(
                {
                    "problem": problem,
                    "method": method,
                    "rule": rule,
                    "runs": len(runs),
                    "runs_violated": any_viol,
                    "step_violation_rate": step_viol / max(1, steps_n - refused),
                    "refused_rate": refused / max(1, steps_n),
                    "first_10pct": first10,
                    "first_5pct": first5,
                    "regret_at_10pct": regret10,
                    "median_bound_over_range": {
                        k: float(np.median(v)) if v else None
                        for k, v in bound_at.items()
                    },
                }
            )
        out["stopping"] += _stopping(problem, method, runs)
    return out


def _stopping(problem: str, method: str, runs: list[dict]) -> list[dict]:
    """Queries and true regret at stop for each rule, tolerance 10% of range.

    A rule that never fires stops at the budget (``fired`` counts the runs in
    which it fired before)."""
    rows = []
    for name, stops in (
        (
            "certificate (current, default)",
            lambda s, tol: (
                s["robust_bound"] is not None
                and s["robust_valid"]
                and s["robust_bound"] <= tol
            ),
        ),
        (
            "certificate (geometric checks)",
            lambda s, tol: (
                s["geometric_bound"] is not None
                and s["geometric_valid"]
                and s["geometric_bound"] <= tol
            ),
        ),
        ("certificate (running minimum, plain)", None),
        (
            "UCB - LCB",
            lambda s, tol: s["ucb_lcb_bound"] is not None and s["ucb_lcb_bound"] <= tol,
        ),
        (
            "Ax ImprovementGlobalStoppingStrategy",
            lambda s, tol: s["ax_improvement_stop"],
        ),
        ("fixed budget", lambda s, tol: False),
    ):
        queries, regrets, above, fired = [], [], 0, 0
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
                k_stop = next(
                    (k for k, s in enumerate(steps, 1) if stops(s, tol)), None
                )
            fired += k_stop is not None
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
                "runs": len(runs),
            }
        )
    return rows


def _fmt_firsts(values: list[int | None], total: int) -> str:
    reached = sorted(v for v in values if v is not None)
    if not reached:
        return f"never (0/{total})"
    return f"{int(np.median(reached))} ({len(reached)}/{total})"


def format_markdown(summary: dict[str, Any]) -> str:
    lines = [
        "| problem | method | certificate | runs violated | step violations | "
        "refused | B/range @25 | @50 | @100 | first <= 10% (runs) | first <= 5% (runs) "
        "| regret/range at 10% |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in summary["rows"]:
        med = r["median_bound_over_range"]
        regret = (
            num(float(np.median(r["regret_at_10pct"])), 3)
            if r["regret_at_10pct"]
            else "-"
        )
        lines.append(
            f"| {PROBLEM_LABELS[r['problem']]} | {LABELS[r['method']]} | "
            f"{RULE_LABELS[r['rule']]} | {r['runs_violated']}/{r['runs']} | "
            f"{num(r['step_violation_rate'], 3)} | "
            f"{num(r['refused_rate'], 3)} | {num(med[25], 3)} | {num(med[50], 3)} | "
            f"{num(med[100], 3)} | {_fmt_firsts(r['first_10pct'], r['runs'])} | "
            f"{_fmt_firsts(r['first_5pct'], r['runs'])} | {regret} |"
        )
    lines += [
        "",
        "| problem | method | stopping rule | fired (runs) | median queries at stop | "
        "median regret/range at stop | regret above tolerance at stop |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in summary["stopping"]:
        lines.append(
            f"| {PROBLEM_LABELS[r['problem']]} | {LABELS[r['method']]} | {r['rule']} | "
            f"{r['fired']}/{r['runs']} | {num(r['median_queries'], 3)} | "
            f"{num(r['median_regret_over_range'], 3)} | "
            f"{r['stopped_above_tolerance']}/{r['runs']} |"
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
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    config = SMALL_CONFIG if args.small else FULL_CONFIG
    changes: dict[str, Any] = {}
    if args.problems:
        changes["problems"] = tuple(args.problems.split(","))
    if args.methods:
        changes["methods"] = tuple(args.methods.split(","))
    if args.runs:
        changes["runs"] = args.runs
    if changes:
        config = ValidityConfig(**{**asdict(config), **changes})
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
