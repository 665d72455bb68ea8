r"""The tail laws of the certificate: for a pair :math:`(x, x^\star)` fixed by
the data, the law of :math:`(g(x^\star) - g(x)) / d_t(x, x^\star)` (Gaussian
under the model; Student-t defaults, a heuristic, for fitted hyperparameters).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch
from torch import Tensor

from ax_chaining.certificate.residuals import ResidualCalibration
from ax_chaining.checks import check_bool, check_choice, check_float, type_error
from ax_chaining.distances import column_blocks

__all__ = [
    "AUTO_DOF_CAP",
    "CHERNOFF",
    "EXPLORED_RATIO",
    "GAUSSIAN",
    "Calibration",
    "CalibrationChoice",
    "ChernoffTail",
    "ExplorationTail",
    "GaussianTail",
    "StudentTail",
    "TailLaw",
    "acting_calibration",
    "bind_tail",
    "check_tail",
    "resolve_tail",
    "tail_sum",
    "upper_quantile",
]

#: The model check a certificate runs first; it decides the default tails.
#: Without the loop's residuals, ``"forecast"`` and ``"audit"`` act as ``"loo"``.
Calibration = Literal["loo", "none", "forecast", "audit"]
#: ``calibration`` of the certificates: a named one or residuals to calibrate on.
CalibrationChoice = Calibration | ResidualCalibration


class TailLaw:
    """The standardized law of one pair's difference: its ``name``, and
    ``dof`` of the rank statement's joint law (``inf``: Gaussian; None: none)."""

    name: str = "law"
    dof: float | None = None

    def sf(self, z: Tensor) -> Tensor:
        """:math:`P[Z > z]`, or an upper bound on it."""
        raise NotImplementedError

    def isf(self, p: Tensor) -> Tensor:
        """The threshold :math:`z` with :math:`P[Z > z] \\le p`."""
        raise NotImplementedError

    def probability(self, z: Tensor) -> Tensor:
        """:math:`P[Z > z]` itself (the rank statement's); ``sf`` by default."""
        return self.sf(z)


@dataclass(frozen=True)
class GaussianTail(TailLaw):
    r"""Standard Gaussian tails, exact under the model."""

    name, dof = "gaussian", math.inf

    def sf(self, z: Tensor) -> Tensor:
        return torch.special.ndtr(-z)

    def isf(self, p: Tensor) -> Tensor:
        return -torch.special.ndtri(p)  # accurate for tiny p


@dataclass(frozen=True)
class ChernoffTail(TailLaw):
    r"""The paper's Chernoff bound :math:`\bar\Phi(z) \le e^{-z^2/2}`,
    :math:`z = \sqrt{2 \log(1/p)}`; probabilities are Gaussian."""

    name, dof = "chernoff", math.inf

    def sf(self, z: Tensor) -> Tensor:
        return torch.where(z > 0, torch.exp(-0.5 * z.square()), torch.ones_like(z))

    def isf(self, p: Tensor) -> Tensor:
        return torch.sqrt(-2.0 * torch.log(p))

    def probability(self, z: Tensor) -> Tensor:
        return torch.special.ndtr(-z)


#: The Gaussian and Chernoff laws.
GAUSSIAN, CHERNOFF = GaussianTail(), ChernoffTail()


def check_tail(tail: object, default: bool = True) -> Any:
    """``tail`` if a :class:`TailLaw`, or None where ``default``; else a
    ``TypeError``."""
    if (tail is None and not default) or not isinstance(tail, TailLaw | None):
        expected = "a TailLaw (GAUSSIAN, CHERNOFF, StudentTail(dof), ...)"
        raise type_error("tail", expected + (" or None" if default else ""), tail)
    return tail


def upper_quantile(p: Tensor | float, tail: TailLaw = GAUSSIAN) -> Tensor:
    """Threshold ``z`` (float64) with tail probability ``p`` in (0, 1) for one pair."""
    check_tail(tail, default=False)
    p = torch.as_tensor(p, dtype=torch.float64)
    if not bool(((p > 0) & (p < 1)).all()):
        raise ValueError(f"tail probabilities must be in (0, 1), got {p}.")
    return tail.isf(p)


