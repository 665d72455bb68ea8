r"""Regret certificates valid at any candidate chosen from the data: with
probability at least :math:`1 - \delta`, jointly over all steps (or declared
checks), :math:`\max_{x^\star \in X} f(x^\star) - f(x) \le B_t(x)` for the
certified point :math:`x`, when the objective is a sample of the GP prior.
The BoTorch layer (:mod:`.calibration`, :mod:`.peers`) loads on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from ax_chaining.certificate import bounds, certify, rank, residuals, schedule, tails
from ax_chaining.certificate.bounds import *  # noqa: F403
from ax_chaining.certificate.certify import *  # noqa: F403
from ax_chaining.certificate.rank import *  # noqa: F403
from ax_chaining.certificate.residuals import *  # noqa: F403
from ax_chaining.certificate.schedule import *  # noqa: F403
from ax_chaining.certificate.tails import *  # noqa: F403

_LAZY = dict.fromkeys(
    "LooCheck among_index calibrate certify_model issue_certificate loo_check "
    "loo_residuals".split(),
    "ax_chaining.certificate.calibration",
)
_LAZY |= dict.fromkeys(
    "PeerStatement posterior_scale_tril probabilistic_regret_bound regret_gap_rule "
    "ucb_lcb_rule".split(),
    "ax_chaining.certificate.peers",
)

__all__ = [*_LAZY]
for _module in (bounds, certify, rank, residuals, schedule, tails):
    __all__ += _module.__all__


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
