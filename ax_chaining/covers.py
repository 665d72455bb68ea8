r"""Epsilon-covers of a finite set under a pseudo-distance, on squared distances:
Algorithm 2 of Contal, Malherbe and Vayatis (2015), the greedy dominating set of
the graph :math:`d(x, x') \le \epsilon` (on a matrix, neighbour lists or lazily
evaluated rows), and the nested covers of a farthest-first traversal."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from ax_chaining.checks import as_index, check_float, check_int, type_error

__all__ = [
    "NearestCentres",
    "farthest_first_order",
    "greedy_cover",
    "greedy_dominating_set_lazy",
    "is_cover",
    "sample_without_replacement",
]

#: Squared fraction of the current cover radius a batched pool point must reach.
POOL_RATIO2 = 0.75**2


def _check_dist2(dist2: Tensor) -> None:
    if not isinstance(dist2, Tensor):
        raise type_error("dist2", "a torch.Tensor", dist2)
    if dist2.ndim != 2 or dist2.shape[0] != dist2.shape[1]:
        shape = tuple(dist2.shape)
        raise ValueError(f"`dist2` must be a square N x N matrix, got shape {shape}.")
    if not dist2.is_floating_point():
        raise TypeError(f"`dist2` must be floating point, got {dist2.dtype}.")


def greedy_dominating_set(adjacency: Tensor) -> Tensor:
    r"""Algorithm 2 on an ``m x m`` (``m >= 1``) symmetric boolean adjacency
    with a true diagonal (:func:`greedy_cover`); once every ball holds only its
    centre, the rest in index order. Returns the picks in order."""
    m, device = adjacency.shape[0], adjacency.device
    uncovered = torch.ones(m, dtype=torch.bool, device=device)
    # degree[x]: uncovered points in the ball of x. The graph is symmetric, so
    # the degrees that drop when R is covered are read off the rows of R. Rows
    # in blocks: sum(dtype=int32) converts its whole input first.
    step = max(1, 2**20 // m)
    degree = torch.cat([b.sum(dim=1, dtype=torch.int32) for b in adjacency.split(step)])
    chosen: list[Tensor] = []
    minus_one = torch.tensor(-1, dtype=torch.int32, device=device)
    while True:
        masked = torch.where(uncovered, degree, minus_one)
        best = torch.argmax(masked)  # first maximum: ties go to the lowest index
        top = int(masked[best])
        if top <= 1:
            # Round-off asymmetry can only make a degree too small, so taking
            # every remaining point keeps the cover valid.
            chosen.append(uncovered.nonzero().squeeze(-1))
            break
        chosen.append(best.reshape(1))
        newly = (adjacency[best] & uncovered).nonzero().squeeze(-1)
        uncovered[newly] = False
        # Fixed-size blocks: large varying allocations cost fresh mmaps.
        for rows in newly.split(step):
            degree -= adjacency.index_select(0, rows).sum(dim=0, dtype=torch.int32)
    return torch.cat(chosen)


def gather_rows(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray):
    """Concatenated neighbour lists of ``rows`` (CSR)."""
    starts, stops = indptr[rows], indptr[rows + 1]
    lengths = stops - starts
    if int(lengths.sum()) >= 64 * rows.size:
        # Long rows: copying slices beats building an index per element.
        return np.concatenate(
            [indices[a:b] for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]
        )
    return indices[run_positions(starts, lengths)]


def run_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Positions ``starts[j] + 0 .. lengths[j] - 1`` for every ``j``, concatenated."""
    offsets = np.cumsum(lengths) - lengths
    total = int(lengths.sum())
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)


def _then_rest(picks: list[int], uncovered: np.ndarray) -> np.ndarray:
    """The picks (int64, in order), then the uncovered points in index order."""
    return np.concatenate(
        [np.asarray(picks, dtype=np.int64), np.flatnonzero(uncovered)]
    )


