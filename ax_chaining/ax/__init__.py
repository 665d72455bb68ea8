"""Chaining-UCB in Ax: candidate sets, nodes and strategies, storage. Importing
registers nothing; see :func:`~ax_chaining.ax.storage.register_storage`. The
public names are those imported here."""

from ax_chaining.ax.candidates import CandidateSetSpec, candidate_parameterizations
from ax_chaining.ax.nodes import (
    GEN_METADATA_KEY,
    CandidateSetAcquisition,
    CandidateSetNode,
    UniformCandidateNode,
    candidate_set_node,
    candidate_set_strategy,
    chaining_generation_strategy,
    chaining_ucb_node,
    gp_ucb_generation_strategy,
    ucb_generation_strategy,
)
from ax_chaining.ax.storage import (
    candidate_index_parameter,
    fingerprint_kernel_surrogate_spec,
    precomputed_kernel_surrogate_spec,
    register_storage,
)
