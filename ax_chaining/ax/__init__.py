"""Chaining-UCB in Ax: candidate sets, nodes and strategies, storage.

An Ax user picks Chaining-UCB the way they pick any Ax method::

    client.set_generation_strategy(chaining_generation_strategy(init_trials=10))

and compares it with BoTorch's stock UCB or GP-UCB by swapping that line for
:func:`ucb_generation_strategy` or :func:`gp_ucb_generation_strategy`.
Modules: :mod:`~ax_chaining.ax.candidates` (the finite set :math:`X`),
:mod:`~ax_chaining.ax.selection` (the Ax ``Acquisition``),
:mod:`~ax_chaining.ax.nodes` (nodes, strategies, recorded metadata),
:mod:`~ax_chaining.ax.storage` (JSON registration, precomputed kernels).
Importing this package registers nothing; see
:func:`~ax_chaining.ax.storage.register_storage`.
"""

from ax_chaining.ax.candidates import (
    DEFAULT_MAX_CANDIDATES,
    DEFAULT_NUM_CANDIDATES,
    CandidateSetSpec,
    candidate_parameterizations,
)
from ax_chaining.ax.nodes import (
    GEN_METADATA_KEY,
    CandidateSetNode,
    UniformCandidateNode,
    candidate_set_node,
    candidate_set_strategy,
    chaining_generation_strategy,
    chaining_ucb_node,
    gp_ucb_generation_strategy,
    ucb_generation_strategy,
)
from ax_chaining.ax.selection import UCB, CandidateSetAcquisition, GenerationRecord
from ax_chaining.ax.storage import (
    candidate_index_parameter,
    precomputed_kernel_surrogate_spec,
    register_storage,
)

__all__ = [
    "DEFAULT_MAX_CANDIDATES",
    "DEFAULT_NUM_CANDIDATES",
    "GEN_METADATA_KEY",
    "UCB",
    "CandidateSetAcquisition",
    "CandidateSetNode",
    "CandidateSetSpec",
    "GenerationRecord",
    "UniformCandidateNode",
    "candidate_index_parameter",
    "candidate_parameterizations",
    "candidate_set_node",
    "candidate_set_strategy",
    "chaining_generation_strategy",
    "chaining_ucb_node",
    "gp_ucb_generation_strategy",
    "precomputed_kernel_surrogate_spec",
    "register_storage",
    "ucb_generation_strategy",
]
