r"""The literature's stopping rules over a finite candidate set, from the
posterior there (maximizing): Makarova et al.'s UCB-LCB regret bound,
Wilson's probabilistic regret bound and Ishibashi et al.'s regret gap."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ax_chaining.certificate.bounds import ucb_lcb_bound
from ax_chaining.certificate.schedule import DEFAULT_DELTA
from ax_chaining.checks import check_delta, check_float, check_int

__all__ = [
    "PeerStatement",
    "posterior_scale_tril",
    "probabilistic_regret_bound",
    "regret_gap_rule",
    "ucb_lcb_rule",
]


@dataclass(frozen=True)
class PeerStatement:
    """What a rule says at one step: ``stop`` or not, its ``value`` (a regret
    bound, or the probability that the regret exceeds ``eps``), the evaluated
    candidate it recommends (``index``), for PRB the Monte Carlo ``interval``
    of its estimate and its ``samples``, and the ``threshold`` a rule with a
    data-dependent one compares ``value`` with."""

    rule: str
    stop: bool
    value: float
    index: int
    interval: tuple[float, float] | None = None
    samples: int = 0
    threshold: float | None = None


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


def posterior_scale_tril(covariance: Tensor) -> Tensor:
    r"""The Cholesky factor :func:`probabilistic_regret_bound` draws with: of
    ``covariance`` plus :math:`10^{-9} \max(1, \max_i \Sigma_{ii})` on the
    diagonal, since a posterior covariance is PSD only up to round-off.

    Example:
        >>> posterior_scale_tril(torch.eye(2)).diagonal()
        tensor([1., 1.])
    """
    if covariance.ndim != 2 or covariance.shape[0] != covariance.shape[1]:
        shape = tuple(covariance.shape)
        raise ValueError(f"`covariance` must be a square matrix; got {shape}.")
    jitter = 1e-9 * float(covariance.diagonal().abs().max().clamp_min(1.0))
    eye = torch.eye(len(covariance), dtype=covariance.dtype, device=covariance.device)
    return torch.linalg.cholesky(covariance + jitter * eye)


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
    dof: float = math.inf,
    scale_tril: Tensor | None = None,
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

    Wilson draws from the Gaussian posterior (``dof=inf``, the default). A
    finite ``dof`` (an option of this package, not his) draws from the
    multivariate Student-t with the same mean and scale matrix: each draw's
    deviation :math:`L z` times :math:`\sqrt{\nu / \chi^2_\nu}`, for heavier
    tails than the model's.

    Args:
        mean, covariance: The joint posterior over the set (``N``, ``N x N``).
        evaluated: Rows of the evaluated candidates.
        eps: The regret tolerance, in the units of ``mean``.
        prob: The largest failure probability to stop at.
        risk: The Monte Carlo test's error rate over this step's batches.
        test_points, max_samples: As above.
        generator: Seeds the draws.
        dof: Degrees of freedom of the draws' law (``inf``: Gaussian).
        scale_tril: :func:`posterior_scale_tril` of ``covariance``, when the
            caller has it: the statements at several ``eps`` of one posterior
            then share one decomposition (an ``N x N`` Cholesky, the rule's
            main cost on a large table).

    Example:
        >>> mean, cov = torch.tensor([0.0, 1.0]), torch.eye(2) * 0.01
        >>> probabilistic_regret_bound(mean, cov, [1], eps=0.1).stop
        True
    """
    import numpy as np
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
    if dof != math.inf:
        check_float("dof", dof, (lambda v: v > 0, "> 0 or inf"))
    if scale_tril is None:
        root = posterior_scale_tril(covariance)
    elif scale_tril.shape != (n, n):
        raise ValueError(
            f"`scale_tril` must be {n} x {n}; got {tuple(scale_tril.shape)}."
        )
    else:
        root = scale_tril

    def draw(k: int) -> Tensor:
        z = torch.randn(n, k, dtype=mean.dtype, generator=generator, device="cpu")
        if math.isfinite(dof):  # one chi-square per draw: a joint Student-t
            seed = int(torch.randint(2**62, (1,), generator=generator))
            chi2 = np.random.default_rng(seed).chisquare(dof, k)
            z *= torch.as_tensor(np.sqrt(dof / chi2), dtype=z.dtype)
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
    ci = (float(lower[best]), float(upper[best]))
    stop = bool(estimate[best] <= prob)
    return PeerStatement("prb", stop, float(estimate[best]), tested[best], ci, size)


