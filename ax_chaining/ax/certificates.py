"""Regret certificates of an Ax experiment: those the steps record in
``gen_metadata[GEN_METADATA_KEY]``, a fresh one (:func:`certify`), and the
answer at the end of a loop (:func:`recommend`)."""

import json
import math
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

import numpy as np
import torch
from ax.adapter.adapter_utils import extract_objective_weight_matrix
from ax.adapter.base import Adapter
from ax.adapter.registry import Generators
from ax.api.client import Client
from ax.core import Arm, Experiment, ObservationFeatures
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.storage.json_store.decoder import object_from_json
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from torch import Tensor

from ax_chaining.acquisition import ChainingUCB
from ax_chaining.ax.candidates import (
    EVALUATED,
    CandidateSetSpec,
    CandidateTable,
    candidate_parameterizations,
    row_key,
)
from ax_chaining.certificate.calibration import certify_model
from ax_chaining.certificate.certify import CertificateOptions, check_options
from ax_chaining.certificate.rank import RankOptions
from ax_chaining.certificate.residuals import ResidualCalibration, ResidualSource
from ax_chaining.certificate.schedule import DEFAULT_DELTA, EVERY_STEP
from ax_chaining.checks import check_choice, check_delta, check_float, type_error
from ax_chaining.posterior import num_training_points

Units = Literal["objective", "model"]
Source = Client | Experiment | GenerationStrategy

#: Key of this package's entry in ``GeneratorRun.gen_metadata``.
GEN_METADATA_KEY: str = "chaining_ucb"


def recorded(experiment: Experiment) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(trial index, metadata)`` of this package's generator runs, in order."""
    for index in sorted(experiment.trials):
        for gr in experiment.trials[index].generator_runs:
            meta = (gr.gen_metadata or {}).get(GEN_METADATA_KEY)
            if isinstance(meta, dict):
                yield index, meta


def objective_scale(
    adapter: Adapter, experiment: Experiment, weights: Tensor | None
) -> float | None:
    r"""The factor :math:`|c_i s_i / w_i|` from the model's objective to the
    user's (objective weights :math:`c_i`, ``StandardizeY`` scales :math:`s_i`,
    model weights :math:`w_i`) when one for all metrics; None otherwise."""
    opt = experiment.optimization_config
    if opt is None or weights is None:
        return None
    outcomes = list(adapter.outcomes)
    c = np.ravel(extract_objective_weight_matrix(opt.objective, outcomes))
    w = weights.detach().cpu().double().numpy().ravel()
    ystd = getattr(adapter.transforms.get("StandardizeY"), "Ystd", {})
    s = np.array([float(ystd.get(o, 1.0)) for o in outcomes])
    r = np.abs(c[w != 0] * s[w != 0] / w[w != 0])
    if len(r) > 0 and np.allclose(r, r[0], rtol=1e-6, atol=0.0):
        return float(r[0])
    return None


def certificate_record(
    acquisition: Any,
    among: Tensor,
    scale: float | None,
    options: CertificateOptions | None,
) -> dict[str, Any] | None:
    """A step's certificate among ``among`` as JSON; None off the schedule's
    checks or without ``options``. ``bound`` is in the objective's units (None
    without a ``scale``), ``bound_model_units`` in Ax's."""
    acqf = acquisition.acqf
    n = num_training_points(acqf.model) or 0
    if options is None or (options.schedule or EVERY_STEP).index(n) is None:
        return None
    options = replace(options, schedule=options.schedule or EVERY_STEP)
    if isinstance(acqf, ChainingUCB):
        cert = acqf.certificate(among=among, options=options)
    else:
        weights = acquisition.objective_weights.reshape(-1)
        cert = certify_model(
            acqf.model,
            acquisition.candidates,
            among=among,
            options=options,
            posterior_transform=ScalarizedPosteriorTransform(
                weights=weights.to(acquisition.candidates)
            ),
        )
    record = cert.as_dict()
    # Lean JSON: otherwise the records grow quadratically over a loop.
    record["num_certified"] = len(record.pop("certified"))
    record.pop("bounds")
    model_units = float(cert.bound)
    record.update(
        bound_model_units=model_units,
        bound=None if scale is None else model_units * scale,
        objective_scale=scale,
    )
    return record


