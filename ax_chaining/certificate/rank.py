r"""The rank statement of a certificate: with probability at least
:math:`1 - \delta`, the certified candidate is among the ``rank_bound`` best,
by Markov's inequality (``"union"``) or from seeded joint posterior draws
(``"monte_carlo"``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import torch
from torch import Tensor

from ax_chaining.certificate.tails import GAUSSIAN, TailLaw, check_tail
from ax_chaining.checks import check_choice, check_delta, check_float, check_int
from ax_chaining.distances import DEFAULT_MEMORY_BUDGET, PseudoDistance

__all__ = [
    "MC_MAX_WORK",
    "MC_MIN_TAIL",
    "RankMethod",
    "RankOptions",
    "RankStatement",
    "better_probabilities",
    "monte_carlo_rank_bound",
    "rank_statement",
    "union_rank_bound",
]

RankMethod = Literal["auto", "union", "monte_carlo"]

#: ``"auto"`` takes the Monte Carlo route only where ``samples * share`` is at
#: least this ...
MC_MIN_TAIL = 10.0
#: ... and ``samples * N^2`` at most this.
MC_MAX_WORK = 2e10


@dataclass(frozen=True)
class RankOptions:
    """How a certificate's rank statement is computed: the ``tolerance``
    :math:`\\tau` of ``expected_better`` (the bound's units), the route
    (``"auto"``, ``"union"`` or ``"monte_carlo"``), and the Monte Carlo
    route's ``samples`` and ``seed``."""

    tolerance: float = 0.0
    method: RankMethod = "auto"
    samples: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        check_float("tolerance", self.tolerance, (lambda v: v >= 0, ">= 0"))
        check_choice("method", self.method, get_args(RankMethod))
        check_int("samples", self.samples, 1)
        check_int("seed", self.seed, 0)


@dataclass(frozen=True)
class RankStatement:
    """With probability at least ``1 - share``, the certified candidate is
    among the ``rank_bound`` best (1 is the best); ``expected_better``
    candidates are expected to beat it by more than ``tolerance``. ``method``
    is ``"union"`` or ``"monte_carlo"`` (with its ``samples``; 0 for union)."""

    rank_bound: int
    expected_better: float
    tolerance: float
    method: str
    share: float
    samples: int = 0


def better_probabilities(
    gap: Tensor, dist: Tensor, tail: TailLaw = GAUSSIAN, tolerance: float = 0.0
) -> Tensor:
    r""":math:`p_j = P[f(j) - f(x) > \tau]` from the mean differences ``gap``
    and their (scaled) standard deviations ``dist`` under ``tail``'s
    :meth:`~ax_chaining.certificate.tails.TailLaw.probability`;
    :math:`1[m_j > \tau]` where the deviation is 0."""
    gap, dist = gap.to(torch.float64), dist.to(torch.float64)
    pos = dist > 0
    z = (tolerance - gap) / torch.where(pos, dist, torch.ones_like(dist))
    p = check_tail(tail, default=False).probability(z.unsqueeze(0))
    p = p.reshape(-1).to(torch.float64)
    return torch.where(pos, p, (gap > tolerance).to(torch.float64))


def union_rank_bound(p: Tensor, share: float) -> int:
    r"""``rank_bound`` of the union route from the :math:`p_j` of the other
    candidates: :math:`\min_m [m + \max(1, \lceil T_m / \delta_t \rceil)]`,
    :math:`T_m` the sum of all but the :math:`m` largest :math:`p_j`."""
    share = check_delta(share, "share")
    ps = torch.sort(p.to(torch.float64).reshape(-1).clamp(0, 1), descending=True)[0]
    # tails[m] = sum of ps[m:], m = 0 .. len(ps).
    tails = torch.cat([ps.flip(0).cumsum(0).flip(0), ps.new_zeros(1)])
    m = torch.arange(tails.numel(), dtype=torch.float64, device=tails.device)
    k = torch.ceil(tails / share).clamp_min(1.0)
    return int((m + k).min())


def monte_carlo_rank_bound(
    mean: Tensor,
    distance: PseudoDistance,
    index: int,
    share: float,
    tail: TailLaw,
    *,
    scale: float = 1.0,
    samples: int = 4096,
    seed: int = 0,
) -> int:
    r"""``rank_bound`` of the Monte Carlo route: one plus the
    :math:`\lceil (M + 1)(1 - \delta_t) \rceil`-th smallest count of better
    candidates in ``M`` joint posterior draws of covariance
    :math:`(\sigma_a^2 + \sigma_b^2 - d_t^2(a, b)) / 2` (Student-t over a
    common :math:`\sqrt{\chi^2_\nu / \nu}` for a tail of ``dof`` :math:`\nu`).
    A ``ValueError`` if ``samples + 1 < 1 / share`` or the tail has no ``dof``.
    """
    n = distance.n
    k = math.ceil((samples + 1) * (1.0 - share))
    if k > samples:
        raise ValueError(
            f"The Monte Carlo rank needs `samples` >= 1 / share - 1 = "
            f"{math.ceil(1 / share - 1)} for the share {share:.3g}, got {samples}."
        )
    if tail.dof is None:
        raise ValueError(
            f"The Monte Carlo rank needs a Gaussian or Student-t tail, got "
            f"{getattr(tail, 'name', tail)!r}; use method='union'."
        )
    dof = float(tail.dof)
    var = distance.variance.to(torch.float64)
    rows = torch.arange(n, device=distance.device)
    d2 = torch.cat([distance.rows(r).to(torch.float64) for r in rows.split(256)])
    cov = 0.5 * (var.unsqueeze(0) + var.unsqueeze(1) - d2)
    del d2
    cov = 0.5 * (cov + cov.T)
    # Jittered Cholesky, else eigenvalues clamped at 0.
    jitter = 1e-10 * float(cov.diagonal().max().clamp_min(1e-300))
    eye = torch.eye(cov.shape[0], dtype=cov.dtype, device=cov.device)
    root, info = torch.linalg.cholesky_ex(cov + jitter * eye)
    if int(info) != 0:
        evals, evecs = torch.linalg.eigh(cov)
        root = evecs * evals.clamp_min(0.0).sqrt().unsqueeze(0)
    del cov, eye
    rng = np.random.default_rng(int(seed))
    mean = mean.to(torch.float64)
    counts = torch.empty(samples, dtype=torch.float64)
    block = max(1, min(samples, (2**24) // max(1, n)))
    for a in range(0, samples, block):
        m = min(block, samples - a)
        eps = torch.as_tensor(rng.standard_normal((m, n))).to(root)
        draw = eps @ root.T
        if math.isfinite(dof):
            chi2 = torch.as_tensor(rng.chisquare(dof, m)).to(draw)
            draw = draw * (dof / chi2).sqrt().unsqueeze(-1)
        f = mean.unsqueeze(0) + scale * draw
        counts[a : a + m] = (f > f[:, index : index + 1]).sum(dim=-1).cpu().double()
    return int(torch.sort(counts)[0][k - 1]) + 1


def rank_statement(
    mean: Tensor,
    distance: PseudoDistance,
    index: int,
    share: float,
    tail: TailLaw = GAUSSIAN,
    *,
    scale: float = 1.0,
    options: RankOptions | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> RankStatement:
    """The rank statement of the certified candidate ``index``. ``"auto"``
    takes the Monte Carlo route where the covariance fits ``memory_budget``
    and ``samples`` suit the share (:data:`MC_MIN_TAIL`, :data:`MC_MAX_WORK`),
    else the union route: sizes decide, never values.

    Example:
        >>> rank_statement(mean, DenseDistance(cov), 0, share=0.05).rank_bound

    Args:
        share: The check's failure probability (the certificate's ``share``).
        tail: The bound's tail law, bound to the candidates.
        scale: The calibration's factor on the standard deviations.
    """
    options = options or RankOptions()
    share = check_delta(share, "share")
    scale = check_float("scale", scale, (lambda v: v > 0, "> 0"))
    n = distance.n
    index = int(index)
    row = distance.rows(torch.tensor([index], device=distance.device))[0]
    dist = scale * row.to(torch.float64).clamp_min(0.0).sqrt()
    mean = mean.to(torch.float64)
    gap = mean - mean[index]
    others = torch.ones(n, dtype=torch.bool, device=gap.device)
    others[index] = False
    p_tol = better_probabilities(gap, dist, tail, options.tolerance)[others]
    expected = float(p_tol.sum())
    # The covariance, its square root and a block of draws: about 3 N^2 floats.
    fits = 3 * 8 * n * n <= memory_budget
    method = options.method
    if method == "auto":
        enough = options.samples * share >= MC_MIN_TAIL
        cheap = options.samples * n * n <= MC_MAX_WORK
        method = "monte_carlo" if fits and enough and cheap else "union"
    samples = options.samples if method == "monte_carlo" else 0
    if not samples:
        p_zero = better_probabilities(gap, dist, tail, 0.0)[others]
        bound = union_rank_bound(p_zero, share)
    elif not fits:
        raise ValueError(
            f"The Monte Carlo rank needs the {n} x {n} covariance within the "
            f"memory budget ({memory_budget} bytes); use method='union'."
        )
    else:
        kw = {"scale": scale, "samples": samples, "seed": options.seed}
        bound = monte_carlo_rank_bound(mean, distance, index, share, tail, **kw)
    tolerance = float(options.tolerance)
    return RankStatement(min(n, bound), expected, tolerance, method, share, samples)
