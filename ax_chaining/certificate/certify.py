r"""The certificate of a recommended point, as the user receives it (pure torch).

:func:`make_certificate` computes the bounds of the candidates that may be
recommended (:func:`~ax_chaining.certificate.bounds.certificate_bounds`),
recommends one (:func:`~ax_chaining.certificate.bounds.recommend`) and returns
a frozen :class:`Certificate`: with probability at least :math:`1 - \delta`
(jointly over all steps or checks), :math:`\max_{x^\star} f(x^\star) - f(x)
\le` ``bound`` for its point, under the assumptions of
:mod:`ax_chaining.certificate.bounds`. :func:`refused_certificate` is the
answer when a model check refuses (``valid=False``). From a BoTorch model, see
:mod:`ax_chaining.certificate.calibration`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ax_chaining.certificate.bounds import (
    ChainingTree,
    Links,
    Method,
    Rule,
    certificate_bounds,
    recommend,
)
from ax_chaining.certificate.schedule import step_delta
from ax_chaining.certificate.tails import Tail, TailLaw
from ax_chaining.distances import DEFAULT_MEMORY_BUDGET, PseudoDistance

__all__ = ["Certificate", "make_certificate", "refused_certificate"]


def _json_float(value: float) -> float | str:
    value = float(value)
    return value if math.isfinite(value) else str(value)


@dataclass(frozen=True)
class Certificate:
    r"""A regret certificate for one recommended candidate.

    With probability at least :math:`1 - \delta` (jointly over all steps, under
    the assumptions of :mod:`ax_chaining.certificate.bounds`),
    :math:`\max_{x^\star} f(x^\star) - f(x) \le` ``bound``.

    Attributes:
        index: Index of the recommended point in the candidate set.
        x: The recommended candidate (``d``-dim tensor).
        bound: The certificate, in objective units.
        delta: Confidence parameter.
        t: Step (observations + 1) whose budget the bound uses.
        method: ``"combined"``, ``"union"``, ``"pairwise"`` or ``"chaining"``.
        rule: How the point was chosen (``"min_bound"``, ``"max_mean"`` or
            ``"index"``).
        links: ``"actual"`` or ``"radius"``.
        tail: ``"gaussian"``, ``"chernoff"`` or ``"student-<dof>"``.
        mean: Posterior mean at the point (objective units).
        components: The bound of each part at the point (``union`` and
            ``chaining`` for ``"combined"``).
        certified: Indices of the candidates that were certified.
        bounds: Their bounds (same order).
        split_delta: Whether the parts of ``"combined"`` got ``delta / 2`` each.
        share: The failure probability spent on this check (the step's share
            of ``delta``).
        valid: False when a model check refused to certify; ``bound`` is then
            ``inf`` and ``reason`` says why.
        reason: Why the certificate was refused (empty when valid).
        checks: The model checks' statistics (name to value).
        rank_bound: With probability at least ``1 - share``, the point is
            among the ``rank_bound`` best candidates
            (:mod:`~ax_chaining.certificate.rank`; the number of candidates
            when refused, None where not computed).
        expected_better: Expected number of candidates better than the point
            by more than ``rank_tolerance``.
        rank_tolerance: That tolerance (the bound's units).
        rank_method: ``"union"``, ``"monte_carlo"`` or ``"refused"``.
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
        return {
            "index": int(self.index),
            "x": [_json_float(v) for v in self.x.detach().reshape(-1).tolist()],
            "bound": _json_float(self.bound),
            "delta": float(self.delta),
            "t": int(self.t),
            "method": str(self.method),
            "rule": str(self.rule),
            "links": str(self.links),
            "tail": str(self.tail),
            "mean": _json_float(self.mean),
            "components": {str(k): _json_float(v) for k, v in self.components.items()},
            "certified": [int(i) for i in self.certified],
            "bounds": [_json_float(b) for b in self.bounds],
            "split_delta": bool(self.split_delta),
            "share": _json_float(self.share),
            "valid": bool(self.valid),
            "reason": str(self.reason),
            "checks": {str(k): _json_float(v) for k, v in self.checks.items()},
            "rank_bound": None if self.rank_bound is None else int(self.rank_bound),
            "expected_better": _json_float(self.expected_better),
            "rank_tolerance": float(self.rank_tolerance),
            "rank_method": str(self.rank_method),
        }


def make_certificate(
    mean: Tensor,
    distance: PseudoDistance,
    index: Tensor,
    candidates: Tensor,
    *,
    t: int,
    delta: float,
    share: float | None = None,
    method: Method = "combined",
    tree: ChainingTree | None = None,
    links: Links = "actual",
    tail: Tail | TailLaw = "gaussian",
    rule: Rule = "min_bound",
    split_delta: bool = False,
    sign: float = 1.0,
    scale: float = 1.0,
    checks: dict[str, float] | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> Certificate:
    """The :class:`Certificate` of the recommended point among ``index``.

    Args:
        mean: ``N`` posterior means of the objective, larger is better.
        distance: The posterior pseudo-distance over the ``N`` candidates.
        index: Indices of the candidates that may be recommended.
        candidates: The ``N x d`` candidates (for the recommended ``x``).
        t, delta, share, method, tree, links, tail, split_delta: As in
            :func:`certificate_bounds`.
        rule: As in :func:`recommend`.
        sign: ``-1`` where ``mean`` is the negated model mean (minimization),
            so that the reported ``mean`` is the model's.
        scale: A factor ``c >= 1`` on every posterior standard deviation (a
            calibration; the bound of ``c d`` is ``c`` times the bound of ``d``
            with the means divided by ``c``, for every method).
        checks: The model checks' statistics, recorded with the certificate.
        memory_budget: As in :func:`certificate_bounds`.
    """
    parts = certificate_bounds(
        mean / scale,
        distance,
        index,
        t=t,
        delta=delta,
        method=method,
        tree=tree,
        links=links,
        tail=tail,
        split_delta=split_delta,
        share=share,
        memory_budget=memory_budget,
    )
    parts = {k: v * scale for k, v in parts.items()}
    bounds = parts["bound"]
    pos = recommend(bounds, index, mean, rule)
    best = int(index[pos])
    return Certificate(
        index=best,
        x=candidates[best].detach().clone(),
        bound=float(bounds[pos]),
        delta=float(delta),
        t=int(t),
        method=method,
        rule=rule,
        links=links,
        tail=tail if isinstance(tail, str) else tail.name,
        mean=float(mean[best]) * sign,
        components={k: float(v[pos]) for k, v in parts.items() if k != "bound"},
        certified=tuple(int(i) for i in index.tolist()),
        bounds=tuple(float(b) for b in bounds.tolist()),
        split_delta=bool(split_delta),
        share=float(step_delta(delta, t) if share is None else share),
        checks=dict(checks or {}),
    )


def refused_certificate(
    mean: Tensor,
    index: Tensor,
    candidates: Tensor,
    *,
    t: int,
    delta: float,
    reason: str,
    checks: dict[str, float],
    sign: float = 1.0,
) -> Certificate:
    """A refused certificate (``valid=False``, ``bound=inf``) for the evaluated
    candidate of largest posterior mean, saying ``reason``."""
    pos = int(torch.argmax(mean[index]))
    best = int(index[pos])
    return Certificate(
        index=best,
        x=candidates[best].detach().clone(),
        bound=math.inf,
        delta=float(delta),
        t=int(t),
        method="refused",
        rule="max_mean",
        mean=float(mean[best]) * sign,
        certified=tuple(int(i) for i in index.tolist()),
        valid=False,
        reason=reason,
        checks=dict(checks),
    )
