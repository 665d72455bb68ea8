r"""The forecasts a step records, and the residuals they give once observed.

A model-based step of a candidate-set strategy records, for each arm it
proposes, the model's predictive mean and standard deviation of the
objective (noise included, Ax's ``Adapter.predict`` with
``use_posterior_predictive=True``, in the objective's units: a positive
combination of the metrics, minimized metrics negated) *before* the arm is
evaluated (``gen_metadata[GEN_METADATA_KEY]["forecast"]``). Once the trial is
complete, :func:`recorded_residuals` turns each into the standardized
one-step-ahead residual :math:`z = (y - \mu) / s` that
:class:`~ax_chaining.certificate.residuals.ResidualCalibration` calibrates the
certificate on (:func:`~ax_chaining.ax.certify` with ``calibration="forecast"`` or
``"audit"``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from ax.adapter.adapter_utils import extract_objective_weight_matrix
from ax.adapter.base import Adapter
from ax.core import Arm, Experiment, ObservationFeatures
from ax.core.trial_status import TrialStatus

from ax_chaining.ax.candidates import row_key
from ax_chaining.ax.metadata import recorded
from ax_chaining.certificate.residuals import ResidualCalibration, ResidualSource

__all__ = ["forecast_record", "recorded_residuals", "residual_calibration"]

_EVALUATED = (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED)


def forecast_record(
    adapter: Adapter, experiment: Experiment, arms: Sequence[Arm]
) -> list[dict[str, Any]]:
    """Per arm: ``parameters``, ``mean`` and ``sd`` of the objective's
    predictive law, and the metric ``weights`` that make the objective
    (module docstring); empty without an optimization config."""
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
        out.append(
            {
                "parameters": dict(arm.parameters),
                "mean": float(mu),
                "sd": math.sqrt(max(float(var), 0.0)),
                "weights": {outcomes[k]: float(c[k]) for k in used},
            }
        )
    return out


def recorded_residuals(
    experiment: Experiment, source: ResidualSource = "forecast"
) -> np.ndarray:
    """The standardized residuals of the recorded forecasts whose trials are
    complete, in trial order; ``source="audit"``: of the audit steps only.

    A forecast whose arm has no value of every weighted metric, or whose
    ``sd`` is 0, gives none.
    """
    df = experiment.lookup_data().df
    names = list(experiment.search_space.parameters)
    out: list[float] = []
    for index, meta in recorded(experiment):
        trial = experiment.trials[index]
        if trial.status not in _EVALUATED or (
            source == "audit" and not meta.get("audit")
        ):
            continue
        rows = df[df["trial_index"] == index]
        by_key = {row_key(a.parameters, names): a.name for a in trial.arms}
        for entry in meta.get("forecast") or []:
            arm = by_key.get(row_key(entry["parameters"], names))
            sd = float(entry["sd"])
            if arm is None or not sd > 0:
                continue
            mine = rows[rows["arm_name"] == arm]
            values = mine.groupby("metric_name")["mean"].last()
            weights = entry["weights"]
            if any(m not in values.index for m in weights):
                continue
            y = sum(w * float(values[m]) for m, w in weights.items())
            out.append((y - float(entry["mean"])) / sd)
    return np.asarray(out, dtype=np.float64)


def residual_calibration(
    experiment: Experiment, source: ResidualSource = "forecast", **options: Any
) -> ResidualCalibration:
    """A :class:`~ax_chaining.certificate.residuals.ResidualCalibration` on the
    experiment's recorded residuals (``options``: its other fields)."""
    z = recorded_residuals(experiment, source)
    return ResidualCalibration(tuple(z.tolist()), source=source, **options)
