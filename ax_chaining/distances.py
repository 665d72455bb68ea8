r"""The posterior pseudo-distance :math:`d_t`, dense or as rows on demand.

For a Gaussian process posterior with covariance :math:`k_t` and variance
:math:`\sigma_t^2(x) = k_t(x, x)`, Section 2 of Contal et al. (2015) defines

.. math::

    d_t(x, x')^2 = \sigma_t^2(x) - 2 k_t(x, x') + \sigma_t^2(x')
                 = \mathrm{Var}[f(x) - f(x') \mid \text{data}].

The engine only ever needs *rows* of :math:`d_t^2` (the distances from a few
points to all candidates), so a :class:`PseudoDistance` exposes ``rows(idx)``:

* :class:`DenseDistance` holds the ``N x N`` matrix (exact, fast, ``O(N^2)``
  memory);
* :class:`LowRankDistance` computes rows from the prior kernel and a low-rank
  posterior correction :math:`k_t(x, x') = k(x, x') - w(x)^\top w(x')` with
  :math:`w(x) = L^{-1} k_n(x)` (``O(N r)`` memory, ``r`` training points).

Round-off can make :math:`d_t^2` slightly negative; it is clamped to 0, and
:math:`d_t(x, x) = 0` exactly. Pure torch: no BoTorch or GPyTorch here.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor

from ax_chaining.covers import run_positions

__all__ = [
    "COLUMN_BLOCK",
    "DEFAULT_MEMORY_BUDGET",
    "DenseDistance",
    "LevelGraph",
    "LowRankDistance",
    "MemoryBudgetError",
    "PseudoDistance",
    "column_blocks",
    "dense_memory_bytes",
    "format_bytes",
]

_T = TypeVar("_T")

#: Default memory budget for the engine's largest allocations, in bytes (4 GiB).
DEFAULT_MEMORY_BUDGET: int = 4 * 2**30

#: Columns (candidates) per block of every matrix product over the candidates
#: on the low-rank route. A BLAS product computes the last few columns of a call
#: with other kernels than the columns inside it (measured with MKL: the last
#: four columns of a call round differently), so a product over some columns
#: is not bit for bit the same product over a longer range. Products are
#: therefore always taken over the same blocks of *global* candidate indices,
#: ``[k B, (k + 1) B)``: a part of the candidates that starts at a multiple of
#: ``B`` (a shard of :mod:`ax_chaining.distributed`) then computes the same
#: bits as the whole set.
COLUMN_BLOCK: int = 4096


def column_blocks(
    start: int, stop: int, offset: int = 0, block: int = COLUMN_BLOCK
) -> Iterator[tuple[int, int]]:
    """Split local columns ``start..stop-1`` at global multiples of ``block``.

    Local column ``c`` is global candidate ``offset + c``; the pieces ``(a, b)``
    are local and each lies within one global block.

    Example:
        >>> list(column_blocks(0, 10, offset=6, block=4))
        [(0, 2), (2, 6), (6, 10)]
    """
    a = start
    while a < stop:
        b = min(stop, ((offset + a) // block + 1) * block - offset)
        yield a, b
        a = b


class MemoryBudgetError(ValueError):
    """A computation would allocate more than the stated memory budget."""


def format_bytes(n: float) -> str:
    """Human-readable size, e.g. ``'1.5 GiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def dense_memory_bytes(n: int, dtype: torch.dtype, copies: float = 3.0) -> int:
    r"""Peak bytes of the ``N x N`` matrices of the dense path for ``n`` candidates.

    ``copies`` full ``n x n`` matrices of ``dtype`` (a posterior covariance and
    its temporaries while it is computed) plus the uint8 level matrix and one
    boolean adjacency matrix of the greedy covers.
    """
    itemsize = torch.finfo(dtype).bits // 8
    return int(math.ceil(copies * n * n * itemsize + 2 * n * n))