def regret_gap_rule(
    mean: Tensor,
    covariance: Tensor,
    previous_mean: Tensor,
    previous_std: Tensor,
    previous_evaluated: Sequence[int],
    evaluated: Sequence[int],
    new: int,
    y_new: float,
    noise: float,
    t: int,
    delta: float = 0.1,
) -> PeerStatement:
    r"""Ishibashi et al. (2023, *A stopping criterion for Bayesian optimization
    by the gap of expected minimum simple regrets*), maximizing: stop when the
    bound on the change of the expected simple regret that the last
    observation :math:`(x_t, y_t)` made is below its noise level.

    With :math:`\hat x_{t-1}, \hat x_t` the evaluated candidates of largest
    posterior mean before and after the observation (``previous_*`` and the
    current posterior), :math:`\sqrt{\beta} = \sqrt{2 \log(N t^2 \pi^2 /
    6\delta)}` (GP-UCB's for :math:`N` candidates) and :math:`s^2, r` the
    previous variance and residual at :math:`x_t`, the value is

    .. math::
        |m_{t-1}(\hat x_{t-1}) - m_t(\hat x_t)|
        + \mathbb{E}_t[(f(\hat x_{t-1}) - f(\hat x_t))_+]
        + \kappa_{t-1} \sqrt{\mathrm{KL}/2},

    :math:`\kappa_{t-1}` the previous UCB-LCB bound (largest UCB over the set
    less largest LCB over the previously evaluated) and :math:`\mathrm{KL} =
    \tfrac12(\sigma^2/(s^2+\sigma^2) + s^2 r^2/(s^2+\sigma^2)^2 - 1 +
    \log(1 + s^2/\sigma^2))` between the posteriors after and before; the
    threshold is :math:`c\,\sigma s\,(s_{t-1}(\hat x_t) + \kappa_{t-1}/2) /
    (s^2 + \sigma^2)`, :math:`c = \sqrt{-2 \log \delta}` (the authors'
    automatic threshold; ``delta`` their default). It recommends
    :math:`\hat x_t`. It states no regret bound: the value bounds a change.

    Args:
        mean, covariance: The current joint posterior over the set (``N``,
            ``N x N``; only the two recommended candidates' entries are read).
        previous_mean, previous_std: The posterior before the observation.
        previous_evaluated, evaluated: Rows evaluated before and after it.
        new: The row observed last; ``y_new`` its observation.
        noise: The observation noise variance :math:`\sigma^2`, in the units
            of ``mean`` squared.
        t: The number of observations.
        delta: The threshold's and :math:`\beta`'s confidence.

    Example:
        >>> m, cov = torch.tensor([0.0, 1.0]), torch.eye(2) * 0.01
        >>> s = regret_gap_rule(m, cov, m, torch.ones(2), [0], [0, 1], 1, 1.0, 0.1, 2)
        >>> s.index, s.stop
        (1, False)
    """
    rows = _checked(mean, evaluated)
    before = _checked(previous_mean, previous_evaluated)
    n = mean.numel()
    shapes = (covariance.shape, previous_mean.shape, previous_std.shape)
    if shapes != ((n, n), (n,), (n,)):
        raise ValueError(
            f"`covariance` must be {n} x {n}, `previous_mean` and `previous_std` "
            f"of length {n}; got {[tuple(x) for x in shapes]}."
        )
    _checked(mean, [new])
    check_float("noise", noise, (lambda v: v > 0, "> 0"))
    check_int("t", t, 1)
    check_delta(delta)
    m0, s0 = previous_mean.double().cpu(), previous_std.double().cpu()
    m1, cov = mean.double().cpu(), covariance.double().cpu()
    old = before[int(m0[before].argmax())]
    best = rows[int(m1[rows].argmax())]
    change = abs(float(m0[old] - m1[best]))
    gain = 0.0  # E[(f(old) - f(best))_+] under the current posterior
    if old != best:
        g = float(m1[old] - m1[best])
        var = float(cov[old, old] + cov[best, best] - 2 * cov[old, best])
        if var > 0:
            u = torch.tensor(g / math.sqrt(var), dtype=torch.float64)
            normal = torch.distributions.Normal(0.0, 1.0)
            pdf, cdf = float(normal.log_prob(u).exp()), float(normal.cdf(u))
            gain = math.sqrt(var) * pdf + g * cdf
        else:
            gain = max(g, 0.0)
    root_beta = math.sqrt(2 * math.log(n * t**2 * math.pi**2 / (6 * delta)))
    kappa = float((m0 + root_beta * s0).max() - (m0 - root_beta * s0)[before].max())
    s2, r = float(s0[new]) ** 2, y_new - float(m0[new])
    total = s2 + noise
    kl = 0.5 * (noise / total + s2 * r**2 / total**2 - 1 + math.log(total / noise))
    value = change + gain + kappa * math.sqrt(max(kl, 0.0) / 2)
    c = math.sqrt(-2 * math.log(delta))
    threshold = c * math.sqrt(noise * s2) * (float(s0[best]) + kappa / 2) / total
    return PeerStatement("gap", value <= threshold, value, best, threshold=threshold)
