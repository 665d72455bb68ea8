"""The rank statement: by hand on independent candidates, where the count of
better candidates has a known (Poisson-binomial) law, and in a certificate."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ax_chaining.certificate import GAUSSIAN, StudentTail
from ax_chaining.certificate.rank import (
    RankOptions,
    better_probabilities,
    monte_carlo_rank_bound,
    rank_statement,
    union_rank_bound,
)
from ax_chaining.distances import DenseDistance

DTYPE = torch.float64
#: Candidate 0 is known exactly (variance 0); the others are independent
#: with variance 1, so f(j) - f(0) ~ N(mean_j, 1) independently.
MEANS = torch.tensor([0.0, -0.5, 0.3, -1.0, -2.0, 0.1, -0.2, -1.5], dtype=DTYPE)


def _independent() -> DenseDistance:
    var = torch.ones(8, dtype=DTYPE)
    var[0] = 0.0
    return DenseDistance(torch.diag(var))


def _count_law(p: list[float]) -> np.ndarray:
    """The Poisson-binomial law of the number of successes."""
    pmf = np.array([1.0])
    for q in p:
        pmf = np.convolve(pmf, [1.0 - q, q])
    return pmf


def test_union_rank_bound_by_hand() -> None:
    # p sorted: .6179 .5398 .4207 .3085 .1587 .0668 .0228 (sum 2.1352).
    p = torch.special.ndtr(MEANS[1:])
    # share 0.2: m + max(1, ceil(T_m / 0.2)) over m = 0..7 is
    # 11, 9, 7, 6, 6, 6, 7, 8: the bound is 6.
    assert union_rank_bound(p, 0.2) == 6
    # share 0.05: m = 5 leaves 0.0896 (2 more), m = 6 leaves 0.0228 (1 more).
    assert union_rank_bound(p, 0.05) == 7
    # Markov alone (m = 0) would give ceil(2.1352 / 0.05) = 43.
    assert union_rank_bound(torch.tensor([0.5, 0.3, 0.01, 0.01, 0.01]), 0.05) == 3


def test_probabilities_and_expected_count_by_hand() -> None:
    stmt = rank_statement(
        MEANS, _independent(), 0, 0.2, options=RankOptions(method="union")
    )
    assert stmt.method == "union" and stmt.rank_bound == 6
    assert stmt.expected_better == pytest.approx(
        float(torch.special.ndtr(MEANS[1:]).sum())
    )
    # A tolerance of 0.5: P[N(m, 1) > 0.5] = Phi(m - 0.5).
    tol = rank_statement(
        MEANS, _independent(), 0, 0.2, options=RankOptions(tolerance=0.5)
    )
    expected = float(torch.special.ndtr(MEANS[1:] - 0.5).sum())
    assert tol.expected_better == pytest.approx(expected)
    # A scale of 2 doubles every standard deviation.
    p = better_probabilities(MEANS, 2.0 * torch.ones(8, dtype=DTYPE), GAUSSIAN)
    assert float(p[1]) == pytest.approx(float(torch.special.ndtr(torch.tensor(-0.25))))


@pytest.mark.parametrize(("share", "quantile"), [(0.2, 3), (0.05, 4)])
def test_monte_carlo_rank_is_the_count_quantile(share: float, quantile: int) -> None:
    # The exact law: P(C <= 3) = 0.899, P(C <= 4) = 0.986, away from 0.8 and
    # 0.95, so 20,000 draws find the exact (1 - share) quantile.
    pmf = _count_law(torch.special.ndtr(MEANS[1:]).tolist())
    cdf = np.cumsum(pmf)
    assert int(np.argmax(cdf >= 1 - share)) == quantile
    for seed in (0, 1):
        got = monte_carlo_rank_bound(
            MEANS, _independent(), 0, share, GAUSSIAN, samples=20_000, seed=seed
        )
        assert got == quantile + 1


def test_monte_carlo_follows_its_seed_and_refuses_too_few_draws() -> None:
    dist = _independent()
    a = monte_carlo_rank_bound(MEANS, dist, 0, 0.3, GAUSSIAN, samples=50, seed=3)
    b = monte_carlo_rank_bound(MEANS, dist, 0, 0.3, GAUSSIAN, samples=50, seed=3)
    assert a == b
    with pytest.raises(ValueError, match="samples"):
        monte_carlo_rank_bound(MEANS, dist, 0, 0.001, GAUSSIAN, samples=100)


def test_monte_carlo_student_tails_are_wider() -> None:
    # A common chi-square scale: heavier tails, a larger count quantile.
    dist = _independent()
    gauss = monte_carlo_rank_bound(MEANS, dist, 0, 0.02, GAUSSIAN, samples=5000)
    heavy = monte_carlo_rank_bound(MEANS, dist, 0, 0.02, StudentTail(1), samples=5000)
    assert heavy >= gauss


@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12),
    st.sampled_from([0.01, 0.05, 0.2]),
)
def test_union_rank_bound_holds_for_independent_candidates(p, share) -> None:
    # P(C >= rank_bound) <= share under the exact law of the count.
    pmf = _count_law(p)
    r = union_rank_bound(torch.tensor(p, dtype=DTYPE), share)
    assert 1 <= r <= len(p) + 1
    assert pmf[r:].sum() <= share + 1e-12


def test_auto_route_depends_on_sizes_and_share_only() -> None:
    dist = _independent()
    small = rank_statement(MEANS, dist, 0, 1e-4)  # 4096 draws * 1e-4 < 10
    large = rank_statement(MEANS, dist, 0, 0.05)
    assert (small.method, large.method) == ("union", "monte_carlo")
    assert large.samples == 4096 and small.samples == 0


@pytest.mark.parametrize("method", ["monte_carlo", "union"])
def test_rank_statement_holds_on_gp_samples_under_the_true_prior(method: str) -> None:
    """Coverage under the model: 300 GP samples on 60 points of a line (RBF,
    lengthscale 0.1), six noisy observations each, the exact posterior, the
    candidate of largest mean certified at share 0.1. The statement fails in
    at most a 0.1 share of samples, up to binomial noise: 30 expected, 46 is
    three standard deviations above (the Monte Carlo route is exact in law,
    so it fails about 30 times; the union route far less)."""
    n, trials, share, noise = 60, 300, 0.1, 0.01
    x = torch.linspace(0, 1, n, dtype=DTYPE).unsqueeze(-1)
    prior = torch.exp(-0.5 * (x - x.T) ** 2 / 0.1**2)
    root = torch.linalg.cholesky(prior + 1e-8 * torch.eye(n, dtype=DTYPE))
    failures = 0
    for t in range(trials):
        gen = torch.Generator().manual_seed(t)
        f = root @ torch.randn(n, generator=gen, dtype=DTYPE)
        seen = torch.randperm(n, generator=gen)[:6]
        y = f[seen] + noise**0.5 * torch.randn(6, generator=gen, dtype=DTYPE)
        gain = torch.linalg.solve(
            prior[seen][:, seen] + noise * torch.eye(6, dtype=DTYPE), prior[seen]
        )
        mean, cov = gain.T @ y, prior - prior[:, seen] @ gain
        index = int(mean.argmax())
        statement = rank_statement(
            mean,
            DenseDistance(cov),
            index,
            share=share,
            options=RankOptions(method=method, samples=2000, seed=t),
        )
        failures += int(1 + (f > f[index]).sum()) > statement.rank_bound
    assert failures <= 46
