r"""The client side of the distributed step: the farthest-first traversal and
the union bound, over shards that hold the ``O(N)`` state (no Dask here).

Both mirror the single-machine code decision by decision:

* :func:`sharded_farthest_first` makes the choices of
  :func:`~ax_chaining.covers.farthest_first_order` (the pool of the farthest
  point and a seeded random sample of the far set, the picks from the pool,
  the chunks of rows, the breaks), from the shards' maxima, counts and the
  values of rows at pool points. Only the round trips differ: the picks from
  rows already computed are taken *speculatively* (applied to a copy of the
  shards' distances, their radii returned in one call), then checked against
  the break rules and committed up to the first break. One machine would have
  taken exactly the committed ones.
* :func:`sharded_union_bound` runs the root search of
  :func:`~ax_chaining.certificate.union_bound` with the tail sums added over
  the shards.

``calls`` is anything with ``call(method, args, shards=None)`` returning the
shards' results in shard order, ``starts`` (each shard's first global index)
and ``sizes``: a :class:`~ax_chaining.distributed.ShardedCandidates`, or a list
of in-process shards in tests.
"""

from __future__ import annotations

import bisect
from typing import Any, Protocol

import torch
from torch import Tensor

from ax_chaining.certificate.bounds import (
    UNION_PAIR_BYTES,
    certified_block,
    solve_tail_budget,
)
from ax_chaining.certificate.tails import GAUSSIAN, TailLaw, upper_quantile
from ax_chaining.covers import POOL_RATIO2, sample_without_replacement
from ax_chaining.distances import DEFAULT_MEMORY_BUDGET
from ax_chaining.distributed._shard import Left

__all__ = ["ShardCalls", "sharded_farthest_first", "sharded_union_bound"]


class ShardCalls(Protocol):
    """The shards as the traversal sees them."""

    starts: list[int]
    sizes: list[int]

    def call(
        self, method: str, args: Any, shards: list[int] | None = None
    ) -> list[Any]:
        """Call ``method`` on the shards (all, or ``shards``) with ``args`` (one
        tuple for all, or a list of tuples, one per shard); results in order."""


def owner(calls: ShardCalls, index: int) -> int:
    """The shard holding global index ``index``."""
    return bisect.bisect_right(calls.starts, index) - 1


