r"""Every tail law of the certificate, in one module.

A certificate bounds, for pairs :math:`(x, x^\star)` fixed by the data, the
standardized difference :math:`z = (g(x^\star) - g(x)) / d_t(x, x^\star)`. Its
law (*tail*) gives two numbers: the survival function (``sf``, summed over the
candidates by the union bound, :func:`tail_sum`) and its inverse (the
threshold of one pair, :func:`upper_quantile`, used by the pairwise and
chaining bounds). The laws: ``"gaussian"`` (exact under the model),
``"chernoff"`` (the paper's :math:`\sqrt{2 \log(1/p)}`), :class:`StudentTail`
and :class:`ExplorationTail` (Student-t tails, heavier for the candidates the
data have not reached); :func:`resolve_tail` picks the default (``"auto"``),
:func:`bind_tail` binds a law to the candidates. Changing how the certificate
treats tails changes this module alone.

Guarantee: every law here is exact or errs on the safe side (Chernoff's
thresholds exceed the Gaussian's; ``StudentTail`` evaluates ``sf`` on a grid
rounded to the larger tail), so a bound built from one is valid whenever the
law it stands for holds. Which law holds is an assumption (Gaussian under the
model; the Student-t defaults are heuristics for fitted hyperparameters); see
the documentation page "The regret certificate" (``docs/certificate.md``).
"""

from __future__ import annotations

import functools
import math
from typing import Literal, Protocol, get_args

import numpy as np
import torch
from torch import Tensor

from ax_chaining.certificate.residuals import ResidualCalibration
from ax_chaining.checks import check_bool, check_choice, check_float
from ax_chaining.distances import column_blocks

__all__ = [
    "AUTO_DOF_CAP",
    "EXPLORED_RATIO",
    "Calibration",
    "CalibrationChoice",
    "ExplorationTail",
    "StudentTail",
    "Tail",
    "TailChoice",
    "TailLaw",
    "acting_calibration",
    "bind_tail",
    "resolve_tail",
    "tail_sum",
    "upper_quantile",
]

#: The named tail laws of the bounds.
Tail = Literal["gaussian", "chernoff"]
#: ``tail`` of the certificates: a named law, ``"auto"``, or a :class:`TailLaw`.
TailChoice = Literal["auto", "gaussian", "chernoff", "student"]
#: The model check a certificate runs first
#: (:func:`~ax_chaining.certificate.calibration.calibrate`); it decides the
#: default tails (:func:`resolve_tail`). ``"forecast"`` and ``"audit"``
#: calibrate on the loop's residuals
#: (:class:`~ax_chaining.certificate.residuals.ResidualCalibration`), which a
#: plain model does not keep: alone, they act as ``"loo"``.
Calibration = Literal["loo", "none", "forecast", "audit"]
#: ``calibration`` of the certificates: a named one or residuals to calibrate on.
CalibrationChoice = Calibration | ResidualCalibration


class TailLaw(Protocol):
    """The standardized law of one pair's difference, for tails other than the
    named ones (e.g. :class:`StudentTail`): its survival function and its
    inverse."""

    name: str

    def sf(self, z: Tensor) -> Tensor: ...

    def isf(self, p: Tensor) -> Tensor: ...


def upper_quantile(p: Tensor | float, tail: Tail | TailLaw = "gaussian") -> Tensor:
    r"""Threshold ``z`` with tail probability ``p`` for one standard Gaussian pair.

    ``"gaussian"``: :math:`z = \bar\Phi^{-1}(p)`, exact; ``"chernoff"``:
    :math:`z = \sqrt{2 \log(1 / p)}`, from :math:`\bar\Phi(z) \le e^{-z^2/2}`.

    Args:
        p: Tail probabilities in (0, 1), any shape.
        tail: ``"gaussian"``, ``"chernoff"`` or a :class:`TailLaw` (e.g.
            :class:`StudentTail`).

    Returns:
        Thresholds, float64.
    """
    p = torch.as_tensor(p, dtype=torch.float64)
    if not bool(((p > 0) & (p < 1)).all()):
        raise ValueError(f"tail probabilities must be in (0, 1), got {p}.")
    if not isinstance(tail, str):
        return tail.isf(p)
    check_choice("tail", tail, get_args(Tail))
    if tail == "gaussian":
        # -ndtri(p) is accurate for tiny p, where 1 - p would round to 1.
        return -torch.special.ndtri(p)
    return torch.sqrt(-2.0 * torch.log(p))


