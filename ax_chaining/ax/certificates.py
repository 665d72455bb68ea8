"""Regret certificates of an Ax experiment: the ones its steps recorded
(:func:`certificate_history`, :func:`best_certificate`), and a fresh one from
its data for any loop (:func:`certify`), read from an Ax ``Client``, an
``Experiment`` or a ``GenerationStrategy``.

A ``Client`` has no public accessor of its experiment; its public JSON snapshot
(``Client.save_to_json_file``, decoded with Ax's ``object_from_json``) is the
route taken here, so a reloaded client works the same as the original.
"""

import json
import os
import tempfile
from typing import Any, Literal, get_args

import torch
from ax.adapter.registry import Generators
from ax.api.client import Client
from ax.core import Experiment, ObservationFeatures
from ax.core.trial_status import TrialStatus
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.storage.json_store.decoder import object_from_json
from botorch.acquisition.objective import ScalarizedPosteriorTransform

from ax_chaining.ax.candidates import (
    CandidateSetSpec,
    CandidateTable,
    candidate_parameterizations,
    row_key,
)
from ax_chaining.ax.forecasts import residual_calibration
from ax_chaining.ax.metadata import objective_scale, recorded
from ax_chaining.certificate.calibration import certify_model
from ax_chaining.certificate.residuals import ResidualCalibration
from ax_chaining.certificate.schedule import CheckSchedule
from ax_chaining.certificate.tails import Calibration
from ax_chaining.checks import check_choice, check_delta, type_error

Units = Literal["objective", "model"]
Source = Client | Experiment | GenerationStrategy

#: Trial statuses whose arms count as evaluated.
EVALUATED = (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED)


def experiment_of(source: Source) -> tuple[Experiment, GenerationStrategy | None]:
    """The experiment (and generation strategy, if any) behind ``source``."""
    if isinstance(source, Experiment):
        return source, None
    if isinstance(source, GenerationStrategy):
        return source.experiment, source
    if not isinstance(source, Client):
        what = "an ax Client, Experiment or GenerationStrategy"
        raise type_error("source", what, source)
    handle, path = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    try:
        source.save_to_json_file(path)
        with open(path) as fh:
            snapshot = json.load(fh)
    finally:
        os.remove(path)
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


