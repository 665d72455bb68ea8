r"""The worker side of sharded candidates: a :class:`Shard` (held by a Dask
actor) keeps all that is ``O(shard)`` of a step and returns a few numbers,
indices, "left data" (:class:`Left`) or rows at a pool of points."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ax_chaining.certificate.tails import bind_tail, tail_sum
from ax_chaining.chaining import BonusShape, chaining_bonus
from ax_chaining.checks import nearest_rows
from ax_chaining.distances import column_square_sums, low_rank_rows
from ax_chaining.kernels.fingerprints import PackedFingerprints
from ax_chaining.kernels.precomputed import item_indices
from ax_chaining.posterior import (
    FeatureRows,
    KernelRows,
    SERows,
    factor_blocks,
    pending_factor_blocks,
    training_mask,
)

__all__ = [
    "Left",
    "LibraryKernel",
    "PendingFactors",
    "Shard",
    "StaleShardError",
    "StepFactors",
]


class StaleShardError(RuntimeError):
    """A shard was asked for a step it does not hold (its state was lost)."""


@dataclass(frozen=True)
class LibraryKernel:
    """A library-mode ``TanimotoKernel``'s parameters, without its library."""

    scale: float
    route: str
    normalized_inputs: bool
    num_items: int


@dataclass(frozen=True)
class PendingFactors:
    """Pending points' kernel features and factors ``W_p`` (``r x p``) and
    ``A`` (``p x p``) of :meth:`~ax_chaining.posterior.ModelFactors.pending`."""

    features: Any
    W_p: Tensor
    A: Tensor


@dataclass
class StepFactors:
    r"""What a step sends to every shard, once (``O(r^2 + r p)``).

    Attributes:
        step: The step's number; every later call names it.
        base_key: Identifies the model (a shard reuses its factor for it).
        kernel: The model's ``covar_module``, or a :class:`LibraryKernel`.
        train_features: Transformed training inputs, or their words (library).
        L, whitened, out_var: As :class:`~ax_chaining.posterior.ModelFactors`.
        flip: ``(w, b)`` of a posterior transform ``w y + b``, or None.
    """

    step: int
    base_key: str
    dtype: torch.dtype
    input_transform: Any
    kernel: Any
    train_features: Any
    L: Tensor
    whitened: Tensor
    out_var: Tensor
    mean_module: Any
    outcome_transform: Any
    flip: tuple[float, float] | None = None
    pending: PendingFactors | None = None


@dataclass
class Left:
    """Points' global indices, kernel features and factor columns
    ``[w; s^2; 1]``: what a shard needs for their rows."""

    index: list[int]
    features: Any
    columns: Tensor

    @staticmethod
    def cat(parts: list[Left | None]) -> Left:
        kept = [p for p in parts if p is not None and p.index]
        feats = [p.features for p in kept]
        cat = np.concatenate if isinstance(feats[0], np.ndarray) else torch.cat
        return Left(
            [i for p in kept for i in p.index],
            cat(feats),
            torch.cat([p.columns for p in kept]),
        )

    def take(self, positions: list[int]) -> Left:
        """The points at ``positions`` (in that order)."""
        index = [self.index[p] for p in positions]
        return Left(index, self.features[positions], self.columns[positions])


class _ShardLibraryKernel(KernelRows):
    """A library-mode Tanimoto kernel over a shard's rows (points given by
    their words); float64 ``as_rows`` (as ``LibraryRows``), else the model's."""

    def __init__(
        self,
        library: PackedFingerprints,
        Zt: Tensor,
        f: StepFactors,
        offset: int,
        as_rows: bool,
    ) -> None:
        super().__init__(None, Zt, offset, exact=True)
        self.library, self.as_rows = library, as_rows
        self.scale, self.route = f.kernel.scale, f.kernel.route

    def features(self, idx: Tensor) -> np.ndarray:
        return np.asarray(self.library.words[idx.numpy()])

    def __call__(self, feats: Any, cols: int | None = None, first: int = 0) -> Tensor:
        stop = self.n if cols is None else cols
        query = PackedFingerprints(
            np.ascontiguousarray(feats), self.library.n_bits, validate=False
        )
        dtype = torch.float64 if self.as_rows else self.Zt.dtype
        out = self.library.tanimoto(
            query, slice(first, stop), route=self.route, dtype=dtype
        )
        return out.mul_(self.scale) if self.scale != 1.0 else out

    def diag(self, first: int, stop: int) -> Tensor:
        return torch.full((stop - first,), self.scale, dtype=self.Zt.dtype)