def tail_sum(b: Tensor, gap: Tensor, dist: Tensor, tail: Tail | TailLaw) -> Tensor:
    r"""The union bound's tail sum :math:`\sum_{x^\star:\, d > 0} P[f(x^\star) -
    f(x) > b]` (or its Chernoff bound), per row.

    Summed over the fixed blocks of candidates of
    :func:`~ax_chaining.distances.column_blocks`, then over the blocks in
    order: a row's sum is then the same whatever rows it is computed with
    (torch splits one long row's sum over threads, many rows' sums by rows).

    Example:
        >>> gap = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
        >>> dist = torch.tensor([[0.0, 0.5]], dtype=torch.float64)
        >>> tail_sum(torch.tensor([1.0], dtype=torch.float64), gap, dist, "gaussian")
        tensor([0.5000], dtype=torch.float64)

    Args:
        b: The levels, one per row (``...``).
        gap: ``... x N`` differences of the means :math:`\mu(x^\star) - \mu(x)`.
        dist: ``... x N`` pseudo-distances :math:`d(x, x^\star)` (pairs with
            :math:`d = 0` add nothing).
        tail: ``"gaussian"``, ``"chernoff"`` or a :class:`TailLaw` (bound to
            the ``N`` candidates where it depends on them, :func:`bind_tail`).

    Returns:
        The sums, one per row.
    """
    pos = dist > 0
    z = (b.unsqueeze(-1) - gap) / torch.where(pos, dist, torch.ones_like(dist))
    if not isinstance(tail, str):
        term = tail.sf(z)
    elif tail == "gaussian":
        term = torch.special.ndtr(-z)
    else:
        term = torch.where(z > 0, torch.exp(-0.5 * z.square()), torch.ones_like(z))
    term = torch.where(pos, term, torch.zeros_like(term))
    total = torch.zeros(term.shape[:-1], dtype=term.dtype, device=term.device)
    for a, c in column_blocks(0, term.shape[-1]):
        total += term[..., a:c].sum(dim=-1)
    return total


class StudentTail:
    r"""Student-t tails with ``dof`` degrees of freedom for the certificate.

    :math:`P[T > z]` and its inverse. ``isf`` is SciPy's ``stdtrit`` (exact,
    float64). ``sf`` is evaluated on a fine grid, rounding ``z`` down to the
    grid (``exact=False``, default): the grid is uniform in
    :math:`\operatorname{asinh} z` with step ``h = 1e-3`` over
    :math:`|z| \le 10^8`, so a term :math:`P[T > z]` is replaced by
    :math:`P[T > z']` with :math:`z - 1.001\, h \sqrt{1 + z^2} \le z' \le z`: never
    smaller, so every bound stays valid, and a union bound at most about
    :math:`h \sqrt{1 + z^2}\, d` larger (0.1% of its ``z`` part at
    :math:`z \approx 7`). One ``stdtr`` call per grid point and ``dof`` (cached)
    instead of one per candidate pair and step of the root search: a
    certificate over 4,200 candidates costs a gather instead of about 10 s.
    ``exact=True`` calls ``stdtr`` for every term.

    Example:
        >>> round(float(StudentTail(5).isf(torch.tensor(0.025))), 4)
        2.5706
    """

    #: Grid step in asinh(z), and the grid's reach.
    GRID_STEP: float = 1e-3
    GRID_MAX: float = math.asinh(1e8)

    def __init__(self, dof: float, exact: bool = False) -> None:
        self.dof = check_float("dof", dof, (lambda v: v > 0, "> 0"))
        self.exact = check_bool("exact", exact)
        self.name = f"student-{self.dof:g}"

    def sf(self, z: Tensor) -> Tensor:
        if self.exact:
            from scipy.special import stdtr

            values = stdtr(self.dof, -z.detach().cpu().double().numpy())
            return torch.as_tensor(values, dtype=z.dtype, device=z.device)
        table = _student_sf_table(self.dof).to(device=z.device)
        u = torch.asinh(z.to(torch.float64))
        k = torch.floor((u + self.GRID_MAX) / self.GRID_STEP)
        k = k.clamp(0, table.numel() - 1).long()
        return table[k].to(z.dtype)

    def isf(self, p: Tensor) -> Tensor:
        from scipy.special import stdtrit

        values = -stdtrit(self.dof, p.detach().cpu().double().numpy())
        return torch.as_tensor(values, dtype=torch.float64, device=p.device)


