"""Stop an Ax optimization when the recorded regret certificate is small, or
when its rank statement names few candidates
(:class:`RankBoundGlobalStoppingStrategy`).

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


class RankBoundGlobalStoppingStrategy(BaseGlobalStoppingStrategy):
    r"""Stop when the certified candidate is among the best few: the recorded
    certificate's ``rank_bound`` (with probability at least :math:`1 -
    \delta`, the certified candidate is among the ``rank_bound`` best of the
    candidate set, :mod:`ax_chaining.certificate.rank`) is at most ``max_rank``, or at
    most ``max_fraction`` of the candidate set (one of the two).

    The rule acts on the current check's certificate, as
    :class:`RegretBoundGlobalStoppingStrategy` with ``use="current"``: a stop
    at any check is covered by the union over checks. A refused certificate
    never stops.

    Args:
        max_rank: Stop once ``rank_bound <= max_rank``.
        max_fraction: Stop once ``rank_bound <= max_fraction * N`` (``N``
            candidates); e.g. 0.01 for "among the top 1%".
        min_trials, inactive_when_pending_trials: Ax's arguments.

    Example:
        >>> stopping = RankBoundGlobalStoppingStrategy(max_fraction=0.01)
        >>> stop, message = stopping.should_stop_optimization(experiment=gs.experiment)
    """

    def __init__(
        self,
        max_rank: int | None = None,
        max_fraction: float | None = None,
        min_trials: int = 5,
        inactive_when_pending_trials: bool = True,
    ) -> None:
        if (max_rank is None) == (max_fraction is None):
            raise ValueError(
                "Pass exactly one of `max_rank` (an int >= 1) and `max_fraction` "
                f"(in (0, 1]), got max_rank={max_rank!r} and "
                f"max_fraction={max_fraction!r}."
            )
        self.max_rank = None if max_rank is None else check_int("max_rank", max_rank, 1)
        self.max_fraction = (
            None
            if max_fraction is None
            else check_float(
                "max_fraction", max_fraction, (lambda v: 0 < v <= 1, "in (0, 1]")
            )
        )
        min_trials = check_int("min_trials", min_trials, 0)
        super().__init__(min_trials, inactive_when_pending_trials)

    def limit(self, num_candidates: int) -> int:
        """The largest ``rank_bound`` that stops, for ``num_candidates``."""
        if self.max_rank is not None:
            return self.max_rank
        return int(self.max_fraction * num_candidates)  # type: ignore[operator]

    def _should_stop_optimization(  # Ax's abstract hook for stopping strategies
        self, experiment: Experiment, **kwargs: Any
    ) -> tuple[bool, str]:
        """``(should_stop, message)``; the message names the parameters and rank."""
        best = best_certificate(experiment)
        if best is None or best.get("rank_bound") is None:
            return False, "No rank statement recorded yet."
        rank, n = int(best["rank_bound"]), best.get("num_candidates")
        if n is None:
            return False, "The recorded certificate does not name its candidate set."
        limit = self.limit(int(n))
        what = f"The certified rank bound {rank} of {n} candidates (recorded at trial "
        what += f"{best['recorded_at']}) for {best['parameters']} is "
        if not best["valid"]:
            return False, f"{what}refused: {best['reason']}"
        if rank > limit:
            return False, f"{what}above the limit {limit}."
        sure = f"with probability at least 1 - {best['delta']}, these parameters are"
        return True, f"{what}at most {limit}: {sure} among the {rank} best candidates."

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in serialize_init_args(self).items())
        return f"{type(self).__name__}({args})"
