r"""Candidates sharded over a Dask cluster: :class:`ShardedCandidates`.

Contiguous shards, each starting at a multiple of
:data:`~ax_chaining.distances.COLUMN_BLOCK` (so that every product over a
shard's candidates is one machine's, bit for bit), each held by a Dask actor
on its worker. Every call names its step, and a shard that does not hold it
(lost and rebuilt) refuses: a lost worker gives :class:`ShardLostError` or a
retried step, never a silently wrong answer.
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ax_chaining.checks import check_int, type_error
from ax_chaining.distances import COLUMN_BLOCK
from ax_chaining.distributed._shard import Left, Shard, StaleShardError, StepFactors
from ax_chaining.distributed.store import ShardedStore
from ax_chaining.kernels.fingerprints import PackedFingerprints

__all__ = [
    "cluster_workers",
    "ShardLostError",
    "ShardedCandidates",
    "check_sharded",
    "shard_bounds",
]


class ShardLostError(RuntimeError):
    """A shard's worker left the cluster (or its state was lost) during a call."""


def shard_bounds(n: int, parts: int, block: int = COLUMN_BLOCK) -> list[int]:
    """Boundaries of ``parts`` contiguous shards of ``n`` candidates, each
    starting at a multiple of ``block`` and as equal as blocks allow (shards
    past the last candidate are dropped).

    Example:
        >>> shard_bounds(10_000, 2, block=4096)
        [0, 8192, 10000]
    """
    blocks = -(-n // block)
    out = [0]
    for k in range(1, parts):
        edge = min(n, round(k * blocks / parts) * block)
        if edge > out[-1]:
            out.append(edge)
    if out[-1] < n:
        out.append(n)
    return out


def cluster_workers(client: Any) -> list[str]:
    """The addresses of the workers the scheduler of ``client`` holds now,
    sorted, asked of the scheduler at each call (``Client.nthreads``).

    Not ``Client.scheduler_info()["workers"]``: that returns the identity the
    client caches, which its periodic refresh (every
    ``distributed.client.scheduler-info-interval``) replaces with one that
    lists no workers, so a call that races the refresh sees an empty cluster
    and would call every shard lost.
    """
    return sorted(client.nthreads())


class ShardedCandidates:
    r"""A finite candidate set split over the workers of a Dask cluster.

    Build it once per candidate set; it holds the shards (one per worker by
    default) until :meth:`close`. Pass it as ``candidates`` to
    :class:`~ax_chaining.ChainingUCB` (Chaining-UCB whose
    step runs on the cluster), select with :meth:`optimize`, and give it to
    :func:`~ax_chaining.ax.chaining_generation_strategy` for Ax.

    Example:
        >>> from distributed import Client, LocalCluster
        >>> cluster = LocalCluster(n_workers=2, threads_per_worker=1)
        >>> client = Client(cluster)
        >>> sharded = ShardedCandidates(client, candidates)  # N x d tensor
        >>> acqf = ChainingUCB(model, sharded)  # the step runs on the workers
        >>> x_next, value = sharded.optimize(acqf, q=1)
        >>> cert = acqf.certificate()

    Args:
        client: A ``distributed.Client``.
        candidates: An ``N x d`` tensor, a
            :class:`~ax_chaining.kernels.PackedFingerprints` library, or the
            path of a library saved with ``PackedFingerprints.save`` (each
            worker then memory-maps its own rows; nothing is sent). For a
            library, candidate ``i`` is item ``i`` (the value ``i``, or
            ``i / (N - 1)`` with ``normalized_inputs``).
        workers: Worker addresses to use (default: all), one shard each.
        normalized_inputs: Library only: candidates in Ax's unit-cube
            normalization of an item index, as ``TanimotoKernel(...,
            normalized_inputs=True)`` expects.
        retries: Times a step interrupted by a lost worker is run again once
            the lost shards are rebuilt on the remaining workers (0: raise
            :class:`ShardLostError`).
        batch_size: Rows per farthest-first batch; default None takes the
            single machine's (from ``N`` and the memory budget), which the
            same traversal needs (32 up to about 10^6 candidates, 3 at
            10^7). A larger one means fewer round trips and other covers, and
            pools of ``2 * batch_size`` rows of each shard on its worker,
            counted against ``memory_budget``.
        timeout: Seconds a call may wait for a shard before its worker is
            checked (a call never hangs on a worker that left).
    """

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
        self.client = client
        self.retries = check_int("retries", retries, 0)
        self.batch_size = (
            None if batch_size is None else check_int("batch_size", batch_size, 1)
        )
        self.timeout = float(timeout)
        self.normalized_inputs = bool(normalized_inputs)
        self._lock = threading.Lock()
        self._source = self._check_source(candidates)
        self.stats_reset()
        known = cluster_workers(client)
        addresses = list(workers) if workers else known
        if unknown := sorted(set(addresses) - set(known)):
            raise ValueError(
                f"`workers` names {unknown}, not workers of the cluster "
                f"{sorted(known)}."
            )
        if not addresses:
            raise ValueError("`client` has no worker; start some first.")
        self.bounds = shard_bounds(self.n, len(addresses))
        self.starts = self.bounds[:-1]
        self.sizes = [b - a for a, b in zip(self.bounds, self.bounds[1:], strict=False)]
        self.workers = addresses[: len(self.starts)]
        self._handles: list[Any] = [None] * len(self.starts)
        self._factors: Any = None  # the prepared step's factors (restore)
        t0 = time.perf_counter()
        for s in range(len(self.starts)):
            self._handles[s] = self._place(s, self.workers[s])
        self.call("ping", ())
        self.setup_seconds = time.perf_counter() - t0

    # ---------------------------------------------------------------- source
    def _check_source(self, candidates: Any) -> dict[str, Any]:
        if isinstance(candidates, Tensor):
            if candidates.ndim != 2 or candidates.shape[0] == 0:
                raise ValueError(
                    "`candidates` must be an N x d tensor with N >= 1, got shape "
                    f"{tuple(candidates.shape)}."
                )
            self.n, self.d = candidates.shape
            self.library: PackedFingerprints | None = None
            return {"kind": "tensor", "tensor": candidates.detach()}
        if isinstance(candidates, str | os.PathLike):
            path = str(Path(candidates))
            library = PackedFingerprints.open(path)
            self.n, self.d, self.library = len(library), 1, library
            return {"kind": "path", "path": path, "n_bits": library.n_bits}
        if isinstance(candidates, PackedFingerprints):
            self.n, self.d, self.library = len(candidates), 1, candidates
            return {"kind": "library", "library": candidates}
        raise type_error(
            "candidates",
            "an N x d tensor, a PackedFingerprints or the path of a saved library",
            candidates,
        )

    def _shard_kwargs(self, s: int) -> dict[str, Any]:
        a, b = self.bounds[s], self.bounds[s + 1]
        src = self._source
        kw: dict[str, Any] = {"normalized_inputs": self.normalized_inputs}
        if src["kind"] == "tensor":
            kw["candidates"] = src["tensor"][a:b].clone()
        elif src["kind"] == "library":
            kw["library_words"] = np.ascontiguousarray(src["library"].words[a:b])
            kw["n_bits"] = src["library"].n_bits
        else:
            kw["library_path"] = src["path"]
        return kw

    def _place(self, s: int, worker: str) -> Any:
        """Create shard ``s`` on ``worker``; its handle."""
        a, b = self.bounds[s], self.bounds[s + 1]
        kw = self._shard_kwargs(s)
        data = {k: v for k, v in kw.items() if k in ("candidates", "library_words")}
        if data:  # large arrays travel once, straight to their worker
            for k, v in data.items():
                kw[k] = self.client.scatter(v, workers=[worker], direct=True)
            self.bytes_placed += sum(_size(v) for v in data.values())
        opts = {"workers": [worker], "allow_other_workers": False, "pure": False}
        future = self.client.submit(Shard, a, b, self.n, actor=True, **kw, **opts)
        return future.result(timeout=self.timeout)

    # ------------------------------------------------------------------ calls
    @property
    def num_shards(self) -> int:
        return len(self.starts)

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"ShardedCandidates(N={self.n}, d={self.d}, shards={self.num_shards})"

    def __deepcopy__(self, memo: dict[int, Any]) -> ShardedCandidates:
        # A handle on live shards: Ax deep-copies its options; share it.
        return self

    def stats_reset(self) -> None:
        """Reset the counters of :meth:`comm_stats`."""
        self.round_trips = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.largest_reply = 0
        self.bytes_placed = getattr(self, "bytes_placed", 0)

    def comm_stats(self) -> dict[str, int]:
        """Round trips (calls to all or some shards), bytes of the arguments
        sent and of the replies received (pickled sizes), the largest single
        reply, since :meth:`stats_reset`; and the bytes of candidates sent to
        place the shards."""
        return {
            "round_trips": self.round_trips,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "largest_reply": self.largest_reply,
            "bytes_placed": self.bytes_placed,
        }

    def call(
        self, method: str, args: Any, shards: list[int] | None = None
    ) -> list[Any]:
        """Call ``method`` on the shards (all, or ``shards``): ``args`` is one
        tuple for all, or a list of tuples, one per shard called. Results come
        in shard order.

        Raises:
            ShardLostError: A shard's worker left (or its state is gone).
        """
        which = list(range(self.num_shards)) if shards is None else list(shards)
        per = args if isinstance(args, list) else [args] * len(which)
        with self._lock:
            self.round_trips += 1
            for a in per:
                self.bytes_sent += _size(a)
            try:
                out = self._dispatch(method, which, per)
            except StaleShardError as e:
                raise ShardLostError(f"{e} Call {method!r} refused.") from e
            except Exception as e:
                lost = self._lost(which)
                if lost:
                    raise ShardLostError(self._lost_message(lost, method)) from e
                raise
            for r in out:
                size = _size(r)
                self.bytes_received += size
                self.largest_reply = max(self.largest_reply, size)
        return out

    def _dispatch(self, method: str, which: list[int], per: list[tuple]) -> list[Any]:
        futures = [
            getattr(self._handles[s], method)(*a)
            for s, a in zip(which, per, strict=True)
        ]
        return [self._wait_actor(s, f) for s, f in zip(which, futures, strict=True)]

    def _wait_actor(self, s: int, future: Any) -> Any:
        """An actor call's result, checking the worker while it waits."""
        while True:
            try:
                return future.result(timeout=self.timeout)
            except TimeoutError:
                if self._lost([s]):
                    raise
            except Exception:
                raise

    def _alive(self) -> set[str]:
        return set(cluster_workers(self.client))

    def _lost(self, which: list[int]) -> list[int]:
        """The shards among ``which`` whose worker left."""
        alive = self._alive()
        return [s for s in which if self.workers[s] not in alive]

    def _lost_message(self, lost: list[int], method: str) -> str:
        parts = ", ".join(
            f"shard {s} (candidates {self.bounds[s]}..{self.bounds[s + 1] - 1}) on "
            f"{self.workers[s]}"
            for s in lost
        )
        return (
            f"{parts}: the worker left the cluster during {method!r}; that "
            "shard's part of the step is lost. Call restore() (or set retries "
            "> 0) to rebuild it on the remaining workers."
        )

    def restore(self) -> list[int]:
        """Rebuild lost shards on the remaining workers (round robin) from the
        candidates' source, and prepare them for the current step; returns
        the shards rebuilt."""
        every = list(range(self.num_shards))
        lost = self._lost(every)
        if not lost:
            # Any shard that refuses the current step is rebuilt as well.
            lost = self._stale(every)
        if not lost:
            return []
        alive = sorted(self._alive())
        if not alive:
            raise ShardLostError("No worker is left in the cluster to restore on.")
        for k, s in enumerate(lost):
            worker = alive[k % len(alive)]
            self.workers[s] = worker
            self._handles[s] = self._place(s, worker)
        if self._factors is not None:
            self.call("prepare", (self._factors,), shards=lost)
        return lost

    def _stale(self, which: list[int]) -> list[int]:
        if self._factors is None:
            return []
        out = []
        for s in which:
            try:
                self.call("left", (self._factors.step, []), shards=[s])
            except (ShardLostError, StaleShardError):
                out.append(s)
        return out

    def retrying(self, fn, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, run again (up to ``retries`` times) after a
        lost worker once :meth:`restore` has rebuilt its shards."""
        for attempt in range(self.retries + 1):
            try:
                return fn(*args, **kwargs)
            except ShardLostError:
                if attempt == self.retries:
                    raise
                self.restore()
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------- gathering
    def owner(self, index: int) -> int:
        """The shard holding candidate ``index``."""
        import bisect

        if not 0 <= index < self.n:
            raise IndexError(
                f"candidate index must be in 0..{self.n - 1}, got {index}."
            )
        return bisect.bisect_right(self.starts, index) - 1

    def candidate_rows(self, index: Sequence[int]) -> Tensor:
        """The candidates at global ``index`` (``len(index) x d``, raw values),
        from the source the client keeps (a tensor, or item numbers)."""
        idx = [int(i) for i in index]
        for i in idx:
            self.owner(i)  # raises for an index out of range
        idx = torch.tensor(idx, dtype=torch.long)
        src = self._source
        if src["kind"] == "tensor":
            return src["tensor"][idx]
        items = idx.to(torch.float64)
        if self.normalized_inputs:
            items = items / (self.n - 1)
        return items[:, None]

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the raw candidates (float64 for a library's items)."""
        src = self._source
        return src["tensor"].dtype if src["kind"] == "tensor" else torch.float64

    def prepare(self, factors: StepFactors) -> list[dict[str, Any]]:
        """Make the shards hold the step of ``factors`` (kept, so that lost
        shards are rebuilt holding it); each shard's summary (smallest
        variance, largest prior variance, where the traversal starts)."""
        self._factors = factors
        return self.call("prepare", (factors,))

    @property
    def prepared(self) -> StepFactors | None:
        """The factors of the step the shards hold (None before the first)."""
        return self._factors

    def shard_stats(self) -> list[dict[str, Any]]:
        """Each shard's seconds and calls per method since the last call."""
        return self.call("stats", ())

    def evaluated(self, train: Tensor, transform: Any, rtol: float) -> list[int]:
        """Global indices of the candidates that are training inputs."""
        parts = self.call("evaluated", (train, transform, rtol))
        return sorted(i for p in parts for i in p)

    def optimize(
        self,
        acqf: Any,
        q: int = 1,
        exclude: Sequence[int] | None = None,
        return_indices: bool = False,
    ) -> tuple[Tensor, ...]:
        r"""The ``q`` best candidates of a
        :class:`~ax_chaining.ChainingUCB`, without the
        ``N`` candidates on the client.

        The discrete optimizer of BoTorch (``optimize_acqf_discrete``) needs
        every candidate as ``choices``; here each shard returns its best
        value of :math:`\pm\mu_t(x) + b_t(\sigma_t(x))` (the mean and standard
        deviation from the factor: ``acqf.candidate_mean`` and
        ``acqf.candidate_sigma`` on one machine, which BoTorch's
        ``model.posterior`` gives to round-off), and the client the first
        maximum. For ``q > 1`` it is BoTorch's sequential greedy: each pick is
        set as a pending point (the step runs again, conditioned on it) and
        not picked again; the acquisition's pending points are restored at
        the end.

        Args:
            acqf: The acquisition function (built on these candidates).
            q: Number of candidates.
            exclude: Global indices that may not be picked.
            return_indices: Also return the picks' global indices.

        Returns:
            ``(X, values)`` (``q x d`` and ``q``), and the ``q`` indices if
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
        """The :class:`~ax_chaining.acquisition.CandidateStore` through which
        ``ChainingUCB(model, sharded)`` runs its step on these shards."""
        return ShardedStore(acqf, self)

    def close(self) -> None:
        """Release the shards (their workers free the memory)."""
        self._handles = [None] * self.num_shards
        self._factors = None


def check_sharded(name: str, value: Any) -> ShardedCandidates:
    """``value`` if it is :class:`ShardedCandidates`, else the ``TypeError``
    naming ``name``."""
    if not isinstance(value, ShardedCandidates):
        raise type_error(name, "a ShardedCandidates", value)
    return value


def _size(obj: Any) -> int:
    """Payload bytes of a message: the bytes of its arrays and 8 per other
    number or index (what travels, up to the framing of Dask's messages and
    pickle's headers); a module or other object by its pickled size."""
    if obj is None or isinstance(obj, bool):
        return 1
    if isinstance(obj, int | float):
        return 8
    if isinstance(obj, str):
        return len(obj)
    if isinstance(obj, Tensor):
        return obj.element_size() * obj.numel()
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, dict):
        return sum(_size(k) + _size(v) for k, v in obj.items())
    if isinstance(obj, list | tuple):
        return sum(8 if type(v) in (int, float) else _size(v) for v in obj)
    if isinstance(obj, Left):
        return _size(obj.index) + _size(obj.features) + _size(obj.columns)
    if isinstance(obj, StepFactors):
        return sum(_size(getattr(obj, f.name)) for f in fields(obj))
    if isinstance(obj, torch.dtype):
        return 8
    try:
        return len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # pragma: no cover - unpicklable locals never travel
        return 0
