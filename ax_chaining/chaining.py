r"""Algorithm 1 of Contal, Malherbe and Vayatis (2015): nested covers and ``H_i``.

Notation (used throughout the package):

* ``t``: the iteration of Algorithm 1; the posterior conditions on ``t - 1``
  observations.
* ``scale`` (:math:`s`): the radius of the first level. The paper normalizes the
  kernel so that :math:`k(x, x) \le 1` and uses :math:`s = 1`.
* ``level`` :math:`i = 1, \dots, L` with radius :math:`\epsilon_i = s\,2^{1-i}`
  (``eps``), and :math:`L = \lceil 1 - \log_2(\sigma_t^{\min} / s) \rceil`.
* ``cover`` :math:`T_i`: nested covers, :math:`T_0 = \emptyset` and

  .. math::

      T_i = T_{i-1} \cup \mathrm{Cover}\big(\{x : d_t(x, T_{i-1}) > \epsilon_i\},
      d_t, \epsilon_i\big),

  so every candidate is within :math:`\epsilon_i` of :math:`T_i` and
  :math:`T_{i-1} \subseteq T_i`.
* ``H`` :math:`H_i = \epsilon_i \sqrt{2 u_i}` with the union-bound level
  :math:`u_i = \log\big((|T_i| + 1)\, i^2 t^2 \pi^4 / (36 \delta)\big)`.
* ``bonus`` :math:`b_t(x) = \sum_{i:\, \sigma_t^{\min} \le \epsilon_i <
  \sigma_t(x)} H_i`, the exploration term of Chaining-UCB.

Deviations from the paper, each a switch:

* ``h_radius="algorithm"`` (default) writes :math:`H_i` with :math:`\epsilon_i` as
  in the box of Algorithm 1; ``"proof"`` uses :math:`\epsilon_{i-1} = 2
  \epsilon_i`, as in the proof of Eq. (ucb) in Appendix A.
* ``sigma_floor``: :math:`\sigma_t^{\min} = 0` (noise-free data, candidates equal
  to training points) would mean infinitely many levels. The engine uses
  :math:`\max(\sigma_t^{\min}, \texttt{sigma\_floor} \cdot s)`; levels below the
  floor change the bonus by less than their geometric tail.
* ``cover="farthest_first"``: nested covers from one farthest-first traversal,
  with ``max_cover_size``; a level whose cover would be larger uses the valid
  bound :math:`|T_i| \le N` (taking :math:`T_i = X`) in :math:`H_i`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from ax_chaining.covers import farthest_first_order, greedy_dominating_set
from ax_chaining.distances import PseudoDistance

__all__ = [
    "ChainingResult",
    "chaining_covers",
    "num_levels",
    "union_bound_log",
]

HRadius = Literal["algorithm", "proof"]
CoverMethod = Literal["greedy", "farthest_first"]

_PI4_OVER_36 = math.pi**4 / 36.0


def union_bound_log(cover_size: Tensor, level: Tensor, t: int, delta: float) -> Tensor:
    r""":math:`u_i = \log\big((|T_i| + 1)\, i^2 t^2 \pi^4 / (36 \delta)\big)`."""
    return (
        torch.log1p(cover_size.to(torch.float64))
        + 2.0 * torch.log(level.to(torch.float64))
        + 2.0 * math.log(t)
        + math.log(_PI4_OVER_36 / delta)
    )


def num_levels(sigma_min: float, scale: float) -> int:
    r"""Number of levels :math:`L = \lceil 1 - \log_2(\sigma^{\min} / s) \rceil`.

    Computed with exact comparisons of :math:`s\,2^{1-i}` against
    :math:`\sigma^{\min}`, so exact powers of two are not pushed one level off by
    the round-off of a logarithm. ``L = 0`` when :math:`\sigma^{\min} \ge 2 s`.
    """
    if not sigma_min > 0:
        raise ValueError(
            f"sigma_min must be positive to bound the number of levels, got "
            f"{sigma_min}; use a positive sigma_floor."
        )
    level = max(0, math.ceil(1.0 - math.log2(sigma_min / scale)))
    while level > 0 and scale * 2.0 ** (2 - level) <= sigma_min:
        level -= 1
    while scale * 2.0 ** (1 - level) > sigma_min:
        level += 1
    return level


def _check_positive_int(name: str, value: int, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int,)):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise TypeError(f"{name} must be an integer, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}.")
    return int(value)


def _check_delta(delta: float) -> float:
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}.")
    return delta


@dataclass(frozen=True)
class ChainingResult:
    r"""Nested covers, radii and chaining terms of one step of Algorithm 1.

    Attributes:
        eps: ``L`` radii :math:`\epsilon_i = s\,2^{1-i}`, ``i = 1..L``.
        cover_sizes: ``L`` values :math:`|T_i|` used in :math:`H_i` (for a level
            marked in ``bounded``, the bound ``N``).
        H: ``L`` chaining terms :math:`H_i`.
        covers: ``L`` index tensors; ``covers[i-1]`` is :math:`T_i` in selection
            order, and ``covers[i-2]`` is a prefix of it (nested). A level in
            ``bounded`` holds the partial cover that was built.
        bounded: ``L`` booleans; true where :math:`|T_i|` was replaced by ``N``.
        sigma_min: :math:`\min_x \sigma_t(x)` over the candidates (before the floor).
        sigma_min_used: :math:`\max(\sigma^{\min}, \texttt{sigma\_floor}\cdot s)`.
        scale: :math:`s`.
        t: Iteration index used in :math:`u_i`.
        delta: Confidence parameter.
        n: Number of candidates ``N``.
        h_radius: ``"algorithm"`` or ``"proof"`` (see the module docstring).
        cover_method: ``"greedy"`` or ``"farthest_first"``.
    """

    eps: Tensor
    cover_sizes: Tensor
    H: Tensor
    covers: tuple[Tensor, ...]
    bounded: Tensor
    sigma_min: float
    sigma_min_used: float
    scale: float
    t: int
    delta: float
    n: int
    h_radius: str = "algorithm"
    cover_method: str = "greedy"
    info: dict = field(default_factory=dict, compare=False)

    @property
    def num_levels(self) -> int:
        """Number of levels ``L``."""
        return self.eps.numel()

    def bonus(self, sigma: Tensor) -> Tensor:
        r"""Exploration bonus :math:`\sum_{i:\,\sigma^{\min}\le\epsilon_i<\sigma} H_i`.

        Args:
            sigma: Tensor of posterior standard deviations, any shape.

        Returns:
            Tensor of the same shape as ``sigma``, dtype and device.
        """
        eps = self.eps.to(sigma)
        active = (eps >= self.sigma_min_used) & (eps < sigma.unsqueeze(-1))
        return (active.to(sigma) * self.H.to(sigma)).sum(dim=-1)

    def regret_bound(self, sigma: Tensor) -> Tensor:
        r"""Regret certificate of Eq. (ucb) of the paper at points with std ``sigma``.

        With probability at least :math:`1 - \delta`,

        .. math::

            \sup_{x^\star} f(x^\star) - f(x) \le 3 \sum_{i:\, \epsilon_i < \sigma(x)}
            \epsilon_{i-1} \sqrt{2 u_i}, \qquad \epsilon_{i-1} = 2 \epsilon_i,

        for the point :math:`x` that Chaining-UCB selects. The sum runs over all
        levels :math:`i \ge 1` below :math:`\sigma(x)`, not only the ``L``
        computed ones; beyond them :math:`|T_i| \le N` is used, and the geometric
        tail is summed until its remainder is below :math:`2^{-64}` of the sum.

        Kept to compare with the paper only. Its derivation holds at most at the
        query :math:`x_t`, needs the query rule with :math:`\epsilon_{i-1}` in
        :math:`H_i` (``h_radius="proof"``), and has two gaps (the first chaining
        link can reach :math:`2\epsilon_{i-1}`; a level uses up to
        :math:`|T_i| + |T_i \setminus T_{i-1}|` pairs, not :math:`|T_i| + 1`).
        For a certificate that is valid at any point chosen from the data, use
        :mod:`ax_chaining.certificate` (``ChainingUCB.certificate()`` and
        ``ChainingUCB.regret_bound``).

        Args:
            sigma: Tensor of posterior standard deviations, any shape.

        Returns:
            Tensor of bounds, same shape as ``sigma``.
        """
        dtype = torch.float64
        sig = sigma.to(dtype)
        positive = sig[sig > 0]
        if positive.numel() == 0:
            return torch.zeros_like(sigma)
        # Levels below the smallest sigma, plus 64 more: the tail past them is
        # below 2^-64 of the first active term, since eps_i halves and u_i grows
        # only like log i.
        below = math.log2(max(self.scale / float(positive.min()), 1.0))
        depth = max(self.num_levels, int(math.ceil(below)) + 1) + 64
        levels = torch.arange(1, depth + 1, dtype=dtype, device=sig.device)
        sizes = torch.full_like(levels, float(self.n))
        sizes[: self.num_levels] = self.cover_sizes.to(sizes)
        eps = self.scale * torch.pow(2.0, 1.0 - levels)
        u = union_bound_log(sizes, levels, self.t, self.delta)
        terms = 2.0 * eps * torch.sqrt(2.0 * u)
        active = eps < sig.unsqueeze(-1)
        total = 3.0 * (active.to(dtype) * terms).sum(dim=-1)
        return total.to(sigma)

    def summary(self) -> str:
        """A small table of levels, radii, cover sizes and ``H_i``.

        The first line says how the covers were built (``path`` is set by
        :class:`~ax_chaining.acquisition.ChainingUCB`); ``*`` marks a level whose
        cover size is the bound ``N``.
        """
        how = f"covers: {self.cover_method}"
        if "path" in self.info:
            how += f", path: {self.info['path']}"
        lines = [
            f"{how}; N={self.n}, t={self.t}, delta={self.delta:g}, "
            f"scale={self.scale:.5g}, sigma_min={self.sigma_min:.3g}",
            f"{'i':>3} {'eps_i':>12} {'|T_i|':>8} {'H_i':>12}",
        ]
        for i in range(self.num_levels):
            mark = "*" if bool(self.bounded[i]) else " "
            lines.append(
                f"{i + 1:>3} {float(self.eps[i]):>12.5g} "
                f"{int(self.cover_sizes[i]):>7d}{mark} {float(self.H[i]):>12.5g}"
            )
        return "\n".join(lines)


def chaining_covers(
    distance: PseudoDistance,
    t: int,
    delta: float = 0.05,
    scale: float = 1.0,
    sigma_floor: float = 1e-6,
    h_radius: HRadius = "algorithm",
    cover: CoverMethod = "greedy",
    max_cover_size: int | None = None,
) -> ChainingResult:
    r"""Run the cover loop of Algorithm 1 on a pseudo-distance.

    For :math:`i = 1, \dots, L`: :math:`\epsilon_i = s\,2^{1-i}`,
    :math:`\bar X = \{x : d_t(x, T_{i-1}) > \epsilon_i\}`,
    :math:`T_i = T_{i-1} \cup \mathrm{Cover}(\bar X, d_t, \epsilon_i)` and
    :math:`H_i = \epsilon_i \sqrt{2 \log((|T_i|+1) i^2 t^2 \pi^4 / (36\delta))}`.

    Example:
        >>> from ax_chaining.distances import DenseDistance
        >>> cov = torch.tensor([[1.0, 0.9], [0.9, 1.0]], dtype=torch.float64)
        >>> res = chaining_covers(DenseDistance(cov), t=2)
        >>> res.cover_sizes
        tensor([1])

    Args:
        distance: The posterior pseudo-distance over the ``N`` candidates.
        t: Iteration index :math:`t \ge 1` (number of observations plus one in
            this package's convention).
        delta: Confidence parameter in (0, 1).
        scale: Radius :math:`s` of the first level (1 for the paper's normalized
            kernel).
        sigma_floor: Floor on :math:`\sigma^{\min}` relative to ``scale``; see the
            module docstring. Set 0 to disable (then :math:`\sigma^{\min} > 0` is
            required).
        h_radius: ``"algorithm"`` (:math:`\epsilon_i` in :math:`H_i`, default) or
            ``"proof"`` (:math:`\epsilon_{i-1}`).
        cover: ``"greedy"`` (Algorithm 2 on :math:`\bar X`, exact, needs an
            :math:`|\bar X|^2` boolean matrix per level) or ``"farthest_first"``
            (nested covers from one farthest-first traversal, ``O(N)`` memory).
        max_cover_size: With ``"farthest_first"``, stop the traversal at this many
            centres and use :math:`|T_i| \le N` for deeper levels. Default ``N``.

    Returns:
        A :class:`ChainingResult`.
    """
    t = _check_positive_int("t", t)
    delta = _check_delta(delta)
    scale = float(scale)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be a finite positive number, got {scale}.")
    sigma_floor = float(sigma_floor)
    if not (0.0 <= sigma_floor < 1.0):
        raise ValueError(f"sigma_floor must be in [0, 1), got {sigma_floor}.")
    if h_radius not in ("algorithm", "proof"):
        raise ValueError(f"h_radius must be 'algorithm' or 'proof', got {h_radius!r}.")
    if cover not in ("greedy", "farthest_first"):
        raise ValueError(f"cover must be 'greedy' or 'farthest_first', got {cover!r}.")
    n = distance.n
    if n == 0:
        raise ValueError("The candidate set is empty.")
    if max_cover_size is None:
        max_cover_size = n
    max_cover_size = _check_positive_int("max_cover_size", max_cover_size)

    device = distance.device
    sigma = distance.sigma
    sigma_min = float(sigma.min())
    sigma_min_used = max(sigma_min, sigma_floor * scale)
    if sigma_min_used <= 0:
        raise ValueError(
            "The smallest posterior standard deviation over the candidates is 0, "
            "which needs infinitely many levels; pass sigma_floor > 0."
        )
    num = num_levels(sigma_min_used, scale)
    eps = [scale * 2.0 ** (1 - i) for i in range(1, num + 1)]

    if cover == "greedy":
        covers, sizes, bounded = _greedy_levels(distance, eps)
    else:
        covers, sizes, bounded = _farthest_first_levels(distance, eps, max_cover_size)

    levels = torch.arange(1, num + 1, dtype=torch.float64, device=device)
    sizes_t = torch.tensor(sizes, dtype=torch.long, device=device)
    eps_t = torch.tensor(eps, dtype=torch.float64, device=device)
    u = union_bound_log(sizes_t, levels, t, delta)
    radius = eps_t if h_radius == "algorithm" else 2.0 * eps_t
    H = radius * torch.sqrt(2.0 * u)
    return ChainingResult(
        eps=eps_t,
        cover_sizes=sizes_t,
        H=H,
        covers=tuple(covers),
        bounded=torch.tensor(bounded, dtype=torch.bool, device=device),
        sigma_min=sigma_min,
        sigma_min_used=sigma_min_used,
        scale=scale,
        t=t,
        delta=delta,
        n=n,
        h_radius=h_radius,
        cover_method=cover,
    )


def _greedy_levels(
    distance: PseudoDistance, eps: list[float]
) -> tuple[list[Tensor], list[int], list[bool]]:
    n, device = distance.n, distance.device
    levels = distance.level_matrix(eps)  # d(a, b) <= eps_i  iff  levels[a, b] >= i
    # reached[x] = deepest level i with d(x, T) <= eps_i, for the cover T so far;
    # x is outside the level-i cover of T_{i-1} iff reached[x] < i.
    reached = torch.zeros(n, dtype=torch.uint8, device=device)
    cover = torch.empty(0, dtype=torch.long, device=device)
    covers: list[Tensor] = []
    step = max(1, 2**24 // n)  # rows of the level matrix per block (16 MB)
    for i in range(1, len(eps) + 1):
        outside = (reached < i).nonzero().squeeze(-1)
        if outside.numel():
            new = outside[greedy_dominating_set(_sub_adjacency(levels, outside, i))]
            cover = torch.cat([cover, new])
            for start in range(0, new.numel(), step):
                rows = levels.index_select(0, new[start : start + step])
                torch.maximum(reached, rows.amax(dim=0), out=reached)
        covers.append(cover)
    return covers, [c.numel() for c in covers], [False] * len(eps)


def _sub_adjacency(levels: Tensor, idx: Tensor, level: int) -> Tensor:
    """Boolean ``levels[idx][:, idx] >= level``, built a block of rows at a time."""
    n, m = levels.shape[0], idx.numel()
    if m == n:  # idx is sorted and unique: every point
        return levels >= level
    out = torch.empty(m, m, dtype=torch.bool, device=levels.device)
    step = max(1, 2**24 // n)
    for start in range(0, m, step):
        rows = levels.index_select(0, idx[start : start + step])
        torch.ge(rows.index_select(1, idx), level, out=out[start : start + step])
    return out


def _farthest_first_levels(
    distance: PseudoDistance, eps: list[float], max_cover_size: int
) -> tuple[list[Tensor], list[int], list[bool]]:
    n = distance.n
    if not eps:
        return [], [], []
    # Start from the least uncertain candidate: d_t(x, x') <= sigma(x) +
    # sigma(x'), so it is the best single centre one can name without rows
    # (near data it covers everything at eps_1 = s, as greedy's first pick does).
    start = int(torch.argmin(distance.variance))
    order, radii = farthest_first_order(
        distance.rows,
        n,
        start=start,
        max_size=max_cover_size,
        stop_radius=eps[-1],
        batch_size=distance.row_batch,
        device=distance.device,
        dtype=distance.dtype,
    )
    covers, sizes, bounded = [], [], []
    for e in eps:
        within = (radii <= e).nonzero()
        if within.numel():
            k = int(within[0]) + 1
            covers.append(order[:k])
            sizes.append(k)
            bounded.append(False)
        else:
            covers.append(order)
            sizes.append(n)
            bounded.append(True)
    return covers, sizes, bounded
