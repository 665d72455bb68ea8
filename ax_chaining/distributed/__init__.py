r"""Candidate sets sharded over a Dask cluster, with the answers of one machine
(the optional extra ``pip install ax-chaining[distributed]``): build
:class:`ShardedCandidates` and pass it to ``ChainingUCB(model, sharded)``;
Ax's strategies take it as ``candidates``, and :mod:`ax_chaining.distributed.ax`
evaluates trials on the same cluster. See "Distributed candidates".
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

__all__ = ["ShardLostError", "ShardedCandidates", "shard_bounds"]
