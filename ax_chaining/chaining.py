r"""Algorithm 1 of Contal, Malherbe and Vayatis (2015): levels, nested covers, ``H_i``.

Level :math:`i = 1..L` has radius :math:`\epsilon_i = s\,2^{1-i}`, cover
:math:`T_i = T_{i-1} \cup \mathrm{Cover}(\{x : d_t(x, T_{i-1}) > \epsilon_i\},
d_t, \epsilon_i)` and term :math:`H_i = \epsilon_i \sqrt{2 u_i}`, :math:`u_i =
\log((|T_i| + 1) i^2 t^2 \pi^4 / (36 \delta))`. Deviations are switches."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np
import torch
from torch import Tensor

from ax_chaining.certificate.schedule import DEFAULT_DELTA
from ax_chaining.checks import check_choice, check_delta, check_float, check_int
from ax_chaining.covers import (
    NearestCentres,
    farthest_first_order,
    gather_rows,
    greedy_dominating_set,
    greedy_dominating_set_csr,
    greedy_dominating_set_lazy,
)
from ax_chaining.distances import MemoryBudgetError, PseudoDistance, format_bytes
from ax_chaining.level_graph import GRAPH_PEAK_EDGE_BYTES, LevelGraph, levels_np

__all__ = [
    "BonusShape",
    "ChainingResult",
    "chaining_bonus",
    "chaining_covers",
    "num_levels",
    "reuse_covers",
    "union_bound_log",
]

HRadius = Literal["algorithm", "proof"]
CoverMethod = Literal["greedy", "farthest_first"]
BonusShape = Literal["paper", "continuous"]
GraphMethod = Literal["auto", "lists", "matrix"]

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
    r"""Number of levels :math:`L = \lceil 1 - \log_2(\sigma^{\min} / s) \rceil`,
    by exact comparisons of :math:`s\,2^{1-i}` with :math:`\sigma^{\min}`
    (``L = 0`` when :math:`\sigma^{\min} \ge 2 s`).

    Example:
        >>> num_levels(0.25, 1.0), num_levels(2.0, 1.0)
        (3, 0)
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


def chaining_bonus(
    sigma: Tensor,
    eps: Tensor,
    H: Tensor,
    sigma_min_used: float,
    shape: BonusShape = "paper",
) -> Tensor:
    r"""The exploration bonus of Chaining-UCB as a function of :math:`\sigma_t(x)`.

    With the active levels :math:`A = \{i : \epsilon_i \ge \sigma^{\min}\}` and
    :math:`B_k = \sum_{i \in A,\, i \ge k} H_i`:

    * ``"paper"`` (Algorithm 1): the staircase
      :math:`b(\sigma) = \sum_{i \in A:\, \epsilon_i < \sigma} H_i`.
    * ``"continuous"`` (a deviation): the piecewise-linear curve through the
      staircase's upper corners :math:`(\epsilon_k, B_k)`, :math:`k \in A`, and
      :math:`(\epsilon_K / 2, 0)` below the last active level :math:`K`; 0
      below that and :math:`B_1` above :math:`\epsilon_1`. It is continuous,
      non-decreasing and :math:`b(\sigma) \le c(\sigma) \le b(2\sigma)`
      (``docs/algorithm.md``).

    ``sigma_min_used`` is the floored :math:`\sigma^{\min}`; the bonus has
    the shape, dtype and device of ``sigma``.

    Example:
        >>> eps, H = torch.tensor([1.0, 0.5]), torch.tensor([2.0, 1.0])
        >>> chaining_bonus(torch.tensor([0.75]), eps, H, 0.5, "paper")
        tensor([1.])
        >>> chaining_bonus(torch.tensor([0.75]), eps, H, 0.5, "continuous")
        tensor([2.])
    """
    check_choice("shape", shape, get_args(BonusShape))
    eps, H = eps.to(sigma), H.to(sigma)
    active = eps >= sigma_min_used
    if shape == "paper":
        on = active & (eps < sigma.unsqueeze(-1))
        return (on.to(sigma) * H).sum(dim=-1)
    eps, H = eps[active], H[active]
    if eps.numel() == 0:
        return torch.zeros_like(sigma)
    # Knots in increasing sigma: (eps_K / 2, 0), (eps_K, B_K), ..., (eps_1, B_1).
    B = torch.flip(torch.cumsum(torch.flip(H, (0,)), 0), (0,))
    knots_x = torch.cat([eps[-1:] / 2, torch.flip(eps, (0,))])
    knots_y = torch.cat([B.new_zeros(1), torch.flip(B, (0,))])
    flat = sigma.clamp(min=float(knots_x[0]), max=float(knots_x[-1])).reshape(-1)
    right = torch.searchsorted(knots_x, flat.contiguous()).clamp(1, knots_x.numel() - 1)
    x0, x1 = knots_x[right - 1], knots_x[right]
    y0, y1 = knots_y[right - 1], knots_y[right]
    return (y0 + (y1 - y0) * (flat - x0) / (x1 - x0)).reshape(sigma.shape)