class Shard:
    r"""Candidates ``start .. stop - 1`` of ``n`` and their part of each step.

    Args:
        start, stop: The shard's global range (``start`` a multiple of
            :data:`~ax_chaining.distances.COLUMN_BLOCK`).
        n: The number of candidates over all shards.
        candidates: The shard's rows of an ``N x d`` tensor, or None.
        library_words: The shard's rows of a fingerprint library, or None.
        library_path: A saved library, memory-mapped (rows ``start..stop-1``).
        normalized_inputs: Library: candidate ``i`` is ``i / (n - 1)``.
    """

    def __init__(
        self,
        start: int,
        stop: int,
        n: int,
        candidates: Tensor | None = None,
        library_words: np.ndarray | None = None,
        library_path: str | None = None,
        n_bits: int | None = None,
        normalized_inputs: bool = False,
    ) -> None:
        self.start, self.stop, self.n = int(start), int(stop), int(n)
        self.size = self.stop - self.start
        self.library: PackedFingerprints | None = None
        if candidates is not None:
            self.Z = candidates
        else:
            if library_path is not None:
                full = PackedFingerprints.open(library_path)
                library_words = full.words[self.start : self.stop]
                n_bits = full.n_bits
            self.library = PackedFingerprints(library_words, n_bits, validate=False)
            items = torch.arange(self.start, self.stop, dtype=torch.float64)
            if normalized_inputs:
                items = items / (self.n - 1)
            self.Z = items.unsqueeze(-1)
        self.step: int | None = None
        self._base_key: str | None = None

    def _check(self, step: int) -> None:
        if self.step is None or step != self.step:
            raise StaleShardError(
                f"shard {self.start}..{self.stop - 1} holds step {self.step}, was "
                f"asked for step {step}: its state was rebuilt or lost."
            )

    def _local(self, gidx: list[int]) -> tuple[list[int], list[int]]:
        """``(positions in gidx, local indices)`` of the owned global indices."""
        pos = [k for k, g in enumerate(gidx) if self.start <= g < self.stop]
        return pos, [gidx[k] - self.start for k in pos]

    def _maxarg(self, x: Tensor) -> tuple[float, int]:
        i = int(torch.argmax(x))  # the first maximum, as one machine's
        return float(x[i]), self.start + i

    def _zero_own(self, x: Tensor, index: int) -> None:
        if self.start <= index < self.stop:
            x[index - self.start] = 0.0

    @torch.no_grad()
    def prepare(self, f: StepFactors) -> dict[str, Any]:
        """Posterior mean, variance and factor over the shard for step ``f``;
        a summary: smallest variance (left data), largest prior, finiteness."""
        self.step = None  # a failure below leaves no half-prepared step
        if self._base_key != f.base_key:
            self._prepare_base(f)
        r = f.L.shape[-1]
        pending = f.pending
        p = 0 if pending is None else int(pending.W_p.shape[-1])
        if p or self.right.shape[0] != r + 2:
            right = torch.empty(r + p + 2, self.size, dtype=f.dtype)
            right[:r] = self._W
            self.right, self._W = right, right[:r]
        right = self.right
        if p:
            pending_factor_blocks(
                self.kernel,
                pending.features,
                pending.W_p,
                pending.A,
                self._W,
                f.out_var,
                right[r : r + p],
            )
        sq = column_square_sums(right[: r + p], self.start)
        right[r + p] = (self.prior_var - sq).clamp_min(0)
        right[r + p + 1] = 1.0
        self.variance = right[r + p]
        self.mean = self._base_mean
        if f.flip is not None:
            self.mean = f.flip[0] * self.mean + f.flip[1]
        self.out_var = float(f.out_var)
        self.dtype = f.dtype
        i = int(torch.argmin(self.variance))
        out = {
            "min_variance": float(self.variance[i]),
            "left": self._left([i]),
            "max_prior_variance": float(self.prior_var.max()),
            "finite": bool(torch.isfinite(self.prior_var - sq).all()),
        }
        self._ff_reset()
        self.step = f.step
        return out

    def _prepare_base(self, f: StepFactors) -> None:
        """The factor and mean without pending points (reused by a batch)."""
        self._base_key = None
        Z = self.Z.to(f.dtype)
        Zt = Z if f.input_transform is None else f.input_transform(Z)
        if isinstance(f.kernel, LibraryKernel):
            normalized, n_items = f.kernel.normalized_inputs, f.kernel.num_items
            if self.library is None:  # the store checked the library's size
                raise ValueError(
                    f"The model's TanimotoKernel holds a library of {n_items} items, "
                    f"the sharded candidates are {self.n} points, not a library; "
                    "expected the same library, item i at candidate i."
                )
            items = item_indices(Zt, n_items, normalized, "TanimotoKernel")
            if not torch.equal(items.cpu(), torch.arange(self.start, self.stop)):
                raise ValueError(
                    "The sharded library's candidates map to other items under the "
                    "model's TanimotoKernel (normalized_inputs="
                    f"{normalized}); expected candidate i to be item i: build "
                    "ShardedCandidates with the kernel's normalized_inputs."
                )
            kernel = _ShardLibraryKernel(self.library, Zt, f, self.start, False)
            rows = _ShardLibraryKernel(self.library, Zt, f, self.start, True)
        else:
            kernel = KernelRows(f.kernel, Zt, offset=self.start)
            rows = (
                SERows.of(f.kernel, Zt, f.train_features, self.start)
                or FeatureRows.of(f.kernel, Zt, f.train_features, self.start)
                or kernel
            )
        r = f.L.shape[-1]
        self.right = torch.empty(r + 2, self.size, dtype=f.dtype)
        self._W = self.right[:r]
        self._base_mean = factor_blocks(
            kernel,
            f.train_features,
            f.L,
            f.whitened,
            f.mean_module,
            f.outcome_transform,
            f.out_var,
            self.right,
        )
        self.prior_var = kernel.diag(0, self.size).to(f.dtype) * f.out_var
        self.kernel, self.rows_source = kernel, rows
        self._base_key = f.base_key

    def _left(self, local: list[int]) -> Left:
        idx = torch.tensor(local, dtype=torch.long)
        return Left(
            [self.start + i for i in local],
            self.rows_source.features(idx),
            self.right[:, idx].T.clone(),
        )

    def left(self, step: int, gidx: list[int]) -> Left | None:
        """Left data of the owned points among ``gidx`` (None if none)."""
        self._check(step)
        local = self._local(gidx)[1]
        return self._left(local) if local else None

    def values(self, step: int, gidx: list[int]) -> dict[str, Any]:
        """Mean (objective), variance and raw rows of the owned ``gidx``."""
        self._check(step)
        pos, local = self._local(gidx)
        idx = torch.tensor(local, dtype=torch.long)
        mean, var, x = self.mean[idx], self.variance[idx], self.Z[idx]
        return {"positions": pos, "mean": mean, "variance": var, "x": x}

    @torch.no_grad()
    def _rows(self, left: Left) -> Tensor:
        r"""Rows of :math:`d_t^2` of ``left`` over the shard (as
        ``LowRankDistance.rows``)."""
        prior = self.rows_source(left.features, self.size, 0).to(self.dtype)
        cols = left.columns.clone()
        cols[:, :-2].mul_(2.0)
        cols[:, -2:] = cols[:, -2:].flip(-1)
        d2 = low_rank_rows(prior, cols, self.right, self.out_var, self.start)
        d2.clamp_(min=0.0)
        pos, local = self._local(left.index)
        if pos:
            d2[torch.tensor(pos), torch.tensor(local)] = 0.0
        return d2

    def _ff_reset(self) -> None:
        self.mind2: Tensor | None = None
        self._tmp: Tensor | None = None
        self._seq: list[tuple[Tensor, int]] = []
        self._rows_cache: dict[int, Tensor] = {}
        self._far: Tensor | None = None

    def _commit(self, keep: int | None) -> None:
        """Keep the first ``keep`` speculative centres (None: no change)."""
        if keep is None:
            return
        if keep == len(self._seq) and self._tmp is not None:
            self.mind2 = self._tmp
        else:
            for row, far in self._seq[:keep]:
                torch.minimum(self.mind2, row, out=self.mind2)
                self._zero_own(self.mind2, far)
        self._tmp, self._seq = None, []

    def _prefixes(self, seq: list[tuple[int, int]]) -> list[dict[str, Any]]:
        """Apply centres ``(pool position, index)`` to the speculative copy;
        after each, the shard's largest distance and its first index."""
        out = []
        if self._tmp is None:
            self._tmp = self.mind2.clone()
        for j, far in seq:
            row = self._rows_cache.pop(j)
            self._seq.append((row, far))
            torch.minimum(self._tmp, row, out=self._tmp)
            self._zero_own(self._tmp, far)
            value, arg = self._maxarg(self._tmp)
            out.append({"max": value, "argmax": arg})
        if out:  # the last prefix's farthest point: the next pool's first
            out[-1]["left"] = self._left([out[-1]["argmax"] - self.start])
        return out

    def ff_begin(self, step: int, left: Left) -> dict[str, Any]:
        """Distances to the first centre (``left``, one point)."""
        self._check(step)
        self._ff_reset()
        self.mind2 = self._rows(left)[0].clamp_min(0).to(self.dtype)
        self._zero_own(self.mind2, left.index[0])
        value, arg = self._maxarg(self.mind2)
        return {"max": value, "argmax": arg, "left": self._left([arg - self.start])}

    def ff_count(self, step: int, commit: int | None, threshold: float) -> int:
        """Commit; count (and keep) the points at least ``threshold`` away."""
        self._check(step)
        self._commit(commit)
        self._rows_cache.clear()
        self._far = (self.mind2 >= threshold).nonzero().squeeze(-1)
        return int(self._far.numel())

    def ff_pool(
        self, step: int, positions: list[int], extra: list[int]
    ) -> dict[str, Any]:
        """Indices, distances and left data of the kept far set's
        ``positions`` and the owned points of ``extra``."""
        self._check(step)
        far = self._far[torch.tensor(positions, dtype=torch.long)].tolist()
        local = far + self._local(extra)[1]
        self._far = None
        return {
            "far": [self.start + i for i in far],
            "extra": [self.start + i for i in local[len(far) :]],
            "mind2": self.mind2[torch.tensor(local, dtype=torch.long)],
            "left": self._left(local) if local else None,
        }

    def ff_rows(
        self,
        step: int,
        commit: int | None,
        pool: list[int] | None,
        chunk: list[int],
        left: Left,
        apply: tuple[int, int],
    ) -> dict[str, Any]:
        """Commit; start ``pool`` if given; rows of pool positions ``chunk``
        (``left``) at the owned pool points; apply centre ``apply``."""
        self._check(step)
        self._commit(commit)
        if pool is not None:
            self._rows_cache.clear()
            self._pool_pos, local = self._local(pool)
            self._pool_local = torch.tensor(local, dtype=torch.long)
        rows = self._rows(left)
        self._rows_cache.update(zip(chunk, rows, strict=True))
        values = rows[:, self._pool_local]
        prefixes = self._prefixes([apply])
        return {"positions": self._pool_pos, "values": values, "prefixes": prefixes}

    def ff_apply(self, step: int, seq: list[tuple[int, int]]) -> list[dict[str, Any]]:
        """Apply more centres speculatively."""
        self._check(step)
        return self._prefixes(seq)

    def ff_end(self, step: int, commit: int | None) -> None:
        self._check(step)
        self._commit(commit)
        self._ff_reset()

    def best(
        self,
        step: int,
        eps: Tensor,
        H: Tensor,
        sigma_min_used: float,
        shape: BonusShape,
        maximize: bool,
        excluded: list[int],
    ) -> dict[str, Any] | None:
        r"""The shard's first largest :math:`\pm\mu_t + b_t(\sigma_t)` (None
        if all are excluded)."""
        self._check(step)
        sigma = self.variance.sqrt()
        bonus = chaining_bonus(sigma, eps, H, sigma_min_used, shape)
        value = (self.mean if maximize else -self.mean) + bonus
        local = self._local(excluded)[1]
        if local:
            value[torch.tensor(local, dtype=torch.long)] = -torch.inf
        if value.numel() == 0 or not bool((value > -torch.inf).any()):
            return None
        i = int(torch.argmax(value))
        return {
            "value": float(value[i]),
            "index": self.start + i,
            "x": self.Z[i].clone(),
            "mean": float(self.mean[i]),
            "sigma": float(sigma[i]),
        }

    def evaluated(self, train: Tensor, transform: Any, *dtypes: Any) -> list[int]:
        """Global indices of the shard's candidates among the training inputs."""
        hit = training_mask(self.Z.to(train.dtype), train, transform, *dtypes)
        return (hit.nonzero().squeeze(-1) + self.start).tolist()

    def nearest(self, X: Tensor) -> tuple[Tensor, Tensor, float]:
        """Per row of ``X``, the nearest candidate's distance and index; and
        the shard's largest absolute entry."""
        dist, index = nearest_rows(X, self.Z)
        return dist, index + self.start, float(self.Z.abs().max())

    def cert_rows(
        self, step: int, left: Left, mean_rows: Tensor, scale: float, sign: float, z
    ) -> dict[str, Tensor]:
        r"""Keep rows of :math:`d_t` of ``left`` for :meth:`cert_tail`; per row
        the largest gap where :math:`d = 0` and the pairwise term (``z``)."""
        self._check(step)
        mean = (sign * self.mean).to(torch.float64) / scale
        d = self._rows(left).to(torch.float64).clamp_min(0.0).sqrt()
        gap = mean.unsqueeze(0) - mean_rows.unsqueeze(-1)
        self._cert = (gap, d)
        exact = torch.where(d > 0, torch.full_like(gap, -torch.inf), gap)
        out = {"exact": exact.amax(dim=-1)}
        if z is not None:
            out["pairwise"] = (gap + z * d).amax(dim=-1)
        return out

    def cert_tail(self, step: int, b: Tensor, tail: Any) -> Tensor:
        """The shard's part of the union bound's tail sum at levels ``b``."""
        self._check(step)
        gap, d = self._cert
        return tail_sum(b, gap, d, bind_tail(tail, self.variance, self.prior_var))

    def cert_end(self, step: int) -> None:
        self._check(step)
        self._cert = None