def forecast_record(
    adapter: Adapter, experiment: Experiment, arms: Sequence[Arm]
) -> list[dict[str, Any]]:
    """Per arm proposed by a step: ``parameters``, the model's predictive
    ``mean`` and ``sd`` of the objective (noise included, objective units) and
    the metric ``weights`` that make the objective."""
    opt = experiment.optimization_config
    if opt is None or not arms:
        return []
    outcomes = list(adapter.outcomes)
    c = np.ravel(extract_objective_weight_matrix(opt.objective, outcomes))
    used = [k for k in range(len(outcomes)) if c[k] != 0]
    feats = [ObservationFeatures(parameters=dict(a.parameters)) for a in arms]
    mean, cov = adapter.predict(feats, use_posterior_predictive=True)
    out = []
    for i, arm in enumerate(arms):
        mu = sum(c[k] * mean[outcomes[k]][i] for k in used)
        var = sum(
            c[a] * c[b] * cov[outcomes[a]][outcomes[b]][i] for a in used for b in used
        )
        forecast = {
            "parameters": dict(arm.parameters),
            "mean": float(mu),
            "sd": math.sqrt(max(float(var), 0.0)),
            "weights": {outcomes[k]: float(c[k]) for k in used},
        }
        out.append(forecast)
    return out


def recorded_residuals(
    experiment: Experiment, source: ResidualSource = "forecast"
) -> np.ndarray:
    r"""The standardized residuals :math:`(y - \mu) / s` of the recorded forecasts of
    evaluated trials, in trial order (``"audit"``: of the audit steps only)."""
    df = experiment.lookup_data().df
    names = list(experiment.search_space.parameters)
    out: list[float] = []
    for index, meta in recorded(experiment):
        trial = experiment.trials[index]
        audit_only = source == "audit" and not meta.get("audit")
        if trial.status not in EVALUATED or audit_only:
            continue
        rows = df[df["trial_index"] == index]
        by_key = {row_key(a.parameters, names): a.name for a in trial.arms}
        for entry in meta.get("forecast") or []:
            arm = by_key.get(row_key(entry["parameters"], names))
            sd = float(entry["sd"])
            if arm is None or not sd > 0:
                continue
            values = rows[rows["arm_name"] == arm].groupby("metric_name")["mean"].last()
            weights = entry["weights"]
            if any(m not in values.index for m in weights):
                continue
            y = sum(w * float(values[m]) for m, w in weights.items())
            out.append((y - float(entry["mean"])) / sd)
    return np.asarray(out, dtype=np.float64)


def residual_calibration(
    experiment: Experiment, source: ResidualSource = "forecast", **options: Any
) -> ResidualCalibration:
    """A ``ResidualCalibration`` on the experiment's recorded residuals."""
    z = recorded_residuals(experiment, source)
    return ResidualCalibration(tuple(z.tolist()), source=source, **options)


def calibrated(
    options: CertificateOptions, experiment: Experiment
) -> CertificateOptions:
    """``options`` with ``"forecast"``/``"audit"`` calibration resolved."""
    if options.calibration in ("forecast", "audit"):
        residuals = residual_calibration(experiment, options.calibration)
        return replace(options, calibration=residuals)
    return options


def experiment_of(source: Source) -> tuple[Experiment, GenerationStrategy | None]:
    """The experiment (and generation strategy, if any) behind ``source``; a
    ``Client``'s through its public JSON snapshot."""
    if isinstance(source, Experiment):
        return source, None
    if isinstance(source, GenerationStrategy):
        return source.experiment, source
    if not isinstance(source, Client):
        what = "an ax Client, Experiment or GenerationStrategy"
        raise type_error("source", what, source)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "client.json")
        source.save_to_json_file(path)
        with open(path) as fh:
            snapshot = json.load(fh)
    experiment = object_from_json(snapshot["experiment"])
    gs = snapshot.get("generation_strategy")
    return experiment, None if gs is None else object_from_json(gs)


def _evaluated_in(experiment: Experiment, parameters: dict[str, Any]) -> int | None:
    """The last evaluated trial holding an arm with these parameters."""
    names = list(experiment.search_space.parameters)
    key = row_key(parameters, names)
    found = [
        index
        for index, trial in experiment.trials.items()
        if trial.status in EVALUATED
        and any(row_key(a.parameters, names) == key for a in trial.arms)
    ]
    return max(found) if found else None


