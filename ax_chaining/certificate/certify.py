r"""The certificate a user receives, its options, and the candidates it is
computed over (pure torch)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Protocol, get_args

from torch import Tensor

from ax_chaining.certificate.bounds import (
    ChainingTree,
    Links,
    Method,
    Rule,
    certificate_bounds,
)
from ax_chaining.certificate.rank import RankOptions, RankStatement, rank_statement
from ax_chaining.certificate.residuals import ResidualCalibration
from ax_chaining.certificate.schedule import CheckSchedule
from ax_chaining.certificate.tails import (
    Calibration,
    CalibrationChoice,
    TailLaw,
    bind_tail,
    check_tail,
)
from ax_chaining.checks import (
    check_bool,
    check_choice,
    check_delta,
    check_int,
    type_error,
)
from ax_chaining.distances import DEFAULT_MEMORY_BUDGET, PseudoDistance

__all__ = [
    "DEFAULT_SCALE_LEVEL",
    "LOO_MIN_OBSERVATIONS",
    "Certificate",
    "CertificateOptions",
    "CertifiedSet",
    "PosteriorSet",
    "check_options",
]

#: The fewest observations from which ``calibration="loo"`` certifies.
LOO_MIN_OBSERVATIONS = 20
#: The ``"loo"`` check's default ``scale_level`` (upper 95% confidence limit).
DEFAULT_SCALE_LEVEL = 0.05


def _json_float(value: float) -> float | str:
    value = float(value)
    return value if math.isfinite(value) else str(value)


def _json(value: Any) -> Any:
    """A field as JSON: tensors and tuples as lists, non-finite floats as strings."""
    if isinstance(value, Tensor):
        return [_json_float(v) for v in value.detach().reshape(-1).tolist()]
    if isinstance(value, dict):
        return {str(k): _json_float(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    return _json_float(value) if isinstance(value, float) else value


@dataclass(frozen=True)
class CertificateOptions:
    r"""How a certificate is computed, checked once.

    Example:
        >>> CertificateOptions(method="union", calibration="none").method
        'union'

    Args:
        method: ``"combined"``, ``"union"``, ``"pairwise"`` or ``"chaining"``
            (:func:`~ax_chaining.certificate.bounds.certificate_bounds`);
            None: ``"combined"`` where the chaining tree is at hand, else
            ``"union"``.
        rule, links: As in :mod:`~ax_chaining.certificate.bounds`.
        tail: A :class:`~ax_chaining.certificate.tails.TailLaw`, or None: the
            calibration's default (:func:`~ax_chaining.certificate.tails.resolve_tail`).
        schedule: The declared checks over which ``delta`` is spent; None:
            every step.
        calibration: ``"loo"`` (leave-one-out check), ``"none"`` (the model
            taken as true), ``"forecast"`` or ``"audit"`` (the loop's
            residuals, in an Ax loop), or a
            :class:`~ax_chaining.certificate.residuals.ResidualCalibration`.
        alpha, min_observations, scale_level: The ``"loo"`` check's
            (:func:`~ax_chaining.certificate.calibration.loo_check`).
        rank: The rank statement's options (None: the defaults).
    """

    method: Method | None = None
    rule: Rule = "min_bound"
    links: Links = "actual"
    tail: TailLaw | None = None
    split_delta: bool = False
    schedule: CheckSchedule | None = None
    calibration: CalibrationChoice = "loo"
    alpha: float = 0.01
    min_observations: int = LOO_MIN_OBSERVATIONS
    scale_level: float | None = DEFAULT_SCALE_LEVEL
    rank: RankOptions | None = None

    def __post_init__(self) -> None:
        if self.method is not None:
            check_choice("method", self.method, get_args(Method))
        check_choice("rule", self.rule, get_args(Rule))
        check_choice("links", self.links, get_args(Links))
        check_tail(self.tail)
        check_bool("split_delta", self.split_delta)
        for name, kind in (("schedule", CheckSchedule), ("rank", RankOptions)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise type_error(name, f"a {kind.__name__} or None", value)
        if not isinstance(self.calibration, ResidualCalibration):
            check_choice("calibration", self.calibration, get_args(Calibration))
        object.__setattr__(self, "alpha", check_delta(self.alpha, "alpha"))
        least = check_int("min_observations", self.min_observations, 1)
        object.__setattr__(self, "min_observations", least)
        if self.scale_level is not None:
            level = check_delta(self.scale_level, "scale_level")
            object.__setattr__(self, "scale_level", level)


def check_options(options: object) -> CertificateOptions:
    """``options``, or the defaults for None; a ``TypeError`` for anything else."""
    if options is None:
        return CertificateOptions()
    if not isinstance(options, CertificateOptions):
        raise type_error("options", "a CertificateOptions or None", options)
    return options


@dataclass(frozen=True)
class Certificate:
    r"""A regret certificate for one recommended candidate.

    With probability at least :math:`1 - \delta` (jointly over all steps or
    declared checks), :math:`\max_{x^\star} f(x^\star) - f(x) \le` ``bound``.

    Attributes:
        index: Index of the recommended point ``x`` in the candidate set.
        t: Step (observations + 1) whose budget the bound uses.
        method: ``"combined"``, ``"union"``, ``"pairwise"``, ``"chaining"``, or
            ``"refused"``; ``rule``, ``links``, ``split_delta``: as in
            :class:`CertificateOptions`; ``tail``: the law's name.
        mean: Posterior mean at the point; ``components``: each part's bound.
        certified: Indices of the candidates certified; ``bounds``: theirs.
        share: The failure probability spent on this check.
        valid: False when a model check rejected the model (``bound`` is then
            ``inf``) or could not run for want of observations (the bound and
            rank statement then hold only if the model is right; ``reason``
            starts with "unchecked"); ``reason`` says why; ``checks``: the
            checks' statistics.
        rank_bound: With probability at least ``1 - share``, the point is
            among the ``rank_bound`` best (None where not computed); the other
            ``rank_*`` fields and ``expected_better``: as in
            :class:`~ax_chaining.certificate.rank.RankStatement`.
    """

    index: int
    x: Tensor
    bound: float
    delta: float
    t: int
    method: str
    rule: str = "min_bound"
    links: str = "actual"
    tail: str = "gaussian"
    mean: float = float("nan")
    components: dict = field(default_factory=dict)
    certified: tuple[int, ...] = ()
    bounds: tuple[float, ...] = ()
    split_delta: bool = False
    share: float = float("nan")
    valid: bool = True
    reason: str = ""
    checks: dict = field(default_factory=dict)
    rank_bound: int | None = None
    expected_better: float = float("nan")
    rank_tolerance: float = 0.0
    rank_method: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe dict (floats, ints, strings and lists only)."""
        return {f.name: _json(getattr(self, f.name)) for f in fields(self)}


