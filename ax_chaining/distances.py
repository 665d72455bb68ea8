r"""The posterior pseudo-distance :math:`d_t(x, x')^2 = \sigma_t^2(x) - 2 k_t(x, x')
+ \sigma_t^2(x')` (Section 2 of the paper), as rows on demand: a dense matrix
(:class:`DenseDistance`) or a prior kernel with a low-rank posterior correction
(:class:`LowRankDistance`). Round-off negatives are clamped to 0, and
:math:`d_t(x, x) = 0` exactly."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor

from ax_chaining.level_graph import (
    LevelGraph,
    build_level_graph,
    check_radii,
    chunk_rows,
    level_counts,
)

__all__ = [
    "COLUMN_BLOCK",
    "DEFAULT_MEMORY_BUDGET",
    "DenseDistance",
    "LowRankDistance",
    "MemoryBudgetError",
    "PseudoDistance",
    "column_blocks",
    "dense_memory_bytes",
    "format_bytes",
]

#: Default memory budget for the engine's largest allocations, in bytes (4 GiB).
DEFAULT_MEMORY_BUDGET: int = 4 * 2**30

#: Columns per block of the low-rank route's matrix products, over blocks of
#: *global* candidate indices so that a shard computes the whole set's bits.
COLUMN_BLOCK: int = 4096


def column_blocks(
    start: int, stop: int, offset: int = 0, block: int = COLUMN_BLOCK
) -> Iterator[tuple[int, int]]:
    """Split local columns ``start..stop-1`` (global ``offset + c``) into local
    pieces ``(a, b)``, each within one global block.

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
    """A human-readable size, e.g. ``'1.5 GiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def dense_memory_bytes(n: int, dtype: torch.dtype, copies: float = 3.0) -> int:
    r"""Peak bytes of the dense path for ``n`` candidates: ``copies`` ``n x n``
    matrices of ``dtype`` plus the greedy covers' level matrix and adjacency."""
    itemsize = torch.finfo(dtype).bits // 8
    return int(math.ceil(copies * n * n * itemsize + 2 * n * n))


class PseudoDistance(ABC):
    r"""Squared pseudo-distances :math:`d_t^2` over ``N`` points, row by row:
    subclasses provide :meth:`rows`.

    Args:
        variance: ``N`` posterior variances :math:`\sigma_t^2(x)` (negatives
            clamped to 0).
        block_bytes: Largest temporary block when many rows are needed.
    """

    #: Rows worth computing together in a farthest-first traversal: 1 where a
    #: row is a cheap lookup, more where each call has a fixed cost.
    row_batch: int = 1
    #: Whether :meth:`upper_block` computes the pairs ``(a, b >= start)`` of a
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
        #: Threads making blocks of rows in :meth:`level_graph` on CPU.
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

    def row_range(self, start: int, stop: int) -> Tensor:
        """Rows ``start..stop-1`` (a view where the subclass can)."""
        return self.rows(torch.arange(start, stop, device=self.device))

    def level_matrix(self, eps: Sequence[float]) -> Tensor:
        r"""``N x N`` uint8 levels :math:`q(a, b) = |\{i : d_t(a, b) \le
        \epsilon_i\}|` for at most 255 decreasing radii ``eps``, from blocks of
        rows: :math:`d_t(a, b) \le \epsilon_i` iff :math:`q(a, b) \ge i`."""
        eps2 = check_radii(eps)
        n = self.n
        out = torch.empty(n, n, dtype=torch.uint8, device=self.device)
        step = chunk_rows(n, self.variance.element_size(), self.block_bytes)
        for start in range(0, n, step):
            stop = min(n, start + step)
            level_counts(self.row_range(start, stop), eps2, out=out[start:stop])
        return out

    def estimate_edges(self, eps: float, sample: int = 64) -> int:
        r"""Pairs with :math:`d(a, b) \le \epsilon`, counted on ``sample`` evenly
        spaced rows and scaled to ``N`` (deterministic)."""
        n = self.n
        k = max(1, min(n, int(sample)))
        idx = torch.linspace(0, n - 1, k, device=self.device).round().long().unique()
        count = int((self.rows(idx) <= float(eps) ** 2).sum())
        return int(math.ceil(count * n / idx.numel()))

    def upper_block(self, start: int, stop: int) -> Tensor:
        """``d^2`` of rows ``start..stop-1`` and columns ``start..N-1`` (unclamped)."""
        raise NotImplementedError

    def level_graph(self, eps: Sequence[float], counted: int = 0) -> LevelGraph:
        """:func:`~ax_chaining.level_graph.build_level_graph` of radii ``eps``."""
        return build_level_graph(self, eps, counted)


def column_square_sums(factor: Tensor, offset: int = 0) -> Tensor:
    """``factor.square().sum(dim=0)`` per block of :func:`column_blocks`."""
    out = torch.empty(factor.shape[-1], dtype=factor.dtype, device=factor.device)
    for a, b in column_blocks(0, factor.shape[-1], offset):
        torch.sum(factor[:, a:b].square(), dim=0, out=out[a:b])
    return out


