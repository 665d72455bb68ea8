"""The scalable path: rows on demand, farthest-first nested covers, auto choice."""

from __future__ import annotations

import pytest
import torch
from botorch.models import SingleTaskGP
from gpytorch.kernels import RBFKernel, ScaleKernel

from ax_chaining import ChainingUCB, is_cover
from ax_chaining.distances import MemoryBudgetError
from ax_chaining.posterior import candidate_posterior

DTYPE = torch.float64
# Farthest-first covers may be larger than Algorithm 2's greedy ones; this is
# the factor this suite holds them to (measured ratios are 1.0-1.4 on SE).
SIZE_FACTOR = 2.0


def se_setting(n: int, num_obs: int = 30, seed: int = 0, side: float = 10.0):
    g = torch.Generator().manual_seed(seed)
    C = side * torch.rand(n, 2, generator=g, dtype=DTYPE)
    X = C[torch.randperm(n, generator=g)[:num_obs]]
    Y = torch.sin(X[:, :1]) + torch.cos(X[:, 1:])
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 1.0
    model = SingleTaskGP(X, Y, covar_module=kernel, outcome_transform=None)
    model.likelihood.noise = 0.05**2
    return model.eval(), C


@pytest.fixture(scope="module")
def setting():
    return se_setting(2000)


@pytest.fixture(scope="module")
def both(setting):
    model, C = setting
    exact = ChainingUCB(model, C, path="dense", cover="greedy")
    scalable = ChainingUCB(
        model, C, path="low_rank", cover="farthest_first", max_cover_size=C.shape[0]
    )
    return exact, scalable


def test_scalable_covers_are_valid_and_nested(setting, both):
    model, C = setting
    _, scalable = both
    res = scalable.chaining
    assert res.info["path"] == "low_rank" and res.cover_method == "farthest_first"
    assert not res.bounded.any()
    distance = candidate_posterior(model, C, path="dense").distance
    d2 = distance.rows(torch.arange(C.shape[0]))  # all pairs: exhaustive check
    for i in range(res.num_levels):
        assert is_cover(d2, res.covers[i], float(res.eps[i]) * (1 + 1e-9))
        if i:
            prev = res.covers[i - 1]
            assert torch.equal(res.covers[i][: prev.numel()], prev)


def test_scalable_cover_sizes_within_factor_of_greedy(both):
    exact, scalable = both
    greedy = exact.chaining.cover_sizes.to(DTYPE)
    ff = scalable.chaining.cover_sizes.to(DTYPE)
    assert exact.chaining.num_levels == scalable.chaining.num_levels
    assert torch.all(ff <= SIZE_FACTOR * greedy), (greedy.tolist(), ff.tolist())


def test_both_paths_select_the_same_point_or_nearly(setting, both):
    _, C = setting
    exact, scalable = both
    values = exact(C.unsqueeze(1))
    values_s = scalable(C.unsqueeze(1))
    pick, pick_s = int(values.argmax()), int(values_s.argmax())
    if pick != pick_s:
        # H_i depends on |T_i| only through a logarithm: the bonus moves by at
        # most sum |H_i - H_i'|, and so can the value of the selected point.
        tol = float((exact.chaining.H - scalable.chaining.H).abs().sum())
        assert float(values[pick] - values[pick_s]) <= tol + 1e-9
    # The posterior itself is the same on both paths.
    torch.testing.assert_close(exact.candidate_sigma, scalable.candidate_sigma)


def test_size_cap_uses_the_N_bound(setting):
    model, C = setting
    acqf = ChainingUCB(model, C, path="low_rank", max_cover_size=50)
    res = acqf.chaining
    assert res.bounded.any()
    assert torch.all(res.cover_sizes[res.bounded] == C.shape[0])
    assert torch.all(res.cover_sizes[~res.bounded] <= 50)
    # The bound N is valid (T_i = X is a cover) and larger than a true cover,
    # so it can only add exploration: H_i is at least the uncapped value.
    full = ChainingUCB(model, C, path="low_rank", max_cover_size=C.shape[0])
    assert torch.all(res.H >= full.chaining.H - 1e-12)


def test_auto_path_choice_by_memory(setting):
    model, C = setting
    acqf = ChainingUCB(model, C)
    assert acqf.chaining.info["path"] == "dense"
    # The greedy covers keep every pair within the first radius that is not
    # covered lazily (eps_2 here: about 3.2e5 pairs, 16 bytes each at the peak,
    # estimated from 64 rows): with a budget below that plus the rows, and below
    # the 2 N^2 bytes of a level matrix, the automatic choice moves to rows on
    # demand.
    small = ChainingUCB(model, C, memory_budget=6 * 2**20)
    assert small.chaining.info["path"] == "low_rank"
    assert small.chaining.cover_method == "farthest_first"
    assert "memory_budget" in small.chaining.info["reason"]
    assert "within eps_2" in small.chaining.info["reason"]
    # Asked for explicitly, the exact path says what it would need.
    with pytest.raises(MemoryBudgetError, match="memory_budget"):
        ChainingUCB(model, C, path="dense", memory_budget=4 * 2**20)