@functools.lru_cache(maxsize=8)
def _student_sf_table(dof: float) -> Tensor:
    """:math:`P[T > z_k]` at ``z_k = sinh(-GRID_MAX + k h)`` (see StudentTail)."""
    from scipy.special import stdtr

    h, top = StudentTail.GRID_STEP, StudentTail.GRID_MAX
    u = np.arange(int(math.ceil(2 * top / h)) + 1) * h - top
    return torch.as_tensor(stdtr(dof, -np.sinh(u)), dtype=torch.float64)


#: The most degrees of freedom of ``tail="auto"``'s tails for unexplored
#: candidates (:func:`resolve_tail`): with 12 or more, the certificate was
#: violated on FreeSolv; with 8 or fewer everywhere, it stayed above 10% of
#: the range after 60 queries on GP samples.
AUTO_DOF_CAP = 10
#: A candidate whose posterior variance is at most this fraction of its prior
#: variance counts as explored for ``tail="auto"`` (:func:`resolve_tail`).
EXPLORED_RATIO = 0.5


class ExplorationTail:
    r"""Student-t tails that depend on how far the data have reached.

    For a candidate :math:`x'` with posterior variance :math:`s_t^2(x')` and
    prior variance :math:`k(x', x')`, the pair :math:`(x, x')` of the union
    bound gets Student-t tails with ``light_dof`` degrees of freedom if
    :math:`s_t^2(x') \le` ``ratio`` :math:`k(x', x')` (explored), else with
    ``heavy_dof`` (unexplored). ``isf`` is the heavy law's (the larger
    quantile), so bounds built from quantiles (pairwise, chaining) stay valid
    for either. Bind it to the candidates' variance ratios with :meth:`bind`
    before summing tails over them.

    Example:
        >>> law = ExplorationTail(heavy_dof=10, light_dof=49)
        >>> bound = law.bind(torch.tensor([0.1, 0.9]))  # explored, unexplored
        >>> z = torch.tensor([[6.0, 6.0]])
        >>> bool(bound.sf(z)[0, 1] > bound.sf(z)[0, 0])
        True

    Args:
        heavy_dof: Degrees of freedom for unexplored candidates.
        light_dof: Degrees of freedom for explored candidates (>= heavy_dof).
        ratio: The variance ratio up to which a candidate is explored.
    """

    def __init__(
        self, heavy_dof: float, light_dof: float, ratio: float = EXPLORED_RATIO
    ) -> None:
        self.heavy = StudentTail(heavy_dof)
        self.light = StudentTail(light_dof)
        if self.light.dof < self.heavy.dof:
            raise ValueError(
                f"`light_dof` must be at least `heavy_dof`={heavy_dof:g} (lighter "
                f"tails for explored candidates), got {light_dof:g}."
            )
        self.ratio = check_float("ratio", ratio, (lambda v: 0 < v < 1, "in (0, 1)"))
        self.name = f"student-{self.heavy.dof:g}/{self.light.dof:g}@{self.ratio:g}"

    def bind(self, variance_ratio: Tensor) -> _BoundExplorationTail:
        """The law over candidates with these posterior-to-prior variance ratios."""
        return _BoundExplorationTail(self, variance_ratio > self.ratio)

    def sf(self, z: Tensor) -> Tensor:
        """The heavy law's (candidates unknown: the conservative side)."""
        return self.heavy.sf(z)

    def isf(self, p: Tensor) -> Tensor:
        return self.heavy.isf(p)


