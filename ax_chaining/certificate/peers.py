r"""The literature's stopping rules over a finite candidate set, from the
posterior there (maximizing): Makarova et al.'s UCB-LCB regret bound and
Wilson's probabilistic regret bound."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ax_chaining.certificate.bounds import ucb_lcb_bound
from ax_chaining.certificate.schedule import DEFAULT_DELTA
from ax_chaining.checks import check_delta, check_float, check_int

__all__ = ["PeerStatement", "probabilistic_regret_bound", "ucb_lcb_rule"]


@dataclass(frozen=True)
class PeerStatement:
    """What a rule says at one step: ``stop`` or not, its ``value`` (a regret
    bound, or the probability that the regret exceeds ``eps``), the evaluated
    candidate it recommends (``index``) and, for PRB, the Monte Carlo
    ``interval`` of its estimate and its ``samples``."""

    rule: str
    stop: bool
    value: float
    index: int
    interval: tuple[float, float] | None = None
    samples: int = 0


def _checked(mean: Tensor, evaluated: Sequence[int]) -> list[int]:
    if mean.ndim != 1 or mean.numel() == 0:
        raise ValueError(f"`mean` must be a non-empty vector; got {tuple(mean.shape)}.")
    rows = [int(i) for i in evaluated]
    if not rows or min(rows) < 0 or max(rows) >= mean.numel():
        last = mean.numel() - 1
        raise ValueError(
            f"`evaluated` must be rows of the set (0 .. {last}); got {rows}."
        )
    return rows


def ucb_lcb_rule(
    mean: Tensor,
    std: Tensor,
    evaluated: Sequence[int],
    t: int,
    threshold: float,
    delta: float = DEFAULT_DELTA,
    scale: float = 0.2,
) -> PeerStatement:
    r"""Makarova et al. (2022, *Automatic termination for hyperparameter
    optimization*): the UCB-LCB bound of
    :func:`~ax_chaining.certificate.ucb_lcb_bound` at the evaluated candidates
    :math:`E`,

    .. math::
        \hat r_t = \max_{x \in X} \big(m(x) + \sqrt{\beta_t} s(x)\big)
        - \max_{x \in E} \big(m(x) - \sqrt{\beta_t} s(x)\big),

    with :math:`\beta_t` ``scale`` times GP-UCB's
    (:func:`~ax_chaining.acquisition.gp_ucb_beta`); stop when :math:`\hat r_t
    \le` ``threshold``, recommending the evaluated candidate of largest lower
    bound.

    Example:
        >>> m, s = torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0])
        >>> round(ucb_lcb_rule(m, s, [1], t=1, threshold=0.5).value, 4)
        0.2941
    """
    from ax_chaining.acquisition import gp_ucb_beta

    rows = _checked(mean, evaluated)
    beta = scale * gp_ucb_beta(mean.numel(), t, delta)
    bounds = ucb_lcb_bound(mean, std, torch.tensor(rows), beta)
    best = int(bounds.argmin())
    value = float(bounds[best])
    return PeerStatement("ucb-lcb", value <= threshold, value, rows[best])


def probabilistic_regret_bound(
    mean: Tensor,
    covariance: Tensor,
    evaluated: Sequence[int],
    eps: float,
    prob: float = 0.025,
    risk: float = 0.025,
    test_points: int = 5,
    max_samples: int = 1000,
    generator: torch.Generator | None = None,
) -> PeerStatement:
    r"""Wilson (2024, *Stopping Bayesian optimization with probabilistic regret
    bounds*; defaults of his experiments): stop when for an evaluated
    candidate :math:`x`, :math:`P(\max_{X} f - f(x) > \epsilon) \le` ``prob``
    under the posterior, the maximum taken over the whole set from joint draws.

    The ``test_points`` evaluated candidates most often best in the first
    draws are tested, in batches of :math:`16 \cdot 1.5^{k-1}` draws (at most
    ``max_samples`` in all), until one candidate's Clopper-Pearson interval at
    risk :math:`(0.1/1.1)\,\text{risk}\, k^{-1.1} / |\text{tests}|` lies below
    ``prob``, or every one lies above it. The value is the best estimate.

    Args:
        mean, covariance: The joint posterior over the set (``N``, ``N x N``).
        evaluated: Rows of the evaluated candidates.
        eps: The regret tolerance, in the units of ``mean``.
        prob: The largest failure probability to stop at.
        risk: The Monte Carlo test's error rate over this step's batches.
        test_points, max_samples: As above.
        generator: Seeds the draws.
    """
    from scipy.stats import beta

    rows = _checked(mean, evaluated)
    n = mean.numel()
    if covariance.shape != (n, n):
        raise ValueError(
            f"`covariance` must be {n} x {n}; got {tuple(covariance.shape)}."
        )
    check_float("eps", eps, (lambda v: v >= 0, ">= 0"))
    check_delta(prob, "prob")
    check_delta(risk, "risk")
    check_int("test_points", test_points, 1)
    check_int("max_samples", max_samples, 16)
    jitter = 1e-9 * float(covariance.diagonal().abs().max().clamp_min(1.0))
    eye = torch.eye(n, dtype=covariance.dtype, device=covariance.device)
    # A posterior covariance is PSD up to round-off; the jitter makes it PD.
    root = torch.linalg.cholesky(covariance + jitter * eye)

    def draw(k: int) -> Tensor:
        z = torch.randn(n, k, dtype=mean.dtype, generator=generator, device="cpu")
        return mean[:, None] + root @ z.to(mean.device)  # N x k

    first = draw(16)
    wins = torch.bincount(first[rows].argmax(0), minlength=len(rows)).tolist()
    # Most often best among the evaluated in the first draws; ties by mean.
    order = sorted(range(len(rows)), key=lambda j: (-wins[j], -float(mean[rows[j]])))
    tested = [rows[j] for j in order[:test_points]]
    failures = torch.zeros(len(tested), dtype=torch.int64)
    size, k, batch = 0, 0, first
    while True:
        k += 1
        failures += (batch[tested] < batch.max(0).values - eps).sum(1).cpu()
        size += batch.shape[1]
        level_risk = (0.1 / 1.1) * risk * k**-1.1 / len(tested)
        # The two-sided 1 - level_risk Clopper-Pearson interval of each rate.
        f = failures.double().cpu().numpy()
        lower = beta.ppf(level_risk / 2, f, size - f + 1)
        upper = beta.ppf(1 - level_risk / 2, f + 1, size - f)
        lower[f == 0], upper[f == size] = 0.0, 1.0
        nxt = min(int(16 * 1.5**k), max_samples) - size
        if (upper <= prob).any() or (lower >= prob).all() or nxt <= 0:
            break
        batch = draw(nxt)
    estimate = failures.double() / size
    best = int(estimate.argmin())
    return PeerStatement(
        "prb",
        bool(estimate[best] <= prob),
        float(estimate[best]),
        tested[best],
        (float(lower[best]), float(upper[best])),
        size,
    )
