r"""Candidate sets sharded over a Dask cluster, with the answers of one machine.

An optional part of the package (``pip install ax-chaining[distributed]``);
the rest of it never imports Dask.

* :class:`ShardedCandidates`: the candidates (an ``N x d`` tensor or a
  fingerprint library) split into contiguous shards held by the workers.
* ``ChainingUCB(model, sharded)``: its step (posterior, farthest-first
  covers, :math:`H_i`, selection, union bound certificate) runs on the
  shards, and only small messages come back.
* :func:`~ax_chaining.distributed.ax.sharded_candidate_set_strategy` and the
  Ax classes of :mod:`ax_chaining.distributed.ax` (also reached through
  ``chaining_generation_strategy(..., candidates=sharded)``), and
  :class:`~ax_chaining.distributed.ax.DaskRunner` /
  :class:`~ax_chaining.distributed.ax.DaskMetric` to evaluate trials on the
  same cluster under Ax's ``Orchestrator``.

See the "Distributed candidates" page of the documentation.
"""

try:
    import distributed as _distributed  # noqa: F401
except ImportError as e:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "ax_chaining.distributed needs Dask's distributed scheduler: "
        "pip install 'ax-chaining[distributed]'."
    ) from e

from ax_chaining.distributed.candidates import (
    ShardedCandidates,
    ShardLostError,
    shard_bounds,
)

__all__ = [
    "ShardLostError",
    "ShardedCandidates",
    "shard_bounds",
]
