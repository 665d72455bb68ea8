"""Chaining-UCB for BoTorch and Ax: exploration calibrated by covering numbers.

Public names. The engine (:mod:`ax_chaining.covers`, :mod:`ax_chaining.distances`,
:mod:`ax_chaining.chaining`) imports torch alone.
"""

from ax_chaining.acquisition import GPUCB, ChainingUCB, default_t, gp_ucb_beta
from ax_chaining.chaining import ChainingResult, chaining_covers, num_levels
from ax_chaining.covers import farthest_first_order, greedy_cover, is_cover
from ax_chaining.distances import (
    DEFAULT_MEMORY_BUDGET,
    DenseDistance,
    LowRankDistance,
    MemoryBudgetError,
    PseudoDistance,
)

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "GPUCB",
    "ChainingResult",
    "ChainingUCB",
    "DenseDistance",
    "LowRankDistance",
    "MemoryBudgetError",
    "PseudoDistance",
    "chaining_covers",
    "default_t",
    "farthest_first_order",
    "gp_ucb_beta",
    "greedy_cover",
    "is_cover",
    "num_levels",
]

__version__ = "0.1.0"