def tail_sum(b: Tensor, gap: Tensor, dist: Tensor, tail: TailLaw) -> Tensor:
    r"""The union bound's tail sum :math:`\sum_{x^\star:\, d > 0} P[f(x^\star) -
    f(x) > b]` (or its bound) per row, over fixed blocks of candidates.

    Args:
        b: The levels, one per row (``...``).
        gap: ``... x N`` differences of the means :math:`\mu(x^\star) - \mu(x)`.
        dist: ``... x N`` pseudo-distances :math:`d(x, x^\star)`.
        tail: The law, bound to the ``N`` candidates (:func:`bind_tail`).
    """
    check_tail(tail, default=False)
    pos = dist > 0
    z = (b.unsqueeze(-1) - gap) / torch.where(pos, dist, torch.ones_like(dist))
    term = torch.where(pos, tail.sf(z), torch.zeros_like(z))
    total = torch.zeros(term.shape[:-1], dtype=term.dtype, device=term.device)
    for a, c in column_blocks(0, term.shape[-1]):
        total += term[..., a:c].sum(dim=-1)
    return total


@dataclass(frozen=True)
class StudentTail(TailLaw):
    r"""Student-t tails with ``dof`` degrees of freedom.

    ``sf`` rounds ``z`` down to a grid uniform in :math:`\operatorname{asinh} z`
    (step :data:`GRID_STEP`): never below the exact value (``exact=True``: exact).

    Example:
        >>> round(float(StudentTail(5).isf(torch.tensor(0.025))), 4)
        2.5706
    """

    dof: float
    exact: bool = False

    def __post_init__(self) -> None:
        dof = check_float("dof", self.dof, (lambda v: v > 0, "> 0"))
        object.__setattr__(self, "dof", dof)
        check_bool("exact", self.exact)
        object.__setattr__(self, "name", f"student-{dof:g}")

    def sf(self, z: Tensor) -> Tensor:
        if self.exact:
            from scipy.special import stdtr

            values = stdtr(self.dof, -z.detach().cpu().double().numpy())
            return torch.as_tensor(values, dtype=z.dtype, device=z.device)
        table = _student_sf_table(self.dof).to(device=z.device)
        u = torch.asinh(z.to(torch.float64))
        k = torch.floor((u + GRID_MAX) / GRID_STEP).clamp(0, table.numel() - 1).long()
        return table[k].to(z.dtype)

    def isf(self, p: Tensor) -> Tensor:
        from scipy.special import stdtrit

        values = -stdtrit(self.dof, p.detach().cpu().double().numpy())
        return torch.as_tensor(values, dtype=torch.float64, device=p.device)


#: StudentTail's grid step in asinh(z), and the grid's reach.
GRID_STEP, GRID_MAX = 1e-3, math.asinh(1e8)


@functools.lru_cache(maxsize=8)
def _student_sf_table(dof: float) -> Tensor:
    from scipy.special import stdtr

    u = np.arange(int(math.ceil(2 * GRID_MAX / GRID_STEP)) + 1) * GRID_STEP - GRID_MAX
    return torch.as_tensor(stdtr(dof, -np.sinh(u)), dtype=torch.float64)


#: The most degrees of freedom of the default tails for unexplored candidates.
AUTO_DOF_CAP = 10
#: Posterior over prior variance at which a candidate counts as explored.
EXPLORED_RATIO = 0.5


