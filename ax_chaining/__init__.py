"""Chaining-UCB for BoTorch and Ax. The torch-only engine is imported eagerly; the
BoTorch and Ax layers on first use of one of their names (importing the Ax layer
registers its classes with Ax's JSON storage)."""

from __future__ import annotations

import importlib
from typing import Any

from ax_chaining.certificate.bounds import (
    ChainingTree,
    certificate_bounds,
    chaining_tree,
)
from ax_chaining.certificate.certify import Certificate
from ax_chaining.chaining import (
    ChainingResult,
    chaining_bonus,
    chaining_covers,
    num_levels,
    reuse_covers,
)
from ax_chaining.covers import (
    farthest_first_order,
    greedy_cover,
    greedy_dominating_set_lazy,
    is_cover,
)
from ax_chaining.distances import (
    DEFAULT_MEMORY_BUDGET,
    DenseDistance,
    LowRankDistance,
    MemoryBudgetError,
    PseudoDistance,
)

# Public name -> module that defines it (BoTorch and Ax layers, loaded lazily).
_LAZY = {
    "ChainingUCB": "ax_chaining.acquisition",
    "GPUCB": "ax_chaining.acquisition",
    "default_t": "ax_chaining.acquisition",
    "evaluated_candidates": "ax_chaining.acquisition",
    "ChainingOptions": "ax_chaining.acquisition",
    "gp_ucb_beta": "ax_chaining.acquisition",
    "PrecomputedKernel": "ax_chaining.kernels",
    "TanimotoKernel": "ax_chaining.kernels",
    "MinMaxKernel": "ax_chaining.kernels",
    "PackedFingerprints": "ax_chaining.kernels",
    "register_fingerprints": "ax_chaining.kernels",
    "featurize_library": "ax_chaining.molecules",
    "fingerprint_kernel_surrogate_spec": "ax_chaining.ax",
    "feature_table_surrogate_spec": "ax_chaining.ax",
    "molecule_surrogate_spec": "ax_chaining.molecules",
    "FeatureTableKernel": "ax_chaining.kernels",
    "CandidateSetSpec": "ax_chaining.ax",
    "candidate_index_parameter": "ax_chaining.ax",
    "candidate_parameterizations": "ax_chaining.ax",
    "chaining_generation_strategy": "ax_chaining.ax",
    "gp_ucb_generation_strategy": "ax_chaining.ax",
    "precomputed_kernel_surrogate_spec": "ax_chaining.ax",
    "ucb_generation_strategy": "ax_chaining.ax",
    "candidate_set_node": "ax_chaining.ax",
    "candidate_set_strategy": "ax_chaining.ax",
    "register_storage": "ax_chaining.ax",
    "load_client": "ax_chaining.ax",
    "load_client_from_database": "ax_chaining.ax",
    "storage_config": "ax_chaining.ax",
    "register_gram": "ax_chaining.kernels",
    "RankBoundGlobalStoppingStrategy": "ax_chaining.ax",
    "RegretBoundGlobalStoppingStrategy": "ax_chaining.ax",
    "best_certificate": "ax_chaining.ax",
    "certificate_history": "ax_chaining.ax",
    "certify": "ax_chaining.ax",
    "recommend": "ax_chaining.ax",
    "certify_model": "ax_chaining.certificate.calibration",
    "CheckSchedule": "ax_chaining.certificate.schedule",
    "ResidualCalibration": "ax_chaining.certificate.residuals",
    "RankOptions": "ax_chaining.certificate.rank",
    "CertificateOptions": "ax_chaining.certificate.certify",
    "CertifiedStop": "ax_chaining.ax",
    "parameters_from_table": "ax_chaining.ax",
    "qlognei_generation_strategy": "ax_chaining.ax",
}

__all__ = [
    *_LAZY,
    "DEFAULT_MEMORY_BUDGET",
    "Certificate",
    "ChainingResult",
    "ChainingTree",
    "DenseDistance",
    "LowRankDistance",
    "MemoryBudgetError",
    "PseudoDistance",
    "certificate_bounds",
    "chaining_bonus",
    "chaining_covers",
    "chaining_tree",
    "farthest_first_order",
    "greedy_cover",
    "greedy_dominating_set_lazy",
    "is_cover",
    "num_levels",
    "reuse_covers",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ax_chaining' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
