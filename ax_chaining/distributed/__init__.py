r"""Candidate sets sharded over a Dask cluster, with one machine's answers
(extra ``ax-chaining[distributed]``): ``ChainingUCB(model, ShardedCandidates(...))``.
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