def _chunk_rows(n: int, itemsize: int, block_bytes: int) -> int:
    return max(1, min(n, block_bytes // max(1, n * itemsize)))


def _map_ordered(
    fn: Callable[[int], _T], items: Iterable[int], workers: int
) -> Iterator[_T]:
    """``map(fn, items)`` on ``workers`` threads, in order, at most ``workers``
    results ahead of the consumer (so memory stays a few blocks)."""
    if workers <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: deque[Future[_T]] = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


#: Bytes per stored edge of a :class:`LevelGraph` (int32 target, uint8 level),
#: and the peak per edge budgeted for the greedy covers: the lists are written
#: into arrays sized from a sample of rows (up to 1.25 x 5 bytes), and
#: splitting them into per-level graphs takes a few bytes an edge more
#: (measured on the SE problem: about 7 bytes an edge at N = 3 x 10^4 with
#: 1.7 x 10^8 edges, 13 at N = 10^4 where one block of rows weighs more).
GRAPH_EDGE_BYTES = 5
GRAPH_PEAK_EDGE_BYTES = 16


def _check_radii(eps: Sequence[float]) -> list[float]:
    eps2 = [float(e) ** 2 for e in eps]
    if len(eps2) > 255 or any(a <= b for a, b in zip(eps2, eps2[1:], strict=False)):
        raise ValueError("eps must be at most 255 strictly decreasing radii.")
    return eps2


def levels_np(d2: np.ndarray, eps2: Sequence[float], start: int = 0) -> np.ndarray:
    """uint8 ``start + sum_i [d2 <= eps_i^2]`` over ``eps2`` (numpy), the same
    comparisons as :func:`_levels_of`; ``start`` counts radii already known to
    hold (coarse levels left out of ``eps2``)."""
    q = np.full(d2.shape, start, dtype=np.uint8)
    for e2 in eps2:
        q += d2 <= e2
    return q


def _levels_of(d2: Tensor, eps2: list[float], out: Tensor | None = None) -> Tensor:
    """uint8 ``sum_i [d2 <= eps_i^2]``: the same comparisons for every caller."""
    if out is None:
        out = torch.zeros(d2.shape, dtype=torch.uint8, device=d2.device)
    else:
        out.zero_()
    for e2 in eps2:
        out.add_(d2 <= e2)
    return out


@dataclass(frozen=True)
class LevelGraph:
    r"""The nested :math:`\epsilon_i`-graphs of a pseudo-distance as one edge list.

    Row ``a`` holds, in increasing order, every ``b`` with
    :math:`d(a, b) \le \epsilon_1` (``indices[indptr[a]:indptr[a + 1]]``) and
    the level :math:`q(a, b) = |\{i : d(a, b) \le \epsilon_i\}|` of each such
    pair (``levels``), so the level-``i`` graph is the edges with ``q >= i``.
    Rows are *out*-neighbours as computed from row ``a`` of :math:`d^2`; round-off
    may make them differ from column ``a`` by an edge at a radius, and the greedy
    cover reads rows only, as the dense level matrix did. Memory follows the edge
    count (5 bytes an edge), not ``N^2``.

    A graph may keep only the edges of levels ``k + 1`` and deeper (``q > k``)
    and, for the ``k`` coarse levels whose edges it drops, the degree of each
    point (``degrees``), which is what a lazy greedy cover needs of them.

    Attributes:
        indptr: ``N + 1`` int64 row offsets.
        indices: ``E`` int32 neighbour indices.
        levels: ``E`` uint8 levels :math:`q(a, b) > k`.
        degrees: ``k x N`` int64: row ``i - 1`` counts, for every point, the
            points within :math:`\epsilon_i` (itself included); ``k = 0`` when
            every edge is kept.
    """

    indptr: Tensor
    indices: Tensor
    levels: Tensor
    degrees: Tensor | None = None

    @property
    def counted_levels(self) -> int:
        """Number ``k`` of coarse levels kept as degrees only."""
        return 0 if self.degrees is None else self.degrees.shape[0]

    @property
    def n(self) -> int:
        """Number of points."""
        return self.indptr.numel() - 1

    @property
    def num_edges(self) -> int:
        """Number of stored (directed) edges, self-loops included."""
        return self.indices.numel()


class PseudoDistance(ABC):
    r"""Squared pseudo-distances :math:`d_t^2` over ``N`` points, row by row.

    Subclasses provide :meth:`rows`; everything else is derived from it and
    from :attr:`variance`.

    Args:
        variance: ``N`` posterior variances :math:`\sigma_t^2(x)`; negatives from
            round-off are clamped to 0.
        block_bytes: Largest temporary block (in bytes) built when many rows are
            needed at once.
    """

    #: Rows worth computing together in a farthest-first traversal: 1 where a
    #: row is a cheap lookup, more where each call has a fixed cost.
    row_batch: int = 1
    #: Whether :meth:`_upper_block` computes the pairs ``(a, b >= start)`` of a
    #: block of rows, so that :meth:`level_graph` computes each pair once.
    upper_blocks: bool = False

    def __init__(self, variance: Tensor, block_bytes: int = 16 * 2**20) -> None:
        if variance.ndim != 1:
            raise ValueError(
                f"variance must be 1-D, got shape {tuple(variance.shape)}."
            )
        if not torch.isfinite(variance).all():
            raise ValueError("variance contains NaN or inf.")
        self.variance = variance.clamp_min(0)
        self.block_bytes = int(block_bytes)
        #: Threads that make blocks of rows in :meth:`level_graph` on CPU: the
        #: row work (kernel, correction, threshold, nonzero) is spread over the
        #: cores torch may use, since numpy's passes run on one thread.
        self.row_workers = max(1, min(8, torch.get_num_threads()))

    @property
    def n(self) -> int:
        """Number of points."""
        return self.variance.shape[0]

    @property
    def device(self) -> torch.device:
        return self.variance.device

    @property
    def dtype(self) -> torch.dtype:
        return self.variance.dtype

    @property
    def sigma(self) -> Tensor:
        r"""Posterior standard deviations :math:`\sigma_t(x)`."""
        return self.variance.sqrt()

    @abstractmethod
    def rows(self, idx: Tensor) -> Tensor:
        r"""``len(idx) x N`` squared :math:`d_t^2(x_i, \cdot)` (new tensor)."""

    def _dist2_from_cov(self, cov: Tensor, idx: Tensor) -> Tensor:
        """Turn covariance rows of ``idx`` into squared distances, in place."""
        d2 = cov.mul_(-2.0).add_(self.variance).add_(self.variance[idx, None])
        d2.clamp_(min=0.0)
        d2[torch.arange(idx.numel(), device=self.device), idx] = 0.0
        return d2

    def _row_range(self, start: int, stop: int) -> Tensor:
        """Rows ``start..stop-1``; subclasses may return a view."""
        return self.rows(torch.arange(start, stop, device=self.device))

    def level_matrix(self, eps: Sequence[float]) -> Tensor:
        r"""``N x N`` uint8 matrix of levels :math:`q(a, b) = |\{i : d_t(a, b) \le
        \epsilon_i\}|` for radii ``eps`` in decreasing order.

        Since the radii decrease, :math:`d_t(a, b) \le \epsilon_i` iff
        :math:`q(a, b) \ge i`: every comparison Algorithms 1 and 2 make is read off
        one byte per pair, instead of eight for a float64 distance. Built from
        rows in blocks, so no float ``N x N`` matrix is needed.

        Args:
            eps: Radii :math:`\epsilon_1 > \epsilon_2 > \dots`, at most 255.

        Returns:
            The ``N x N`` uint8 level matrix.
        """
        eps2 = _check_radii(eps)
        n = self.n
        out = torch.empty(n, n, dtype=torch.uint8, device=self.device)
        step = _chunk_rows(n, self.variance.element_size(), self.block_bytes)
        for start in range(0, n, step):
            stop = min(n, start + step)
            _levels_of(self._row_range(start, stop), eps2, out=out[start:stop])
        return out

    def estimate_edges(self, eps: float, sample: int = 64) -> int:
        r"""Estimated number of pairs with :math:`d(a, b) \le \epsilon`.

        Counted exactly on ``sample`` evenly spaced rows (no randomness) and
        scaled to ``N`` rows; used to check a :class:`LevelGraph` against a
        memory budget before it is built.
        """
        n = self.n
        k = max(1, min(n, int(sample)))
        idx = torch.linspace(0, n - 1, k, device=self.device).round().long().unique()
        count = int((self.rows(idx) <= float(eps) ** 2).sum())
        return int(math.ceil(count * n / idx.numel()))

    def _upper_block(self, start: int, stop: int) -> Tensor:
        """``d^2`` of rows ``start..stop-1`` and columns ``start..N-1`` (unclamped)."""
        raise NotImplementedError

    def _level_graph_symmetric(
        self, eps2: list[float], counted: int, step: int
    ) -> LevelGraph:
        """:meth:`level_graph` computing each pair once, for a symmetric ``d^2``.

        A block of rows ``[start, stop)`` is computed for the columns
        ``start..N-1`` only (half the work over all blocks). Its pairs with
        ``b >= start`` are row ``a``'s neighbours from ``start`` on (the square
        ``[start, stop)^2`` holds both directions), and its pairs with
        ``b >= stop`` are also written, mirrored, into row ``b``, so row ``b``
        receives every neighbour below its own block from earlier blocks, in
        increasing order, ahead of its own. A pair across blocks gets the value
        its upper block computed in both directions (within a block's own
        square both directions are computed).
        Blocks are made on ``row_workers`` threads and kept until the counts
        are known (about 12 bytes an edge at the peak, within the budgeted 16).
        """
        n = self.n
        kept = eps2[counted]
        degrees = np.zeros((counted, n), dtype=np.int64)
        direct_counts = np.zeros(n, dtype=np.int64)
        mirror_counts = np.zeros(n, dtype=np.int64)

        def block(start: int) -> tuple[Any, ...]:
            stop = min(n, start + step)
            k, width = stop - start, n - start
            with torch.no_grad():
                d2 = self._upper_block(start, stop).detach().cpu().numpy()
            deg = [
                (np.count_nonzero(m, axis=1), np.count_nonzero(m[:, k:], axis=0))
                for m in (d2 <= eps2[i] for i in range(counted))
            ]
            mask = d2 <= kept
            flat = np.flatnonzero(mask)  # row-major: rows in turn, columns up
            bounds = np.searchsorted(flat, np.arange(k + 1) * width)
            cols = (flat % width + start).astype(np.int32)
            q = levels_np(d2.ravel()[flat], eps2[counted:], counted)
            # The mirrored pairs (b, a), b >= stop, in b-major order: for each
            # target b its sources a in increasing order.
            tflat = np.flatnonzero(mask[:, k:].T)
            tb, ta = np.divmod(tflat, k)
            tq = levels_np(d2[ta, k + tb], eps2[counted:], counted)
            mirrored = (tb + stop, ta + start, tq)
            return (start, stop, deg, np.diff(bounds), cols, q, *mirrored)

        blocks = []
        for out in _map_ordered(block, range(0, n, step), self.row_workers):
            start, stop, deg, dc, _, _, tb, _, _ = out
            for i, (rows, cols) in enumerate(deg):
                degrees[i, start:stop] += rows
                degrees[i, stop:] += cols
            direct_counts[start:stop] = dc
            mirror_counts += np.bincount(tb, minlength=n)
            blocks.append(out)
        counts = direct_counts + mirror_counts
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        total = int(indptr[-1])
        indices = np.empty(total, dtype=np.int32)
        levels = np.empty(total, dtype=np.uint8)
        cursor = indptr[:-1].copy()
        for j in range(len(blocks)):
            start, stop, _, dc, cols, q, tb, ta, tq = blocks[j]
            blocks[j] = None  # free each block once written
            # Row a's own block comes after every block that mirrors into it.
            pos = run_positions(cursor[start:stop], dc)
            indices[pos], levels[pos] = cols, q
            cursor[start:stop] += dc
            if tb.size:
                mc = np.bincount(tb - stop, minlength=n - stop)
                pos = run_positions(cursor[stop:], mc)
                indices[pos], levels[pos] = ta, tq
                cursor[stop:] += mc
        return LevelGraph(
            torch.from_numpy(indptr),
            torch.from_numpy(indices),
            torch.from_numpy(levels),
            torch.from_numpy(degrees) if counted else None,
        )

    def _level_graph_numpy(
        self, eps2: list[float], counted: int, counts: Tensor, step: int
    ) -> LevelGraph:
        """:meth:`level_graph` on CPU: numpy's mask and nonzero are several times
        faster than torch's there, with the same IEEE comparisons (the radius
        cast to the dtype of the distances). Blocks of rows are made by
        ``row_workers`` threads (numpy and torch release the GIL), at most one
        block per worker ahead of the writer, and written in row order into
        arrays sized from a sample of rows (grown if the sample was low), so the
        peak is the graph itself plus a few blocks, not twice the graph."""
        n = self.n
        kept = eps2[counted]  # the radius of the first level whose edges are kept
        capacity = max(n, int(1.25 * self.estimate_edges(math.sqrt(kept))))
        cols = np.empty(capacity, dtype=np.int32)
        levels = np.empty(capacity, dtype=np.uint8)
        degrees = np.empty((counted, n), dtype=np.int64)
        filled = 0

        def block(start: int) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
            stop = min(n, start + step)
            # Grad mode is per thread: the caller's no_grad does not reach here.
            with torch.no_grad():
                d2 = self._row_range(start, stop).detach().cpu().numpy()
            for i in range(counted):
                degrees[i, start:stop] = np.count_nonzero(d2 <= eps2[i], axis=1)
            flat = np.flatnonzero(d2 <= kept)  # row-major: rows in turn
            vals = d2.ravel()[flat]
            # Row r's edges are flat[bounds[r]:bounds[r + 1]].
            bounds = np.searchsorted(flat, np.arange(stop - start + 1) * n)
            # Every kept pair is within the counted radii: start its level there.
            q = levels_np(vals, eps2[counted:], counted)
            return start, stop, np.diff(bounds), (flat % n).astype(np.int32), q

        for start, stop, row_counts, block_cols, block_levels in _map_ordered(
            block, range(0, n, step), self.row_workers
        ):
            counts[start:stop] = torch.from_numpy(row_counts)
            end = filled + block_cols.size
            if end > capacity:
                # The sample was low: grow by the rows still to come, pro rata.
                capacity = max(end, int(end * n / stop * 1.05))
                cols = np.resize(cols, capacity)
                levels = np.resize(levels, capacity)
            cols[filled:end] = block_cols
            levels[filled:end] = block_levels
            filled = end
        indptr = torch.zeros(n + 1, dtype=torch.int64)
        torch.cumsum(counts, dim=0, out=indptr[1:])
        return LevelGraph(
            indptr,
            torch.from_numpy(cols)[:filled],
            torch.from_numpy(levels)[:filled],
            torch.from_numpy(degrees) if counted else None,
        )

    def level_graph(self, eps: Sequence[float], counted: int = 0) -> LevelGraph:
        r"""The :class:`LevelGraph` of radii ``eps`` (decreasing), from row blocks.

        One pass over the rows of :math:`d^2` serves every level: a block of rows
        keeps the pairs within :math:`\epsilon_{k+1}` and their level, computed
        with the same comparisons as :meth:`level_matrix`, so the two agree pair
        by pair; the ``k = counted`` coarse levels before it are kept as degrees
        only. No ``N x N`` matrix of any dtype is allocated.

        Args:
            eps: Radii :math:`\epsilon_1 > \epsilon_2 > \dots`, at most 255.
            counted: Number ``k < len(eps)`` of coarse levels kept as degrees.

        Returns:
            The level graph.
        """
        eps2 = _check_radii(eps)
        counted = int(counted)
        if not 0 <= counted < max(1, len(eps2)):
            raise ValueError(
                f"counted must be in [0, {len(eps2)}) for {len(eps2)} radii, got "
                f"{counted}."
            )
        n = self.n
        device = self.device
        counts = torch.empty(n, dtype=torch.int64, device=device)
        on_cpu = device.type == "cpu"
        step = _chunk_rows(n, self.variance.element_size(), self.block_bytes)
        if on_cpu and eps2 and self.upper_blocks:
            return self._level_graph_symmetric(eps2, counted, step)
        if on_cpu and eps2:
            return self._level_graph_numpy(eps2, counted, counts, step)
        cols: list[Tensor] = []
        levels: list[Tensor] = []
        degrees = torch.empty(counted, n, dtype=torch.int64, device=device)
        for start in range(0, n, step):
            stop = min(n, start + step)
            d2 = self._row_range(start, stop)
            if not eps2:
                counts[start:stop] = 0
                continue
            for i in range(counted):
                degrees[i, start:stop] = (d2 <= eps2[i]).sum(dim=1)
            mask = d2 <= eps2[counted]
            counts[start:stop] = mask.sum(dim=1)
            cols.append(mask.nonzero()[:, 1].to(torch.int32))
            levels.append(_levels_of(d2[mask], eps2[counted:]).add_(counted))
        indptr = torch.zeros(n + 1, dtype=torch.int64, device=device)
        torch.cumsum(counts, dim=0, out=indptr[1:])
        kept_degrees = degrees if counted else None
        if not cols:
            empty = torch.empty(0, device=device)
            return LevelGraph(
                indptr, empty.to(torch.int32), empty.to(torch.uint8), kept_degrees
            )
        return LevelGraph(indptr, torch.cat(cols), torch.cat(levels), kept_degrees)


def column_square_sums(factor: Tensor, offset: int = 0) -> Tensor:
    """``factor.square().sum(dim=0)`` per block of :func:`column_blocks`."""
    out = torch.empty(factor.shape[-1], dtype=factor.dtype, device=factor.device)
    for a, b in column_blocks(0, factor.shape[-1], offset):
        torch.sum(factor[:, a:b].square(), dim=0, out=out[a:b])
    return out


def low_rank_rows(
    prior: Tensor, left: Tensor, right: Tensor, scale: float, offset: int = 0
) -> Tensor:
    r"""Rows of :math:`d^2` from prior rows, in place: ``-2 c prior + left @ right``.

    ``prior`` is ``b x m`` (prior covariance rows over ``m`` columns, local
    column ``j`` being global candidate ``offset + j``), ``left`` ``b x (r + 2)``
    and ``right`` ``(r + 2) x m`` (see :class:`LowRankDistance`); the product
    is taken per block of :func:`column_blocks`, so any part of the
    candidates that starts at a block boundary computes the same bits.
    """
    beta = -2.0 * scale
    for a, b in column_blocks(0, prior.shape[-1], offset):
        prior[:, a:b].addmm_(left, right[:, a:b], beta=beta)
    return prior


class DenseDistance(PseudoDistance):
    r"""Pseudo-distance backed by a dense ``N x N`` matrix of :math:`d_t^2`.

    Built from the posterior covariance, which is turned into squared distances
    in place (so the matrix is allocated once).

    Example:
        >>> cov = torch.tensor([[1.0, 0.5], [0.5, 1.0]])
        >>> DenseDistance(cov).rows(torch.tensor([0]))
        tensor([[0., 1.]])

    Args:
        covariance: ``N x N`` symmetric posterior covariance :math:`k_t`.
        inplace: Overwrite ``covariance`` with the squared distances instead of
            copying it.
        block_bytes: See :class:`PseudoDistance`.
    """

    def __init__(
        self,
        covariance: Tensor,
        inplace: bool = False,
        block_bytes: int = 16 * 2**20,
    ) -> None:
        if covariance.ndim != 2 or covariance.shape[0] != covariance.shape[1]:
            raise ValueError(
                "covariance must be a square N x N matrix, got shape "
                f"{tuple(covariance.shape)}."
            )
        super().__init__(torch.diagonal(covariance).clone(), block_bytes)
        dist2 = covariance if inplace else covariance.clone()
        idx = torch.arange(self.n, device=self.device)
        self.dist2 = self._dist2_from_cov(dist2, idx)

    def rows(self, idx: Tensor) -> Tensor:
        return self.dist2[idx.to(device=self.device, dtype=torch.long)]

    def _row_range(self, start: int, stop: int) -> Tensor:
        return self.dist2[start:stop]


class LowRankDistance(PseudoDistance):
    r"""Pseudo-distance from a prior kernel and a low-rank posterior correction.

    For an exact GP with ``r`` observations, the posterior covariance over the
    candidates is :math:`k_t(x, x') = k(x, x') - w(x)^\top w(x')`, where the
    columns of ``factor`` are :math:`w(x) = L^{-1} k_n(x)` and :math:`L L^\top`
    is the Cholesky factorization of the noisy training covariance
    :math:`K_n + \eta^2 I`. Rows are computed on demand, so memory is ``O(N r)``
    plus one block.

    Each call to ``prior_rows`` evaluates a kernel (with fixed costs per call),
    so farthest-first traversals take rows in batches of :attr:`row_batch`.

    Args:
        prior_rows: Maps a 1-D index tensor to the ``len(idx) x N`` prior
            covariance rows :math:`k(x_i, \cdot)` over the candidates.
        prior_variance: ``N`` prior variances :math:`k(x, x)`.
        factor: ``r x N`` matrix whose columns are :math:`w(x)`.
        block_bytes: See :class:`PseudoDistance`.
        prior_scale: Constant :math:`c` by which ``prior_rows`` are multiplied
            (e.g. an outcome transform's variance); ``prior_variance`` and
            ``factor`` already include it.
        prior_block: Optional map ``(idx, first)`` to the prior covariance of
            the points ``idx`` and the points ``first..N-1``; with it,
            :meth:`level_graph` computes each pair once (``d^2`` is symmetric).
    """

    def __init__(
        self,
        prior_rows: Callable[[Tensor], Tensor],
        prior_variance: Tensor,
        factor: Tensor,
        block_bytes: int = 16 * 2**20,
        prior_scale: float = 1.0,
        prior_block: Callable[[Tensor, int], Tensor] | None = None,
    ) -> None:
        if factor.ndim != 2 or factor.shape[-1] != prior_variance.shape[-1]:
            raise ValueError(
                f"factor must be r x N with N = {prior_variance.shape[-1]}, got "
                f"shape {tuple(factor.shape)}."
            )
        super().__init__(prior_variance - column_square_sums(factor), block_bytes)
        self.row_batch = 32
        self.prior_rows = prior_rows
        self.prior_block = prior_block
        self.upper_blocks = prior_block is not None
        self.prior_scale = float(prior_scale)
        self.factor = factor
        # [W; s^2; 1] (r + 2 rows): the variances ride in the same matrix
        # product as the correction, so a row of d^2 is one kernel row and one
        # addmm, with no further pass over the block for the two variances.
        ones = torch.ones_like(self.variance).unsqueeze(0)
        self._right = torch.cat([factor, self.variance.unsqueeze(0), ones])

    def rows(self, idx: Tensor) -> Tensor:
        return self._rows(idx.to(device=self.device, dtype=torch.long), clamp=True)

    def _row_range(self, start: int, stop: int) -> Tensor:
        # Only compared with positive radii here, where a round-off negative
        # and the 0 it would be clamped to fall on the same side: no clamp pass.
        return self._rows(torch.arange(start, stop, device=self.device), clamp=False)

    def _left(self, idx: Tensor) -> Tensor:
        # d^2(a, b) = -2 c k(a, b) + [2 w_a; 1; s_a^2] . [w_b; s_b^2; 1]
        left = self._right[:, idx].T.clone()
        left[:, :-2].mul_(2.0)
        left[:, -2:] = left[:, -2:].flip(-1)
        return left

    def _upper_block(self, start: int, stop: int) -> Tensor:
        idx = torch.arange(start, stop, device=self.device)
        d2 = self.prior_block(idx, start).addmm_(
            self._left(idx), self._right[:, start:], beta=-2.0 * self.prior_scale
        )
        square = torch.arange(stop - start, device=self.device)
        d2[square, square] = 0.0
        return d2

    def _rows(self, idx: Tensor, clamp: bool) -> Tensor:
        d2 = low_rank_rows(
            self.prior_rows(idx), self._left(idx), self._right, self.prior_scale
        )
        if clamp:
            d2.clamp_(min=0.0)
        d2[torch.arange(idx.numel(), device=self.device), idx] = 0.0
        return d2
