r"""Calibration of the certificate from the loop's own residuals
:math:`z_i = (y_i - \mu_{i-1}(x_i)) / s_{i-1}(x_i)`, forecasts made before each
observation: the loop's queries (``"forecast"``) or random audits (``"audit"``).
The estimator, what it guarantees and its references are on the documentation
page "The regret certificate".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from ax_chaining.checks import check_choice, check_float, check_int

__all__ = [
    "DOF_GRID",
    "FittedCalibration",
    "ResidualCalibration",
    "ResidualSource",
    "conformal_quantile",
    "upper_quantile_rank",
    "standardized_residuals",
]

ResidualSource = Literal["forecast", "audit"]

#: Degrees of freedom tried, lightest tail first (``inf``: Gaussian).
DOF_GRID: tuple[float, ...] = (math.inf, 100, 50, 30, 20, 15, 10, 7, 5, 4, 3, 2, 1)


def conformal_quantile(scores: Sequence[float] | np.ndarray, level: float) -> float:
    r"""The split-conformal quantile of ``scores`` at ``level``: the
    :math:`\lceil (n + 1)\, \texttt{level} \rceil`-th smallest of the ``n``
    scores, ``inf`` when that rank exceeds ``n``.

    If ``scores`` and a further score :math:`s_{n+1}` are exchangeable,
    :math:`P(s_{n+1} \le q) \ge \texttt{level}` (Vovk et al., 2005; Lei et al.,
    2018).

    Example:
        >>> conformal_quantile([0.1, 0.5, 0.2, 0.9], level=0.6)  # 3rd smallest
        0.5
        >>> conformal_quantile([0.1, 0.5], level=0.9)
        inf
    """
    level = check_float("level", level, (lambda v: 0 < v < 1, "in (0, 1)"))
    s = np.sort(np.asarray(scores, dtype=np.float64).reshape(-1))
    if not np.isfinite(s).all():
        raise ValueError("`scores` must be finite.")
    k = math.ceil((s.size + 1) * level)
    return math.inf if k > s.size else float(s[k - 1])


def upper_quantile_rank(n: int, level: float, confidence: float) -> int:
    r"""The smallest rank :math:`k` with :math:`P[\mathrm{Bin}(n, \texttt{level})
    \le k - 1] \ge \texttt{confidence}`; ``n + 1`` when there is none.

    For ``n`` i.i.d. scores, the :math:`k`-th smallest is at least the
    ``level`` quantile of their law with probability at least ``confidence``
    (it is below it only if :math:`k` or more scores are, and each is with
    probability at most ``level``).

    Example:
        >>> upper_quantile_rank(40, 0.8, 0.9)
        36
    """
    from scipy.stats import binom

    n = check_int("n", n, 0)
    ks = np.arange(1, n + 1)
    ok = np.flatnonzero(binom.cdf(ks - 1, n, level) >= confidence)
    return int(ks[ok[0]]) if ok.size else n + 1


def standardized_residuals(
    observed: Sequence[float] | np.ndarray,
    mean: Sequence[float] | np.ndarray,
    sd: Sequence[float] | np.ndarray,
) -> np.ndarray:
    """:math:`(y_i - \\mu_i) / s_i` of predictions made before observing.

    Raises:
        ValueError: The three differ in length, or an ``sd`` is not positive.
    """
    y, m, s = (
        np.asarray(a, dtype=np.float64).reshape(-1) for a in (observed, mean, sd)
    )
    if not (y.size == m.size == s.size):
        raise ValueError(
            f"`observed`, `mean` and `sd` must have one entry per prediction, got "
            f"{y.size}, {m.size} and {s.size}."
        )
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise ValueError(f"`sd` must be finite and positive, got {s}.")
    return (y - m) / s


@dataclass(frozen=True)
class FittedCalibration:
    """What :meth:`ResidualCalibration.fit` gives the certificate.

    Attributes:
        scale: The factor on every posterior standard deviation.
        dof: The tails' degrees of freedom (``inf``: Gaussian).
        stats: ``n``, ``quantile`` (the conformal :math:`q`), ``max_abs``,
            ``p_max`` (the test of the maximum at the chosen law), ``scale``,
            ``dof`` (``inf`` as a large float is not JSON: -1 for Gaussian).
    """

    scale: float
    dof: float
    stats: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ResidualCalibration:
    r"""Calibrate a certificate from standardized residuals: the scale of the
    ``level`` quantile of :math:`|z|` and the lightest Student-t law under
    which the largest :math:`|z|` is not surprising at level ``alpha``.

    Pass it as ``calibration=`` of
    :func:`~ax_chaining.certificate.calibration.certify_model` or of a
    :class:`~ax_chaining.ChainingUCB` certificate; in an Ax loop
    :func:`~ax_chaining.ax.certify` builds it from the recorded forecasts.

    Example:
        >>> z = [0.3, -1.1, 0.8, 0.1, -0.4, 1.9, -0.7, 0.2, 0.5, -0.9, 1.2, 0.05]
        >>> fit = ResidualCalibration(z).fit()  # q = 1.9, the 12th of 12
        >>> round(fit.scale, 3), fit.dof
        (1.483, inf)

    Args:
        residuals: The standardized residuals :math:`z_i`.
        source: ``"forecast"`` or ``"audit"`` (what they are).
        level: The level of the scale's quantile.
        quantile: ``"conformal"`` (:func:`conformal_quantile`), ``"upper"``
            (:func:`upper_quantile_rank`) or ``"auto"`` (``"upper"`` for
            forecasts, ``"conformal"`` for audits).
        confidence: The confidence of ``"upper"``.
        alpha: The level of the test of the largest residual.
        min_residuals: Fewer residuals than this: no calibration from them
            (:meth:`usable` is False; the certificate falls back to the
            leave-one-out check, and says so in its ``checks``).
        min_scale: The smallest scale (a floor on how far residuals may
            narrow the bound).
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
        check_float("level", self.level, (lambda v: 0 < v < 1, "in (0, 1)"))
        check_choice("quantile", self.quantile, ("auto", "conformal", "upper"))
        check_float("confidence", self.confidence, (lambda v: 0 < v < 1, "in (0, 1)"))
        check_float("alpha", self.alpha, (lambda v: 0 < v < 1, "in (0, 1)"))
        check_int("min_residuals", self.min_residuals, 2)
        check_float("min_scale", self.min_scale, (lambda v: v > 0, "> 0"))

    @property
    def name(self) -> str:
        return self.source

    def rank(self) -> int:
        """The rank :math:`k` of the scale's quantile among ``n`` residuals
        (``n + 1``: too few residuals for it)."""
        n = len(self.residuals)
        rule = self.quantile
        if rule == "auto":
            rule = "conformal" if self.source == "audit" else "upper"
        if rule == "conformal":
            return math.ceil((n + 1) * self.level)
        return upper_quantile_rank(n, self.level, self.confidence)

    def usable(self) -> bool:
        """Whether there are enough residuals (``min_residuals``, and a rank
        :meth:`rank` of at most ``n``)."""
        n = len(self.residuals)
        return n >= self.min_residuals and self.rank() <= n

    def fit(self) -> FittedCalibration:
        """The scale and degrees of freedom (see the class docstring).

        Raises:
            ValueError: Not :meth:`usable`.
        """
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
            # P(max of n |T| >= top / scale), in the complement's log for accuracy.
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
