"""What a candidate-set node checks before any trial: the acquisition's
options, the certificates' calibration and the stopping rule (shared by the
single-machine and the sharded strategies)."""

from collections.abc import Mapping
from typing import Any, get_args

from botorch.acquisition.acquisition import AcquisitionFunction

from ax_chaining.acquisition import ChainingOptions, ChainingUCB
from ax_chaining.ax.stopping import RegretBoundCriterion
from ax_chaining.certificate.schedule import CheckSchedule
from ax_chaining.certificate.tails import Calibration
from ax_chaining.checks import (
    check_choice,
    check_delta,
    check_float,
    check_int,
    type_error,
)

__all__ = [
    "checked_calibration",
    "checked_min_observations",
    "checked_scale_level",
    "checked_options",
    "stop_rule_of",
]


def checked_calibration(calibration: Any) -> Calibration:
    """``certificate_calibration``, one of the named calibrations.

    Example:
        >>> checked_calibration("forecast")
        'forecast'
    """
    return check_choice("certificate_calibration", calibration, get_args(Calibration))


def checked_min_observations(value: Any) -> int:
    """``certificate_min_observations``, an int >= 1 (the ``"loo"`` check's
    :data:`~ax_chaining.certificate.calibration.LOO_MIN_OBSERVATIONS`).

    Example:
        >>> checked_min_observations(10)
        10
    """
    return check_int("certificate_min_observations", value, 1)


def checked_scale_level(value: Any) -> float | None:
    """``certificate_scale_level``: a level in (0, 1) (the ``"loo"`` check's
    upper confidence limit of the scale,
    :func:`~ax_chaining.certificate.calibration.loo_check`) or None (its
    point estimate).

    Example:
        >>> checked_scale_level(0.05)
        0.05
    """
    if value is None:
        return None
    return check_float(
        "certificate_scale_level", value, (lambda v: 0 < v < 1, "in (0, 1) or None")
    )


def checked_options(
    acqf_class: type[AcquisitionFunction], options: Mapping[str, Any]
) -> dict[str, Any]:
    """``options`` with the values of this package's classes checked: a
    Chaining-UCB's by :class:`~ax_chaining.ChainingOptions` (the one check of
    its options), GP-UCB's ``delta`` and UCB's ``beta`` here.

    Example:
        >>> checked_options(ChainingUCB, {"delta": 0.1})
        {'delta': 0.1}
    """
    out = dict(options)
    if issubclass(acqf_class, ChainingUCB):
        checked = ChainingOptions(**out).as_dict()  # raises on a bad value, naming it
        return {k: checked[k] for k in out}
    if "delta" in out:
        out["delta"] = check_delta(out["delta"])
    if "beta" in out:
        out["beta"] = check_float("beta", out["beta"], (lambda v: v >= 0, ">= 0"))
    return out


def stop_rule_of(
    name: str,
    stop_tolerance: float | None,
    certificate_schedule: CheckSchedule | None,
) -> RegretBoundCriterion | None:
    """The node's stopping rule for ``stop_tolerance`` (None: no rule), after
    checking ``certificate_schedule`` (a rule needs recorded certificates)."""
    if certificate_schedule is not None and not isinstance(
        certificate_schedule, CheckSchedule
    ):
        raise type_error(
            "certificate_schedule", "a CheckSchedule or None", certificate_schedule
        )
    if stop_tolerance is None:
        return None
    if certificate_schedule is None:
        raise ValueError(
            "`stop_tolerance` stops on the recorded certificate, and "
            "`certificate_schedule=None` records none; pass a CheckSchedule."
        )
    return RegretBoundCriterion(stop_tolerance, transition_to=name)