def certificate_history(
    source: Source, units: Units = "objective"
) -> list[dict[str, Any]]:
    """Every certificate the steps recorded, in trial order, with its running
    minimum.

    Args:
        source: An Ax ``Client``, its ``Experiment``, or the generation strategy.
        units: ``"objective"`` (the objective's units) or ``"model"`` (the GP's).

    Returns:
        Per check: ``recorded_at`` (the trial whose generation recorded it),
        ``trial_index`` (the last trial that evaluated the certified point),
        ``bound``, ``running_min``, ``parameters``, ``delta``, ``share`` (the
        part of ``delta`` the check spent), ``valid``, ``reason``, ``units``,
        ``rank_bound`` (with probability at least ``1 - delta``, the point is
        among the ``rank_bound`` best candidates; None in records from before
        the rank statement), ``expected_better`` (the expected number of
        candidates better than it), ``num_candidates``.
        A refused certificate has ``bound`` ``inf``. A strategy with a
        ``certificate_schedule`` records its checks only.
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
        low = min([bound] + [c["running_min"] for c in out[-1:]])
        params = cert.get("parameters") or {}
        out.append(
            {
                "recorded_at": index,
                "trial_index": _evaluated_in(experiment, params),
                "bound": bound,
                "running_min": low,
                "parameters": params,
                "delta": cert.get("delta"),
                "share": cert.get("share"),
                "valid": bool(cert.get("valid", True)),
                "reason": cert.get("reason", ""),
                "units": units,
                "rank_bound": cert.get("rank_bound"),
                "expected_better": cert.get("expected_better"),
                "num_candidates": meta.get("num_candidates"),
            }
        )
    return out


def best_certificate(
    source: Source, units: Units = "objective", use: str = "current"
) -> dict[str, Any] | None:
    """The certificate a stopping rule acts on; None before the first one.

    Args:
        source, units: As in :func:`certificate_history`.
        use: ``"current"`` (default): the last recorded check's certificate,
            valid under refitted hyperparameters as far as the last model is;
            ``"running_min"``: the smallest recorded bound, valid only if every
            step's model was right (fixed, true hyperparameters), since an early
            overconfident fit would be kept forever.
    """
    check_choice("use", use, ("current", "running_min"))
    history = certificate_history(source, units)
    if not history:
        return None
    if use == "current":
        return history[-1]
    return min(history, key=lambda c: c["bound"])


def certify(
    source: Source,
    candidates: CandidateTable | None = None,
    delta: float = 0.05,
    *,
    schedule: CheckSchedule | None = None,
    units: Units = "objective",
    calibration: Calibration | ResidualCalibration = "loo",
) -> dict[str, Any]:
    r"""A regret certificate for the best evaluated candidate of any Ax loop.

    Fits Ax's GP surrogate to the experiment's data (the candidate-set
    strategy's own surrogate spec if ``source`` has one, else Ax's default) and
    certifies, among the evaluated candidates, the one with the smallest bound:
    with probability at least :math:`1 - \delta` over the checks of
    ``schedule``, the best candidate is at most ``bound`` better than
    ``parameters``, under the assumptions of :mod:`ax_chaining.certificate`.

    The candidate set is ``candidates`` if given; else the candidate set of
    ``source``'s candidate-set strategy; else every combination of a fully
    discrete search space; else the evaluated points together with a Sobol
    design of 1,024 points (seed 0).

    Example:
        >>> client.get_next_trials(...)  # any strategy, Ax's default included
        >>> certify(client)["bound"]

    Args:
        source: An Ax ``Client``, its ``Experiment``, or its generation strategy.
        candidates: The finite set to certify against (a table).
        delta: Confidence parameter.
        schedule: The checks over which ``delta`` is spent (default every step).
        units: ``"objective"`` or ``"model"`` for ``bound``.
        calibration: ``"loo"`` (default: the fitted model's leave-one-out
            check, :mod:`ax_chaining.certificate`), ``"none"`` (the model
            taken as true), ``"forecast"`` or ``"audit"`` (the residuals of
            the forecasts the steps recorded, of all steps or of the audits:
            :mod:`ax_chaining.ax.forecasts`; too few fall back to ``"loo"``),
            or a
            :class:`~ax_chaining.certificate.residuals.ResidualCalibration`.

    Returns:
        ``parameters``, ``bound`` (None in objective units without a single
        scale), ``bound_model_units``, ``trial_index`` (the trial that evaluated
        the certified point), ``delta``, ``share``, ``valid``, ``reason``,
        ``checks`` (the calibration check's statistics), ``rank_bound`` and
        ``expected_better`` (:mod:`ax_chaining.certificate.rank`),
        ``num_candidates``.
    """
    delta = check_delta(delta)
    check_choice("units", units, get_args(Units))
    experiment, gs = experiment_of(source)
    data = experiment.lookup_data()
    if data.df.empty:
        raise ValueError("The experiment has no data yet; nothing to certify.")
    spec, surrogate_spec = _spec_of(gs, candidates)
    ss = experiment.search_space
    rows = candidate_parameterizations(ss, spec)
    names = list(ss.parameters)
    evaluated_keys = {
        row_key(a.parameters, names)
        for t in experiment.trials.values()
        if t.status in EVALUATED
        for a in t.arms
    }
    if spec.candidates is None and not _fully_discrete(ss):
        known = {row_key(r, names) for r in rows}
        extra = [
            dict(a.parameters)
            for t in experiment.trials.values()
            if t.status in EVALUATED
            for a in t.arms
            if row_key(a.parameters, names) not in known
        ]
        rows = rows + list({row_key(r, names): r for r in extra}.values())
    evaluated = torch.tensor([row_key(r, names) in evaluated_keys for r in rows])
    if not bool(evaluated.any()):
        raise ValueError("No evaluated arm is among the candidates to certify.")
    kwargs = {} if surrogate_spec is None else {"surrogate_spec": surrogate_spec}
    adapter = Generators.BOTORCH_MODULAR(experiment=experiment, data=data, **kwargs)
    model = adapter.generator.surrogate.model
    X = adapter.transform_observation_features(
        [ObservationFeatures(parameters=dict(r)) for r in rows]
    )
    opt = experiment.optimization_config
    sign = -1.0 if opt is not None and opt.objective.minimize else 1.0
    weights = torch.tensor([sign], dtype=X.dtype)
    if calibration in ("forecast", "audit"):
        calibration = residual_calibration(experiment, calibration)
    cert = certify_model(
        model,
        X,
        among=evaluated,
        delta=delta,
        schedule=schedule,
        posterior_transform=ScalarizedPosteriorTransform(weights=weights),
        calibration=calibration,
    )
    scale = objective_scale(adapter, experiment, weights)
    parameters = dict(rows[cert.index])
    model_units = float(cert.bound)
    bound = model_units if units == "model" else None
    if units == "objective" and scale is not None:
        bound = model_units * scale
    return {
        "parameters": parameters,
        "bound": bound,
        "bound_model_units": model_units,
        "trial_index": _evaluated_in(experiment, parameters),
        "delta": delta,
        "share": cert.share,
        "valid": cert.valid,
        "reason": cert.reason,
        "checks": dict(cert.checks),
        "rank_bound": cert.rank_bound,
        "expected_better": cert.expected_better,
        "num_candidates": len(rows),
    }


def _fully_discrete(search_space: Any) -> bool:
    from ax.core import ChoiceParameter
    from ax.core.parameter import ParameterType

    return all(
        isinstance(p, ChoiceParameter) or p.parameter_type == ParameterType.INT
        for p in search_space.tunable_parameters.values()
    )


def _spec_of(
    gs: GenerationStrategy | None, candidates: CandidateTable | None
) -> tuple[CandidateSetSpec, Any]:
    """The candidate spec and surrogate spec of ``gs``'s candidate-set nodes."""
    spec, surrogate = None, None
    for node in gs.nodes_by_name.values() if gs is not None else []:
        spec = getattr(node, "candidate_spec", None) or spec
        for gen_spec in getattr(node, "generator_specs", []):
            surrogate = gen_spec.generator_kwargs.get("surrogate_spec") or surrogate
    if candidates is not None:
        spec = CandidateSetSpec(candidates=candidates)
    if spec is None:
        spec = CandidateSetSpec(seed=0)
    if spec.seed is None:
        spec = CandidateSetSpec(**{**spec.__dict__, "seed": 0})
    return spec, surrogate
