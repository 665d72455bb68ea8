r"""When to stop: every stopping rule evaluated at every step of the same Ax
loops, and how often each rule's claim was true when it said stop.

A run is an ordinary Ax ``Client`` loop over a table's rows (the molecule
benchmark's loop, :func:`benchmarks.molecules_bench.make_strategy`) on the
default model. After every query the GP is refitted on all the data (Ax's
modular generator, the strategy's surrogate spec) and each rule states, from
that fit, whether to stop and which evaluated row to keep:

* ``certificate``: this package's regret bound of the best observed row
  (:func:`~ax_chaining.certificate.certify_model`, default options); it
  claims the row is within the bound of the best, so it stops at a tolerance
  ``eps`` when the bound is at most ``eps``.
* ``rank``: the same certificate's rank bound; stops at ``R`` when it is at
  most ``R`` and claims the row is among the ``R`` best.
* ``ucb-lcb``: Makarova et al. (2022), :func:`~ax_chaining.certificate.peers.
  ucb_lcb_rule` at its defaults; claims regret at most its bound.
* ``prb``: Wilson (2024), :func:`~ax_chaining.certificate.peers.
  probabilistic_regret_bound` at each ``eps``; claims regret at most ``eps``.
* ``prb-checked``: PRB's statement trusted only once the model passed the
  certificate's leave-one-out check at that step (the model-exact statement,
  checked by the loop's own data before it is trusted).
* ``prb-t``: PRB under the certificate's calibration: the covariance widened
  by the leave-one-out check's scale, Student-t draws with the certificate's
  default tails for unexplored candidates (``min(n - 1, 10)`` degrees of
  freedom), trusted only where the check passed.
* ``prb-forecast``: PRB under the package's ``"forecast"`` calibration
  (:class:`~ax_chaining.certificate.residuals.ResidualCalibration` of the
  loop's own forecast residuals: each observation against the previous fit's
  prediction, noise included): the covariance widened by its scale, Student-t
  draws with its degrees of freedom, from the step with enough residuals on.
* ``prb-widened``: ``prb-forecast`` with the scale held at 1 or more: the
  loop's residuals may widen the model's posterior, never narrow it (the
  model-exact statement where the forecasts agree with the model).
* ``gap``: Ishibashi et al. (2023), :func:`~ax_chaining.certificate.peers.
  regret_gap_rule` at its defaults, from the previous and the current fit,
  from their 10th observation on (their experiments' start); it claims no
  regret, so it is scored as regret at most ``eps``.
* ``ax-improvement``: Ax's ``ImprovementGlobalStoppingStrategy`` as Ax ships
  it (``min_trials`` the initial rows plus 5); keeps the best observed row.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import math
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch

from benchmarks import molecules_bench as mol
from benchmarks._tables import md_row
from benchmarks.records import add_record_options, command_line, resume, write_summary

#: Regret tolerances as fractions of the table's range, and top-R fractions.
EPS_FRACTIONS = (0.01, 0.05, 0.1)
TOP_FRACTIONS = (0.01, 0.05)
#: The cost table's columns: the step, the rules' shared refit, each rule.
COST_PARTS = (
    "step",
    "fit",
    "certificate",
    "ucb-lcb",
    "prb",
    "prb-t",
    "prb-forecast",
    "prb-widened",
    "gap",
    "ax-improvement",
)
#: The field's rules: the literature's, Ax's and (``bofire-`` prefixed) BoFire's.
PEER_RULES = ("ucb-lcb", "prb", "gap", "ax-improvement")
#: Rules that records made before they were measured lack.
NEWER_RULES = ("gap", "prb-t", "prb-forecast", "prb-widened")
RULES = (
    "certificate",
    "rank",
    "ucb-lcb",
    "prb",
    "prb-checked",
    "prb-t",
    "prb-forecast",
    "prb-widened",
    "gap",
    "ax-improvement",
)


@dataclass(frozen=True)
class StoppingConfig:
    """Size of a stopping benchmark: ``runs`` per (dataset, acquisition,
    ``n_init``), ``queries`` each."""

    datasets: tuple[str, ...] = ("freesolv", "esol", "lipo", "buchwald-hartwig")
    acquisitions: tuple[str, ...] = ("chaining", "qlognei")
    n_inits: tuple[int, ...] = (5, 10)
    runs: int = 20
    queries: int = 40
    delta: float = 0.05
    eps_fractions: tuple[float, ...] = EPS_FRACTIONS
    top_fractions: tuple[float, ...] = TOP_FRACTIONS
    extra: dict[str, Any] = field(default_factory=dict)

    def key(self) -> dict[str, Any]:
        return {"queries": self.queries, "delta": self.delta, **self.extra}


SMALL_CONFIG = StoppingConfig(
    datasets=("freesolv",), acquisitions=("qlognei",), n_inits=(5,), runs=1, queries=3
)


def table(dataset: str, seed: int) -> tuple[Any, np.ndarray]:
    """The surrogate spec and outcomes of run ``seed`` on ``dataset``: on
    ``"grid"`` a GP sample on a 30 x 30 grid (a new sample each seed) under a
    fitted RBF feature-table model, otherwise :func:`library_table`."""
    if dataset == "grid":
        from ax_chaining.ax import feature_table_surrogate_spec
        from ax_chaining.test_functions.problems import grid_problem

        X, f = grid_problem(30, seed)
        return feature_table_surrogate_spec(X / 6.0, kernel="rbf"), f.numpy()
    return library_table(dataset)


@functools.cache
def library_table(dataset: str) -> tuple[Any, np.ndarray]:
    """The default model's surrogate spec of a molecule library or a reaction
    table (features cached for the process), and its outcomes."""
    if dataset in mol.DATASET_LABELS:
        from ax_chaining.molecules import molecule_surrogate_spec
        from benchmarks.testbeds import default_cache_dir

        data = mol.load_dataset(dataset)
        path = default_cache_dir() / "features" / f"{dataset}-default"
        spec = molecule_surrogate_spec(data.smiles, duplicates="map", path=path)
        return spec, data.y.numpy()
    from ax_chaining.molecules import reaction_surrogate_spec
    from ax_chaining.test_functions.reactions import load_reactions

    data = load_reactions(dataset)
    spec = reaction_surrogate_spec(data.table, data.components, data.numeric)
    return spec, data.y.numpy()


def fitted_posterior(strategy: Any, n: int) -> tuple[Any, Any, float]:
    """Ax's GP refitted on all the data of ``strategy``'s experiment, as
    :func:`~ax_chaining.ax.certify` fits it; its posterior over the ``n`` items
    in item order (mean and covariance, in the objective's units up to a
    shift) and the factor from model to objective units."""
    from ax_chaining.ax.certificates import fit_candidates

    fitted = fit_candidates(strategy)
    order = torch.tensor([int(r["item"]) for r in fitted.rows]).argsort()
    X = fitted.X[order]
    scale = fitted.scale or 1.0
    with torch.no_grad():
        post = fitted.model.posterior(X)
        mean = post.mean.squeeze(-1) * scale
        cov = post.distribution.covariance_matrix * scale**2
    return (fitted.model, X), (mean, cov), scale


def step_statements(
    strategy: Any,
    y: np.ndarray,
    tested: list[int],
    config: StoppingConfig,
    min_trials: int,
    seed: int,
    previous: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every rule's statement after the queries so far: values and kept rows
    (the stop decisions follow from them at each tolerance); and the fit's
    posterior, which the next step's gap rule compares with (``previous``)."""
    from ax.global_stopping.strategies.improvement import (
        ImprovementGlobalStoppingStrategy,
    )

    from ax_chaining.ax.certificates import experiment_of
    from ax_chaining.certificate import certify_model, loo_check
    from ax_chaining.certificate.peers import (
        posterior_scale_tril,
        probabilistic_regret_bound,
        regret_gap_rule,
        ucb_lcb_rule,
    )
    from ax_chaining.certificate.residuals import ResidualCalibration
    from ax_chaining.certificate.tails import AUTO_DOF_CAP

    seconds: dict[str, float] = {}
    clock = time.perf_counter
    start = clock()
    (model, X), (mean, cov), scale = fitted_posterior(strategy, len(y))
    seconds["fit"], start = clock() - start, clock()
    evaluated = sorted(set(tested))
    best = max(evaluated, key=lambda i: y[i])  # the best observed row
    cert = certify_model(model, X, [best], delta=config.delta)
    seconds["certificate"], start = clock() - start, clock()
    std = cov.diagonal().clamp_min(0).sqrt()
    t = len(tested)
    span = float(y.max() - y.min())
    ucb = ucb_lcb_rule(mean, std, evaluated, t, threshold=0.0, delta=config.delta)
    seconds["ucb-lcb"], start = clock() - start, clock()
    gen = torch.Generator().manual_seed(seed * 100_003 + t)

    def prb_at_each_eps(scale: float = 1.0, dof: float = math.inf) -> dict:
        # One generator for every PRB of the step, in a fixed order; one
        # Cholesky factor for the tolerances of one scale.
        out, scaled = {}, cov * scale**2
        root = posterior_scale_tril(scaled)
        for f in config.eps_fractions:
            s = probabilistic_regret_bound(
                mean,
                scaled,
                evaluated,
                f * span,
                generator=gen,
                dof=dof,
                scale_tril=root,
            )
            out[str(f)] = {"stop": s.stop, "value": s.value, "index": s.index}
        return out

    prb = prb_at_each_eps()
    seconds["prb"], start = clock() - start, clock()
    check = loo_check(model)
    dof = min(max(1, len(tested) - 1), AUTO_DOF_CAP)
    prb_t = {"valid": bool(check.valid), **prb_at_each_eps(check.scale, dof)}
    seconds["prb-t"], start = clock() - start, clock()
    # Ax's StandardizeY centres the model's outcome on the observations' mean:
    # the gap rule and the forecasts compare two fits, so they need the
    # objective's own units.
    current = {"mean": mean + float(np.mean(y[tested])), "std": std}
    current["evaluated"] = evaluated
    forecast = list(previous["forecast"]) if previous else []
    prb_f: dict[str, Any] = {}
    prb_w: dict[str, Any] = {}
    if previous is not None:
        new = tested[-1]
        with torch.no_grad():
            at = X[new : new + 1]
            noisy = model.posterior(at, observation_noise=True).variance
            noise = float((noisy - model.posterior(at).variance).squeeze()) * scale**2
        # The previous fit's forecast of the row just observed, noise included.
        sd = math.sqrt(float(previous["std"][new]) ** 2 + max(noise, 0.0))
        if sd > 0:
            forecast.append((float(y[new]) - float(previous["mean"][new])) / sd)
    current["forecast"] = forecast
    calibration = ResidualCalibration(tuple(forecast), source="forecast")
    if calibration.usable():
        fit = calibration.fit()
        prb_f = {"scale": fit.scale, "dof": fit.dof}
        prb_f |= prb_at_each_eps(fit.scale, fit.dof)
    seconds["prb-forecast"], start = clock() - start, clock()
    if prb_f:  # drawn after the other PRBs, so that theirs stay as recorded
        widened = max(1.0, prb_f["scale"])
        prb_w = {"scale": widened, "dof": prb_f["dof"]}
        prb_w |= prb_at_each_eps(widened, prb_f["dof"])
        seconds["prb-widened"], start = clock() - start, clock()
    gap = None
    if previous is not None:
        statement = regret_gap_rule(
            current["mean"],
            cov,
            previous["mean"],
            previous["std"],
            previous["evaluated"],
            evaluated,
            new,
            float(y[new]),
            noise,
            t,
        )
        gap = {
            "stop": statement.stop,
            "value": statement.value,
            "threshold": statement.threshold,
            "index": statement.index,
        }
    seconds["gap"], start = clock() - start, clock()
    ax_rule = ImprovementGlobalStoppingStrategy(min_trials=min_trials)
    ax_stop, _ = ax_rule.should_stop_optimization(experiment_of(strategy)[0])
    seconds["ax-improvement"] = clock() - start
    return {
        "t": t,
        "best_observed": best,
        "certificate": {
            "bound": float(cert.bound) * scale,
            "rank_bound": int(cert.rank_bound),
            "valid": bool(cert.valid),
        },
        "ucb-lcb": {"bound": ucb.value, "index": ucb.index},
        "prb": prb,
        "prb-t": prb_t,
        "prb-forecast": {"valid": bool(prb_f), **prb_f},
        "prb-widened": {"valid": bool(prb_w), **prb_w},
        "gap": gap,
        "ax-improvement": bool(ax_stop),
        "seconds": seconds,
    }, current


