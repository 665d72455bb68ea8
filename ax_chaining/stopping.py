r"""Stop an Ax optimization when Chaining-UCB certifies a small regret.

Theorem 1 of Contal, Malherbe & Vayatis (2015) bounds, with probability at least
:math:`1 - \delta` simultaneously for all iterations, the instantaneous regret of
each Chaining-UCB query :math:`x_t`:

.. math::

    \sup_{x^\star \in X} f(x^\star) - f(x_t) \le B_t,

where :math:`B_t` is :meth:`ax_chaining.acquisition.ChainingUCB.regret_bound`
at :math:`x_t`, under the posterior it was chosen with. The Chaining-UCB node of
:mod:`ax_chaining.ax` records :math:`B_t` with every generator run, and
:class:`RegretBoundGlobalStoppingStrategy` stops the optimization once the
certificate of the last query falls below a tolerance.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from ax.core.experiment import Experiment
from ax.global_stopping.strategies.base import BaseGlobalStoppingStrategy
from ax.storage.json_store.registry import (
    CORE_DECODER_REGISTRY,
    CORE_ENCODER_REGISTRY,
)

from ax_chaining.ax import GEN_METADATA_KEY

__all__ = ["RegretBoundGlobalStoppingStrategy", "latest_regret_bound"]

Units = Literal["objective", "model"]


def latest_regret_bound(
    experiment: Experiment, units: Units = "objective"
) -> tuple[int, float] | None:
    """The regret certificate of the most recent Chaining-UCB query.

    Args:
        experiment: An Ax experiment generated (in part) by a Chaining-UCB node
            of :mod:`ax_chaining.ax`.
        units: ``"objective"`` (the objective's own units, through Ax's
            ``StandardizeY`` scale) or ``"model"`` (the standardized units the
            GP works in).

    Returns:
        ``(trial_index, bound)`` for the trial with the largest index that
        carries a certificate (for a trial with several arms, the smallest bound
        of its arms), or None if no trial has one.
    """
    key = "regret_bound" if units == "objective" else "regret_bound_model_units"
    for index in sorted(experiment.trials, reverse=True):
        for gr in experiment.trials[index].generator_runs:
            meta = (gr.gen_metadata or {}).get(GEN_METADATA_KEY) or {}
            bounds = meta.get(key)
            if bounds:
                return index, float(min(bounds))
    return None


class RegretBoundGlobalStoppingStrategy(BaseGlobalStoppingStrategy):
    r"""Stop when the Chaining-UCB regret certificate drops below ``tolerance``.

    The certificate is the paper's bound (Eq. (ucb)) at the last Chaining-UCB
    query: with probability at least :math:`1 - \delta` (the ``delta`` of the
    Chaining-UCB node), the last query is within ``bound`` of the best candidate.
    It holds under the assumption that the GP prior is the true one (with the
    learned hyperparameters), and it is conservative: expect it to fall below
    ``tolerance`` well after the optimum is found.

    Use it with Ax's ``Orchestrator`` (``OrchestratorOptions(global_stopping_strategy=
    ...)``), with ``AxClient(global_stopping_strategy=...)``, or, in an
    ``ax.api.Client`` loop, by calling :meth:`should_stop_optimization` with the
    client's experiment (see the example).

    Args:
        tolerance: Stop once the last certificate is at most this (in ``units``).
        min_trials: Do not stop before this many completed trials.
        inactive_when_pending_trials: Do not stop while trials are running.
        units: ``"objective"`` (default; the objective's units) or ``"model"``
            (Ax's standardized units).

    Example:
        >>> stopping = RegretBoundGlobalStoppingStrategy(tolerance=0.5, min_trials=15)
        >>> for _ in range(100):
        ...     stop, message = stopping.should_stop_optimization(
        ...         experiment=client._experiment
        ...     )
        ...     if stop:
        ...         print(message)
        ...         break
        ...     for index, params in client.get_next_trials(max_trials=1).items():
        ...         client.complete_trial(index, raw_data={"y": f(params)})
    """

    def __init__(
        self,
        tolerance: float,
        min_trials: int = 5,
        inactive_when_pending_trials: bool = True,
        units: Units = "objective",
    ) -> None:
        if isinstance(tolerance, bool) or not isinstance(tolerance, int | float):
            raise TypeError(
                f"`tolerance` must be a positive float, got {type(tolerance).__name__}."
            )
        if not (tolerance > 0 and math.isfinite(tolerance)):
            raise ValueError(
                f"`tolerance` must be a finite positive float, got {tolerance}."
            )
        if isinstance(min_trials, bool) or not isinstance(min_trials, int):
            raise TypeError(
                f"`min_trials` must be an int, got {type(min_trials).__name__}."
            )
        if min_trials < 0:
            raise ValueError(f"`min_trials` must be >= 0, got {min_trials}.")
        if units not in ("objective", "model"):
            raise ValueError(f"`units` must be 'objective' or 'model', got {units!r}.")
        super().__init__(
            min_trials=min_trials,
            inactive_when_pending_trials=inactive_when_pending_trials,
        )
        self.tolerance = float(tolerance)
        self.units: Units = units

    def _should_stop_optimization(
        self, experiment: Experiment, **kwargs: Any
    ) -> tuple[bool, str]:
        """Compare the last Chaining-UCB certificate with ``tolerance``.

        Args:
            experiment: The experiment.
            kwargs: Ignored.

        Returns:
            ``(should_stop, message)``; the message reports the bound.
        """
        found = latest_regret_bound(experiment, units=self.units)
        if found is None:
            return False, (
                "No Chaining-UCB regret certificate yet (no trial was generated by a "
                f"Chaining-UCB node with {self.units}-unit bounds)."
            )
        index, bound = found
        unit = "objective units" if self.units == "objective" else "model units"
        if bound <= self.tolerance:
            return True, (
                f"Chaining-UCB regret bound {bound:.4g} ({unit}) at trial {index} is "
                f"at most the tolerance {self.tolerance:.4g}: with high probability "
                "the last query is within that of the best candidate."
            )
        return False, (
            f"Chaining-UCB regret bound {bound:.4g} ({unit}) at trial {index} is "
            f"above the tolerance {self.tolerance:.4g}."
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(tolerance={self.tolerance}, "
            f"min_trials={self.min_trials}, "
            f"inactive_when_pending_trials={self.inactive_when_pending_trials}, "
            f"units={self.units!r})"
        )


def _to_dict(strategy: RegretBoundGlobalStoppingStrategy) -> dict[str, Any]:
    return {
        "__type": type(strategy).__name__,
        "tolerance": strategy.tolerance,
        "min_trials": strategy.min_trials,
        "inactive_when_pending_trials": strategy.inactive_when_pending_trials,
        "units": strategy.units,
    }


def register_storage() -> None:
    """Register the stopping strategy with Ax's JSON registries (idempotent)."""
    CORE_ENCODER_REGISTRY[RegretBoundGlobalStoppingStrategy] = _to_dict
    CORE_DECODER_REGISTRY["RegretBoundGlobalStoppingStrategy"] = (
        RegretBoundGlobalStoppingStrategy
    )


register_storage()