def _number(value: Any) -> float:
    """A recorded number (JSON stores "nan", "inf" as strings; None is nan)."""
    return math.nan if value is None else float(value)


def certificate_history(
    source: Source, units: Units = "objective"
) -> list[dict[str, Any]]:
    """Every certificate the steps recorded, in trial order.

    Args:
        source: An Ax ``Client``, its ``Experiment``, or the generation strategy.
        units: ``"objective"`` or ``"model"`` (the GP's).

    Returns:
        Per check: ``recorded_at`` (the trial whose generation recorded it),
        ``trial_index`` (the last trial that evaluated the certified point),
        ``bound`` (``inf`` if refused), ``running_min``, ``parameters``,
        ``delta``, ``share``, ``valid``, ``reason``, ``units``, ``rank_bound``,
        ``expected_better``, ``num_candidates``.
    """
    objective = check_choice("units", units, get_args(Units)) == "objective"
    key = "bound" if objective else "bound_model_units"
    experiment, _ = experiment_of(source)
    out: list[dict[str, Any]] = []
    for index, meta in recorded(experiment):
        cert = meta.get("certificate") or {}
        if cert.get(key) is None:
            continue
        bound = float(cert[key])
        params = cert.get("parameters") or {}
        record = {
            "recorded_at": index,
            "trial_index": _evaluated_in(experiment, params),
            "bound": bound,
            "running_min": min([bound] + [c["running_min"] for c in out[-1:]]),
            "parameters": params,
            "delta": _number(cert.get("delta")),
            "share": _number(cert.get("share")),
            "valid": bool(cert.get("valid", True)),
            "reason": cert.get("reason", ""),
            "units": units,
            "rank_bound": cert.get("rank_bound"),
            "expected_better": _number(cert.get("expected_better")),
            "num_candidates": meta.get("num_candidates"),
        }
        out.append(record)
    return out


def best_certificate(
    source: Source, units: Units = "objective", use: str = "current"
) -> dict[str, Any] | None:
    """The certificate a stopping rule acts on; None before the first one.

    Args:
        source, units: As in :func:`certificate_history`.
        use: ``"current"`` (default): the last check's certificate, valid
            under refitted hyperparameters as far as the last model is;
            ``"running_min"``: the smallest recorded bound, valid only if every
            step's model was right (fixed, true hyperparameters).
    """
    check_choice("use", use, ("current", "running_min"))
    history = certificate_history(source, units)
    if not history:
        return None
    return history[-1] if use == "current" else min(history, key=lambda c: c["bound"])


def certify(
    source: Source,
    candidates: CandidateTable | None = None,
    delta: float | None = None,
    *,
    options: CertificateOptions | None = None,
    units: Units = "objective",
    tolerance: float | None = None,
) -> dict[str, Any]:
    r"""A regret certificate for the evaluated point of any Ax loop with the
    smallest bound, from Ax's GP (:func:`fit_candidates`): with probability at
    least :math:`1 - \delta`, no point of its set is more than ``bound`` better
    than ``parameters`` (assumptions: :mod:`ax_chaining.certificate`).

    Example:
        >>> certify(client)["bound"]
        >>> certify(client, candidates=catalogue)["parameters"]

    Args:
        source: An Ax ``Client``, its ``Experiment``, or its generation strategy.
        candidates: The finite set to certify against (a table).
        delta: Confidence parameter; default the one the strategy's steps
            recorded, else 0.05.
        options: :class:`~ax_chaining.certificate.CertificateOptions`
            (``calibration="forecast"`` or ``"audit"``: the residuals the
            steps recorded).
        units: ``"objective"`` or ``"model"`` for ``bound`` and ``tolerance``.
        tolerance: The margin :math:`\tau` of ``expected_better`` and
            ``p_better`` (default 0, or ``options.rank``'s).

    Returns:
        ``parameters``, ``bound`` (None without a single objective scale),
        ``bound_model_units``, ``trial_index``, ``delta``, ``share``, ``valid``,
        ``reason``, ``checks``, ``rank_bound``, ``expected_better`` (the
        expected number of candidates more than :math:`\tau` better),
        ``p_better`` (at most this probability that one is:
        :math:`\min(1,` ``expected_better``:math:`)`, Markov's inequality),
        ``tolerance``, ``num_candidates``. Numbers are floats (``nan`` where
        not computed), ``rank_bound`` an int or None.
    """
    check_choice("units", units, get_args(Units))
    fitted = fit_candidates(source, candidates)
    return _certificate(fitted, fitted.evaluated, delta, options, units, tolerance)


