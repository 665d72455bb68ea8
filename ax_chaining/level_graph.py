r"""The nested :math:`\epsilon_i`-graphs of a pseudo-distance, built from blocks
of its rows: the :class:`LevelGraph` that greedy covers read, and the comparisons
of rows of :math:`d^2` with the radii that every caller shares."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np
import torch
from torch import Tensor

from ax_chaining.covers import run_positions

__all__ = [
    "GRAPH_PEAK_EDGE_BYTES",
    "LevelGraph",
    "RowSource",
    "build_level_graph",
    "check_radii",
    "chunk_rows",
    "level_counts",
    "levels_np",
    "map_ordered",
]

_T = TypeVar("_T")


class RowSource(Protocol):
    """What the builders read of a pseudo-distance over ``n`` points (a
    :class:`~ax_chaining.distances.PseudoDistance`)."""

    variance: Tensor
    block_bytes: int
    row_workers: int
    upper_blocks: bool

    @property
    def n(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    def row_range(self, start: int, stop: int) -> Tensor: ...

    def upper_block(self, start: int, stop: int) -> Tensor: ...

    def estimate_edges(self, eps: float, sample: int = 64) -> int: ...


def chunk_rows(n: int, itemsize: int, block_bytes: int) -> int:
    """Rows of ``n`` values of ``itemsize`` bytes in a block of ``block_bytes``."""
    return max(1, min(n, block_bytes // max(1, n * itemsize)))


def map_ordered(
    fn: Callable[[int], _T], items: Iterable[int], workers: int
) -> Iterator[_T]:
    """``map(fn, items)`` on ``workers`` threads, in order, at most ``workers``
    results ahead of the consumer."""
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


#: Peak bytes per edge budgeted for the greedy covers: 5 stored (int32 target,
#: uint8 level), the rest for arrays sized from a sample of rows and their split
#: into per-level graphs.
GRAPH_PEAK_EDGE_BYTES = 16


def check_radii(eps: Sequence[float]) -> list[float]:
    """Squared radii of ``eps``, checked: at most 255, strictly decreasing."""
    eps2 = [float(e) ** 2 for e in eps]
    if len(eps2) > 255 or any(a <= b for a, b in zip(eps2, eps2[1:], strict=False)):
        raise ValueError("eps must be at most 255 strictly decreasing radii.")
    return eps2


def levels_np(d2: np.ndarray, eps2: Sequence[float], start: int = 0) -> np.ndarray:
    """uint8 ``start + sum_i [d2 <= eps_i^2]`` in numpy, ``start`` counting the
    radii known to hold."""
    q = np.full(d2.shape, start, dtype=np.uint8)
    for e2 in eps2:
        q += d2 <= e2
    return q


def level_counts(d2: Tensor, eps2: list[float], out: Tensor | None = None) -> Tensor:
    """uint8 ``sum_i [d2 <= eps_i^2]`` (the comparisons of :func:`levels_np`)."""
    if out is None:
        out = torch.empty(d2.shape, dtype=torch.uint8, device=d2.device)
    out.zero_()
    for e2 in eps2:
        out.add_(d2 <= e2)
    return out


@dataclass(frozen=True)
class LevelGraph:
    r"""The nested :math:`\epsilon_i`-graphs of a pseudo-distance as one edge list.

    Row ``a`` (``indices[indptr[a]:indptr[a + 1]]``) holds, in increasing order,
    every ``b`` with :math:`d(a, b) \le \epsilon_{k+1}` as computed from row
    ``a`` of :math:`d^2`, and ``levels`` each pair's
    :math:`q(a, b) = |\{i : d(a, b) \le \epsilon_i\}|`: the level-``i`` graph
    is the edges with ``q >= i``. The ``k`` coarse levels whose edges are
    dropped keep each point's degree (what a lazy greedy cover needs).

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
        """The number ``k`` of coarse levels kept as degrees only."""
        return 0 if self.degrees is None else self.degrees.shape[0]

    @property
    def n(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_edges(self) -> int:
        """Number of stored (directed) edges, self-loops included."""
        return self.indices.numel()


@dataclass
class _UpperBlock:
    """Rows ``[start, stop)`` of a symmetric ``d^2`` over columns ``start..N-1``:
    per counted level the degrees added to its rows and (mirrored) to the rows
    ``b >= stop``, its rows' edge ``counts``, ``cols`` and ``levels``, and the
    mirrored edges ``(b, a)``, ``b >= stop``, in ``b``-major order."""

    start: int
    stop: int
    degrees: list[tuple[np.ndarray, np.ndarray]]
    counts: np.ndarray
    cols: np.ndarray
    levels: np.ndarray
    mirror_rows: np.ndarray
    mirror_cols: np.ndarray
    mirror_levels: np.ndarray


def _symmetric_level_graph(
    source: RowSource, eps2: list[float], counted: int, step: int
) -> LevelGraph:
    """:func:`build_level_graph` computing each pair once, for a symmetric ``d^2``:
    block ``[start, stop)`` is computed for the columns ``start..N-1`` only, its
    pairs with ``b >= stop`` also written, mirrored, into row ``b``, which so
    receives its lower neighbours from earlier blocks, in order, ahead of its
    own. Blocks are made on ``row_workers`` threads."""
    n = source.n
    kept = eps2[counted]
    degrees = np.zeros((counted, n), dtype=np.int64)
    direct_counts = np.zeros(n, dtype=np.int64)
    mirror_counts = np.zeros(n, dtype=np.int64)

    def block(start: int) -> _UpperBlock:
        stop = min(n, start + step)
        k, width = stop - start, n - start
        with torch.no_grad():
            d2 = source.upper_block(start, stop).detach().cpu().numpy()
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
        return _UpperBlock(
            start, stop, deg, np.diff(bounds), cols, q, tb + stop, ta + start, tq
        )

    blocks: list[_UpperBlock | None] = []
    for out in map_ordered(block, range(0, n, step), source.row_workers):
        start, stop = out.start, out.stop
        for i, (rows, cols) in enumerate(out.degrees):
            degrees[i, start:stop] += rows
            degrees[i, stop:] += cols
        direct_counts[start:stop] = out.counts
        mirror_counts += np.bincount(out.mirror_rows, minlength=n)
        blocks.append(out)
    counts = direct_counts + mirror_counts
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    total = int(indptr[-1])
    indices = np.empty(total, dtype=np.int32)
    levels = np.empty(total, dtype=np.uint8)
    cursor = indptr[:-1].copy()
    for j in range(len(blocks)):
        b = blocks[j]
        blocks[j] = None  # free each block once written
        start, stop, dc, tb = b.start, b.stop, b.counts, b.mirror_rows
        # Row a's own block comes after every block that mirrors into it.
        pos = run_positions(cursor[start:stop], dc)
        indices[pos], levels[pos] = b.cols, b.levels
        cursor[start:stop] += dc
        if tb.size:
            mc = np.bincount(tb - stop, minlength=n - stop)
            pos = run_positions(cursor[stop:], mc)
            indices[pos], levels[pos] = b.mirror_cols, b.mirror_levels
            cursor[stop:] += mc
    return LevelGraph(
        torch.from_numpy(indptr),
        torch.from_numpy(indices),
        torch.from_numpy(levels),
        torch.from_numpy(degrees) if counted else None,
    )


def _numpy_level_graph(
    source: RowSource, eps2: list[float], counted: int, step: int
) -> LevelGraph:
    """:func:`build_level_graph` on CPU, in numpy: blocks made on ``row_workers``
    threads, written in row order into arrays sized from a sample of rows."""
    n = source.n
    kept = eps2[counted]  # the radius of the first level whose edges are kept
    capacity = max(n, int(1.25 * source.estimate_edges(math.sqrt(kept))))
    cols = np.empty(capacity, dtype=np.int32)
    levels = np.empty(capacity, dtype=np.uint8)
    degrees = np.empty((counted, n), dtype=np.int64)
    counts = torch.empty(n, dtype=torch.int64, device=source.device)
    filled = 0

    def block(start: int) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
        """Rows ``[start, stop)``: their edge counts, targets and levels."""
        stop = min(n, start + step)
        with torch.no_grad():
            d2 = source.row_range(start, stop).detach().cpu().numpy()
        for i in range(counted):
            degrees[i, start:stop] = np.count_nonzero(d2 <= eps2[i], axis=1)
        flat = np.flatnonzero(d2 <= kept)  # row-major: rows in turn
        bounds = np.searchsorted(flat, np.arange(stop - start + 1) * n)
        q = levels_np(d2.ravel()[flat], eps2[counted:], counted)
        return start, stop, np.diff(bounds), (flat % n).astype(np.int32), q

    for start, stop, b_counts, b_cols, b_levels in map_ordered(
        block, range(0, n, step), source.row_workers
    ):
        counts[start:stop] = torch.from_numpy(b_counts)
        end = filled + b_cols.size
        if end > capacity:
            # The sample was low: grow by the rows still to come, pro rata.
            capacity = max(end, int(end * n / stop * 1.05))
            cols = np.resize(cols, capacity)
            levels = np.resize(levels, capacity)
        cols[filled:end] = b_cols
        levels[filled:end] = b_levels
        filled = end
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    torch.cumsum(counts, dim=0, out=indptr[1:])
    return LevelGraph(
        indptr,
        torch.from_numpy(cols)[:filled],
        torch.from_numpy(levels)[:filled],
        torch.from_numpy(degrees) if counted else None,
    )


def build_level_graph(
    source: RowSource, eps: Sequence[float], counted: int = 0
) -> LevelGraph:
    r"""The :class:`LevelGraph` of ``source``'s :math:`d^2` (a
    :class:`~ax_chaining.distances.PseudoDistance`) for at most 255 decreasing
    radii ``eps``, its ``counted < len(eps)`` coarse levels kept as degrees
    only: one pass over blocks of rows, with the comparisons of
    :meth:`~ax_chaining.distances.PseudoDistance.level_matrix`.

    Example:
        >>> from ax_chaining.distances import DenseDistance
        >>> graph = build_level_graph(DenseDistance(torch.eye(3)), [1.5, 1.0])
        >>> graph.indptr.tolist(), graph.levels.tolist()
        ([0, 3, 6, 9], [2, 1, 1, 1, 2, 1, 1, 1, 2])
    """
    eps2 = check_radii(eps)
    counted = int(counted)
    if not 0 <= counted < max(1, len(eps2)):
        raise ValueError(
            f"counted must be in [0, {len(eps2)}) for {len(eps2)} radii, got {counted}."
        )
    n, device = source.n, source.device
    step = chunk_rows(n, source.variance.element_size(), source.block_bytes)
    if device.type == "cpu" and eps2:
        graph = _symmetric_level_graph if source.upper_blocks else _numpy_level_graph
        return graph(source, eps2, counted, step)
    counts = torch.zeros(n, dtype=torch.int64, device=device)
    cols = [torch.empty(0, dtype=torch.int32, device=device)]
    levels = [torch.empty(0, dtype=torch.uint8, device=device)]
    degrees = torch.empty(counted, n, dtype=torch.int64, device=device)
    for start in range(0, n if eps2 else 0, step):  # no edges without radii
        stop = min(n, start + step)
        d2 = source.row_range(start, stop)
        for i in range(counted):
            degrees[i, start:stop] = (d2 <= eps2[i]).sum(dim=1)
        mask = d2 <= eps2[counted]
        counts[start:stop] = mask.sum(dim=1)
        cols.append(mask.nonzero()[:, 1].to(torch.int32))
        levels.append(level_counts(d2[mask], eps2[counted:]).add_(counted))
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=device)
    torch.cumsum(counts, dim=0, out=indptr[1:])
    kept_degrees = degrees if counted else None
    return LevelGraph(indptr, torch.cat(cols), torch.cat(levels), kept_degrees)