def low_rank_rows(
    prior: Tensor, left: Tensor, right: Tensor, scale: float, offset: int = 0
) -> Tensor:
    r"""Rows of :math:`d^2`, in place, from ``b x m`` prior rows (local column
    ``j`` is candidate ``offset + j``): ``-2 c prior + left @ right`` per block
    of :func:`column_blocks` (:class:`LowRankDistance`)."""
    beta = -2.0 * scale
    for a, b in column_blocks(0, prior.shape[-1], offset):
        prior[:, a:b].addmm_(left, right[:, a:b], beta=beta)
    return prior


class DenseDistance(PseudoDistance):
    r"""Pseudo-distance backed by a dense ``N x N`` matrix of :math:`d_t^2`, from
    the ``N x N`` symmetric posterior covariance :math:`k_t` (overwritten if
    ``inplace``).

    Example:
        >>> cov = torch.tensor([[1.0, 0.5], [0.5, 1.0]])
        >>> DenseDistance(cov).rows(torch.tensor([0]))
        tensor([[0., 1.]])
    """

    def __init__(
        self, covariance: Tensor, inplace: bool = False, block_bytes: int = 16 * 2**20
    ) -> None:
        if covariance.ndim != 2 or covariance.shape[0] != covariance.shape[1]:
            raise ValueError(
                "covariance must be a square N x N matrix, got shape "
                f"{tuple(covariance.shape)}."
            )
        super().__init__(torch.diagonal(covariance).clone(), block_bytes)
        dist2 = covariance if inplace else covariance.clone()
        dist2.mul_(-2.0).add_(self.variance).add_(self.variance[:, None])
        self.dist2 = dist2.clamp_(min=0.0).fill_diagonal_(0.0)

    def rows(self, idx: Tensor) -> Tensor:
        return self.dist2[idx.to(device=self.device, dtype=torch.long)]

    def row_range(self, start: int, stop: int) -> Tensor:
        return self.dist2[start:stop]


class LowRankDistance(PseudoDistance):
    r"""Pseudo-distance from a prior kernel and a low-rank posterior correction.

    For an exact GP with ``r`` observations, :math:`k_t(x, x') = k(x, x') -
    w(x)^\top w(x')` with :math:`w(x) = L^{-1} k_n(x)`, :math:`L L^\top = K_n +
    \eta^2 I`. Rows are computed on demand: memory ``O(N r)`` plus one block.

    Args:
        prior_rows: Maps indices to the ``len(idx) x N`` prior covariance rows.
        prior_variance: ``N`` prior variances :math:`k(x, x)`.
        factor: ``r x N`` matrix whose columns are :math:`w(x)`.
        prior_scale: Constant :math:`c` multiplying ``prior_rows`` (e.g. an
            outcome transform's variance), already in the other two.
        prior_block: Optional map ``(idx, first)`` to the prior covariance of
            ``idx`` and ``first..N-1``: :meth:`level_graph` then computes each
            pair once.

    Example:
        >>> K = torch.tensor([[1.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
        >>> W = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
        >>> LowRankDistance(lambda idx: K[idx], K.diagonal(), W).rows(torch.tensor([0]))
        tensor([[0., 1.]], dtype=torch.float64)
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
        # [W; s^2; 1]: the variances ride in the correction's matrix product.
        ones = torch.ones_like(self.variance).unsqueeze(0)
        self._right = torch.cat([factor, self.variance.unsqueeze(0), ones])
        # W as rows of that matrix: a caller may drop its own copy for this one.
        self.factor = self._right[:-2]

    def rows(self, idx: Tensor) -> Tensor:
        return self._rows(idx.to(device=self.device, dtype=torch.long)).clamp_(min=0.0)

    def row_range(self, start: int, stop: int) -> Tensor:
        # Only compared with positive radii: a negative acts as its clamp 0.
        return self._rows(torch.arange(start, stop, device=self.device))

    def _left(self, idx: Tensor) -> Tensor:
        # d^2(a, b) = -2 c k(a, b) + [2 w_a; 1; s_a^2] . [w_b; s_b^2; 1]
        left = self._right[:, idx].T.clone()
        left[:, :-2].mul_(2.0)
        left[:, -2:] = left[:, -2:].flip(-1)
        return left

    def upper_block(self, start: int, stop: int) -> Tensor:
        idx = torch.arange(start, stop, device=self.device)
        d2 = self.prior_block(idx, start).addmm_(
            self._left(idx), self._right[:, start:], beta=-2.0 * self.prior_scale
        )
        square = torch.arange(stop - start, device=self.device)
        d2[square, square] = 0.0
        return d2

    def _rows(self, idx: Tensor) -> Tensor:
        d2 = low_rank_rows(
            self.prior_rows(idx), self._left(idx), self._right, self.prior_scale
        )
        d2[torch.arange(idx.numel(), device=self.device), idx] = 0.0
        return d2
