"""Stop an Ax optimization when the current certificate's regret bound or rank
statement is small enough."""

from typing import Any, Literal, get_args

from ax.core.experiment import Experiment
from ax.exceptions.generation_strategy import GenerationStrategyCompleted
from ax.global_stopping.strategies.base import BaseGlobalStoppingStrategy
from ax.utils.common.serialization import serialize_init_args

from ax_chaining.ax.certificates import Units, best_certificate
from ax_chaining.checks import check_choice, check_float, check_int

Use = Literal["current", "running_min"]


class CertifiedStop(GenerationStrategyCompleted):
    """The strategy stopped: the certified regret bound reached the tolerance
    (its message names the parameters, the bound, the tolerance and ``delta``)."""


class _CertificateStop(BaseGlobalStoppingStrategy):
    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in serialize_init_args(self).items())
        return f"{type(self).__name__}({args})"


class RegretBoundGlobalStoppingStrategy(_CertificateStop):
    r"""Stop when the certified regret bound is at most ``tolerance``.

    Example:
        >>> stopping = RegretBoundGlobalStoppingStrategy(tolerance=0.5, min_trials=15)
        >>> stop, message = stopping.should_stop_optimization(experiment=gs.experiment)

    Args:
        tolerance: Stop once the bound (see ``use``) is at most this.
        min_trials, inactive_when_pending_trials: Ax's arguments.
        units: ``"objective"`` or ``"model"``.
        use: ``"current"`` (default) or ``"running_min"`` (valid only when
            every step's model is right).
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
        best = best_certificate(experiment, units=self.units, use=self.use)
        if best is None:
            return False, f"No regret certificate recorded yet ({self.units} units)."
        which = "current" if self.use == "current" else "running minimum"
        what = f"The certified regret bound {best['bound']:.4g} ({self.units} units, "
        what += f"{which}, recorded at trial {best['recorded_at']}) for "
        what += f"{best['parameters']} (evaluated in trial {best['trial_index']}) is "
        tol = f"the tolerance {self.tolerance:.4g}"
        if not best["valid"]:
            return False, f"{what}not certified: {best['reason']}"
        if best["bound"] > self.tolerance:
            return False, f"{what}above {tol}."
        sure = f"with probability at least 1 - {best['delta']}, these parameters are"
        return True, f"{what}at most {tol}: {sure} within that of the best candidate."

    def stop_if_met(self, experiment: Experiment) -> None:
        """Raise :class:`CertifiedStop`, naming the bound, if the rule is met."""
        stop, message = self.should_stop_optimization(experiment)
        if stop:
            raise CertifiedStop(message)


class RankBoundGlobalStoppingStrategy(_CertificateStop):
    r"""Stop when the current certificate's ``rank_bound`` (with probability at
    least :math:`1 - \delta`, the point is among the ``rank_bound`` best
    candidates) is at most ``max_rank`` or ``max_fraction`` of the candidates
    (pass one); a certificate not valid (refused or unchecked) never stops.

    Example:
        >>> stopping = RankBoundGlobalStoppingStrategy(max_fraction=0.01)

    Args:
        max_rank: Stop once ``rank_bound <= max_rank``.
        max_fraction: Stop once ``rank_bound <= max_fraction * N``.
        min_trials, inactive_when_pending_trials: Ax's arguments.
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
        self.max_fraction = None
        if max_fraction is not None:
            rule = (lambda v: 0 < v <= 1, "in (0, 1]")
            self.max_fraction = check_float("max_fraction", max_fraction, rule)
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
            return False, f"{what}not certified: {best['reason']}"
        if rank > limit:
            return False, f"{what}above the limit {limit}."
        sure = f"with probability at least 1 - {best['delta']}, these parameters are"
        return True, f"{what}at most {limit}: {sure} among the {rank} best candidates."
