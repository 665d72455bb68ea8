"""Chaining-UCB in Ax: candidate sets, nodes and strategies, certificates and
their analysis card, stopping and storage. Importing it registers this
package's classes with Ax's JSON storage, as Ax registers its own."""

from ax_chaining.ax.analysis import RecommendationAnalysis
from ax_chaining.ax.candidates import (
    CandidateSetSpec,
    candidate_parameterizations,
    parameters_from_table,
)
from ax_chaining.ax.certificates import (
    GEN_METADATA_KEY,
    best_certificate,
    certificate_history,
    certify,
    recommend,
)
from ax_chaining.ax.nodes import (
    CandidateSetAcquisition,
    CandidateSetNode,
    SobolCandidateNode,
    UniformCandidateNode,
)
from ax_chaining.ax.stopping import (
    CertifiedStop,
    RankBoundGlobalStoppingStrategy,
    RegretBoundGlobalStoppingStrategy,
)
from ax_chaining.ax.storage import (
    load_client,
    load_client_from_database,
    register_storage,
    storage_config,
)
from ax_chaining.ax.strategies import (
    candidate_set_node,
    candidate_set_strategy,
    chaining_generation_strategy,
    gp_ucb_generation_strategy,
    qlognei_generation_strategy,
    ucb_generation_strategy,
)
from ax_chaining.ax.surrogates import (
    candidate_index_parameter,
    feature_table_surrogate_spec,
    fingerprint_kernel_surrogate_spec,
    precomputed_kernel_surrogate_spec,
)

__all__ = [
    "GEN_METADATA_KEY",
    "CandidateSetAcquisition",
    "CandidateSetNode",
    "CandidateSetSpec",
    "CertifiedStop",
    "RankBoundGlobalStoppingStrategy",
    "RecommendationAnalysis",
    "RegretBoundGlobalStoppingStrategy",
    "SobolCandidateNode",
    "UniformCandidateNode",
    "best_certificate",
    "candidate_index_parameter",
    "candidate_parameterizations",
    "candidate_set_node",
    "candidate_set_strategy",
    "certificate_history",
    "certify",
    "chaining_generation_strategy",
    "feature_table_surrogate_spec",
    "fingerprint_kernel_surrogate_spec",
    "gp_ucb_generation_strategy",
    "load_client",
    "load_client_from_database",
    "parameters_from_table",
    "precomputed_kernel_surrogate_spec",
    "qlognei_generation_strategy",
    "recommend",
    "register_storage",
    "storage_config",
    "ucb_generation_strategy",
]

register_storage()
