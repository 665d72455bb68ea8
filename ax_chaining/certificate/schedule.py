r"""How :math:`\delta` is spent over steps and declared checks: the
:math:`j`-th gets :math:`6 \delta / (\pi^2 j^2)`; these sum to :math:`\delta`,
so bounds built with them hold at every check at once."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from ax_chaining.checks import check_choice, check_delta, check_float, check_int

__all__ = ["DEFAULT_DELTA", "EVERY_STEP", "CheckSchedule", "ScheduleKind", "step_delta"]

#: The confidence parameter every certificate and acquisition defaults to.
DEFAULT_DELTA = 0.05

#: The kinds of :class:`CheckSchedule`.
ScheduleKind = Literal["every", "every_k", "geometric"]


def step_delta(delta: float, t: int) -> float:
    r"""Share of ``delta`` given to step ``t``: :math:`6 \delta / (\pi^2 t^2)`."""
    delta = check_delta(delta)
    t = check_int("t", t, 1)
    return 6.0 * delta / (math.pi**2 * t**2)


@dataclass(frozen=True)
class CheckSchedule:
    r"""The steps at which certificates are checked; :math:`\delta` is spent on
    them only.

    * ``"every"`` (default): every step; a model with ``n`` observations is
      check :math:`j = n + 1` (:func:`step_delta`).
    * ``"every_k"``: after ``start + (j - 1) k`` observations, check :math:`j`.
    * ``"geometric"``: after :math:`n_1 = \texttt{start}` and
      :math:`n_j = \max(n_{j-1} + 1, \lceil \texttt{start} \cdot
      \texttt{ratio}^{j-1} \rceil)` observations (``ratio`` > 1).

    Example:
        >>> s = CheckSchedule("geometric", start=10)
        >>> [n for n in range(1, 100) if s.index(n) is not None]
        [10, 20, 40, 80]
    """

    kind: ScheduleKind = "every"
    k: int = 1
    start: int = 1
    ratio: float = 2.0

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, get_args(ScheduleKind))
        check_int("k", self.k, 1)
        check_int("start", self.start, 1)
        check_float("ratio", self.ratio, (lambda v: v > 1, "> 1"))

    def index(self, num_observations: int) -> int | None:
        """The check index :math:`j \\ge 1` of the step with that many
        observations, or None if it is not a check."""
        n = check_int("num_observations", num_observations, 0)
        if self.kind == "every":
            return n + 1 if n >= 1 else None
        if n < self.start:
            return None
        if self.kind == "every_k":
            j, rest = divmod(n - self.start, self.k)
            return j + 1 if rest == 0 else None
        j, at = 1, self.start
        while at < n:
            j += 1
            at = max(at + 1, math.ceil(self.start * self.ratio ** (j - 1)))
        return j if at == n else None

    def next_check(self, num_observations: int) -> int:
        """The number of observations of the first check at or after this step."""
        n = max(1, check_int("num_observations", num_observations, 0))
        while self.index(n) is None:
            n += 1
        return n

    def share(self, delta: float, num_observations: int) -> float:
        """:func:`step_delta` ``(delta, j)`` of this step's check ``j``; a
        ``ValueError`` if the step is not a check."""
        j = self.index(num_observations)
        if j is None:
            raise ValueError(
                f"{num_observations} observations is not a check of {self}; the "
                f"next check is after {self.next_check(num_observations)}."
            )
        return step_delta(delta, j)


#: The default schedule: a check at every step.
EVERY_STEP = CheckSchedule()
