"""What a step of a candidate-set strategy records in its generator run's
``gen_metadata[GEN_METADATA_KEY]``, and reading it back from an experiment."""

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
from ax.adapter.adapter_utils import extract_objective_weight_matrix
from ax.adapter.base import Adapter
from ax.core import Experiment
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from torch import Tensor

from ax_chaining.acquisition import ChainingUCB
from ax_chaining.certificate.calibration import certify_model
from ax_chaining.certificate.certify import CertificateOptions
from ax_chaining.certificate.schedule import EVERY_STEP
from ax_chaining.posterior import num_training_points

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
    """The factor from the model's objective to the user's objective units.

    Differences of the model's objective :math:`\\sum_i w_i y_i` (:math:`y_i`
    standardized by Ax's ``StandardizeY``, scales :math:`s_i`) are the user's
    :math:`\\sum_i c_i (s_i y_i + m_i)` ones times :math:`|c_i s_i / w_i|`, when
    that is one number for all :math:`i`; None otherwise.
    """
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
    evaluated: Tensor,
    scale: float | None,
    options: CertificateOptions,
) -> dict[str, Any]:
    """The step's certificate as JSON: the evaluated candidate with the smallest
    bound, from the acquisition's own model, whatever the acquisition.

    ``ChainingUCB`` certifies with its covers (:meth:`ChainingUCB.certificate`);
    any other acquisition with :func:`~ax_chaining.certificate.certify_model` on its
    model. ``bound`` is in the objective's units (None without a single
    ``scale``), ``bound_model_units`` in Ax's.
    """
    acqf = acquisition.acqf
    if isinstance(acqf, ChainingUCB):
        cert = acqf.certificate(among=evaluated, options=options)
    else:
        weights = acquisition.objective_weights.reshape(-1)
        transform = ScalarizedPosteriorTransform(
            weights=weights.to(acquisition.candidates)
        )
        cert = certify_model(
            acqf.model,
            acquisition.candidates,
            among=evaluated,
            options=options,
            posterior_transform=transform,
        )
    record = cert.as_dict()
    # Lean JSON: every step's record would otherwise grow with the evaluated
    # candidates (their indices and bounds), quadratically over a loop.
    record["num_certified"] = len(record.pop("certified"))
    record.pop("bounds")
    record.update(
        bound_model_units=float(cert.bound),
        bound=None if scale is None else float(cert.bound) * scale,
        objective_scale=scale,
    )
    return record


def step_certificate(
    acquisition: Any,
    evaluated: Tensor,
    scale: float | None,
    options: CertificateOptions | None,
) -> dict[str, Any] | None:
    """:func:`certificate_record` when this step is one of the schedule's
    checks (counted by the model's observations), else None: a step that is
    not a declared check records nothing, so ``delta`` is spent on the checks
    alone; ``options=None`` records none."""
    n = num_training_points(acquisition.acqf.model) or 0
    if options is None:
        return None
    schedule = options.schedule or EVERY_STEP
    if schedule.index(n) is None:
        return None
    return certificate_record(
        acquisition, evaluated, scale, replace(options, schedule=schedule)
    )