@dataclass(frozen=True)
class ExplorationTail(TailLaw):
    r"""Student-t tails that depend on how far the data have reached: the
    pair :math:`(x, x')` gets ``light_dof`` degrees of freedom if
    :math:`s_t^2(x') \le` ``ratio`` :math:`k(x', x')` (explored), else
    ``heavy_dof`` (``<=`` ``light_dof``); ``isf`` is the heavy law's. Bind it
    to the candidates (:func:`bind_tail`) before summing tails over them.
    """

    heavy_dof: float
    light_dof: float
    ratio: float = EXPLORED_RATIO

    def __post_init__(self) -> None:
        heavy, light = StudentTail(self.heavy_dof), StudentTail(self.light_dof)
        if light.dof < heavy.dof:
            raise ValueError(
                f"`light_dof` must be at least `heavy_dof`={heavy.dof:g} (lighter "
                f"tails for explored candidates), got {light.dof:g}."
            )
        ratio = check_float("ratio", self.ratio, (lambda v: 0 < v < 1, "in (0, 1)"))
        name = f"student-{heavy.dof:g}/{light.dof:g}@{ratio:g}"
        values = {"heavy": heavy, "light": light, "ratio": ratio, "dof": heavy.dof}
        for key, value in {**values, "name": name}.items():
            object.__setattr__(self, key, value)

    def bind(self, variance_ratio: Tensor) -> _BoundExplorationTail:
        """The law over candidates with these posterior-to-prior variance ratios."""
        return _BoundExplorationTail(self, variance_ratio > self.ratio)

    def sf(self, z: Tensor) -> Tensor:
        return self.heavy.sf(z)

    def isf(self, p: Tensor) -> Tensor:
        return self.heavy.isf(p)


class _BoundExplorationTail(TailLaw):
    """An :class:`ExplorationTail` whose ``sf`` takes each of ``N`` columns' law."""

    def __init__(self, law: ExplorationTail, unexplored: Tensor) -> None:
        self.law, self.unexplored = law, unexplored
        self.name, self.dof = law.name, law.dof

    def sf(self, z: Tensor) -> Tensor:
        mask = self.unexplored.to(z.device)
        if z.shape[-1] != mask.numel():
            raise ValueError(
                f"The tail law is bound to {mask.numel()} candidates; got "
                f"differences over {z.shape[-1]}."
            )
        return torch.where(mask, self.law.heavy.sf(z), self.law.light.sf(z))

    def isf(self, p: Tensor) -> Tensor:
        return self.law.isf(p)


def acting_calibration(
    calibration: CalibrationChoice,
) -> Calibration | ResidualCalibration:
    """``calibration`` as it acts: residuals too few to use, and
    ``"forecast"`` or ``"audit"`` without residuals, act as ``"loo"``."""
    if isinstance(calibration, ResidualCalibration):
        return calibration if calibration.usable() else "loo"
    check_choice("calibration", calibration, get_args(Calibration))
    return "loo" if calibration in ("forecast", "audit") else calibration


def resolve_tail(
    tail: TailLaw | None, calibration: CalibrationChoice, num_observations: int
) -> TailLaw:
    """The tail law a certificate uses: ``tail``, or for None the acting
    calibration's default: under ``"loo"`` an :class:`ExplorationTail` with
    ``n - 1`` degrees of freedom (explored) and ``min(n - 1,``
    :data:`AUTO_DOF_CAP` ``)`` (at least 1); under ``"none"`` Gaussian; under
    residuals their fitted law.

    Example:
        >>> resolve_tail(None, "loo", 50).name
        'student-10/49@0.5'
    """
    if check_tail(tail) is not None:
        return tail
    calibration = acting_calibration(calibration)
    if isinstance(calibration, ResidualCalibration):
        dof = calibration.fit().dof
        return GAUSSIAN if math.isinf(dof) else StudentTail(dof)
    if calibration == "none":
        return GAUSSIAN
    light = max(1, num_observations - 1)
    return ExplorationTail(min(light, AUTO_DOF_CAP), light)


def bind_tail(law: TailLaw, variance: Tensor, prior_var: Tensor) -> TailLaw:
    """``law`` bound to the candidates' ratios of posterior ``variance`` to
    ``prior_var`` if it is an :class:`ExplorationTail`."""
    if not isinstance(law, ExplorationTail):
        return law
    prior_var = prior_var.to(variance)
    ratio = variance / prior_var.clamp_min(torch.finfo(prior_var.dtype).tiny)
    return law.bind(ratio)