@dataclass(frozen=True)
class ChainingResult:
    r"""Nested covers, radii and chaining terms of one step of Algorithm 1.

    Attributes:
        eps: ``L`` radii :math:`\epsilon_i = s\,2^{1-i}`, ``i = 1..L``.
        cover_sizes: ``L`` values :math:`|T_i|` used in :math:`H_i`.
        H: ``L`` chaining terms :math:`H_i`.
        covers: ``L`` index tensors; ``covers[i-1]`` is :math:`T_i` in selection
            order, with ``covers[i-2]`` as a prefix.
        bounded: ``L`` booleans; true where :math:`|T_i|` was replaced by ``N``
            (the cover holds the partial cover that was built).
        sigma_min: :math:`\min_x \sigma_t(x)` over the candidates (unfloored).
        sigma_min_used: :math:`\max(\sigma^{\min}, \texttt{sigma\_floor}\cdot s)`.
        scale, t, delta, n, h_radius, cover_method: As passed to
            :func:`chaining_covers` (``n`` the number of candidates ``N``).
        info: How the covers were built (``sigma_floor``; ``path`` and
            ``reason`` from :class:`~ax_chaining.acquisition.ChainingUCB`).
        parents: ``(parent, link2)`` of every candidate in the chaining tree
            where the farthest-first traversal recorded them
            (:class:`~ax_chaining.covers.NearestCentres`); else None.
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
    parents: tuple[Tensor, Tensor] | None = field(
        default=None, compare=False, repr=False
    )

    @property
    def num_levels(self) -> int:
        return self.eps.numel()

    def bonus(self, sigma: Tensor, shape: BonusShape = "paper") -> Tensor:
        """:func:`chaining_bonus` at posterior standard deviations ``sigma``."""
        return chaining_bonus(sigma, self.eps, self.H, self.sigma_min_used, shape)

    def regret_bound(self, sigma: Tensor) -> Tensor:
        r"""The paper's Eq. (ucb) at points with standard deviation ``sigma``:

        .. math::

            3 \sum_{i \ge 1:\, \epsilon_i < \sigma} \epsilon_{i-1} \sqrt{2 u_i},
            \qquad \epsilon_{i-1} = 2 \epsilon_i,

        with :math:`|T_i| \le N` beyond the ``L`` levels, summed to 64 levels
        past the smallest ``sigma`` (the rest is below :math:`2^{-64}` of the
        sum); for comparison with the paper only (:mod:`ax_chaining.certificate`
        is valid at points chosen from the data).
        """
        dtype = torch.float64
        sig = sigma.to(dtype)
        positive = sig[sig > 0]
        if positive.numel() == 0:
            return torch.zeros_like(sigma)
        below = math.log2(max(self.scale / float(positive.min()), 1.0))
        depth = max(self.num_levels, int(math.ceil(below)) + 1) + 64
        levels = torch.arange(1, depth + 1, dtype=dtype, device=sig.device)
        sizes = torch.full_like(levels, float(self.n))
        sizes[: self.num_levels] = self.cover_sizes.to(sizes)
        eps = self.scale * torch.pow(2.0, 1.0 - levels)
        u = union_bound_log(sizes, levels, self.t, self.delta)
        terms = 2.0 * eps * torch.sqrt(2.0 * u)
        active = eps < sig.unsqueeze(-1)
        return (3.0 * (active.to(dtype) * terms).sum(dim=-1)).to(sigma)

    def summary(self) -> str:
        """A table of levels, radii, cover sizes and ``H_i`` (``*``: a level
        whose size is the bound ``N``) under how the covers were built."""
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
    delta: float = DEFAULT_DELTA,
    scale: float = 1.0,
    sigma_floor: float = 1e-6,
    h_radius: HRadius = "algorithm",
    cover: CoverMethod = "greedy",
    max_cover_size: int | None = None,
    memory_budget: int | None = None,
    lazy: bool = True,
    graph: GraphMethod = "auto",
) -> ChainingResult:
    r"""Run the cover loop of Algorithm 1 (the module docstring) on the posterior
    pseudo-distance over the ``N`` candidates, with :math:`L` from
    :func:`level_radii` (at least 1).

    Args:
        t: Iteration index :math:`t \ge 1` (observations plus one).
        scale: Radius :math:`s` of the first level (1 for a kernel with
            :math:`k(x, x) \le 1`).
        sigma_floor: Floor on :math:`\sigma^{\min}` relative to ``scale`` (0:
            none, and then :math:`\sigma^{\min} > 0` is required).
        h_radius: ``"algorithm"`` (:math:`\epsilon_i` in :math:`H_i`) or
            ``"proof"`` (:math:`\epsilon_{i-1}`, as in Appendix A's proof).
        cover: ``"greedy"`` (Algorithm 2 on :math:`\bar X`) or
            ``"farthest_first"`` (the prefixes of one farthest-first traversal,
            ``O(N)`` memory).
        max_cover_size: ``"farthest_first"`` stops at this many centres (default
            ``N``); a deeper level uses :math:`|T_i| \le N` (``bounded``).
        memory_budget: Bytes the greedy covers' graph may take (default: no
            limit); :class:`~ax_chaining.distances.MemoryBudgetError` above it.
        lazy: Cover the dense coarse levels by
            :func:`~ax_chaining.covers.greedy_dominating_set_lazy` (the same
            picks wherever :math:`d_t^2` is symmetric as computed).
        graph: How greedy covers hold the :math:`\epsilon_i`-graphs (the same
            covers): ``"lists"`` (numpy neighbour lists), ``"matrix"`` (an
            ``N x N`` uint8 level matrix) or ``"auto"`` (lists, or the matrix
            where only it fits ``memory_budget``).

    Example:
        >>> from ax_chaining.distances import DenseDistance
        >>> cov = torch.tensor([[1.0, 0.9], [0.9, 1.0]], dtype=torch.float64)
        >>> res = chaining_covers(DenseDistance(cov), t=2)
        >>> res.cover_sizes
        tensor([1])
    """
    t = check_int("t", t, 1)
    delta = check_delta(delta)
    scale = check_float("scale", scale, (lambda v: v > 0, "finite and > 0"))
    sigma_floor = check_float(
        "sigma_floor", sigma_floor, (lambda v: 0 <= v < 1, "in [0, 1)")
    )
    check_choice("h_radius", h_radius, get_args(HRadius))
    check_choice("cover", cover, get_args(CoverMethod))
    n = distance.n
    if n == 0:
        raise ValueError("`distance` has no candidate; expected N >= 1.")
    max_cover_size = n if max_cover_size is None else max_cover_size
    max_cover_size = check_int("max_cover_size", max_cover_size, 1)
    sigma_min = float(distance.sigma.min())
    _, eps = level_radii(sigma_min, scale, sigma_floor)
    parents = None
    if cover == "greedy":
        check_choice("graph", graph, get_args(GraphMethod))
        covers, sizes, bounded = _greedy_levels(
            distance, eps, graph=graph, memory_budget=memory_budget, lazy=lazy
        )
    else:
        tracker = NearestCentres(n, eps)
        order, radii = farthest_first_order(
            distance.rows,
            n,
            # The least uncertain candidate: d_t(x, x') <= sigma(x) + sigma(x'),
            # so it is the best single centre one can name without rows.
            start=int(torch.argmin(distance.variance)),
            max_size=max_cover_size,
            stop_radius=eps[-1],
            batch_size=distance.row_batch,
            device=distance.device,
            dtype=distance.dtype,
            on_centre=tracker,
        )
        covers, sizes, bounded = prefix_covers(order, radii, eps, n)
        parents = tracker.parents()
        if tracker.sizes != [int(c.numel()) for c in covers]:
            parents = None  # float32 radii cut a level at another prefix
    return chaining_result(
        eps,
        covers,
        sizes,
        bounded,
        sigma_min=sigma_min,
        sigma_floor=sigma_floor,
        scale=scale,
        t=t,
        delta=delta,
        n=n,
        h_radius=h_radius,
        cover_method=cover,
        device=distance.device,
        parents=parents,
    )


def level_radii(
    sigma_min: float, scale: float, sigma_floor: float
) -> tuple[float, list[float]]:
    r""":math:`\sigma^{\min}_{\text{used}} = \max(\sigma^{\min},
    \texttt{sigma\_floor} \cdot s)` and the radii :math:`\epsilon_i = s\,2^{1-i}`
    of its :func:`num_levels` levels, at least one (a deviation outside the
    paper's :math:`\sigma \le s`: the bonus stays the empty sum)."""
    sigma_min_used = max(sigma_min, sigma_floor * scale)
    if sigma_min_used <= 0:
        raise ValueError(
            "The smallest posterior standard deviation over the candidates is 0, "
            "which needs infinitely many levels; pass sigma_floor > 0."
        )
    num = max(1, num_levels(sigma_min_used, scale))
    return sigma_min_used, [scale * 2.0 ** (1 - i) for i in range(1, num + 1)]


def chaining_result(
    eps: list[float],
    covers: list[Tensor],
    sizes: list[int],
    bounded: list[bool],
    *,
    sigma_min: float,
    sigma_floor: float,
    scale: float,
    t: int,
    delta: float,
    n: int,
    h_radius: HRadius,
    cover_method: CoverMethod,
    device: torch.device,
    parents: tuple[Tensor, Tensor] | None = None,
) -> ChainingResult:
    r"""The :class:`ChainingResult` of covers built by any route for radii
    ``eps``, with :math:`H_i = r_i \sqrt{2 u_i}`, :math:`r_i = \epsilon_i`
    (``"algorithm"``) or :math:`\epsilon_{i-1}` (``"proof"``)."""
    levels = torch.arange(1, len(eps) + 1, dtype=torch.float64, device=device)
    sizes_t = torch.tensor(sizes, dtype=torch.long, device=device)
    eps_t = torch.tensor(eps, dtype=torch.float64, device=device)
    u = union_bound_log(sizes_t, levels, t, delta)
    radius = eps_t if h_radius == "algorithm" else 2.0 * eps_t
    return ChainingResult(
        eps=eps_t,
        cover_sizes=sizes_t,
        H=radius * torch.sqrt(2.0 * u),
        covers=tuple(covers),
        bounded=torch.tensor(bounded, dtype=torch.bool, device=device),
        sigma_min=sigma_min,
        sigma_min_used=max(sigma_min, sigma_floor * scale),
        scale=scale,
        t=t,
        delta=delta,
        n=n,
        h_radius=h_radius,
        cover_method=cover_method,
        info={"sigma_floor": sigma_floor},
        parents=parents,
    )


def reuse_covers(
    base: ChainingResult, distance: PseudoDistance, t: int
) -> ChainingResult:
    r"""Algorithm 1's terms on a smaller pseudo-distance, with the covers of ``base``.

    A deviation for batches (``pending_covers="reuse"``): the covers of ``base``
    stay :math:`\epsilon_i`-covers of a ``distance`` nowhere above ``base``'s.
    The levels are recounted from the new :math:`\sigma^{\min}` (deeper ones use
    :math:`|T_i| \le N`), :math:`H_i` recomputed with ``t``, and
    ``info["covers_from"] == "reused"``.

    Example:
        >>> base = chaining_covers(distance, t=3)
        >>> batch = reuse_covers(base, distance_given_pending, t=4)
    """
    t = check_int("t", t, 1)
    if distance.n != base.n:
        raise ValueError(
            f"distance has N={distance.n} candidates, base covers N={base.n}."
        )
    if "sigma_floor" not in base.info:
        raise ValueError(
            "base has no info['sigma_floor']; pass covers built by chaining_covers."
        )
    sigma_min = float(distance.sigma.min())
    sigma_floor = base.info["sigma_floor"]
    _, eps = level_radii(sigma_min, base.scale, sigma_floor)
    num, device = len(eps), base.eps.device
    covers = list(base.covers[:num])
    sizes = base.cover_sizes[:num].tolist()
    bounded = base.bounded[:num].tolist()
    missing = num - len(covers)
    covers += [torch.arange(base.n, device=device)] * missing
    sizes += [base.n] * missing
    bounded += [True] * missing
    result = chaining_result(
        eps,
        covers,
        sizes,
        bounded,
        sigma_min=sigma_min,
        sigma_floor=sigma_floor,
        scale=base.scale,
        t=t,
        delta=base.delta,
        n=base.n,
        h_radius=base.h_radius,
        cover_method=base.cover_method,
        device=device,
    )
    result.info.update(base.info, covers_from="reused")
    return result


#: Coarse levels use the lazy greedy (degrees kept, edges not) while their
#: estimated edge count exceeds ``LAZY_EDGE_FACTOR * N^1.5``.
LAZY_EDGE_FACTOR = 4.0


def lazy_levels(distance: PseudoDistance, eps: list[float]) -> tuple[int, int]:
    """Number ``k`` of leading levels for the lazy greedy, and the estimated
    edges of the first level kept as lists (level ``k + 1``)."""
    k, edges = 0, distance.estimate_edges(eps[0])
    while k < len(eps) - 1 and edges > LAZY_EDGE_FACTOR * distance.n**1.5:
        k += 1
        edges = distance.estimate_edges(eps[k])
    return k, edges


def _greedy_levels(
    distance: PseudoDistance,
    eps: list[float],
    graph: GraphMethod = "auto",
    memory_budget: int | None = None,
    lazy: bool = True,
) -> tuple[list[Tensor], list[int], list[bool]]:
    """Greedy nested covers from neighbour lists (``GRAPH_PEAK_EDGE_BYTES`` per
    estimated edge) or the level matrix (``2 N^2`` bytes), within ``memory_budget``."""
    n = distance.n
    matrix_bytes = 2 * n * n  # level matrix plus one boolean adjacency
    counted = 0
    if graph != "matrix" and lazy:
        counted, edges = lazy_levels(distance, eps)
    if graph != "matrix" and memory_budget is not None:
        # Only when even a complete graph might not fit is it worth sampling.
        if GRAPH_PEAK_EDGE_BYTES * n * n <= memory_budget:
            edges = n * n
        elif not counted:
            edges = distance.estimate_edges(eps[0])
        lists_bytes = GRAPH_PEAK_EDGE_BYTES * edges
        if lists_bytes > memory_budget:
            if graph == "auto" and matrix_bytes <= memory_budget:
                graph = "matrix"
            else:
                raise MemoryBudgetError(
                    f"Greedy covers of N={n} candidates need neighbour lists of "
                    f"about {edges:,} pairs within eps_{counted + 1} "
                    f"({format_bytes(lists_bytes)}), above memory_budget="
                    f"{format_bytes(memory_budget)}. Pass a larger memory_budget, "
                    "use cover='farthest_first', or fewer candidates."
                )
    if graph == "matrix":
        if memory_budget is not None and matrix_bytes > memory_budget:
            raise MemoryBudgetError(
                f"Greedy covers of N={n} candidates need a level matrix of "
                f"{format_bytes(matrix_bytes)}, above memory_budget="
                f"{format_bytes(memory_budget)}. Pass a larger memory_budget, use "
                "cover='farthest_first', or fewer candidates."
            )
        covers = _greedy_levels_matrix(distance, eps)
    else:
        lists = distance.level_graph(eps, counted=counted)
        covers = _greedy_levels_lists(lists, eps, distance)
    return covers, [c.numel() for c in covers], [False] * len(eps)


def _csr_select(indptr: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Row offsets of the edges marked in ``keep`` (row order is preserved)."""
    n = indptr.size - 1
    kept = np.zeros(n, dtype=np.int64)
    # Rows in pieces of about 2^22 edges: reduceat casts its input to int64.
    start = 0
    while start < n:
        stop = int(np.searchsorted(indptr, indptr[start] + 2**22, side="right")) - 1
        stop = min(n, max(start + 1, stop))
        lo, hi = int(indptr[start]), int(indptr[stop])
        if hi > lo:
            # The sentinel makes every row start a valid index for reduceat,
            # whose value for an empty row is overwritten with 0.
            part = np.add.reduceat(
                np.append(keep[lo:hi], False), indptr[start:stop] - lo, dtype=np.int64
            )
            part[indptr[start + 1 : stop + 1] == indptr[start:stop]] = 0
            kept[start:stop] = part
        start = stop
    out = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(kept, out=out[1:])
    return out


def _greedy_levels_lists(
    graph: LevelGraph, eps: list[float], distance: PseudoDistance
) -> list[Tensor]:
    """Algorithm 1's cover loop on the level graph (numpy): its counted coarse
    levels by the lazy greedy on rows of ``distance``, the rest on its lists."""
    n, num, device = graph.n, len(eps), distance.device
    counted = graph.counted_levels
    eps2 = [e * e for e in eps]
    indptr = graph.indptr.cpu().numpy()
    indices = graph.indices.cpu().numpy()
    levels = graph.levels.cpu().numpy()
    # reached[x]: the deepest level i with d(x, T) <= eps_i for the cover T so
    # far; x is outside the level-i cover of T_{i-1} iff reached[x] < i.
    reached = np.zeros(n, dtype=np.uint8)
    cover = np.empty(0, dtype=np.int64)
    covers: list[Tensor] = []

    def rows(idx: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return distance.rows(torch.from_numpy(idx)).cpu().numpy()

    for i in range(1, num + 1):
        outside = reached < i
        if i <= counted:
            if outside.any():
                bound = graph.degrees[i - 1].cpu().numpy()
                new = greedy_dominating_set_lazy(
                    lambda idx, e2=eps2[i - 1]: rows(idx) <= e2, outside, bound
                )
                cover = np.concatenate([cover, new])
                for start in range(0, new.size, 256):
                    depth = levels_np(rows(new[start : start + 256]), eps2)
                    np.maximum(reached, depth.max(axis=0), out=reached)
            covers.append(torch.from_numpy(cover.copy()).to(device))
            continue
        if i > counted + 1:
            # Edges below level i cannot change a later test reached[x] < i'.
            keep = levels >= i
            indptr = _csr_select(indptr, keep)
            indices, levels = indices[keep], levels[keep]
        sub = np.flatnonzero(outside)
        if sub.size == n:
            sub_indptr, sub_indices = indptr, indices
        elif sub.size:
            # The level-i graph on the outside points, renumbered 0..m-1 in
            # index order (so ties still go to the lowest original index).
            keep = outside[indices] & np.repeat(outside, np.diff(indptr))
            local = np.full(n, -1, dtype=np.int32)
            local[sub] = np.arange(sub.size, dtype=np.int32)
            sub_indices = local[indices[keep]]
            sub_indptr = _csr_select(indptr, keep)[np.append(sub, n)]
        if sub.size:
            new = sub[greedy_dominating_set_csr(sub_indptr, sub_indices)]
            cover = np.concatenate([cover, new])
            hit = gather_rows(indptr, indices, new)
            np.maximum.at(reached, hit, gather_rows(indptr, levels, new))
        covers.append(torch.from_numpy(cover.copy()).to(device))
    return covers


def _greedy_levels_matrix(distance: PseudoDistance, eps: list[float]) -> list[Tensor]:
    """Algorithm 1's cover loop on the ``N x N`` uint8 level matrix (any device)."""
    n, device = distance.n, distance.device
    levels = distance.level_matrix(eps)  # d(a, b) <= eps_i  iff  levels[a, b] >= i
    reached = torch.zeros(n, dtype=torch.uint8, device=device)  # as in the lists
    cover = torch.empty(0, dtype=torch.long, device=device)
    covers: list[Tensor] = []
    step = max(1, 2**24 // n)  # rows of the level matrix per block (16 MB)
    for i in range(1, len(eps) + 1):
        outside = (reached < i).nonzero().squeeze(-1)
        if outside.numel():
            if outside.numel() == n:
                adjacency = levels >= i
            else:
                adjacency = torch.empty(
                    outside.numel(), outside.numel(), dtype=torch.bool, device=device
                )
                for start in range(0, outside.numel(), step):
                    block = levels.index_select(0, outside[start : start + step])
                    torch.ge(
                        block.index_select(1, outside),
                        i,
                        out=adjacency[start : start + step],
                    )
            new = outside[greedy_dominating_set(adjacency)]
            cover = torch.cat([cover, new])
            for start in range(0, new.numel(), step):
                block = levels.index_select(0, new[start : start + step])
                torch.maximum(reached, block.amax(dim=0), out=reached)
        covers.append(cover)
    return covers


def prefix_covers(
    order: Tensor, radii: Tensor, eps: list[float], n: int
) -> tuple[list[Tensor], list[int], list[bool]]:
    """Nested covers of a farthest-first traversal: for each radius, the
    shortest prefix of ``order`` whose cover radius is within it, or the
    whole traversal and the bound ``N`` where none is."""
    covers, sizes, bounded = [], [], []
    for e in eps:
        within = (radii <= e).nonzero()
        bounded.append(within.numel() == 0)
        k = n if bounded[-1] else int(within[0]) + 1
        covers.append(order if bounded[-1] else order[:k])
        sizes.append(k)
    return covers, sizes, bounded