class _BoundExplorationTail:
    """An :class:`ExplorationTail` over ``N`` candidates: ``sf`` of ``... x N``
    standardized differences takes each column's law."""

    def __init__(self, law: ExplorationTail, unexplored: Tensor) -> None:
        self.law, self.unexplored, self.name = law, unexplored, law.name

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
    """``calibration`` as it acts: residuals too few to use
    (:meth:`~ax_chaining.certificate.residuals.ResidualCalibration.usable`),
    and ``"forecast"`` or ``"audit"`` without residuals, act as ``"loo"``."""
    if isinstance(calibration, ResidualCalibration):
        return calibration if calibration.usable() else "loo"
    check_choice("calibration", calibration, get_args(Calibration))
    return "loo" if calibration in ("forecast", "audit") else calibration


def resolve_tail(
    tail: TailChoice | TailLaw,
    calibration: CalibrationChoice,
    num_observations: int,
) -> Tail | TailLaw:
    """The tail law a certificate uses.

    ``"auto"`` (the default): when ``calibration="loo"`` (fitted
    hyperparameters), an :class:`ExplorationTail` with ``n - 1`` degrees of
    freedom for explored candidates and ``min(n - 1,`` :data:`AUTO_DOF_CAP`
    ``)`` for the others (at least 1); Gaussian when
    ``calibration="none"`` (the model taken as true, where Gaussian tails are
    exact). ``"student"``: Student-t tails with ``n - 1`` degrees of freedom
    everywhere (the previous default), whatever the calibration. Under a
    usable :class:`~ax_chaining.certificate.residuals.ResidualCalibration`,
    ``"auto"`` takes its fitted tails (Student-t with its degrees of freedom,
    Gaussian for infinitely many).

    Example:
        >>> resolve_tail("auto", "loo", 50).name
        'student-10/49@0.5'
        >>> resolve_tail("student", "loo", 50).dof
        49.0
    """
    if not isinstance(tail, str):
        return tail
    check_choice("tail", tail, get_args(TailChoice))
    calibration = acting_calibration(calibration)
    if tail == "auto" and isinstance(calibration, ResidualCalibration):
        dof = calibration.fit().dof
        return "gaussian" if math.isinf(dof) else StudentTail(dof)
    if tail == "auto":
        if calibration == "none":
            return "gaussian"
        light = max(1, num_observations - 1)
        return ExplorationTail(min(light, AUTO_DOF_CAP), light)
    if tail == "student":
        return StudentTail(max(1, num_observations - 1))
    return tail  # type: ignore[return-value]


def bind_tail(
    law: Tail | TailLaw, variance: Tensor, prior_var: Tensor
) -> Tail | TailLaw:
    """``law``, bound to the candidates' posterior-to-prior variance ratios if
    it is an :class:`ExplorationTail` (``variance``: their posterior variances,
    ``prior_var``: their prior variances in the same units,
    :func:`~ax_chaining.posterior.known_prior_variance`)."""
    if not isinstance(law, ExplorationTail):
        return law
    prior_var = prior_var.to(variance)
    ratio = variance / prior_var.clamp_min(torch.finfo(prior_var.dtype).tiny)
    return law.bind(ratio)