def greedy_dominating_set_csr(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    r"""Algorithm 2 on neighbour lists (``indices[indptr[a]:indptr[a + 1]]``
    the out-neighbours of ``a``, ``a`` included, ``m >= 1`` points): the picks
    (int64, in order) of :func:`greedy_dominating_set`, in time the edges plus
    ``O(m)`` per pick."""
    m = indptr.size - 1
    # Covered points are pushed below -1 and stay there, so the argmax (first
    # maximum) only sees uncovered points while any has degree >= 2.
    masked = np.diff(indptr).astype(np.int64)
    uncovered = np.ones(m, dtype=bool)
    picks: list[int] = []
    while masked[best := int(masked.argmax())] > 1:
        picks.append(best)
        ball = indices[indptr[best] : indptr[best + 1]]
        newly = ball[uncovered[ball]]
        uncovered[newly] = False
        masked[newly] = -(m + 2)
        # Rows of the newly covered points in pieces of about 2^22 entries.
        sizes = indptr[newly + 1] - indptr[newly]
        step = max(1, int(2**22 // max(1, int(sizes.max()))))
        for start in range(0, newly.size, step):
            hit = gather_rows(indptr, indices, newly[start : start + step])
            if hit.size * 8 < m:
                np.subtract.at(masked, hit, 1)
            else:
                masked -= np.bincount(hit, minlength=m)
    return _then_rest(picks, uncovered)


def greedy_dominating_set_lazy(
    balls: Callable[[np.ndarray], np.ndarray],
    outside: np.ndarray,
    degree_bound: np.ndarray,
    batch: int = 64,
) -> np.ndarray:
    r"""Algorithm 2 with lazily evaluated degrees: the same picks, from few rows.

    Degrees only fall as points are covered, so upper bounds suffice: if the
    first maximum of the bounds equals its current degree, it is Algorithm 2's
    pick; otherwise its bound is lowered and the search repeats. Rows are read
    ``batch`` at a time, for the largest bounds.

    Args:
        balls: Maps ``k`` point indices to a ``k x N`` boolean array: row ``j``
            marks the points within the radius of point ``j``.
        outside: ``N`` booleans, the points to cover (also the centres).
        degree_bound: ``N`` integers, each at least the number of ``outside``
            points within the radius (e.g. the row counts over all points).
        batch: Rows evaluated per call of ``balls``.

    Example:
        >>> ball = np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1]]) > 0
        >>> everyone, bound = np.ones(3, dtype=bool), np.full(3, 3)
        >>> greedy_dominating_set_lazy(lambda idx: ball[idx], everyone, bound)
        array([1])
    """
    uncovered = outside.copy()
    bound = np.where(outside, degree_bound, -1).astype(np.int64)
    cached: dict[int, np.ndarray] = {}
    picks: list[int] = []
    while bound.size and bound[best := int(bound.argmax())] > 1:
        ball = cached.get(best)
        if ball is None:
            if len(cached) > 4 * batch:
                cached.clear()  # bounded memory; the bounds stay valid
            top = np.argpartition(bound, -min(batch, bound.size))[-batch:]
            top = np.union1d(top[bound[top] > 1], [best])
            for j, row in zip(top.tolist(), balls(top), strict=True):
                cached[j] = row
            ball = cached[best]
        degree = int(np.count_nonzero(ball & uncovered))
        if degree != bound[best]:
            # Round-off can leave a row an edge above the bound: made exact.
            bound[best] = degree
            continue
        picks.append(best)
        del cached[best]
        newly = ball & uncovered
        uncovered &= ~ball
        bound[newly] = -1
    return _then_rest(picks, uncovered)


def greedy_cover(dist2: Tensor, eps: float, candidates: Tensor | None = None) -> Tensor:
    r"""Greedy :math:`\epsilon`-cover (Algorithm 2 of Contal et al., 2015).

    With :math:`G[x, x'] = \mathbb{1}\{d(x, x') \le \epsilon\}` and
    :math:`\bar X` the points not yet covered, repeat until :math:`\bar X` is empty:

    .. math::

        x \gets \arg\max_{x \in \bar X} \sum_{x' \in \bar X} G[x, x'], \qquad
        T \gets T \cup \{x\}, \qquad
        \bar X \gets \bar X \setminus \{x' : G[x, x'] = 1\},

    ties in degree to the lowest index.

    Args:
        dist2: ``N x N`` tensor of squared pseudo-distances :math:`d(x, x')^2`
            (the diagonal taken as 0).
        eps: The cover radius :math:`\epsilon > 0` (a distance, not squared).
        candidates: Optional 1-D index tensor (or length-``N`` boolean mask)
            restricting the points to cover and the centres (the paper's
            :math:`\bar X` in Algorithm 1).

    Returns:
        The chosen indices (into ``0..N-1``) in selection order.

    Example:
        >>> dist2 = torch.tensor([[0.0, 1.0, 4.0], [1.0, 0.0, 1.0], [4.0, 1.0, 0.0]])
        >>> greedy_cover(dist2, eps=1.0)
        tensor([1])
    """
    _check_dist2(dist2)
    eps = check_float("eps", eps, (lambda v: v > 0, "finite and > 0"))
    idx = as_index("candidates", candidates, dist2.shape[0], dist2.device)
    if idx.numel() == 0:
        return idx
    if torch.isnan(dist2[idx[:, None], idx[None, :]]).any():
        raise ValueError("dist2 contains NaN on the candidates to cover.")
    adjacency = dist2[idx[:, None], idx[None, :]] <= eps * eps
    # Round-off may make dist2 asymmetric: an edge needs both directions.
    adjacency &= adjacency.T.clone()
    adjacency.fill_diagonal_(True)
    return idx[greedy_dominating_set(adjacency)]


def sample_without_replacement(m: int, k: int, generator: torch.Generator) -> Tensor:
    """``min(k, m)`` distinct positions in ``0..m-1`` (int64, CPU, in the order
    drawn from the CPU ``generator``), a uniformly random ordered sample (the
    law of ``torch.randperm(m)[:k]``), in ``O(k)`` when ``k`` is small against
    ``m``."""
    m = check_int("m", m, low=0)
    k = min(check_int("k", k, low=0), m)
    if not isinstance(generator, torch.Generator):
        raise type_error("generator", "a torch.Generator", generator)
    if 4 * k >= m:  # a permutation is as cheap, and rejections would be many
        return torch.randperm(m, generator=generator)[:k]
    out: list[int] = []
    seen: set[int] = set()
    while len(out) < k:
        for p in torch.randint(m, (2 * k,), generator=generator).tolist():
            if p not in seen:
                seen.add(p)
                out.append(p)
                if len(out) == k:
                    break
    return torch.tensor(out, dtype=torch.long)


def farthest_first_order(
    dist2_rows: Callable[[Tensor], Tensor],
    n: int,
    start: int,
    max_size: int,
    stop_radius: float = 0.0,
    *,
    batch_size: int = 1,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float64,
    on_centre: Callable[[int, Tensor, float], None] | None = None,
) -> tuple[Tensor, Tensor]:
    r"""Farthest-first traversal (Gonzalez, 1985) on rows computed on demand.

    Starting from ``start``, repeatedly add the point farthest from the points
    chosen so far: the prefix ``order[:k]`` covers all ``n`` points with radius
    ``radii[k - 1]``, within a factor 2 of the optimal ``k``-centre radius.
    With ``batch_size = b > 1``, up to ``b`` centres per block of rows come from
    a pool (the farthest point and a seeded sample of those at least 3/4 of the
    radius away); the radii stay exact, only the order may differ.

    Args:
        dist2_rows: Maps a 1-D index tensor of length ``b`` to the ``b x n``
            squared distances (non-negative) from those points to all points.
        max_size: Stop after this many centres.
        stop_radius: Stop once the cover radius is at most this distance.
        batch_size: Centres taken per block of rows (1: exact traversal).
        device: Device of the index tensors (default: that of the first row).
        on_centre: Called after each centre is taken with the centre's index,
            its row of squared distances (clamped at 0, in ``dtype``; read it,
            do not keep it) and the squared cover radius of the prefix that ends
            with it (e.g. a :class:`NearestCentres`).

    Returns:
        ``(order, radii)``: the centres in traversal order and the cover radius
        of each prefix ``order[:k]`` (a distance, not squared).

    Example:
        >>> dist2 = torch.tensor([[0.0, 1.0, 4.0], [1.0, 0.0, 1.0], [4.0, 1.0, 0.0]])
        >>> farthest_first_order(lambda idx: dist2[idx], 3, start=0, max_size=3)
        (tensor([0, 2, 1]), tensor([2., 1., 0.], dtype=torch.float64))
    """
    if not 0 <= start < n:
        raise ValueError(f"start must be in 0..{n - 1}, got {start}.")
    if max_size < 1:
        raise ValueError(f"max_size must be at least 1, got {max_size}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
    first = dist2_rows(torch.tensor([start], device=device))[0]
    device = first.device
    mind2 = first.clamp_min(0).to(dtype)
    mind2[start] = 0.0
    order = [start]
    radii2 = [float(mind2.max())]
    if on_centre is not None:
        on_centre(start, mind2, radii2[0])
    stop2 = float(stop_radius) ** 2
    pool_size = 1 if batch_size == 1 else 2 * batch_size
    chunk_size = max(1, batch_size // 2)
    gen = torch.Generator().manual_seed(start)
    while radii2[-1] > stop2 and len(order) < max_size:
        if pool_size == 1:
            pool = mind2.argmax().reshape(1)
        else:
            # A sample spreads over the far region; the top-k would crowd into
            # one corner of it.
            far_set = (mind2 >= POOL_RATIO2 * radii2[-1]).nonzero().squeeze(-1)
            pick = sample_without_replacement(far_set.numel(), pool_size - 1, gen)
            pool = torch.cat([mind2.argmax().reshape(1), far_set[pick.to(device)]])
        pool_mind2 = mind2[pool]
        rows: dict[int, Tensor] = {}
        for _ in range(min(batch_size, max_size - len(order))):
            j = int(torch.argmax(pool_mind2))
            top = float(pool_mind2[j])
            # A pool point only while nearly as far as the farthest overall.
            if top < POOL_RATIO2 * radii2[-1] or not top > 0.0:
                break
            far = int(pool[j])
            order.append(far)
            if j not in rows:
                # With the pool points likeliest to be chosen next.
                ranked = torch.argsort(pool_mind2, descending=True).tolist()
                chunk = [j] + [k for k in ranked if k != j and k not in rows]
                chunk = chunk[:chunk_size]
                computed = dist2_rows(pool[torch.tensor(chunk, device=device)])
                rows.update(zip(chunk, computed.to(dtype), strict=True))
            row = rows.pop(j)  # rows are clamped at 0 already
            torch.minimum(mind2, row, out=mind2)
            mind2[far] = 0.0
            pool_mind2 = torch.minimum(pool_mind2, row[pool])
            pool_mind2[j] = 0.0
            radii2.append(float(mind2.max()))
            if on_centre is not None:
                on_centre(far, row, radii2[-1])
            if radii2[-1] <= stop2 or len(order) >= max_size:
                break
    radii = torch.tensor(radii2, dtype=dtype, device=device).sqrt()
    return torch.tensor(order, dtype=torch.long, device=device), radii


class NearestCentres:
    r"""Each point's parent in the nested covers of a farthest-first traversal,
    recorded along it (its ``on_centre``).

    Level :math:`i`'s cover :math:`T_i` is the shortest prefix whose cover radius
    is at most :math:`\epsilon_i` (the whole traversal where none is). A point
    entering at level :math:`j \ge 2` (:math:`j = L + 1` for none) gets its
    nearest point of :math:`T_{j-1}` as parent, as in
    :func:`~ax_chaining.certificate.chaining_tree` (ties to the earliest
    centre). :attr:`sizes` records each level's cover size.

    Example:
        >>> tracker = NearestCentres(n, eps)  # eps: decreasing radii
        >>> order, radii = farthest_first_order(rows, n, 0, n, on_centre=tracker)
        >>> parent, link2 = tracker.parents()
    """

    def __init__(self, n: int, radii: list[float]) -> None:
        self.n = check_int("n", n, 1)
        positive = (lambda v: v > 0, "finite and > 0")
        self._radii = [check_float("radii", r, positive) for r in radii]
        self._next = 0  # index of the first level whose cover is not yet closed
        self._taken_count = 0
        #: Each closed level's cover size (centres taken when it closed).
        self.sizes: list[int] = []
        self._best: Tensor | None = None  # squared distance to the prefix
        self._arg: Tensor | None = None  # nearest centre of the prefix
        self._taken: Tensor | None = None
        self._parent: Tensor | None = None
        self._link2: Tensor | None = None

    def __call__(self, centre: int, row: Tensor, radius2: float) -> None:
        """Take ``centre`` (its squared-distance row ``row``); the prefix that
        ends with it has squared cover radius ``radius2``."""
        if self._best is None:
            device = row.device
            self._best = row.clone()
            self._arg = torch.full((self.n,), centre, dtype=torch.long, device=device)
            self._taken = torch.zeros(self.n, dtype=torch.bool, device=device)
            self._parent = torch.full((self.n,), -1, dtype=torch.long, device=device)
            self._link2 = torch.zeros(self.n, dtype=row.dtype, device=device)
        else:
            # Strictly closer only: among equally near centres the first stays.
            closer = row < self._best
            self._arg = torch.where(closer, centre, self._arg)
            torch.minimum(self._best, row, out=self._best)
        self._best[centre] = 0.0
        self._taken[centre] = True
        self._taken_count += 1
        first = self._next
        # The radius, not its square, as prefix_covers compares it.
        radius = math.sqrt(radius2)
        while self._next < len(self._radii) and radius <= self._radii[self._next]:
            self._next += 1
            self.sizes.append(self._taken_count)
        if self._next > first:
            self._close()

    def _close(self) -> None:
        free = ~self._taken  # outside the level's cover: they take their parent
        self._parent = torch.where(free, self._arg, self._parent)
        self._link2 = torch.where(free, self._best, self._link2)

    def parents(self) -> tuple[Tensor, Tensor]:
        """``(parent, link2)``: each point's parent (-1 for the points of
        :math:`T_1`) and its squared distance to it (0 for those), once the
        traversal has ended (the points of no cover: their nearest centre)."""
        if self._best is None:
            raise RuntimeError("NearestCentres.parents: no centre was taken yet.")
        if self._next < len(self._radii):
            self._close()  # levels the traversal did not reach: the whole order
            missing = len(self._radii) - self._next
            self.sizes.extend([self._taken_count] * missing)
            self._next = len(self._radii)
        return self._parent.clone(), self._link2.clamp_min(0.0)


def is_cover(
    dist2: Tensor, cover: Tensor, eps: float, points: Tensor | None = None
) -> bool:
    """Whether every point (of ``points``, default all) is within ``eps`` (a
    distance) of the centres ``cover`` under the squared distances ``dist2``.

    Example:
        >>> dist2 = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
        >>> is_cover(dist2, torch.tensor([0]), eps=1.0)
        True
    """
    _check_dist2(dist2)
    idx = as_index("points", points, dist2.shape[0], dist2.device)
    if idx.numel() == 0:
        return True
    if cover.numel() == 0:
        return False
    d2 = dist2[cover[:, None], idx[None, :]].clamp_min(0)
    d2[cover[:, None] == idx[None, :]] = 0.0
    return bool((d2.min(dim=0).values <= float(eps) ** 2).all())
