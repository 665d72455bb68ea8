r"""Candidates sharded over a Dask cluster (:class:`ShardedCandidates`): Dask
actors holding contiguous shards that start at multiples of
:data:`~ax_chaining.distances.COLUMN_BLOCK`, so that products are one machine's."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ax_chaining.checks import check_int, type_error
from ax_chaining.distances import COLUMN_BLOCK
from ax_chaining.distributed._shard import Shard, StaleShardError, StepFactors
from ax_chaining.distributed.store import ShardedStore
from ax_chaining.kernels.fingerprints import PackedFingerprints

__all__ = ["ShardLostError", "ShardedCandidates", "cluster_workers", "shard_bounds"]


class ShardLostError(RuntimeError):
    """A shard's worker left the cluster (or its state was lost) during a call."""


def shard_bounds(n: int, parts: int, block: int = COLUMN_BLOCK) -> list[int]:
    """Boundaries of ``parts`` contiguous shards of ``n`` candidates, each
    starting at a multiple of ``block``, as equal as blocks allow (shards past
    the last candidate are dropped).

    Example:
        >>> shard_bounds(10_000, 2, block=4096)
        [0, 8192, 10000]
    """
    blocks = -(-n // block)
    edges = {min(n, round(k * blocks / parts) * block) for k in range(parts)}
    return sorted({0, n, *edges})


def cluster_workers(client: Any) -> list[str]:
    """The sorted addresses of the scheduler's workers now (``Client.nthreads``:
    ``scheduler_info()`` may be a stale view listing none)."""
    return sorted(client.nthreads())


class ShardedCandidates:
    """A finite candidate set split over a Dask cluster's workers (one shard
    each) until :meth:`close`: the ``candidates`` of
    :class:`~ax_chaining.ChainingUCB` (select with :meth:`optimize`) or of
    :func:`~ax_chaining.ax.chaining_generation_strategy`. A lost worker gives
    :class:`ShardLostError` or, with ``retries``, the step run again on rebuilt
    shards, never a silently wrong answer.

    Example:
        >>> sharded = ShardedCandidates(client, candidates)  # N x d tensor
        >>> acqf = ChainingUCB(model, sharded)
        >>> x_next, value = sharded.optimize(acqf, q=1)

    Args:
        client: A ``distributed.Client``.
        candidates: An ``N x d`` tensor, a
            :class:`~ax_chaining.kernels.PackedFingerprints` library, or the path
            of one saved by ``PackedFingerprints.save`` (each worker memory-maps
            its rows). Library candidate ``i`` is item ``i``, or ``i / (N - 1)``
            with ``normalized_inputs`` (Ax's unit-cube normalization).
        workers: Worker addresses to use (default: all), one shard each.
        retries: Times a step interrupted by a lost worker is run again once
            :meth:`restore` has rebuilt the lost shards (0: raise).
        batch_size: Rows per farthest-first batch; default the single machine's,
            which the same traversal needs. Larger: fewer round trips, other
            covers, pools of ``2 * batch_size`` rows per shard.
        timeout: Seconds a call waits for a shard before its worker is checked.
    """

    #: The class a Dask actor holds for each shard.
    shard_class: type = Shard

    def __init__(
        self,
        client: Any,
        candidates: Tensor | PackedFingerprints | str | os.PathLike,
        *,
        workers: Sequence[str] | None = None,
        normalized_inputs: bool = False,
        retries: int = 1,
        batch_size: int | None = None,
        timeout: float = 60.0,
    ) -> None:
        if not callable(getattr(client, "submit", None)):
            raise type_error("client", "a distributed.Client", client)
        self.library: PackedFingerprints | None = None
        if isinstance(candidates, Tensor):
            if candidates.ndim != 2 or candidates.shape[0] == 0:
                raise ValueError(
                    "`candidates` must be an N x d tensor with N >= 1, got shape "
                    f"{tuple(candidates.shape)}."
                )
            self.n, self.d = candidates.shape
            candidates = candidates.detach()
        elif isinstance(candidates, str | os.PathLike | PackedFingerprints):
            if not isinstance(candidates, PackedFingerprints):
                candidates = str(Path(candidates))
                self.library = PackedFingerprints.open(candidates)
            else:
                self.library = candidates
            self.n, self.d = len(self.library), 1
        else:
            what = (
                "an N x d tensor, a PackedFingerprints or the path of a saved library"
            )
            raise type_error("candidates", what, candidates)
        self.source = candidates
        #: The dtype of the raw candidates (float64 for a library's items).
        self.dtype: torch.dtype = getattr(candidates, "dtype", torch.float64)
        self.client = client
        self.retries = check_int("retries", retries, 0)
        self.batch_size = (
            None if batch_size is None else check_int("batch_size", batch_size, 1)
        )
        self.timeout = float(timeout)
        self.normalized_inputs = bool(normalized_inputs)
        self._lock = threading.Lock()
        known = cluster_workers(client)
        addresses = list(workers) if workers else known
        if unknown := sorted(set(addresses) - set(known)):
            raise ValueError(
                f"`workers` names {unknown}, not workers of the cluster {known}."
            )
        if not addresses:
            raise ValueError("`client` has no worker; start some first.")
        self.bounds = shard_bounds(self.n, len(addresses))
        self.starts = self.bounds[:-1]
        self.sizes = [b - a for a, b in zip(self.bounds, self.bounds[1:], strict=False)]
        self.workers = addresses[: len(self.starts)]
        self.num_shards = len(self.starts)
        #: The factors of the step the shards hold (None: prepare it again).
        self.prepared: StepFactors | None = None
        self._handles = [self._place(s, w) for s, w in enumerate(self.workers)]

    def _place(self, s: int, worker: str) -> Any:
        """Create shard ``s`` on ``worker``; its handle."""
        a, b = self.bounds[s], self.bounds[s + 1]
        kw: dict[str, Any] = {"normalized_inputs": self.normalized_inputs}
        scatter = self.client.scatter  # large arrays travel once, to their worker
        if isinstance(self.source, Tensor):
            data = self.source[a:b].clone()
            kw["candidates"] = scatter(data, workers=[worker], direct=True)
        elif isinstance(self.source, PackedFingerprints):
            data = np.ascontiguousarray(self.source.words[a:b])
            kw["library_words"] = scatter(data, workers=[worker], direct=True)
            kw["n_bits"] = self.source.n_bits
        else:
            kw["library_path"] = self.source
        opts = {"workers": [worker], "allow_other_workers": False, "pure": False}
        future = self.client.submit(
            self.shard_class, a, b, self.n, actor=True, **kw, **opts
        )
        return future.result(timeout=self.timeout)

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"ShardedCandidates(N={self.n}, d={self.d}, shards={self.num_shards})"

    def __deepcopy__(self, memo: dict[int, Any]) -> ShardedCandidates:
        return self  # a handle on live shards: Ax deep-copies its options

    def call(
        self, method: str, args: Any, shards: list[int] | None = None
    ) -> list[Any]:
        """``method`` of the shards (all, or ``shards``), results in shard order;
        ``args``: one tuple for all, or one per shard.

        Raises:
            ShardLostError: A shard's worker left (or its state is gone).
        """
        which = list(range(self.num_shards)) if shards is None else list(shards)
        per = args if isinstance(args, list) else [args] * len(which)
        with self._lock:
            try:
                futures = [
                    getattr(self._handles[s], method)(*a)
                    for s, a in zip(which, per, strict=True)
                ]
                return [self._wait(s, f) for s, f in zip(which, futures, strict=True)]
            except StaleShardError as e:
                raise ShardLostError(f"{e} Call {method!r} refused.") from e
            except Exception as e:
                if not (lost := self._lost(which)):
                    raise
                where = ", ".join(
                    f"shard {s} (candidates {self.bounds[s]}.."
                    f"{self.bounds[s + 1] - 1}) on {self.workers[s]}"
                    for s in lost
                )
                raise ShardLostError(
                    f"{where}: the worker left the cluster during {method!r}; that "
                    "shard's part of the step is lost. Call restore() (or set "
                    "retries > 0) to rebuild it on the remaining workers."
                ) from e

    def _wait(self, s: int, future: Any) -> Any:
        while True:  # never hang on a worker that left
            try:
                return future.result(timeout=self.timeout)
            except TimeoutError:
                if self._lost([s]):
                    raise

    def _lost(self, which: list[int]) -> list[int]:
        alive = set(cluster_workers(self.client))
        return [s for s in which if self.workers[s] not in alive]

    def restore(self) -> list[int]:
        """Rebuild the shards whose worker left on the remaining workers (round
        robin; Dask does not restart actors); returns them."""
        alive = cluster_workers(self.client)
        lost = [s for s, w in enumerate(self.workers) if w not in alive]
        if lost and not alive:
            raise ShardLostError("No worker is left in the cluster to restore on.")
        for k, s in enumerate(lost):
            self.workers[s] = alive[k % len(alive)]
            self._handles[s] = self._place(s, self.workers[s])
        self.prepared = None
        return lost

    def retrying(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, run again up to ``retries`` times after :meth:`restore`."""
        for _ in range(self.retries):
            try:
                return fn(*args)
            except ShardLostError:
                self.restore()
        return fn(*args)

    def prepare(self, factors: StepFactors) -> list[dict[str, Any]]:
        """Make the shards hold the step of ``factors``; each one's summary."""
        self.prepared = factors
        return self.call("prepare", (factors,))

    def optimize(
        self,
        acqf: Any,
        q: int = 1,
        exclude: Sequence[int] | None = None,
        return_indices: bool = False,
    ) -> tuple[Tensor, ...]:
        r"""The ``q`` best candidates (first maxima of :math:`\pm\mu_t(x) +
        b_t(\sigma_t(x))`) of a :class:`~ax_chaining.ChainingUCB` on these shards;
        for ``q > 1`` BoTorch's sequential greedy over pending points.
        ``exclude``: indices never picked.

        Returns:
            ``(X, values)`` (``q x d`` and ``q``), and the indices if
            ``return_indices``.
        """
        store = getattr(acqf, "store", None)
        if getattr(store, "sharded", None) is not self:
            raise ValueError(
                "`acqf` must be a ChainingUCB built on these ShardedCandidates "
                f"(ChainingUCB(model, sharded)), got {type(acqf).__name__}."
            )
        q = check_int("q", q, 1)
        excluded = sorted({int(i) for i in (exclude or ())})
        if len(excluded) >= self.n:
            raise ValueError(
                f"`exclude` leaves none of the {self.n} candidates to select."
            )
        base = acqf.X_pending
        picks: list[int] = []
        values, xs = [], []
        try:
            for _ in range(min(q, self.n - len(excluded))):
                best = store.best_candidate(excluded + picks)
                picks.append(best["index"])
                values.append(best["value"])
                xs.append(best["x"])
                chosen = torch.stack(xs).to(store.candidate_dtype)
                acqf.set_X_pending(
                    chosen if base is None else torch.cat([base, chosen])
                )
        finally:
            acqf.set_X_pending(base)
        X = torch.stack(xs)
        vals = torch.tensor(values, dtype=X.dtype)
        if return_indices:
            return X, vals, torch.tensor(picks, dtype=torch.long)
        return X, vals

    def chaining_store(self, acqf: Any) -> ShardedStore:
        """The :class:`~ax_chaining.acquisition.CandidateStore` of
        ``ChainingUCB(model, sharded)``."""
        return ShardedStore(acqf, self)

    def close(self) -> None:
        """Release the shards (their workers free the memory)."""
        self._handles = [None] * self.num_shards
        self.prepared = None
