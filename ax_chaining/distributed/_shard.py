r"""The worker side of a sharded candidate set: one contiguous shard of the
candidates, and its part of every step. No Dask here: a :class:`Shard` is a
plain object that a Dask actor (or a future pinned to a worker) holds, and that
tests can hold in-process.

A shard holds candidates ``start .. stop - 1`` (global indices; ``start`` a
multiple of :data:`~ax_chaining.distances.COLUMN_BLOCK`). Per step it receives
the model's small factors (:class:`StepFactors`) and keeps, for its own
candidates only, everything that is ``O(shard)``:

* the factor :math:`W` with the variances, ``[W; \sigma_t^2; 1]``
  (``(r + p + 2) x n_s``), the posterior mean and prior variance;
* the farthest-first traversal's distances to the centres so far
  (``mind2``), a copy for the centres taken speculatively, and a pool's rows;
* a block of certified points' rows of :math:`d_t` during a certificate.

What it returns is small: a few numbers, the global indices and "left data"
(kernel features and factor columns) of a few points, or the values of a
chunk of rows at a pool of at most 64 points.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ax_chaining.certificate.tails import bind_tail, tail_sum
from ax_chaining.chaining import BonusShape, chaining_bonus
from ax_chaining.checks import match_rows, nearest_rows
from ax_chaining.distances import (
    column_blocks,
    column_square_sums,
    low_rank_rows,
)
from ax_chaining.kernels.fingerprints import PackedFingerprints
from ax_chaining.kernels.precomputed import item_indices
from ax_chaining.posterior import (
    FeatureRows,
    KernelRows,
    SERows,
    factor_blocks,
    pending_factor_blocks,
)

__all__ = [
    "LibraryKernel",
    "Left",
    "PendingFactors",
    "Shard",
    "ShardKernel",
    "StaleShardError",
    "StepFactors",
    "TorchKernel",
]


class StaleShardError(RuntimeError):
    """A shard was asked for a step it did not prepare (its state was rebuilt
    or lost, e.g. recomputed on another worker): its answer would be wrong."""


@dataclass(frozen=True)
class TorchKernel:
    """A step's kernel sent to the shards as the model's own module.

    Attributes:
        covar_module: The model's covariance module (a small module).
    """

    covar_module: Any


@dataclass(frozen=True)
class LibraryKernel:
    """A step's library-mode ``TanimotoKernel`` as sent to the shards: its
    parameters, never the library itself (each shard holds its own part).

    Attributes:
        scale: The outputscale of the kernel's ``ScaleKernel``.
        route: The kernel's route (how it evaluates the library's rows).
        normalized_inputs: Whether the model's inputs are normalized item indices.
        num_items: The library's size.
        n_bits: The fingerprints' length.
    """

    scale: float
    route: str
    normalized_inputs: bool
    num_items: int
    n_bits: int


#: A step's kernel as the shards receive it.
ShardKernel = TorchKernel | LibraryKernel


@dataclass(frozen=True)
class PendingFactors:
    """The pending points of a step as the shards receive them.

    Attributes:
        features: Their features in the step's kernel (transformed inputs, or
            their fingerprints' words for a library kernel).
        W_p: Their ``r x p`` whitened cross-covariance with the training points.
        A: The ``p x p`` factor that conditions on them.
    """

    features: Any
    W_p: Tensor
    A: Tensor

    @property
    def p(self) -> int:
        """The number of pending points."""
        return int(self.W_p.shape[-1])


@dataclass
class StepFactors:
    r"""What a step sends to every shard, once: all ``O(r^2 + r p)``.

    Attributes:
        step: The step's number; every later call names it.
        base_key: Identifies the model (its factors without pending points):
            a shard that already holds them for this key reuses its factor.
        dtype: The model's floating dtype.
        input_transform: The model's input transform (a small module), or None.
        kernel: A :class:`TorchKernel`, or a :class:`LibraryKernel` for a
            library-mode ``TanimotoKernel`` (the library itself is never sent).
        train_features: Transformed training inputs, or their fingerprints'
            words (library).
        L, whitened, out_var: Cholesky factor, whitened residual and outcome
            variance scale of :class:`~ax_chaining.posterior.ModelFactors`.
        mean_module, outcome_transform: The model's (small modules).
        flip: ``(w, b)`` of a posterior transform ``w y + b``, or None.
        pending: The pending points' :class:`PendingFactors`, or None.
    """

    step: int
    base_key: str
    dtype: torch.dtype
    input_transform: Any
    kernel: ShardKernel
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
    """What a shard needs of points held elsewhere to compute their rows:
    their global indices, kernel features (transformed inputs, SE features, or
    fingerprint words) and factor columns ``[w; s^2; 1]``."""

    index: list[int]
    features: Any
    columns: Tensor

    @staticmethod
    def cat(parts: list[Left]) -> Left:
        parts = [p for p in parts if p is not None and p.index]
        if not parts:
            raise ValueError("no left data to concatenate")
        feats = [p.features for p in parts]
        if isinstance(feats[0], np.ndarray):
            features = np.concatenate(feats)
        else:
            features = torch.cat(feats)
        return Left(
            [i for p in parts for i in p.index],
            features,
            torch.cat([p.columns for p in parts]),
        )

    def take(self, positions: list[int]) -> Left:
        """The points at ``positions`` (in that order)."""
        pos = torch.tensor(positions, dtype=torch.long)
        feats = self.features
        if isinstance(feats, np.ndarray):
            feats = feats[np.asarray(positions, dtype=np.int64)]
        else:
            feats = feats[pos]
        return Left([self.index[p] for p in positions], feats, self.columns[pos])


class _ShardLibraryKernel:
    r"""A library-mode Tanimoto kernel over a shard of the library, with the
    interface of :class:`~ax_chaining.posterior.KernelRows`: rows of points
    given by their fingerprints' words against the shard's candidates. Exact
    (integer counts, one rounded division), so equal to one machine's values
    whatever the grouping of columns."""

    exact = True
    chunk = 2**16

    def __init__(
        self,
        library: PackedFingerprints,
        Zt: Tensor,
        scale: float,
        route: str,
        offset: int,
        as_rows: bool,
    ) -> None:
        self.library, self.Zt, self.scale, self.route = library, Zt, scale, route
        self.offset = offset
        # As one machine: prior rows in float64 (``LibraryRows``, cast by the
        # caller); the cross-covariance in the model's dtype, as GPyTorch's
        # ``covar_module`` (the kernel, then its ``ScaleKernel``) gives it.
        self.as_rows = as_rows

    @property
    def n(self) -> int:
        return len(self.library)

    def features(self, idx: Tensor) -> np.ndarray:
        return np.asarray(self.library.words[idx.numpy()])

    def ranges(self, first: int, stop: int) -> list[tuple[int, int]]:
        return list(column_blocks(first, stop, self.offset, self.chunk))

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
        dtype = self.Zt.dtype
        return torch.ones(stop - first, dtype=dtype) * torch.tensor(
            self.scale, dtype=dtype
        )


class Shard:
    r"""Candidates ``start .. stop - 1`` of ``n`` and their part of each step.

    Args:
        start, stop: The shard's global range (``start`` a multiple of
            :data:`~ax_chaining.distances.COLUMN_BLOCK`).
        n: The number of candidates over all shards.
        candidates: The shard's ``(stop - start) x d`` candidates (a tensor),
            or None for a fingerprint library.
        library_words: The shard's rows of a fingerprint library (uint64
            words), or None.
        library_path: A library saved by ``PackedFingerprints.save``, memory
            mapped (rows ``start .. stop - 1``), or None.
        n_bits: The library's fingerprint width.
        normalized_inputs: Library: candidate ``i`` is ``i / (n - 1)`` (Ax's
            normalization) instead of ``i``.
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
        self._timings: dict[str, float] = defaultdict(float)
        self._counts: dict[str, int] = defaultdict(int)

    # ------------------------------------------------------------------ helpers
    @property
    def size(self) -> int:
        return self.stop - self.start

    def _check(self, step: int) -> None:
        if self.step is None or step != self.step:
            raise StaleShardError(
                f"shard {self.start}..{self.stop - 1} holds step {self.step}, was "
                f"asked for step {step}: its state was rebuilt or lost."
            )

    def _local(self, gidx: list[int]) -> tuple[list[int], list[int]]:
        """``(positions in gidx, local indices)`` of the owned global indices."""
        pos, loc = [], []
        for k, g in enumerate(gidx):
            if self.start <= g < self.stop:
                pos.append(k)
                loc.append(g - self.start)
        return pos, loc

    def _time(self, name: str, t0: float) -> None:
        self._timings[name] += time.perf_counter() - t0
        self._counts[name] += 1

    def _maxarg(self, x: Tensor) -> tuple[float, int]:
        # torch.argmax returns the first maximum, as one machine's does.
        i = int(torch.argmax(x))
        return float(x[i]), self.start + i

    def ping(self) -> tuple[int, int]:
        """The shard's range (a liveness check)."""
        return self.start, self.stop

    def data_bytes(self) -> int:
        """Bytes of the shard's candidates (words or tensor)."""
        if self.library is not None:
            return int(self.library.words.nbytes)
        return int(self.Z.element_size() * self.Z.numel())

    def stats(self) -> dict[str, Any]:
        """Seconds and calls per method since the last call, and reset."""
        out = {
            "seconds": dict(self._timings),
            "calls": dict(self._counts),
            "rows": self.size,
        }
        self._timings.clear()
        self._counts.clear()
        return out

    # ------------------------------------------------------------------ prepare
    def prepare(self, f: StepFactors) -> dict[str, Any]:
        """Posterior mean, variance and the factor over the shard, for one step.

        Returns the smallest variance and its (first) global index with its
        left data, the largest prior variance, and whether every variance is
        finite.
        """
        t0 = time.perf_counter()
        self.step = None  # a failure below leaves no half-prepared step
        with torch.no_grad():
            if self._base_key != f.base_key:
                self._prepare_base(f)
            r = f.L.shape[-1]
            pending = f.pending
            p = 0 if pending is None else pending.p
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
            variance = (self.prior_var - sq).clamp_min(0)
            right[r + p] = variance
            right[r + p + 1] = 1.0
            self.variance = right[r + p]
            self.mean = self._base_mean
            if f.flip is not None:
                self.mean = f.flip[0] * self.mean + f.flip[1]
            self.out_var = float(f.out_var)
            self.dtype = f.dtype
            finite = bool(torch.isfinite(self.prior_var - sq).all())
            i = int(torch.argmin(self.variance))
            out = {
                "min_variance": float(self.variance[i]),
                "argmin": self.start + i,
                "left": self._left([i]),
                "max_prior_variance": float(self.prior_var.max()),
                "finite": finite,
            }
        self._ff_reset()
        self.step = f.step
        self._time("prepare", t0)
        return out

    def _prepare_base(self, f: StepFactors) -> None:
        """The factor and mean without pending points (reused by a batch)."""
        self._base_key = None
        Z = self.Z.to(f.dtype)
        Zt = Z if f.input_transform is None else f.input_transform(Z)
        if isinstance(f.kernel, LibraryKernel):
            scale, route = f.kernel.scale, f.kernel.route
            normalized, n_items = f.kernel.normalized_inputs, f.kernel.num_items
            if n_items != self.n or self.library is None:
                raise ValueError(
                    f"The model's TanimotoKernel holds a library of {n_items} items, "
                    f"the sharded candidates are {self.n}"
                    + ("" if self.library is not None else " points, not a library")
                    + "; expected the same library, item i at candidate i."
                )
            items = item_indices(Zt, n_items, normalized, "TanimotoKernel")
            expected = torch.arange(self.start, self.stop)
            if not torch.equal(items.cpu(), expected):
                raise ValueError(
                    "The sharded library's candidates map to other items under the "
                    "model's TanimotoKernel (normalized_inputs="
                    f"{normalized}); expected candidate i to be item i: build "
                    "ShardedCandidates with the kernel's normalized_inputs."
                )
            kernel = _ShardLibraryKernel(
                self.library, Zt, scale, route, self.start, as_rows=False
            )
            rows = _ShardLibraryKernel(
                self.library, Zt, scale, route, self.start, as_rows=True
            )
        else:
            covar_module = f.kernel.covar_module
            kernel = KernelRows(covar_module, Zt, offset=self.start)
            rows = (
                SERows.of(covar_module, Zt, f.train_features, self.start)
                or FeatureRows.of(covar_module, Zt, f.train_features, self.start)
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
        self.kernel, self.rows_source, self.Zt = kernel, rows, Zt
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
        _, local = self._local(gidx)
        return self._left(local) if local else None

    def values(self, step: int, gidx: list[int]) -> dict[str, Any]:
        """Mean (objective, after the flip), variance and raw candidate rows of
        the owned points among ``gidx``."""
        self._check(step)
        pos, local = self._local(gidx)
        idx = torch.tensor(local, dtype=torch.long)
        return {
            "positions": pos,
            "mean": self.mean[idx],
            "variance": self.variance[idx],
            "x": self.Z[idx],
        }

    @torch.no_grad()
    def _rows(self, left: Left) -> Tensor:
        r"""Rows of :math:`d_t^2` of the points ``left`` over the shard: the
        same operations as ``LowRankDistance.rows`` on one machine."""
        feats = left.features
        prior = self.rows_source(feats, self.size, 0).to(self.dtype)
        cols = left.columns.clone()
        cols[:, :-2].mul_(2.0)
        cols[:, -2:] = cols[:, -2:].flip(-1)
        d2 = low_rank_rows(prior, cols, self.right, self.out_var, self.start)
        d2.clamp_(min=0.0)
        pos, local = self._local(left.index)
        if pos:
            d2[torch.tensor(pos), torch.tensor(local)] = 0.0
        return d2

    # ------------------------------------------------------- farthest-first
    def _ff_reset(self) -> None:
        self.mind2: Tensor | None = None
        self._tmp: Tensor | None = None
        self._seq: list[tuple[Tensor, int]] = []
        self._rows_cache: dict[int, Tensor] = {}
        self._pool: list[int] = []
        self._far: Tensor | None = None

    def _commit(self, keep: int | None) -> None:
        """Keep the first ``keep`` centres taken speculatively (all: the copy
        they were applied to; fewer: applied again to the committed state)."""
        if keep is None:
            return
        if keep == len(self._seq) and self._tmp is not None:
            self.mind2 = self._tmp
        else:
            for row, far in self._seq[:keep]:
                torch.minimum(self.mind2, row, out=self.mind2)
                if self.start <= far < self.stop:
                    self.mind2[far - self.start] = 0.0
        self._tmp, self._seq = None, []

    def _prefixes(self, seq: list[tuple[int, int]]) -> list[dict[str, Any]]:
        """Apply centres ``(pool position, global index)`` to the speculative
        copy; after each, the shard's largest distance and its first index."""
        out = []
        if self._tmp is None:
            self._tmp = self.mind2.clone()
        for j, far in seq:
            row = self._rows_cache.pop(j)
            self._seq.append((row, far))
            torch.minimum(self._tmp, row, out=self._tmp)
            if self.start <= far < self.stop:
                self._tmp[far - self.start] = 0.0
            value, arg = self._maxarg(self._tmp)
            out.append({"max": value, "argmax": arg})
        if out:  # the last prefix's farthest point: the next pool's first
            out[-1]["left"] = self._left([out[-1]["argmax"] - self.start])
        return out

    def ff_begin(self, step: int, left: Left) -> dict[str, Any]:
        """Distances to the first centre (``left``, one point)."""
        self._check(step)
        t0 = time.perf_counter()
        self._ff_reset()
        self.mind2 = self._rows(left)[0].clamp_min(0).to(self.dtype)
        start = left.index[0]
        if self.start <= start < self.stop:
            self.mind2[start - self.start] = 0.0
        value, arg = self._maxarg(self.mind2)
        out = {"max": value, "argmax": arg, "left": self._left([arg - self.start])}
        self._time("ff_begin", t0)
        return out

    def ff_count(self, step: int, commit: int | None, threshold: float) -> int:
        """Commit, then count the points at least ``threshold`` away (a pool's
        far set, kept for :meth:`ff_pool`)."""
        self._check(step)
        t0 = time.perf_counter()
        self._commit(commit)
        self._rows_cache.clear()
        self._far = (self.mind2 >= threshold).nonzero().squeeze(-1)
        self._time("ff_count", t0)
        return int(self._far.numel())

    def ff_pool(
        self, step: int, positions: list[int], extra: list[int]
    ) -> dict[str, Any]:
        """The far points at ``positions`` of this shard's far set, and the
        owned points of ``extra``: global indices, distances, left data."""
        self._check(step)
        t0 = time.perf_counter()
        far = self._far[torch.tensor(positions, dtype=torch.long)].tolist()
        _, extra_local = self._local(extra)
        local = far + extra_local
        out = {
            "far": [self.start + i for i in far],
            "extra": [self.start + i for i in extra_local],
            "mind2": self.mind2[torch.tensor(local, dtype=torch.long)],
            "left": self._left(local) if local else None,
        }
        self._far = None
        self._time("ff_pool", t0)
        return out

    def ff_rows(
        self,
        step: int,
        commit: int | None,
        pool: list[int] | None,
        chunk: list[int],
        left: Left,
        apply: tuple[int, int] | None,
    ) -> dict[str, Any]:
        """Commit; with ``pool`` start a new pool; compute the rows of the
        pool positions ``chunk`` (points ``left``), return their values at the
        owned pool points, and apply ``apply = (position, index)`` speculatively.
        """
        self._check(step)
        t0 = time.perf_counter()
        self._commit(commit)
        if pool is not None:
            self._rows_cache.clear()
            self._pool = pool
            self._pool_pos, local = self._local(pool)
            self._pool_local = torch.tensor(local, dtype=torch.long)
        rows = self._rows(left)
        for k, j in enumerate(chunk):
            self._rows_cache[j] = rows[k]
        out = {"positions": self._pool_pos, "values": rows[:, self._pool_local]}
        out["prefixes"] = self._prefixes([apply]) if apply is not None else []
        self._time("ff_rows", t0)
        return out

    def ff_apply(self, step: int, seq: list[tuple[int, int]]) -> list[dict[str, Any]]:
        """Apply more centres speculatively (see :meth:`_prefixes`)."""
        self._check(step)
        t0 = time.perf_counter()
        out = self._prefixes(seq)
        self._time("ff_apply", t0)
        return out

    def ff_end(self, step: int, commit: int | None) -> None:
        """Commit and free the traversal's state."""
        self._check(step)
        self._commit(commit)
        self._ff_reset()

    # ------------------------------------------------------------- selection
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
        r"""The shard's largest :math:`\pm\mu_t + b_t(\sigma_t)`, its first
        index, value parts and raw candidate row (None if all are excluded)."""
        self._check(step)
        t0 = time.perf_counter()
        sigma = self.variance.sqrt()
        bonus = chaining_bonus(sigma, eps, H, sigma_min_used, shape)
        value = (self.mean if maximize else -self.mean) + bonus
        _, local = self._local(excluded)
        if local:
            value[torch.tensor(local, dtype=torch.long)] = -torch.inf
        if value.numel() == 0 or not bool((value > -torch.inf).any()):
            self._time("best", t0)
            return None
        i = int(torch.argmax(value))
        out = {
            "value": float(value[i]),
            "index": self.start + i,
            "x": self.Z[i].clone(),
            "mean": float(self.mean[i]),
            "sigma": float(sigma[i]),
        }
        self._time("best", t0)
        return out

    def evaluated(self, train: Tensor, transform: Any, rtol: float) -> list[int]:
        """Global indices of the candidates that are training inputs (as
        :func:`~ax_chaining.posterior.evaluated_candidates` on one machine)."""
        with torch.no_grad():
            C = self.Z.to(train.dtype)
            if transform is not None:
                C = transform.preprocess_transform(C)
            hit = match_rows(C, train.to(C), rtol=rtol) >= 0
        return (hit.nonzero().squeeze(-1) + self.start).tolist()

    def max_abs(self) -> float:
        return float(self.Z.abs().max())

    def nearest(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """For each row of ``X``, the distance to the nearest candidate of the
        shard and its global index (:func:`~ax_chaining.checks.nearest_rows`
        on the shard's rows)."""
        dist, index = nearest_rows(X, self.Z)
        return dist, index + self.start

    # ----------------------------------------------------------- certificate
    def cert_rows(
        self, step: int, left: Left, mean_rows: Tensor, scale: float, sign: float, z
    ) -> dict[str, Tensor]:
        r"""Rows of :math:`d_t` of certified points (``left``) over the shard,
        kept for :meth:`cert_tail`; returns the largest gap where :math:`d = 0`
        and, given ``z``, the pairwise bound's largest term (per row)."""
        self._check(step)
        t0 = time.perf_counter()
        mean = (sign * self.mean).to(torch.float64) / scale
        d = self._rows(left).to(torch.float64).clamp_min(0.0).sqrt()
        gap = mean.unsqueeze(0) - mean_rows.unsqueeze(-1)
        self._cert = (gap, d)
        exact = torch.where(d > 0, torch.full_like(gap, -torch.inf), gap)
        out = {"exact": exact.amax(dim=-1)}
        if z is not None:
            out["pairwise"] = (gap + z * d).amax(dim=-1)
        self._time("cert_rows", t0)
        return out

    def cert_tail(self, step: int, b: Tensor, tail: Any) -> Tensor:
        """The shard's part of the union bound's tail sum at levels ``b``."""
        self._check(step)
        t0 = time.perf_counter()
        gap, d = self._cert
        # Explored or not, from the shard's own variances (as one machine
        # binds the law to all candidates).
        tail = bind_tail(tail, self.variance, self.prior_var)
        out = tail_sum(b, gap, d, tail)
        self._time("cert_tail", t0)
        return out

    def cert_end(self, step: int) -> None:
        self._check(step)
        self._cert = None
