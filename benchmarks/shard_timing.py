"""Instrumentation of sharded candidates for the distributed benchmark: round
trips, message bytes and the shards' own seconds per method, measured around
``ShardedCandidates.call`` and the shard's methods."""

from __future__ import annotations

import pickle
import time
from collections import defaultdict
from dataclasses import fields
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ax_chaining.distributed import ShardedCandidates as _ShardedCandidates
from ax_chaining.distributed._shard import Left, Shard, StepFactors
from ax_chaining.kernels import PackedFingerprints

__all__ = ["ShardedCandidates", "TimedShard"]

#: The shard methods whose seconds are reported (a step's work).
TIMED = tuple(
    "prepare ff_begin ff_count ff_pool ff_rows ff_apply best cert_rows "
    "cert_tail".split()
)


class TimedShard(Shard):
    """A :class:`Shard` that counts its seconds and calls per method."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def stats(self) -> dict[str, Any]:
        """Seconds and calls per method since the last call, and reset."""
        out = {"seconds": dict(self.seconds), "calls": dict(self.calls)}
        out["rows"] = self.stop - self.start
        self.seconds.clear()
        self.calls.clear()
        return out


def _timed(name: str) -> Any:
    def method(self: TimedShard, *args: Any) -> Any:
        t0 = time.perf_counter()
        out = getattr(Shard, name)(self, *args)
        self.seconds[name] += time.perf_counter() - t0
        self.calls[name] += 1
        return out

    method.__name__ = name
    return method


for _name in TIMED:
    setattr(TimedShard, _name, _timed(_name))


def _size(obj: Any) -> int:
    """Payload bytes of a message: the bytes of its arrays and 8 per other
    number or index (what travels, up to the framing of Dask's messages and
    pickle's headers); any other object by its pickled size."""
    if obj is None or isinstance(obj, bool):
        return 1
    if isinstance(obj, int | float | torch.dtype):
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
    try:
        return len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # unpicklable locals never travel
        return 0


class ShardedCandidates(_ShardedCandidates):
    """:class:`~ax_chaining.distributed.ShardedCandidates` with the
    benchmark's counters: :meth:`comm_stats` (reset when a step prepares the
    shards) and :meth:`shard_stats`. ``backend`` must be ``"actors"``, the
    one way the library holds shards."""

    shard_class = TimedShard

    def __init__(
        self, client: Any, candidates: Any, *, backend: str = "actors", **kw: Any
    ) -> None:
        if backend != "actors":
            raise ValueError(f"backend {backend!r}: shards are Dask actors only.")
        self.stats_reset()
        if isinstance(candidates, Tensor):
            self.bytes_placed = candidates.element_size() * candidates.numel()
        elif isinstance(candidates, PackedFingerprints):
            self.bytes_placed = int(np.asarray(candidates.words).nbytes)
        else:  # a library's path: each worker maps its own rows
            self.bytes_placed = 0
        super().__init__(client, candidates, **kw)

    def stats_reset(self) -> None:
        self.round_trips = self.bytes_sent = self.bytes_received = 0
        self.largest_reply = 0

    def comm_stats(self) -> dict[str, int]:
        """Round trips, bytes of the arguments sent and of the replies
        received, the largest reply (since a step last prepared the shards),
        and the bytes of candidates placed on the workers."""
        return {
            "round_trips": self.round_trips,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "largest_reply": self.largest_reply,
            "bytes_placed": self.bytes_placed,
        }

    def call(self, method: str, args: Any, shards: list[int] | None = None) -> list:
        count = self.num_shards if shards is None else len(shards)
        per = args if isinstance(args, list) else [args] * count
        self.round_trips += 1
        self.bytes_sent += sum(_size(a) for a in per)
        out = super().call(method, args, shards)
        for r in out:
            size = _size(r)
            self.bytes_received += size
            self.largest_reply = max(self.largest_reply, size)
        return out

    def prepare(self, factors: StepFactors) -> list[dict[str, Any]]:
        self.stats_reset()  # a step's messages are counted from here
        return super().prepare(factors)

    def shard_stats(self) -> list[dict[str, Any]]:
        """Each shard's seconds and calls per method since the last call."""
        return self.call("stats", ())
