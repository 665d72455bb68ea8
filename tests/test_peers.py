"""The literature's stopping rules over a finite set (ax_chaining.certificate.peers)
against their papers' formulas on tiny tables."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from ax_chaining.acquisition import gp_ucb_beta
from ax_chaining.certificate import (
    posterior_scale_tril,
    probabilistic_regret_bound,
    regret_gap_rule,
    ucb_lcb_rule,
)

MEAN = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
STD = torch.tensor([0.5, 0.1, 1.0], dtype=torch.float64)


def test_ucb_lcb_rule_by_hand():
    # Makarova et al.'s beta: a fifth of GP-UCB's 2 log(|X| t^2 pi^2 / (6 delta)).
    beta = 0.2 * 2 * math.log(3 * 16 * math.pi**2 / 0.6)
    assert 0.2 * gp_ucb_beta(3, 4, 0.1) == pytest.approx(beta)
    root = math.sqrt(beta)
    # UCBs 1 + 0.5r, 2 + 0.1r, 0.5 + r; the evaluated rows 0 and 1 have LCBs
    # 1 - 0.5r and 2 - 0.1r, the larger row 1's.
    ucb = max(1 + 0.5 * root, 2 + 0.1 * root, 0.5 + root)
    expected = ucb - (2 - 0.1 * root)
    out = ucb_lcb_rule(MEAN, STD, [0, 1], t=4, threshold=1.0, delta=0.1)
    assert out.value == pytest.approx(expected)
    assert out.index == 1 and out.rule == "ucb-lcb"
    assert out.stop == (expected <= 1.0)
    assert ucb_lcb_rule(MEAN, STD, [0, 1], 4, threshold=expected, delta=0.1).stop
    assert not ucb_lcb_rule(MEAN, STD, [0, 1], 4, 0.9 * expected, delta=0.1).stop


def _exact_failure(mean, cov, row, eps):
    """P(max_j f_j - f_row > eps) for a 3-dim Gaussian: one minus the
    probability that f_row - f_j >= -eps for both other j (a 2-dim CDF)."""
    others = [j for j in range(3) if j != row]
    A = np.zeros((2, 3))
    for k, j in enumerate(others):
        A[k, j], A[k, row] = 1.0, -1.0  # f_j - f_row <= eps
    return multivariate_normal(A @ mean, A @ cov @ A.T).cdf(np.array([eps, eps]))


def test_prb_monte_carlo_probability_against_the_exact_value():
    mean = MEAN.numpy()
    cov = np.array([[0.25, 0.02, 0.05], [0.02, 0.04, 0.01], [0.05, 0.01, 1.0]])
    eps = 1.2
    exact = 1.0 - _exact_failure(mean, cov, 0, eps)
    assert 0.1 < exact < 0.5  # a probability the level test cannot settle early
    out = probabilistic_regret_bound(
        MEAN,
        torch.as_tensor(cov),
        [0],
        eps,
        prob=exact,
        max_samples=20_000,
        generator=torch.Generator().manual_seed(0),
    )
    assert out.index == 0 and out.samples == 20_000
    lower, upper = out.interval
    assert lower <= exact <= upper
    assert out.value == pytest.approx(
        exact, abs=4 * math.sqrt(exact * (1 - exact) / 2e4)
    )


def test_prb_student_draws_against_the_exact_t_probability():
    # Two candidates, row 0 kept: the failure event is f1 - f0 > eps, and under
    # the joint Student-t f1 - f0 is a univariate t with the same dof, centre
    # m1 - m0 and scale sqrt(a' S a), a = (-1, 1).
    from scipy.stats import t as student

    mean = torch.tensor([0.0, -0.5], dtype=torch.float64)
    cov = torch.tensor([[0.2, 0.05], [0.05, 0.3]], dtype=torch.float64)
    eps, dof = 0.1, 3.0
    scale = math.sqrt(0.2 + 0.3 - 2 * 0.05)
    exact = float(student.sf((eps + 0.5) / scale, dof))
    gaussian = float(student.sf((eps + 0.5) / scale, 1e9))
    assert exact - gaussian > 0.02  # heavier tails fail more often
    out = probabilistic_regret_bound(
        mean,
        cov,
        [0],
        eps,
        prob=exact,
        max_samples=20_000,
        generator=torch.Generator().manual_seed(3),
        dof=dof,
    )
    assert out.samples == 20_000
    lower, upper = out.interval
    assert lower <= exact <= upper
    assert out.value == pytest.approx(
        exact, abs=4 * math.sqrt(exact * (1 - exact) / 2e4)
    )
    with pytest.raises(ValueError, match="`dof` must be > 0 or inf"):
        probabilistic_regret_bound(mean, cov, [0], eps, dof=0.0)


def test_prb_stops_on_a_clear_winner_and_refuses_bad_input():
    cov = 0.01 * torch.eye(3, dtype=torch.float64)
    mean = torch.tensor([0.0, 5.0, 0.0], dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    out = probabilistic_regret_bound(mean, cov, [0, 1], eps=0.1, generator=gen)
    assert out.stop and out.index == 1 and out.value == 0.0
    assert out.interval[1] <= 0.025 and 16 < out.samples < 1000
    # Same seed, same statement.
    again = probabilistic_regret_bound(
        mean, cov, [0, 1], 0.1, generator=torch.Generator().manual_seed(1)
    )
    assert again == out
    with pytest.raises(ValueError, match="`evaluated` must be rows"):
        probabilistic_regret_bound(mean, cov, [3], eps=0.1)
    with pytest.raises(ValueError, match="`covariance` must be 3 x 3"):
        probabilistic_regret_bound(mean, cov[:2], [0], eps=0.1)
    with pytest.raises(ValueError, match="`eps` must be >= 0"):
        probabilistic_regret_bound(mean, cov, [0], eps=-1.0)
    with pytest.raises(ValueError, match="`prob` must be in"):
        probabilistic_regret_bound(mean, cov, [0], eps=0.1, prob=1.5)
    with pytest.raises(ValueError, match="`scale_tril` must be 3 x 3"):
        probabilistic_regret_bound(mean, cov, [0], 0.1, scale_tril=cov[:2, :2])


def test_prb_with_a_shared_factor_draws_as_without():
    # Three tolerances from one decomposition make the statements each call
    # makes alone, with one generator drawing in the same order.
    a = torch.tensor([[1.0, 0.3, 0.0], [0.3, 0.5, 0.2], [0.0, 0.2, 0.8]])
    cov = (a @ a.T).double()
    mean = torch.tensor([0.2, 0.0, 0.1], dtype=torch.float64)
    root = posterior_scale_tril(cov)
    assert torch.allclose(root @ root.T, cov)
    gens = [torch.Generator().manual_seed(4) for _ in range(2)]
    alone = [
        probabilistic_regret_bound(mean, cov, [0, 1], e, generator=gens[0])
        for e in (0.1, 0.5, 1.0)
    ]
    shared = [
        probabilistic_regret_bound(
            mean, cov, [0, 1], e, generator=gens[1], scale_tril=root
        )
        for e in (0.1, 0.5, 1.0)
    ]
    assert shared == alone
    with pytest.raises(ValueError, match="`covariance` must be a square matrix"):
        posterior_scale_tril(cov[:2])
    assert len({s.value for s in alone}) == 3  # three different statements


def test_regret_gap_rule_by_hand():
    # Ishibashi et al. (2023), maximizing. Before: rows 0 and 1 evaluated, the
    # best mean row 1; row 2 is then observed at 2.0 and becomes the best.
    from scipy.stats import norm

    m0 = torch.tensor([0.0, 1.0, 0.5], dtype=torch.float64)
    s0 = torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)
    m1 = torch.tensor([0.0, 1.0, 1.8], dtype=torch.float64)
    cov = torch.diag(torch.tensor([0.04, 0.09, 0.01], dtype=torch.float64))
    cov[1, 2] = cov[2, 1] = 0.02
    noise, t, delta = 0.25, 3, 0.1
    out = regret_gap_rule(m1, cov, m0, s0, [0, 1], [0, 1, 2], 2, 2.0, noise, t)
    change = abs(1.0 - 1.8)
    g, sd = 1.0 - 1.8, math.sqrt(0.09 + 0.01 - 2 * 0.02)
    gain = sd * norm.pdf(g / sd) + g * norm.cdf(g / sd)  # E[(f_1 - f_2)_+]
    root = math.sqrt(2 * math.log(3 * t**2 * math.pi**2 / (6 * delta)))
    ucb = max(0 + root * 1.0, 1 + root * 0.5, 0.5 + root * 2.0)
    kappa = ucb - max(0 - root * 1.0, 1 - root * 0.5)
    s2, r = 4.0, 2.0 - 0.5
    kl = 0.5 * (noise / (s2 + noise) + s2 * r**2 / (s2 + noise) ** 2 - 1)
    kl += 0.5 * math.log(1 + s2 / noise)
    value = change + gain + kappa * math.sqrt(kl / 2)
    threshold = math.sqrt(-2 * math.log(delta)) * 0.5 * 2.0 * (2.0 + kappa / 2)
    threshold /= s2 + noise
    assert (out.rule, out.index) == ("gap", 2)
    assert out.value == pytest.approx(value, rel=1e-12)
    assert out.threshold == pytest.approx(threshold, rel=1e-12)
    assert out.stop == (value <= threshold)
    # An observation where the model expected it, barely informative, with
    # the same best row: no change, no gain, a KL of order s^4: stop.
    s0 = torch.tensor([1.0, 0.5, 0.01], dtype=torch.float64)
    same = regret_gap_rule(m0, cov, m0, s0, [0, 1], [0, 1, 2], 2, 0.5, noise, t)
    assert same.index == 1 and same.stop and same.value < same.threshold
    with pytest.raises(ValueError, match="noise"):
        regret_gap_rule(m0, cov, m0, s0, [0, 1], [0, 1, 2], 2, 0.5, 0.0, t)
    with pytest.raises(ValueError, match="evaluated"):
        regret_gap_rule(m0, cov, m0, s0, [0, 1], [0, 5], 2, 0.5, noise, t)
    with pytest.raises(ValueError, match="`previous_mean` and `previous_std`"):
        regret_gap_rule(m0, cov, m0[:2], s0, [0, 1], [0, 1, 2], 2, 0.5, noise, t)