def recommend(
    source: Source,
    candidates: CandidateTable | None = None,
    delta: float | None = None,
    *,
    options: CertificateOptions | None = None,
    units: Units = "objective",
    tolerance: float | None = None,
) -> dict[str, Any]:
    r"""The answer at the end of a loop: the evaluated row with the best observed
    objective, and its certificate over the set of :func:`certify` (with
    probability at least :math:`1 - \delta`, no candidate is more than
    ``certificate["bound"]`` better).

    Example:
        >>> answer = recommend(client)
        >>> answer["id"], answer["value"], answer["certificate"]["bound"]

    Args:
        source, candidates, delta, options, units, tolerance: As in :func:`certify`.

    Returns:
        ``parameters``; ``arm_name`` and ``trial_index`` (the last trial that
        evaluated it); ``id`` (its ``id_column`` value when the candidates are
        the strategy's table with an ``id_column``, else None) and ``row`` (its
        label in the candidate table, None off the table); ``value`` (its
        observed objective); ``certificate`` (as :func:`certify` returns).
    """
    check_choice("units", units, get_args(Units))
    fitted = fit_candidates(source, candidates)
    arm, value = _best_observed(fitted.experiment)
    names = list(fitted.experiment.search_space.parameters)
    key = row_key(arm.parameters, names)
    index = next(i for i, r in enumerate(fitted.rows) if row_key(r, names) == key)
    certificate = _certificate(fitted, [index], delta, options, units, tolerance)
    # The table's rows come first in ``fitted.rows``, in the table's order.
    row, ident, spec = None, None, fitted.spec
    if spec.candidates is not None and index < len(spec.candidates):
        row = index if spec.row_labels is None else spec.row_labels[index]
        if spec.id_column is not None:
            ident = spec.candidates[index][spec.id_column]
    return {
        "parameters": certificate["parameters"],
        "arm_name": arm.name,
        "trial_index": certificate["trial_index"],
        "id": ident,
        "row": row,
        "value": value,
        "certificate": certificate,
    }


@dataclass
class FittedCandidates:
    """Ax's GP fitted to an experiment's data, and the finite set it is read
    over: ``rows`` (the candidates, then evaluated points off them), their
    model inputs ``X``, the ``evaluated`` mask, the objective's ``weights``
    and ``scale`` (model to objective units; None without one)."""

    experiment: Experiment
    spec: CandidateSetSpec
    rows: list[dict[str, Any]]
    evaluated: Tensor
    model: Any
    X: Tensor
    weights: Tensor
    scale: float | None


def fit_candidates(
    source: Source, candidates: CandidateTable | None = None
) -> FittedCandidates:
    """Ax's GP (the strategy's surrogate spec if any) fitted to all the data, over the
    set :func:`certify` uses: ``candidates``, else the strategy's candidate set, a fully
    discrete space or a Sobol design of 1,024 points, with every evaluated point.

    Example:
        >>> fitted = fit_candidates(client)
        >>> fitted.model.posterior(fitted.X).mean
    """
    experiment, gs = experiment_of(source)
    data = experiment.lookup_data()
    if data.df.empty:
        raise ValueError("The experiment has no data yet; nothing to certify.")
    spec, surrogate_spec = None, None
    for node in gs.nodes_by_name.values() if gs is not None else []:
        spec = getattr(node, "candidate_spec", None) or spec
        for gen_spec in getattr(node, "generator_specs", []):
            given = gen_spec.generator_kwargs.get("surrogate_spec")
            surrogate_spec = given or surrogate_spec
    if candidates is not None or spec is None:
        spec = CandidateSetSpec(candidates=candidates)
    if spec.seed is None:
        spec = replace(spec, seed=0)
    ss = experiment.search_space
    names = list(ss.parameters)
    arms = {
        row_key(a.parameters, names): dict(a.parameters)
        for t in experiment.trials.values()
        if t.status in EVALUATED
        for a in t.arms
    }
    if not arms:
        raise ValueError("No trial is completed yet; nothing to certify.")
    # The candidates and every evaluated point: one off the candidates may be best.
    rows = candidate_parameterizations(ss, spec)
    known = {row_key(r, names) for r in rows}
    rows = rows + [r for key, r in arms.items() if key not in known]
    evaluated = torch.tensor([row_key(r, names) in arms for r in rows])
    kwargs = {} if surrogate_spec is None else {"surrogate_spec": surrogate_spec}
    adapter = Generators.BOTORCH_MODULAR(experiment=experiment, data=data, **kwargs)
    X = adapter.transform_observation_features(
        [ObservationFeatures(parameters=dict(r)) for r in rows]
    )
    opt = experiment.optimization_config
    sign = -1.0 if opt is not None and opt.objective.minimize else 1.0
    weights = torch.tensor([sign], dtype=X.dtype)
    return FittedCandidates(
        experiment=experiment,
        spec=spec,
        rows=rows,
        evaluated=evaluated,
        model=adapter.generator.surrogate.model,
        X=X,
        weights=weights,
        scale=objective_scale(adapter, experiment, weights),
    )