def combine_max(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The global maximum and its first index from the shards' (in order)."""
    best = max(p["max"] for p in parts)
    return next(p for p in parts if p["max"] == best)


def _prefixes(per_shard: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Combine the shards' speculative prefixes, prefix by prefix."""
    return [combine_max(list(group)) for group in zip(*per_shard, strict=True)]


def sharded_farthest_first(
    calls: ShardCalls,
    step: int,
    n: int,
    start_left: Left,
    max_size: int,
    stop_radius: float = 0.0,
    batch_size: int = 1,
    dtype: torch.dtype = torch.float64,
) -> tuple[Tensor, Tensor]:
    r"""Farthest-first traversal over sharded candidates: the decisions of
    :func:`~ax_chaining.covers.farthest_first_order` (same arguments; the first
    centre is ``start_left``, one point's left data).

    Returns:
        ``(order, radii)`` as :func:`~ax_chaining.covers.farthest_first_order`.
    """
    if not 0 <= start_left.index[0] < n:
        raise ValueError(f"start must be in 0..{n - 1}, got {start_left.index[0]}.")
    if max_size < 1:
        raise ValueError(f"max_size must be at least 1, got {max_size}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
    run = _Traversal(calls, step, max_size, stop_radius, batch_size, dtype)
    return run.run(start_left)


class _Traversal:
    """The state of one sharded traversal (see :func:`sharded_farthest_first`)."""

    def __init__(
        self,
        calls: ShardCalls,
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
        start = start_left.index[0]
        self.top = combine_max(self.calls.call("ff_begin", (self.step, start_left)))
        self.order = [start]
        self.radii2 = [self.top["max"]]
        self.top_left: Left | None = self.top["left"]
        self.gen = torch.Generator().manual_seed(start)
        while self.radii2[-1] > self.stop2 and len(self.order) < self.max_size:
            self._pool()
        self.calls.call("ff_end", (self.step, self.commit))
        radii = torch.tensor(self.radii2, dtype=self.dtype).sqrt()
        return torch.tensor(self.order, dtype=torch.long), radii

    def _threshold(self) -> float:
        return POOL_RATIO2 * self.radii2[-1]

    def _draw(self) -> tuple[list[int], Tensor, Left]:
        """A pool: the farthest point and a seeded random sample of the far set
        (positions in global candidate order), their distances and left data."""
        if self.pool_size == 1:
            mind2 = torch.tensor([self.radii2[-1]], dtype=self.dtype)
            return [self.top["argmax"]], mind2, self.top_left
        counts = self.calls.call(
            "ff_count", (self.step, self.commit, self._threshold())
        )
        self.commit = None
        cum = [0]
        for c in counts:
            cum.append(cum[-1] + c)
        pick = sample_without_replacement(cum[-1], self.pool_size - 1, self.gen)
        where = [bisect.bisect_right(cum, p) - 1 for p in pick.tolist()]
        wanted: list[list[int]] = [[] for _ in counts]
        for p, s in zip(pick.tolist(), where, strict=True):
            wanted[s].append(p - cum[s])
        extra = [self.top["argmax"]]
        parts = self.calls.call(
            "ff_pool", [(self.step, wanted[s], extra) for s in range(len(counts))]
        )
        values: dict[int, float] = {}
        lefts: dict[int, Left] = {}
        taken = [0] * len(parts)
        far = []
        for part in parts:
            for k, g in enumerate(part["far"] + part["extra"]):
                values[g] = float(part["mind2"][k])
                lefts[g] = part["left"].take([k])
        for s in where:  # the far points in the order drawn
            far.append(parts[s]["far"][taken[s]])
            taken[s] += 1
        pool = [self.top["argmax"], *far]
        mind2 = torch.tensor([values[g] for g in pool], dtype=self.dtype)
        return pool, mind2, Left.cat([lefts[g] for g in pool])

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
            else:
                info = None
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
        kept, going = 0, True
        for e in self.spec:
            if e["value"] < self._threshold():
                going = False
                break
            self.order.append(e["far"])
            self.radii2.append(e["info"]["max"])
            self.top = e["info"]
            self.top_left = e["info"].get("left")
            kept += 1
            if self.radii2[-1] <= self.stop2 or len(self.order) >= self.max_size:
                going = False
                break
        self.commit = kept
        self.spec = []
        return going


def sharded_union_bound(
    calls: ShardCalls,
    step: int,
    lefts: Left,
    mean_rows: Tensor,
    n: int,
    delta_t: float,
    tail: TailLaw = GAUSSIAN,
    rtol: float = 1e-6,
    scale: float = 1.0,
    sign: float = 1.0,
    method: str = "union",
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> Tensor:
    r""":func:`~ax_chaining.certificate.union_bound` (or ``pairwise_bound``)
    of the points ``lefts`` over sharded candidates.

    The same bracket and per-point root search as one machine, a block of
    points at a time (as many as the largest shard's rows of them hold within
    ``memory_budget``, :func:`~ax_chaining.certificate.certified_block`: each
    worker's share); each tail sum is the sum of the shards' sums (a
    different order of addition than one machine's: the bound agrees to the
    root search's relative tolerance ``rtol``, whose points follow the
    sums). ``mean_rows`` are the certified points' means (objective units,
    divided by ``scale``).

    Returns:
        ``m`` bounds (float64, at least 0), in the units of ``mean_rows``.
    """
    m = len(lefts.index)
    out = torch.empty(m, dtype=torch.float64)
    z = None if n == 1 else upper_quantile(delta_t / (n - 1), tail)
    # Every block costs round trips: as many points as the budget allows.
    step_rows = certified_block(
        max(calls.sizes), UNION_PAIR_BYTES, memory_budget, largest=None
    )
    for first in range(0, m, step_rows):
        block = list(range(first, min(m, first + step_rows)))
        parts = calls.call(
            "cert_rows",
            (step, lefts.take(block), mean_rows[block], scale, sign, z),
        )
        lo = torch.stack([p["exact"] for p in parts]).amax(dim=0).clamp_min(0.0)
        if z is None:
            pairwise = torch.zeros_like(lo)
        else:
            pairwise = torch.stack([p["pairwise"] for p in parts]).amax(dim=0)
            pairwise = pairwise.clamp_min(0.0)
        if method == "pairwise":
            out[block] = pairwise
            calls.call("cert_end", (step,))
            continue
        hi = torch.maximum(pairwise, lo)

        def tail_sum(b: Tensor) -> Tensor:
            parts = calls.call("cert_tail", (step, b, tail))
            total = parts[0].clone()
            for p in parts[1:]:
                total += p
            return total

        solved = solve_tail_budget(tail_sum, lo, hi, delta_t, rtol)
        # As one machine: the pairwise bound, where computed, caps the result.
        out[block] = solved if z is None else torch.minimum(solved, hi)
        calls.call("cert_end", (step,))
    return out
