"""Stop an Ax optimization on the running minimum of the regret certificates
that Chaining-UCB records in ``gen_metadata`` (valid jointly over the steps, see
:mod:`ax_chaining.certificate`)."""

from typing import Any, Literal, get_args

from ax.core.experiment import Experiment
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generation_strategy.transition_criterion import TransitionCriterion
from ax.global_stopping.strategies.base import BaseGlobalStoppingStrategy
from ax.utils.common.serialization import serialize_init_args

from ax_chaining.ax.metadata import recorded
from ax_chaining.checks import check_choice, check_float, check_int

Units = Literal["objective", "model"]


def certificate_history(
    source: Experiment | GenerationStrategy, units: Units = "objective"
) -> list[dict[str, Any]]:
    """Every recorded certificate, in trial order, with its running minimum.

    Args:
        source: The experiment, or the generation strategy given to the Client.
        units: ``"objective"`` (the objective's units) or ``"model"`` (the GP's).

    Returns:
        Per step: ``trial_index, bound, running_min, parameters, delta, units``.
    """
    objective = check_choice("units", units, get_args(Units)) == "objective"
    key = "bound" if objective else "bound_model_units"
    experiment = source.experiment if isinstance(source, GenerationStrategy) else source
    out: list[dict[str, Any]] = []
    for index, meta in recorded(experiment):
        cert = meta.get("certificate") or {}
        if cert.get(key) is not None:
            low = min([float(cert[key])] + [c["running_min"] for c in out[-1:]])
            row = {"trial_index": index, "bound": float(cert[key]), "running_min": low}
            fields = {k: cert.get(k) for k in ("parameters", "delta")}
            out.append({**row, **fields, "units": units})
    return out


def best_certificate(
    source: Experiment | GenerationStrategy, units: Units = "objective"
) -> dict[str, Any] | None:
    """The certificate of :func:`certificate_history` with the smallest bound
    (the earliest on ties); None before the first one."""
    history = certificate_history(source, units)
    return min(history, key=lambda c: c["bound"]) if history else None


class RegretBoundGlobalStoppingStrategy(BaseGlobalStoppingStrategy):
    r"""Stop when the running minimum of the certified regret bound is small.

    Args:
        tolerance: Stop once the smallest recorded bound is at most this.
        min_trials, inactive_when_pending_trials: Ax's arguments.
        units: ``"objective"`` or ``"model"``, as in :func:`certificate_history`.

    Example:
        >>> stopping = RegretBoundGlobalStoppingStrategy(tolerance=0.5, min_trials=15)
        >>> stop, message = stopping.should_stop_optimization(experiment=gs.experiment)
    """

    def __init__(
        self,
        tolerance: float,
        min_trials: int = 5,
        inactive_when_pending_trials: bool = True,
        units: Units = "objective",
    ) -> None:
        rule = (lambda v: v > 0, "a finite positive float")
        self.tolerance = check_float("tolerance", tolerance, rule, "a positive float")
        self.units: Units = check_choice("units", units, get_args(Units))
        min_trials = check_int("min_trials", min_trials, 0)
        super().__init__(min_trials, inactive_when_pending_trials)

    def _should_stop_optimization(  # Ax's abstract hook for stopping strategies
        self, experiment: Experiment, **kwargs: Any
    ) -> tuple[bool, str]:
        """``(should_stop, message)``; the message names the parameters and bound."""
        best, units = best_certificate(experiment, units=self.units), self.units
        if best is None:
            return False, f"No Chaining-UCB regret certificate yet ({units} units)."
        what = f"Chaining-UCB certified regret bound {best['bound']:.4g} ({units} "
        what += f"units, running minimum, recorded at trial {best['trial_index']}) "
        what += f"for {best['parameters']} is "
        tol = f"the tolerance {self.tolerance:.4g}"
        if best["bound"] > self.tolerance:
            return False, f"{what}above {tol}."
        sure = f"with probability at least 1 - {best['delta']}, these parameters are"
        return True, f"{what}at most {tol}: {sure} within that of the best candidate."

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in serialize_init_args(self).items())
        return f"{type(self).__name__}({args})"


class RegretBoundCriterion(TransitionCriterion):
    """Ax transition criterion: met once the certified bound is at most ``tolerance``.

    Args:
        tolerance, units: As in :class:`RegretBoundGlobalStoppingStrategy`.
        transition_to, continue_trial_generation: Ax's (its own node: stop).
        min_trials: Not before this many completed trials.
    """

    def __init__(
        self,
        tolerance: float,
        transition_to: str,
        min_trials: int = 0,
        units: Units = "objective",
        continue_trial_generation: bool | None = False,
    ) -> None:
        # The global stopping rule, active with pending trials too.
        rule = RegretBoundGlobalStoppingStrategy(tolerance, min_trials, False, units)
        self.rule, self.tolerance = rule, rule.tolerance
        self.min_trials, self.units = min_trials, units
        super().__init__(transition_to, continue_trial_generation)

    def is_met(self, experiment: Experiment, curr_node: Any = None) -> bool:
        """Whether the running minimum of the bound is at most ``tolerance``."""
        return self.rule.should_stop_optimization(experiment)[0]