def _certificate(
    fitted: FittedCandidates,
    among: Tensor | list[int],
    delta: float | None,
    options: CertificateOptions | None,
    units: Units,
    tolerance: float | None,
) -> dict[str, Any]:
    if delta is None:  # the last recorded certificate's, else 0.05
        certs = [m.get("certificate") or {} for _, m in recorded(fitted.experiment)]
        deltas = [c["delta"] for c in certs if c.get("delta") is not None]
        delta = float(deltas[-1]) if deltas else DEFAULT_DELTA
    delta = check_delta(delta)
    options = calibrated(check_options(options), fitted.experiment)
    # Model units to the asked ones (None: no single objective scale).
    factor = 1.0 if units == "model" else fitted.scale
    if tolerance is not None:
        tolerance = check_float("tolerance", tolerance, (lambda v: v >= 0, ">= 0"))
        if factor is None:
            raise ValueError(
                "`tolerance` in objective units needs a single objective scale; "
                "pass units='model' and a tolerance in the model's units."
            )
        rank = replace(options.rank or RankOptions(), tolerance=tolerance / factor)
        options = replace(options, rank=rank)
    cert = certify_model(
        fitted.model,
        fitted.X,
        among=among,
        delta=delta,
        options=options,
        posterior_transform=ScalarizedPosteriorTransform(weights=fitted.weights),
    )
    parameters = dict(fitted.rows[cert.index])
    model_units = float(cert.bound)
    bound = None if factor is None else model_units * factor
    expected = float(cert.expected_better)
    margin = math.nan if factor is None else float(cert.rank_tolerance) * factor
    return {
        "parameters": parameters,
        "bound": bound,
        "bound_model_units": model_units,
        "trial_index": _evaluated_in(fitted.experiment, parameters),
        "delta": delta,
        "share": cert.share,
        "valid": cert.valid,
        "reason": cert.reason,
        "checks": dict(cert.checks),
        "rank_bound": cert.rank_bound,
        "expected_better": expected,
        "p_better": min(1.0, expected) if math.isfinite(expected) else math.nan,
        "tolerance": margin,
        "num_candidates": len(fitted.rows),
    }


def _best_observed(experiment: Experiment) -> tuple[Any, float]:
    """The evaluated arm whose mean observed objective is best, and that mean."""
    objective = experiment.optimization_config.objective
    # Weights (negative ones minimize): the utility is maximized in any direction.
    name_of = {v: k for k, v in objective.metric_name_to_signature.items()}
    weights = {name_of[s]: w for s, w in objective.metric_weights}
    df = experiment.lookup_data().df
    done = {i for i, t in experiment.trials.items() if t.status in EVALUATED}
    df = df[df["trial_index"].isin(done) & df["metric_name"].isin(weights)]
    weight = df["metric_name"].map(weights)
    df = df.assign(utility=df["mean"] * weight, value=df["mean"] * weight.abs())
    per_trial = df.groupby(["trial_index", "arm_name"], sort=False)[
        ["utility", "value"]
    ].sum()
    per_arm = per_trial.groupby(level="arm_name", sort=False).mean()
    if per_arm.empty:
        raise ValueError("No completed trial has data for the objective.")
    best = per_arm["utility"].idxmax()
    value = per_arm.loc[best, "utility" if len(weights) > 1 else "value"]
    return experiment.arms_by_name[best], float(value)
