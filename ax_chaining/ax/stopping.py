"""Stop an Ax optimization when the recorded regret certificate is small.

One rule, three of Ax's extension points: a node's own check (the strategies'
``stop_tolerance``, which ends ``Client.get_next_trials`` with
:class:`CertifiedStop` naming the bound), a transition criterion
(:class:`RegretBoundCriterion`, for strategies composed by hand) and a global
stopping strategy (:class:`RegretBoundGlobalStoppingStrategy`, for Ax's
``Orchestrator``).

Which bound the rule acts on (``use``): by default the *current* one, the last
check's certificate. With hyperparameters refitted at every step, a running
minimum would keep an early, overconfident bound forever; the current bound is
as valid as the current model, and a stop at any check is covered by the union
over checks (:mod:`ax_chaining.certificate`). ``use="running_min"`` is valid when
every step's model is right (fixed, true hyperparameters).
"""

from typing import Any, Literal, get_args

from ax.core.experiment import Experiment
from ax.exceptions.generation_strategy import GenerationStrategyCompleted
from ax.generation_strategy.transition_criterion import TransitionCriterion
from ax.global_stopping.strategies.base import BaseGlobalStoppingStrategy
from ax.utils.common.serialization import serialize_init_args

from ax_chaining.ax.certificates import Units, best_certificate
from ax_chaining.checks import check_choice, check_float, check_int

Use = Literal["current", "running_min"]


class CertifiedStop(GenerationStrategyCompleted):
    """The strategy stopped: the certified regret bound reached the tolerance.

    A ``GenerationStrategyCompleted`` (code that catches it keeps working);
    its message names the parameters, the bound, the tolerance and ``delta``.
    """


class RegretBoundGlobalStoppingStrategy(BaseGlobalStoppingStrategy):
    r"""Stop when the certified regret bound is at most ``tolerance``.

    Args:
        tolerance: Stop once the bound (see ``use``) is at most this.
        min_trials, inactive_when_pending_trials: Ax's arguments.
        units: ``"objective"`` or ``"model"``, as in
            :func:`~ax_chaining.ax.certificates.certificate_history`.
        use: ``"current"`` (default) or ``"running_min"`` (module docstring).

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
        use: Use = "current",
    ) -> None:
        rule = (lambda v: v > 0, "a finite positive float")
        self.tolerance = check_float("tolerance", tolerance, rule, "a positive float")
        self.units: Units = check_choice("units", units, get_args(Units))
        self.use: Use = check_choice("use", use, get_args(Use))
        min_trials = check_int("min_trials", min_trials, 0)
        super().__init__(min_trials, inactive_when_pending_trials)

    def _should_stop_optimization(  # Ax's abstract hook for stopping strategies
        self, experiment: Experiment, **kwargs: Any
    ) -> tuple[bool, str]:
        """``(should_stop, message)``; the message names the parameters and bound."""
        best = best_certificate(experiment, units=self.units, use=self.use)
        if best is None:
            return False, f"No regret certificate recorded yet ({self.units} units)."
        which = "current" if self.use == "current" else "running minimum"
        what = f"The certified regret bound {best['bound']:.4g} ({self.units} units, "
        what += f"{which}, recorded at trial {best['recorded_at']}) for "
        what += f"{best['parameters']} (evaluated in trial {best['trial_index']}) is "
        tol = f"the tolerance {self.tolerance:.4g}"
        if not best["valid"]:
            return False, f"{what}refused: {best['reason']}"
        if best["bound"] > self.tolerance:
            return False, f"{what}above {tol}."
        sure = f"with probability at least 1 - {best['delta']}, these parameters are"
        return True, f"{what}at most {tol}: {sure} within that of the best candidate."

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in serialize_init_args(self).items())
        return f"{type(self).__name__}({args})"


class RegretBoundCriterion(TransitionCriterion):
    """Ax transition criterion: met once the certified bound is at most
    ``tolerance`` (a node pointing to itself then completes the strategy).

    Args:
        tolerance, units, use: As in :class:`RegretBoundGlobalStoppingStrategy`.
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
        use: Use = "current",
    ) -> None:
        # The global stopping rule, active with pending trials too.
        self.rule = RegretBoundGlobalStoppingStrategy(
            tolerance, min_trials, False, units, use
        )
        self.tolerance, self.min_trials = self.rule.tolerance, min_trials
        self.units, self.use = units, use
        super().__init__(transition_to, continue_trial_generation)

    def is_met(self, experiment: Experiment, curr_node: Any = None) -> bool:
        """Whether the bound is at most ``tolerance``."""
        return self.rule.should_stop_optimization(experiment)[0]

    def stop_if_met(self, experiment: Experiment) -> None:
        """Raise :class:`CertifiedStop`, naming the bound, if the rule is met."""
        stop, message = self.rule.should_stop_optimization(experiment)
        if stop:
            raise CertifiedStop(message)