class CertifiedSet(Protocol):
    """The ``n`` candidates a certificate is computed over
    (:class:`PosteriorSet`, :class:`~ax_chaining.distributed.store.ShardedStore`):
    ``methods``, the bounds it computes (the first is the default); ``ranks``,
    whether it gives a rank statement."""

    n: int
    methods: tuple[Method, ...]
    ranks: bool

    def values(self, index: Tensor) -> tuple[Tensor, Tensor]:
        """The objective's means (float64) and the candidates at ``index``."""

    def bind(self, law: TailLaw) -> TailLaw:
        """``law`` bound to the candidates where it depends on them."""

    def bounds(self, index: Tensor, **options: Any) -> dict[str, Tensor]:
        """:func:`~ax_chaining.certificate.bounds.certificate_bounds` at
        ``index`` in objective units."""

    def rank(self, index: int, **options: Any) -> RankStatement:
        """The rank statement of candidate ``index``."""


@dataclass
class PosteriorSet:
    """A :class:`CertifiedSet` of ``N`` candidates held in memory: the
    objective's ``mean`` (float64, larger is better), the pseudo-distance
    :math:`d_t`, the candidates, their prior variances and the chaining tree
    (None: no chaining bound)."""

    mean: Tensor
    distance: PseudoDistance
    candidates: Tensor
    prior_var: Tensor
    tree: ChainingTree | None = None
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    ranks: bool = True

    @property
    def n(self) -> int:
        return self.distance.n

    @property
    def methods(self) -> tuple[Method, ...]:
        return ("union", "pairwise") if self.tree is None else get_args(Method)

    def values(self, index: Tensor) -> tuple[Tensor, Tensor]:
        return self.mean[index], self.candidates[index]

    def bind(self, law: TailLaw) -> TailLaw:
        return bind_tail(law, self.distance.variance, self.prior_var)

    def bounds(
        self, index: Tensor, *, scale: float, method: Method, **options: Any
    ) -> dict[str, Tensor]:
        parts = certificate_bounds(
            self.mean / scale,
            self.distance,
            index,
            t=1,
            method=method,
            tree=None if method in ("union", "pairwise") else self.tree,
            memory_budget=self.memory_budget,
            **options,
        )
        return {k: v * scale for k, v in parts.items()}

    def rank(self, index: int, **options: Any) -> RankStatement:
        return rank_statement(
            self.mean, self.distance, index, memory_budget=self.memory_budget, **options
        )
