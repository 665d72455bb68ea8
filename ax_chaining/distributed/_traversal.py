r"""The client side of the sharded farthest-first traversal: exactly the picks
of :func:`~ax_chaining.covers.farthest_first_order`, taken speculatively from
rows already computed and committed up to the first break."""

from __future__ import annotations

import bisect
from itertools import accumulate
from typing import Any

import torch
from torch import Tensor

from ax_chaining.covers import POOL_RATIO2, sample_without_replacement
from ax_chaining.distributed._shard import Left

__all__ = ["ShardedTraversal", "combine_max"]


def combine_max(parts: list[dict[str, Any]], key: str = "max") -> dict[str, Any]:
    """The shards' part (in order) holding the first largest ``key``."""
    best = max(p[key] for p in parts)
    return next(p for p in parts if p[key] == best)


def _prefixes(per_shard: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [combine_max(list(group)) for group in zip(*per_shard, strict=True)]


class ShardedTraversal:
    """:func:`~ax_chaining.covers.farthest_first_order` over the shards of
    ``calls`` (a :class:`~ax_chaining.distributed.ShardedCandidates`) holding
    ``step``; :meth:`run` returns its ``(order, radii)``."""

    def __init__(
        self,
        calls: Any,
        step: int,
        max_size: int,
        stop_radius: float,
        batch_size: int,
        dtype: torch.dtype,
    ) -> None:
        self.calls, self.step, self.max_size = calls, step, max_size
        self.stop2 = float(stop_radius) ** 2
        self.batch_size, self.dtype = batch_size, dtype
        self.pool_size = 1 if batch_size == 1 else 2 * batch_size
        self.chunk_size = max(1, batch_size // 2)
        self.commit: int | None = None  # centres to keep, sent with the next call
        self.spec: list[dict[str, Any]] = []  # centres taken, radii unchecked

    def run(self, start_left: Left) -> tuple[Tensor, Tensor]:
        """The traversal from ``start_left`` (one point's left data)."""
        start = start_left.index[0]
        self.top = combine_max(self.calls.call("ff_begin", (self.step, start_left)))
        self.order = [start]
        self.radii2 = [self.top["max"]]
        self.gen = torch.Generator().manual_seed(start)
        while self.radii2[-1] > self.stop2 and len(self.order) < self.max_size:
            self._pool()
        self.calls.call("ff_end", (self.step, self.commit))
        radii = torch.tensor(self.radii2, dtype=self.dtype).sqrt()
        return torch.tensor(self.order, dtype=torch.long), radii

    def _threshold(self) -> float:
        return POOL_RATIO2 * self.radii2[-1]

    def _draw(self) -> tuple[list[int], Tensor, Left]:
        """A pool (the farthest point and a seeded sample of the far set), its
        distances and left data."""
        if self.pool_size == 1:
            mind2 = torch.tensor([self.radii2[-1]], dtype=self.dtype)
            return [self.top["argmax"]], mind2, self.top.get("left")
        counts = self.calls.call(
            "ff_count", (self.step, self.commit, self._threshold())
        )
        self.commit = None
        cum = [0, *accumulate(counts)]
        pick = sample_without_replacement(cum[-1], self.pool_size - 1, self.gen)
        where = [bisect.bisect_right(cum, p) - 1 for p in pick.tolist()]
        wanted: list[list[int]] = [[] for _ in counts]
        for p, s in zip(pick.tolist(), where, strict=True):
            wanted[s].append(p - cum[s])
        extra = [self.top["argmax"]]
        parts = self.calls.call(
            "ff_pool", [(self.step, wanted[s], extra) for s in range(len(counts))]
        )
        found = {  # each point's part and position in it
            g: (part, k)
            for part in parts
            for k, g in enumerate(part["far"] + part["extra"])
        }
        far = [iter(part["far"]) for part in parts]
        pool = [self.top["argmax"], *(next(far[s]) for s in where)]  # as drawn
        mind2 = [float(found[g][0]["mind2"][found[g][1]]) for g in pool]
        lefts = [found[g][0]["left"].take([found[g][1]]) for g in pool]
        return pool, torch.tensor(mind2, dtype=self.dtype), Left.cat(lefts)

    def _pool(self) -> None:
        """One pool of :func:`~ax_chaining.covers.farthest_first_order`."""
        pool, pool_mind2, pool_left = self._draw()
        known: dict[int, Tensor] = {}  # pool position -> its row at the pool
        first_call = True
        for _ in range(min(self.batch_size, self.max_size - len(self.order))):
            j = int(torch.argmax(pool_mind2))
            value = float(pool_mind2[j])
            if not value > 0.0:
                break  # the picks so far are checked below
            if not self.spec and value < self._threshold():
                break
            info = None
            if j not in known:
                # Rows are the cost: check the picks so far before a chunk.
                if self.spec and (not self._flush() or value < self._threshold()):
                    break
                ranked = torch.argsort(pool_mind2, descending=True).tolist()
                chunk = [j] + [k for k in ranked if k != j and k not in known]
                chunk = chunk[: self.chunk_size]
                args = (
                    self.step,
                    self.commit,
                    pool if first_call else None,
                    chunk,
                    pool_left.take(chunk),
                    (j, pool[j]),
                )
                parts = self.calls.call("ff_rows", args)
                self.commit, first_call = None, False
                rows = torch.empty(len(chunk), len(pool), dtype=self.dtype)
                for part in parts:
                    if part["positions"]:
                        rows[:, part["positions"]] = part["values"].to(self.dtype)
                known.update(zip(chunk, rows, strict=True))
                info = _prefixes([part["prefixes"] for part in parts])[0]
            self.spec.append({"j": j, "far": pool[j], "value": value, "info": info})
            row = known.pop(j)
            pool_mind2 = torch.minimum(pool_mind2, row)
            pool_mind2[j] = 0.0
            if len(self.order) + len(self.spec) >= self.max_size:
                break
        if self.spec:  # the pool's picks ended: check them
            self._flush()

    def _flush(self) -> bool:
        """Radii of the speculative centres; commit up to the first break (as
        one machine breaks). False if the pool ends there."""
        todo = [e for e in self.spec if e["info"] is None]
        if todo:
            seq = [(e["j"], e["far"]) for e in todo]
            infos = _prefixes(self.calls.call("ff_apply", (self.step, seq)))
            for e, info in zip(todo, infos, strict=True):
                e["info"] = info
        spec, self.spec, self.commit = self.spec, [], 0
        for e in spec:
            if e["value"] < self._threshold():
                return False
            self.order.append(e["far"])
            self.radii2.append(e["info"]["max"])
            self.top = e["info"]
            self.commit += 1
            if self.radii2[-1] <= self.stop2 or len(self.order) >= self.max_size:
                return False
        return True
