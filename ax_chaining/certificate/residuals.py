r"""Calibration of the certificate from the loop's own residuals
:math:`z_i = (y_i - \mu_{i-1}(x_i)) / s_{i-1}(x_i)` at its queries
(``"forecast"``) or at random audits (``"audit"``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from ax_chaining.checks import check_choice, check_delta, check_float, check_int

__all__ = [
    "DOF_GRID",
    "FittedCalibration",
    "ResidualCalibration",
    "ResidualSource",
    "conformal_quantile",
    "upper_quantile_rank",
]

ResidualSource = Literal["forecast", "audit"]

#: Degrees of freedom tried, lightest tail first (``inf``: Gaussian).
DOF_GRID: tuple[float, ...] = (math.inf, 100, 50, 30, 20, 15, 10, 7, 5, 4, 3, 2, 1)


def conformal_quantile(scores: Sequence[float] | np.ndarray, level: float) -> float:
    r"""The split-conformal quantile: the :math:`\lceil (n + 1)\,
    \texttt{level} \rceil`-th smallest of the ``n`` finite ``scores``
    (``inf`` beyond ``n``). If they and a further score :math:`s_{n+1}` are
    exchangeable, :math:`P(s_{n+1} \le q) \ge \texttt{level}` (Vovk et al.,
    2005; Lei et al., 2018)."""
    level = check_delta(level, "level")
    s = np.sort(np.asarray(scores, dtype=np.float64).reshape(-1))
    if not np.isfinite(s).all():
        raise ValueError("`scores` must be finite.")
    k = math.ceil((s.size + 1) * level)
    return math.inf if k > s.size else float(s[k - 1])


def upper_quantile_rank(n: int, level: float, confidence: float) -> int:
    r"""The smallest rank :math:`k` with :math:`P[\mathrm{Bin}(n, \texttt{level})
    \le k - 1] \ge \texttt{confidence}` (``n + 1`` if none): the :math:`k`-th
    smallest of ``n`` i.i.d. scores is at least the ``level`` quantile of their
    law with probability at least ``confidence``."""
    from scipy.stats import binom

    n = check_int("n", n, 0)
    ks = np.arange(1, n + 1)
    ok = np.flatnonzero(binom.cdf(ks - 1, n, level) >= confidence)
    return int(ks[ok[0]]) if ok.size else n + 1


@dataclass(frozen=True)
class FittedCalibration:
    """What :meth:`ResidualCalibration.fit` gives: the ``scale`` on the
    standard deviations, the tails' ``dof`` (``inf``: Gaussian), ``stats``."""

    scale: float
    dof: float
    stats: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ResidualCalibration:
    r"""Calibrate a certificate from standardized residuals: the scale of the
    ``level`` quantile of :math:`|z|` and the lightest Student-t law (of
    :data:`DOF_GRID`) under which the largest :math:`|z|` is not surprising
    at level ``alpha``. Pass it as ``CertificateOptions(calibration=...)``.

    Example:
        >>> z = [0.3, -1.1, 0.8, 0.1, -0.4, 1.9, -0.7, 0.2, 0.5, -0.9, 1.2, 0.05]
        >>> fit = ResidualCalibration(z).fit()  # q = 1.9, the 12th of 12
        >>> round(fit.scale, 3), fit.dof
        (1.483, inf)

    Args:
        quantile: ``"conformal"`` (:func:`conformal_quantile`), ``"upper"``
            (:func:`upper_quantile_rank` at ``confidence``) or ``"auto"``
            (``"upper"`` for forecasts, ``"conformal"`` for audits).
        min_residuals: With fewer, :meth:`usable` is False (the certificate
            falls back to the leave-one-out check).
        min_scale: The smallest scale.
    """

    residuals: tuple[float, ...]
    source: ResidualSource = "forecast"
    level: float = 0.8
    quantile: Literal["auto", "conformal", "upper"] = "auto"
    confidence: float = 0.9
    alpha: float = 0.05
    min_residuals: int = 5
    min_scale: float = 0.25

    def __post_init__(self) -> None:
        z = np.asarray(self.residuals, dtype=np.float64).reshape(-1)
        if not np.isfinite(z).all():
            raise ValueError("`residuals` must be finite.")
        object.__setattr__(self, "residuals", tuple(float(v) for v in z))
        check_choice("source", self.source, get_args(ResidualSource))
        check_delta(self.level, "level")
        check_choice("quantile", self.quantile, ("auto", "conformal", "upper"))
        check_delta(self.confidence, "confidence")
        check_delta(self.alpha, "alpha")
        check_int("min_residuals", self.min_residuals, 2)
        check_float("min_scale", self.min_scale, (lambda v: v > 0, "> 0"))

    def rank(self) -> int:
        """The rank of the scale's quantile among the ``n`` residuals."""
        n, rule = len(self.residuals), self.quantile
        if rule == "conformal" or (rule == "auto" and self.source == "audit"):
            return math.ceil((n + 1) * self.level)
        return upper_quantile_rank(n, self.level, self.confidence)

    def usable(self) -> bool:
        """Whether there are ``min_residuals`` and a :meth:`rank` of at most ``n``."""
        n = len(self.residuals)
        return n >= self.min_residuals and self.rank() <= n

    def fit(self) -> FittedCalibration:
        """The scale and degrees of freedom; a ``ValueError`` if not :meth:`usable`."""
        from scipy.stats import norm, t

        if not self.usable():
            raise ValueError(
                f"{len(self.residuals)} residuals are too few for level "
                f"{self.level:g} (at least {self.min_residuals}, and a quantile "
                f"rank {self.rank()} of at most n)."
            )
        a = np.abs(np.asarray(self.residuals))
        n, top = a.size, float(a.max())
        q = float(np.sort(a)[self.rank() - 1])
        upper = (1.0 - self.level) / 2.0
        for dof in DOF_GRID:
            law = norm if math.isinf(dof) else t(dof)
            scale = max(self.min_scale, q / float(law.isf(upper)))
            # P(max of n |T| >= top / scale).
            tail = 2.0 * float(law.sf(top / scale))
            p_max = -math.expm1(n * math.log1p(-min(tail, 1.0 - 1e-16)))
            if p_max >= self.alpha:
                break
        stats = {
            "residuals": float(n),
            "quantile": q,
            "max_abs": top,
            "p_max": p_max,
            "scale": scale,
            "dof": -1.0 if math.isinf(dof) else float(dof),
        }
        return FittedCalibration(scale=scale, dof=float(dof), stats=stats)