def test_low_rank_memory_is_linear_in_N():
    model, _ = se_setting(10, num_obs=5)
    C = 10.0 * torch.rand(20_000, 2, dtype=DTYPE)
    # A level matrix would need 2 x 20000^2 B = 800 MB, and the neighbour lists
    # of the first level kept (eps_2, after the lazily covered eps_1) more than
    # 16 MB; 16 MB is enough for rows on demand.
    budget = 16 * 2**20
    acqf = ChainingUCB(model, C, memory_budget=budget, max_cover_size=256)
    assert acqf.chaining.info["path"] == "low_rank"
    assert acqf.chaining.n == 20_000
    with pytest.raises(MemoryBudgetError, match="memory_budget"):
        ChainingUCB(model, C, path="dense", memory_budget=budget)


def test_batch_equals_sequential_rebuilds():
    """q picks through optimize_acqf_discrete (pending points set after each
    pick, covers rebuilt lazily on a reused factor) equal picks made by fresh
    acquisition functions, each built from scratch on the pending points."""
    from botorch.optim import optimize_acqf_discrete

    model, C = se_setting(600, num_obs=12, seed=3)
    acqf = ChainingUCB(model, C)
    base = acqf.chaining
    X, _ = optimize_acqf_discrete(acqf, q=4, choices=C)
    assert acqf.chaining is base  # the original state is restored, not rebuilt
    remaining = C
    for k in range(4):
        fresh = ChainingUCB(model, C, X_pending=X[:k] if k else None)
        values = fresh(remaining.unsqueeze(1))
        best = int(values.argmax())
        assert torch.equal(remaining[best], X[k])
        remaining = torch.cat([remaining[:best], remaining[best + 1 :]])
        acqf.set_X_pending(X[:k] if k else None)
        for a, b in zip(acqf.chaining.covers, fresh.chaining.covers, strict=True):
            assert torch.equal(a, b)
        torch.testing.assert_close(acqf.candidate_sigma, fresh.candidate_sigma)


def test_batch_with_reused_covers_is_valid_and_within_tolerance():
    """pending_covers="reuse": the covers built without pending points stay
    valid nested eps_i-covers under the smaller d_t given them; the posterior is
    the rebuild's, and each acquisition value differs from the rebuild's by at
    most sum_i |H_i - H_i'| (the bonus sums H_i over the same levels)."""
    from botorch.optim import optimize_acqf_discrete

    model, C = se_setting(600, num_obs=12, seed=3)
    acqf = ChainingUCB(model, C, pending_covers="reuse")
    base = acqf.chaining
    X, _ = optimize_acqf_discrete(acqf, q=4, choices=C)
    assert acqf.chaining is base
    for k in range(1, 4):
        acqf.set_X_pending(X[:k])
        reused = acqf.chaining
        assert reused.info["covers_from"] == "reused"
        assert reused.t == base.t + k
        fresh = ChainingUCB(model, C, X_pending=X[:k])
        torch.testing.assert_close(acqf.candidate_sigma, fresh.candidate_sigma)
        assert reused.num_levels == fresh.chaining.num_levels
        # Valid and nested under the new distance: every candidate within eps_i.
        distance = candidate_posterior(model, C, X_pending=X[:k]).distance
        previous = torch.empty(0, dtype=torch.long)
        for eps, cover in zip(reused.eps.tolist(), reused.covers, strict=True):
            assert set(previous.tolist()) <= set(cover.tolist())
            nearest = distance.rows(cover).min(dim=0).values
            assert bool((nearest <= eps * eps).all())
            previous = cover
        values = acqf(C.unsqueeze(1))
        values_fresh = fresh(C.unsqueeze(1))
        tol = float((reused.H - fresh.chaining.H).abs().sum())
        assert float((values - values_fresh).abs().max()) <= tol + 1e-9


def test_pending_factor_matches_model_posterior():
    model, C = se_setting(300, num_obs=8, seed=4)
    P = C[:3] + 0.01
    acqf = ChainingUCB(model, C, X_pending=P)
    # GP-BUCB: the posterior variance given the pending points observed with
    # noise, whatever their values; here from BoTorch's own conditioning.
    fant = model.condition_on_observations(P, model.posterior(P).mean)
    expected = fant.posterior(C).variance.reshape(-1).sqrt()
    torch.testing.assert_close(acqf.candidate_sigma, expected, atol=1e-7, rtol=1e-6)