#: The certificate's widenings taken away one at a time (:func:`final_widths`).
WIDTHS = ("default", "Gaussian tails", "model as true")


def final_widths(record: dict[str, Any]) -> dict[str, Any]:
    """The default statement about a run's best observed row after its last
    query, refitted on its observations, and the same statement with Gaussian
    tails, with the model taken as true (whose default tails are Gaussian),
    and with both: bound over the range and rank bound over the rows of each
    (:data:`WIDTHS`)."""
    import logging

    from ax.api.client import Client
    from ax.utils.common.logger import set_stderr_log_level

    from ax_chaining.ax import candidate_index_parameter, qlognei_generation_strategy
    from ax_chaining.ax.certificates import fit_candidates
    from ax_chaining.certificate import CertificateOptions, GaussianTail, certify_model
    from ax_chaining.certificate.calibration import loo_check

    set_stderr_log_level(logging.WARNING)
    spec, y = table(record["dataset"], record["seed"])
    client = Client(random_seed=record["seed"])
    client.configure_experiment(parameters=[candidate_index_parameter(len(y))])
    client.configure_optimization(objective="y")
    # A strategy only to carry the run's surrogate spec into the refit.
    client.set_generation_strategy(qlognei_generation_strategy(0, surrogate_spec=spec))
    for item in record["items"]:
        trial = client.attach_trial({"item": int(item)})
        client.complete_trial(trial, raw_data={"y": float(y[item])})
    fitted = fit_candidates(client)
    X = fitted.X[torch.tensor([int(r["item"]) for r in fitted.rows]).argsort()]
    best = max(set(record["items"]), key=lambda i: y[i])
    options = {
        "default": CertificateOptions(),
        "Gaussian tails": CertificateOptions(tail=GaussianTail()),
        # Calibration "none" takes Gaussian tails already.
        "model as true": CertificateOptions(calibration="none"),
    }
    out = {k: record[k] for k in ("dataset", "acquisition", "n_init", "seed")}
    out["loo_scale"] = float(loo_check(fitted.model).scale)
    for name in WIDTHS:
        cert = certify_model(fitted.model, X, [best], options=options[name])
        bound = float(cert.bound) * (fitted.scale or 1.0) / record["span"]
        out[name] = {"bound": bound, "rank": cert.rank_bound / len(y)}
    return out


