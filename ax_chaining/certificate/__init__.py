r"""Regret certificates valid at any candidate chosen from the data.

With probability at least :math:`1 - \delta`, jointly over all steps (or the
declared checks), :math:`\max_{x^\star \in X} f(x^\star) - f(x) \le B_t(x)`
for the certified point :math:`x`, when the objective is a sample of the
model's GP prior and :math:`x` is a function of the data. The package imports
torch alone; the BoTorch layer (:mod:`~ax_chaining.certificate.calibration`)
loads on first use of one of its names. Derivations are on the documentation
page "The regret certificate".
"""

from __future__ import annotations

import importlib
from typing import Any

from ax_chaining.certificate.bounds import (
    BLOCK_BYTES,
    PAIRWISE_PAIR_BYTES,
    UNION_PAIR_BYTES,
    ChainingTree,
    Links,
    Method,
    Rule,
    certificate_bounds,
    certificate_share,
    certified_block,
    chaining_bound,
    chaining_tree,
    pairwise_bound,
    recommend,
    running_minimum,
    solve_tail_budget,
    ucb_lcb_bound,
    union_bound,
)
from ax_chaining.certificate.certify import (
    DEFAULT_SCALE_LEVEL,
    LOO_MIN_OBSERVATIONS,
    Certificate,
    CertificateOptions,
    CertifiedSet,
    PosteriorSet,
)
from ax_chaining.certificate.rank import (
    RankMethod,
    RankOptions,
    RankStatement,
    rank_statement,
)
from ax_chaining.certificate.residuals import (
    ResidualCalibration,
    ResidualSource,
    conformal_quantile,
)
from ax_chaining.certificate.schedule import (
    DEFAULT_DELTA,
    EVERY_STEP,
    CheckSchedule,
    ScheduleKind,
    step_delta,
)
from ax_chaining.certificate.tails import (
    AUTO_DOF_CAP,
    CHERNOFF,
    EXPLORED_RATIO,
    GAUSSIAN,
    Calibration,
    CalibrationChoice,
    ChernoffTail,
    ExplorationTail,
    GaussianTail,
    StudentTail,
    TailLaw,
    bind_tail,
    resolve_tail,
    tail_sum,
    upper_quantile,
)

# The BoTorch layer's names, loaded on first use.
_LAZY = {
    name: "ax_chaining.certificate.calibration"
    for name in (
        "LooCheck",
        "among_index",
        "calibrate",
        "certify_model",
        "issue_certificate",
        "loo_check",
        "loo_residuals",
    )
}

__all__ = [
    *_LAZY,
    "AUTO_DOF_CAP",
    "BLOCK_BYTES",
    "CHERNOFF",
    "Calibration",
    "CalibrationChoice",
    "Certificate",
    "CertificateOptions",
    "CertifiedSet",
    "ChainingTree",
    "CheckSchedule",
    "ChernoffTail",
    "DEFAULT_DELTA",
    "DEFAULT_SCALE_LEVEL",
    "EVERY_STEP",
    "EXPLORED_RATIO",
    "ExplorationTail",
    "GAUSSIAN",
    "GaussianTail",
    "LOO_MIN_OBSERVATIONS",
    "Links",
    "Method",
    "PAIRWISE_PAIR_BYTES",
    "PosteriorSet",
    "RankMethod",
    "RankOptions",
    "RankStatement",
    "ResidualCalibration",
    "ResidualSource",
    "Rule",
    "ScheduleKind",
    "StudentTail",
    "TailLaw",
    "UNION_PAIR_BYTES",
    "bind_tail",
    "certificate_bounds",
    "certificate_share",
    "certified_block",
    "chaining_bound",
    "chaining_tree",
    "conformal_quantile",
    "pairwise_bound",
    "rank_statement",
    "recommend",
    "resolve_tail",
    "running_minimum",
    "solve_tail_budget",
    "step_delta",
    "tail_sum",
    "ucb_lcb_bound",
    "union_bound",
    "upper_quantile",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(
            f"module 'ax_chaining.certificate' has no attribute {name!r}"
        )
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