def format_widths(lines: list[dict[str, Any]]) -> str:
    """Per dataset and acquisition, the median of each statement of
    :func:`final_widths` (bound / range, rank / rows) and of the check's scale."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for line in lines:
        groups.setdefault((line["dataset"], line["acquisition"]), []).append(line)
    head = [f"{w}: bound, rank" for w in WIDTHS]
    out = [
        md_row("dataset", "acquisition", "runs", "leave-one-out scale", *head),
        "|---|---|---:|---:|" + "---:|" * len(WIDTHS),
    ]
    for (dataset, acq), group in groups.items():
        cells = [
            f"{np.median([g[w]['bound'] for g in group]):.3f}, "
            f"{np.median([g[w]['rank'] for g in group]):.3f}"
            for w in WIDTHS
        ]
        scale = f"{np.median([g['loo_scale'] for g in group]):.2f}"
        out.append(md_row(dataset, acq, len(group), scale, *cells))
    return "\n".join(out) + "\n"


def run_one(
    dataset: str, acquisition: str, n_init: int, seed: int, config: StoppingConfig
) -> dict[str, Any]:
    """One loop: ``n_init`` initial rows (the molecule benchmark's draw), then
    ``config.queries`` queries of ``acquisition``, every rule's statements
    after each query; the record."""
    spec, y = table(dataset, seed)
    strategy = mol.make_strategy(acquisition, spec, n_init, config)
    steps: list[dict[str, Any]] = []
    previous: list[Any] = [None]

    def after_step(tested: list[int]) -> None:
        statements, previous[0] = step_statements(
            strategy, y, tested, config, n_init + 5, seed, previous[0]
        )
        steps.append(statements)

    initial = mol.initial_items(len(y), n_init, seed)
    name = f"{dataset}_{acquisition}_{n_init}_{seed}"
    tested, step_seconds, _ = mol.run_client(
        y, initial, strategy, config.queries, seed, name, after_step
    )
    return {
        "dataset": dataset,
        "acquisition": acquisition,
        "n_init": n_init,
        "seed": seed,
        "config": config.key(),
        "num_items": len(y),
        "span": float(y.max() - y.min()),
        "items": tested,
        # Each tested row's regret and rank (1: the best; ties share the
        # better rank), what the rules' claims are checked against.
        "truth": {str(i): truth(y, i) for i in sorted(set(tested))},
        "steps": steps,
        # Each query's get_next_trials, beside the rules' seconds in steps.
        "step_seconds": step_seconds,
    }


def truth(y: np.ndarray, index: int) -> tuple[float, int]:
    """A row's regret and its rank (1: the best; ties share the better rank)."""
    return float(y.max() - y[index]), int((y > y[index]).sum()) + 1


def decision(step: dict[str, Any], rule: str, level: float) -> tuple[bool, int]:
    """Whether ``rule`` says stop at ``step`` for the tolerance ``level`` (a
    regret in the objective's units, or ``R`` for ``rank``), and the row it
    keeps."""
    kept = step["best_observed"]
    cert = step["certificate"]
    # Only a checked certificate stops; an unchecked one states the model's
    # own numbers (fewer observations than the check needs).
    if rule == "certificate":
        return cert["valid"] and cert["bound"] <= level, kept
    if rule == "rank":
        return cert["valid"] and cert["rank_bound"] <= level, kept
    if rule == "ucb-lcb":
        return step["ucb-lcb"]["bound"] <= level, step["ucb-lcb"]["index"]
    if rule == "gap":  # from the 10th observation on, as the authors start
        gap = step.get("gap")
        if gap is None or step["t"] <= 10:
            return False, kept
        return gap["stop"], gap["index"]
    if rule == "ax-improvement":
        return step["ax-improvement"], kept
    raise ValueError(f"unknown rule {rule!r}")


def first_stops(record: dict[str, Any], config: StoppingConfig) -> list[dict[str, Any]]:
    """For each rule and tolerance: the first query at which the rule says
    stop (None: never) and whether its claim then held (the kept row within
    ``eps`` of the best, or among the ``R`` best)."""
    span, n = record["span"], record["num_items"]
    regret = {int(i): r for i, (r, _) in record["truth"].items()}
    rank = {int(i): k for i, (_, k) in record["truth"].items()}
    out = []
    for rule in RULES:
        if rule in NEWER_RULES and rule not in record["steps"][-1]:
            continue  # a record made before the rule was measured
        if rule == "rank":
            levels = [(f"top {f:g}", math.ceil(f * n)) for f in config.top_fractions]
        else:
            levels = [(f"eps {f:g}", f * span) for f in config.eps_fractions]
        for name, level in levels:
            stop, query, true = None, None, None
            for step in record["steps"]:
                if rule.startswith("prb"):
                    key = "prb" if rule == "prb-checked" else rule
                    s = step[key].get(str(float(name.split()[1])))
                    stop, kept = (s["stop"], s["index"]) if s else (False, None)
                    # Checked: only where the step's model check passed.
                    valid = step[key].get("valid", step["certificate"]["valid"])
                    stop = stop and (rule == "prb" or valid)
                else:
                    stop, kept = decision(step, rule, level)
                if stop:
                    query = step["t"] - record["n_init"]
                    claim = (
                        rank[kept] <= level if rule == "rank" else regret[kept] <= level
                    )
                    true = bool(claim)
                    break
            out.append({"rule": rule, "tolerance": name, "query": query, "true": true})
    return out


def summarize(
    records: list[dict[str, Any]], config: StoppingConfig, pool: bool = False
) -> list[dict[str, Any]]:
    """Per dataset, acquisition, initial rows (with ``pool``: per dataset, as
    acquisition and initial rows ``"all"``), rule and tolerance: runs, the
    runs that stopped, the median query at the stop, and the stops whose
    claim held."""
    return aggregate(
        (_group(rec, pool), stop)
        for rec in records
        for stop in first_stops(rec, config)
    )


def bofire_summary(path: str, pool: bool = False) -> list[dict[str, Any]]:
    """:func:`summarize`'s rows for BoFire's criteria, from the gzipped JSON
    lines of ``benchmarks/bofire_stops.py`` (run in BoFire's environment)."""
    with gzip.open(path, "rt") as fh:
        lines = [json.loads(line) for line in fh if line.strip()]
    return aggregate(
        (_group(line, pool), {**line, "tolerance": f"eps {line['eps']:g}"})
        for line in lines
    )


def _group(record: dict[str, Any], pool: bool) -> tuple[Any, ...]:
    if pool:
        return (record["dataset"], "all", "all")
    return (record["dataset"], record["acquisition"], record["n_init"])


def aggregate(stops: Iterable[tuple[tuple, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per group key, rule and tolerance of ``(key, stop)`` pairs: the runs,
    the stops, their median query, and the stops whose claim held."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for key, stop in stops:
        groups.setdefault((*key, stop["rule"], stop["tolerance"]), []).append(stop)
    rows = []
    for (dataset, acq, n_init, rule, tol), group in groups.items():
        stopped = [s for s in group if s["query"] is not None]
        rows.append(
            {
                "dataset": dataset,
                "acquisition": acq,
                "n_init": n_init,
                "rule": rule,
                "tolerance": tol,
                "runs": len(group),
                "stopped": len(stopped),
                "median_query": (
                    float(np.median([s["query"] for s in stopped])) if stopped else None
                ),
                "true": sum(bool(s["true"]) for s in stopped),
            }
        )
    return rows


def final_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per dataset, acquisition and initial rows, the default statement after
    the last query: the runs that hold the best row, the median bound as a
    fraction of the range and rank bound as a fraction of the rows (a refused
    or unchecked one counts as the whole range and all rows), how many of the
    runs holding the best row read "usable" (checked, bound at most 20% of the
    range, rank within the best 10%), and how many statements were false."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for rec in records:
        key = (rec["dataset"], rec["acquisition"], rec["n_init"])
        groups.setdefault(key, []).append(rec)
    rows = []
    for (dataset, acq, n_init), recs in groups.items():
        bounds, ranks, usable, holding, false = [], [], 0, 0, 0
        for rec in recs:
            step = rec["steps"][-1]
            cert, kept = step["certificate"], str(step["best_observed"])
            regret, rank = rec["truth"][kept]
            valid = bool(cert["valid"])
            bound = cert["bound"] / rec["span"] if valid else 1.0
            share = cert["rank_bound"] / rec["num_items"] if valid else 1.0
            bounds.append(bound)
            ranks.append(share)
            false += valid and (regret > cert["bound"] or rank > cert["rank_bound"])
            if regret == 0:
                holding += 1
                usable += bound <= 0.2 and share <= 0.1
        rows.append(
            {
                "dataset": dataset,
                "acquisition": acq,
                "n_init": n_init,
                "runs": len(recs),
                "holding_best": holding,
                "usable": usable,
                "median_bound_fraction": float(np.median(bounds)),
                "median_rank_fraction": float(np.median(ranks)),
                "false": int(false),
            }
        )
    return rows


def format_final(rows: list[dict[str, Any]]) -> str:
    """The last-query table."""
    lines = [
        "**After the last query**: the default statement about the best observed "
        "row (bound / range, rank bound / rows; refused or unchecked: 1)",
        "",
        "| dataset | acquisition | initial rows | runs | hold the best row | of "
        "those, usable | median bound / range | median rank / rows | false |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        fractions = (
            f"{r['median_bound_fraction']:.2f}",
            f"{r['median_rank_fraction']:.3f}",
        )
        keys = ("dataset", "acquisition", "n_init", "runs", "holding_best", "usable")
        lines.append(md_row(*(r[k] for k in keys), *fractions, r["false"]))
    return "\n".join(lines) + "\n"


def unchecked_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per dataset and acquisition, the steps whose certificate was unchecked
    (fewer observations than the check needs: finite, not valid), and how
    many of their bounds and rank bounds were false."""
    groups: dict[tuple[str, str], list[int]] = {}
    for rec in records:
        counts = groups.setdefault((rec["dataset"], rec["acquisition"]), [0, 0, 0, 0])
        runs = False
        for step in rec["steps"]:
            cert = step["certificate"]
            if cert["valid"] or not math.isfinite(cert["bound"]):
                continue
            regret, rank = rec["truth"][str(step["best_observed"])]
            counts[1] += 1
            counts[2] += regret > cert["bound"]
            counts[3] += rank > cert["rank_bound"]
            runs = True
        counts[0] += runs
    return [
        {
            "dataset": d,
            "acquisition": a,
            "runs": c[0],
            "steps": c[1],
            "bound_false": c[2],
            "rank_false": c[3],
        }
        for (d, a), c in groups.items()
        if c[1]
    ]


def format_unchecked(rows: list[dict[str, Any]]) -> str:
    """The unchecked statements' table, or nothing where no record holds one."""
    if not rows:
        return ""
    lines = [
        "**Unchecked statements** (below the check's 20 observations; no rule "
        "stops on them): steps, and how many were false",
        "",
        "| dataset | acquisition | runs | steps | bound false | rank false |",
        "|---|---|---:|---:|---:|---:|",
    ]
    keys = ("dataset", "acquisition", "runs", "steps", "bound_false", "rank_false")
    lines += [md_row(*(r[k] for k in keys)) for r in rows]
    return "\n".join(lines) + "\n"


def cost_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per dataset and acquisition, the median seconds per query of the step
    (``get_next_trials``), of the rules' refit, and of each rule, over the
    records that timed them."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in records:
        if "step_seconds" in rec:
            groups.setdefault((rec["dataset"], rec["acquisition"]), []).append(rec)
    rows = []
    for (dataset, acq), recs in groups.items():
        row: dict[str, Any] = {"dataset": dataset, "acquisition": acq}
        row["runs"] = len(recs)
        row["step"] = float(np.median([s for r in recs for s in r["step_seconds"]]))
        for part in COST_PARTS[1:]:
            steps = (s["seconds"] for r in recs for s in r["steps"])
            values = [s[part] for s in steps if part in s]  # gap: newer records
            row[part] = float(np.median(values)) if values else None
        rows.append(row)
    return rows


def format_costs(rows: list[dict[str, Any]]) -> str:
    """The cost table, or nothing where no record was timed."""
    if not rows:
        return ""
    parts = COST_PARTS
    lines = [
        "**Seconds per query** (median; the step is `get_next_trials`, the fit "
        "the rules' shared refit; prb: all its tolerances)",
        "",
        md_row("dataset", "acquisition", "runs", *parts),
        "|---|---|---:|" + "---:|" * len(parts),
    ]
    for r in rows:
        cells = ("-" if r[p] is None else f"{r[p]:.3g}" for p in parts)
        lines.append(md_row(r["dataset"], r["acquisition"], r["runs"], *cells))
    return "\n".join(lines) + "\n"


def run_stops(
    records: list[dict[str, Any]], config: StoppingConfig, bofire: str | None = None
) -> dict[tuple, dict[tuple[str, str], int | None]]:
    """Per run (dataset, acquisition, initial rows, seed): each rule's query
    at its first stop per tolerance (None: never), BoFire's (``bofire``, the
    file of ``benchmarks/bofire_stops.py``) included."""
    out: dict[tuple, dict[tuple[str, str], int | None]] = {}
    for rec in records:
        run = (rec["dataset"], rec["acquisition"], rec["n_init"], rec["seed"])
        out[run] = {
            (s["rule"], s["tolerance"]): s["query"] for s in first_stops(rec, config)
        }
    if bofire:
        with gzip.open(bofire, "rt") as fh:
            for line in map(json.loads, filter(str.strip, fh)):
                run = (
                    line["dataset"],
                    line["acquisition"],
                    line["n_init"],
                    line["seed"],
                )
                if run in out:  # the runs of ``records`` only
                    out[run][line["rule"], f"eps {line['eps']:g}"] = line["query"]
    return out


def verdict_rows(
    pooled: list[dict[str, Any]],
    stops: dict[tuple, dict[tuple[str, str], int | None]],
    delta: float = 0.05,
) -> list[dict[str, Any]]:
    """Per dataset and regret tolerance, pooled over acquisitions and starts:
    the package's stop (the checked ``certificate``) against each of the
    field's rules (:data:`PEER_RULES`, BoFire's) that was correct there, i.e.
    whose claims held in at least ``1 - delta`` of its stops. In each run where
    such a peer stopped, the package stopped no later, or later (never
    stopping counts as later); it loses to a peer where it was later in more
    of those runs than not, and wins where it was correct and lost to none."""
    out = []
    keys = dict.fromkeys(
        (r["dataset"], r["tolerance"]) for r in pooled if r["rule"] == "certificate"
    )

    def correct(r: dict[str, Any]) -> bool:
        return r["stopped"] > 0 and r["true"] >= (1 - delta) * r["stopped"]

    for dataset, tolerance in keys:
        here = [
            r for r in pooled if (r["dataset"], r["tolerance"]) == (dataset, tolerance)
        ]
        ours = next(r for r in here if r["rule"] == "certificate")
        runs = [v for k, v in stops.items() if k[0] == dataset]
        peers = []
        for r in here:
            peer = r["rule"] in PEER_RULES or r["rule"].startswith("bofire-")
            if not (peer and correct(r)):
                continue
            later = no_later = 0
            for run in runs:
                theirs = run.get((r["rule"], tolerance))
                if theirs is None:
                    continue
                mine = run.get(("certificate", tolerance))
                if mine is None or mine > theirs:
                    later += 1
                else:
                    no_later += 1
            peers.append({**r, "later": later, "no_later": no_later})
        beaten = [p for p in peers if p["later"] > p["no_later"]]
        if ours["stopped"] and not correct(ours):
            verdict = "the package's stop was wrong"
        elif beaten:
            verdict = "loses to " + ", ".join(p["rule"] for p in beaten)
        elif ours["stopped"]:
            verdict = "wins" if peers else "wins: no peer correct"
        else:
            verdict = "no stop" if peers else "no rule correct and stopping"
        out.append(
            {
                "dataset": dataset,
                "tolerance": tolerance,
                "ours": ours,
                "correct_peers": peers,
                "verdict": verdict,
            }
        )
    return out


def format_verdicts(rows: list[dict[str, Any]]) -> str:
    """The verdict table, or nothing without rows."""
    if not rows:
        return ""

    def stops(r: dict[str, Any]) -> str:
        med = "-" if r["median_query"] is None else f"{r['median_query']:g}"
        return f"{r['stopped']} / {r['runs']}, query {med}, {r['true']} true"

    lines = [
        "**The package's stop against the correct peers** (the checked regret "
        "bound; a peer is correct where at least 95% of its stops held; in the "
        "runs where a peer stopped, the package stopped later in k of m)",
        "",
        "| dataset | tolerance | package: stops, median query, true | correct "
        "peers: stops, median query, true | verdict |",
        "|---|---|---|---|---|",
    ]
    for v in rows:
        peers = "; ".join(
            f"{p['rule']}: {stops(p)}, package later in {p['later']} of "
            f"{p['later'] + p['no_later']}"
            for p in v["correct_peers"]
        )
        lines.append(
            md_row(
                v["dataset"],
                v["tolerance"],
                stops(v["ours"]),
                peers or "none",
                v["verdict"],
            )
        )
    return "\n".join(lines) + "\n"


def format_markdown(rows: list[dict[str, Any]], title: str = "") -> str:
    """One table per dataset, acquisition and initial rows; ``title`` opens
    each table's heading."""
    lines: list[str] = []
    for key in dict.fromkeys(
        (r["dataset"], r["acquisition"], r["n_init"]) for r in rows
    ):
        dataset, acq, n_init = key
        lines += [
            title
            + (
                f"**{dataset}**, {acq}, {n_init} initial rows"
                if acq != "all"
                else f"**{dataset}**, all runs (both acquisitions, every start)"
            ),
            "",
            "| rule | tolerance | stopped | median query at stop | claim true |",
            "|---|---|---:|---:|---:|",
        ]
        for r in rows:
            if (r["dataset"], r["acquisition"], r["n_init"]) != key:
                continue
            med = "-" if r["median_query"] is None else f"{r['median_query']:g}"
            true = f"{r['true']} / {r['stopped']}" if r["stopped"] else "-"
            stopped = f"{r['stopped']} / {r['runs']}"
            lines.append(md_row(r["rule"], r["tolerance"], stopped, med, true))
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks stopping [--small] [--runs R] [--queries T]
    [--dataset ...] [--acquisition ...] [--init ...] [--out DIR] [--jobs J]``:
    run (or resume) the loops, or with ``--summary-only`` read the stored
    records; print the tables and write ``summary.md`` and ``summary.json``
    under ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks stopping")
    add_record_options(parser, "results/stopping", "a test's size", plot=False)
    parser.add_argument("--runs", type=int)
    parser.add_argument("--queries", type=int)
    parser.add_argument("--dataset", nargs="+")
    parser.add_argument("--acquisition", nargs="+")
    parser.add_argument("--init", type=int, nargs="+")
    parser.add_argument(
        "--bofire", help="BoFire's stops (benchmarks/bofire_stops.py) to tabulate"
    )
    parser.add_argument(
        "--measured", choices=NEWER_RULES, help="only the runs that measured this rule"
    )
    parser.add_argument(
        "--widths",
        action="store_true",
        help="with --summary-only: the final statement without each widening",
    )
    args = parser.parse_args(argv)
    config = SMALL_CONFIG if args.small else StoppingConfig()
    changes = {
        "runs": args.runs,
        "queries": args.queries,
        "datasets": tuple(args.dataset) if args.dataset else None,
        "acquisitions": tuple(args.acquisition) if args.acquisition else None,
        "n_inits": tuple(args.init) if args.init else None,
    }
    config = replace(config, **{k: v for k, v in changes.items() if v is not None})
    tasks = [
        (d, a, i, s)
        for s in range(config.runs)
        for d in config.datasets
        for a in config.acquisitions
        for i in config.n_inits
    ]
    run = functools.partial(run_one, config=config)
    records = resume(args, "stopping", tasks, config.key(), run)
    if args.measured:  # every rule on the same runs
        records = [r for r in records if args.measured in r["steps"][-1]]
    if args.widths:
        chosen = [
            r
            for r in records
            if r["dataset"] in config.datasets
            and r["acquisition"] in config.acquisitions
            and r["n_init"] in config.n_inits
        ]
        lines = [final_widths(r) for r in chosen]
        text = format_widths(lines)
        print(text)
        command = command_line(["stopping", *(sys.argv[1:] if argv is None else argv)])
        write_summary(args.out, command, text, {"widths": lines})
        return 0
    rows, costs = summarize(records, config), cost_rows(records)
    pooled = summarize(records, config, pool=True)
    final, unchecked = final_rows(records), unchecked_rows(records)
    bofire = bofire_summary(args.bofire, pool=True) if args.bofire else []
    per_run = run_stops(records, config, args.bofire)
    verdicts = verdict_rows(pooled + bofire, per_run, config.delta)
    markdown = "\n".join(
        [
            format_verdicts(verdicts),
            format_markdown(pooled),
            format_markdown(bofire, "BoFire 0.5's criteria, "),
            format_markdown(rows),
            format_final(final),
            format_unchecked(unchecked),
            format_costs(costs),
        ]
    )
    print(markdown)
    command = command_line(["stopping", *(sys.argv[1:] if argv is None else argv)])
    config_json = {**asdict(config), "extra": None}
    summary = {
        "config": config_json,
        "pooled": pooled,
        "bofire": bofire,
        "verdicts": verdicts,
        "rows": rows,
        "final": final,
        "unchecked": unchecked,
        "costs": costs,
    }
    write_summary(args.out, command, markdown, summary)
    return 0
