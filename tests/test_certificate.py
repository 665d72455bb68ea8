"""Regret certificates: hand-computed values, properties, the BoTorch API, soundness."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from dataclasses import FrozenInstanceError
from pathlib import Path
from statistics import NormalDist

import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.optim import optimize_acqf_discrete
from gpytorch.kernels import RBFKernel
from hypothesis import example, given
from hypothesis import strategies as st

from ax_chaining import ChainingUCB, DenseDistance, chaining_covers
from ax_chaining.certificate import (
    CHERNOFF,
    GAUSSIAN,
    Certificate,
    CertificateOptions,
    certificate_bounds,
    certified_block,
    chaining_bound,
    chaining_tree,
    pairwise_bound,
    recommend,
    running_minimum,
    solve_tail_budget,
    step_delta,
    tail_sum,
    ucb_lcb_bound,
    union_bound,
    upper_quantile,
)

DTYPE = torch.float64
DELTA = 0.05


def zq(p: float) -> float:
    """Gaussian upper quantile, from the standard library (independent of torch)."""
    return -NormalDist().inv_cdf(p)


# Three independent posterior values with sigma = 1, 0.5, 0.25 and means 0, 0.5, 1:
# d(0,1)^2 = 1.25, d(0,2)^2 = 1.0625, d(1,2)^2 = 0.3125.
COV = torch.diag(torch.tensor([1.0, 0.25, 0.0625], dtype=DTYPE))
MEAN = torch.tensor([0.0, 0.5, 1.0], dtype=DTYPE)
D01, D02, D12 = math.sqrt(1.25), math.sqrt(1.0625), math.sqrt(0.3125)


def hand_setup():
    distance = DenseDistance(COV)
    res = chaining_covers(distance, t=1, delta=DELTA, scale=1.0)
    tree = chaining_tree(distance, res.covers, res.eps, res.bounded)
    dist = distance.rows(torch.arange(3)).sqrt()
    return distance, res, tree, dist


def test_step_delta_and_quantiles():
    assert step_delta(0.05, 1) == pytest.approx(0.3 / math.pi**2, rel=1e-15)
    assert step_delta(0.05, 3) == pytest.approx(0.3 / (9 * math.pi**2), rel=1e-15)
    p = torch.tensor([0.3, 1e-3, 1e-12], dtype=DTYPE)
    gauss = upper_quantile(p, GAUSSIAN)
    assert gauss.tolist() == pytest.approx([zq(v) for v in p.tolist()], rel=1e-9)
    chern = upper_quantile(p, CHERNOFF)
    assert chern.tolist() == pytest.approx(
        [math.sqrt(2 * math.log(1 / v)) for v in p.tolist()], rel=1e-12
    )
    assert bool((gauss < chern).all())  # the exact quantile is tighter
    with pytest.raises(ValueError, match="`delta` must be in"):
        step_delta(1.5, 1)
    with pytest.raises(ValueError, match="`t` must be"):
        step_delta(0.05, 0)
    with pytest.raises(ValueError, match=r"in \(0, 1\)"):
        upper_quantile(0.0)


def test_a_tail_that_is_not_a_law_is_refused_naming_it():
    with pytest.raises(TypeError, match="`tail` must be a TailLaw"):
        upper_quantile(0.1, "normal")
    gap = torch.zeros(1, 2, dtype=torch.float64)
    with pytest.raises(TypeError, match="`tail` must be a TailLaw"):
        tail_sum(torch.zeros(1, dtype=torch.float64), gap, gap, None)


def test_pairwise_by_hand():
    _, _, _, dist = hand_setup()
    dt = step_delta(DELTA, 1)
    z = zq(dt / 2)  # N - 1 = 2 pairs per certified point
    got = pairwise_bound(MEAN, dist, torch.arange(3), dt)
    expected = [
        max(0.5 + z * D01, 1.0 + z * D02),
        max(-0.5 + z * D01, 0.5 + z * D12, 0.0),
        max(-1.0 + z * D02, -0.5 + z * D12, 0.0),
    ]
    assert got.tolist() == pytest.approx(expected, rel=1e-12)
    zc = math.sqrt(2 * math.log(2 / dt))
    chern = pairwise_bound(MEAN, dist[:1], torch.tensor([0]), dt, tail=CHERNOFF)
    assert chern.item() == pytest.approx(max(0.5 + zc * D01, 1 + zc * D02), rel=1e-12)


def test_tree_by_hand():
    _, res, tree, _ = hand_setup()
    assert [c.tolist() for c in res.covers] == [[1, 0], [1, 0, 2], [1, 0, 2]]
    # T_1 = {0, 1}, T_2 = T_3 = {0, 1, 2}, closed by T_4 = X.
    assert tree.level.tolist() == [1, 1, 2]
    assert tree.parent.tolist() == [-1, -1, 1]  # d(2, 1) < d(2, 0)
    assert tree.link.tolist() == pytest.approx([0.0, 0.0, D12], rel=1e-12)
    assert tree.ancestors.tolist() == [[0, 1, 1], [0, 1, 2], [0, 1, 2], [0, 1, 2]]
    assert tree.sizes.tolist() == [2, 3, 3, 3]
    assert tree.new.tolist() == [2, 1, 0, 0]
    # m_j = |T_j| first links + |T_j \ T_{j-1}| chain links (none at level 1).
    assert tree.num_pairs().tolist() == [2, 4, 3, 3]
    assert tree.eps.tolist() == [1.0, 0.5, 0.25, 0.125]


@given(
    points=st.lists(
        st.tuples(st.floats(-3, 3), st.floats(-3, 3)), min_size=2, max_size=25
    ),
    max_size=st.integers(1, 25),
)
@example(points=[(3.0, 3.0), (3.0, 3.0)], max_size=1)  # sigma_min > 2 * scale
def test_tree_from_traversal_equals_tree_from_rows(points, max_size):
    # Farthest-first covers record each point's nearest centre as they are
    # built: the tree from those parents equals the one from rows (up to a
    # choice among exactly equally near parents: same links, a valid parent).
    x = torch.tensor(points, dtype=DTYPE)
    cov = x @ x.T + torch.diag(torch.linspace(0.5, 1.0, len(points), dtype=DTYPE))
    distance = DenseDistance(cov)
    res = chaining_covers(
        distance, t=3, scale=2.0, cover="farthest_first", max_cover_size=max_size
    )
    assert res.parents is not None
    rows = chaining_tree(distance, res.covers, res.eps, res.bounded)
    given_ = chaining_tree(distance, res.covers, res.eps, res.bounded, res.parents)
    torch.testing.assert_close(given_.link, rows.link, rtol=1e-9, atol=1e-12)
    assert torch.equal(given_.level, rows.level)
    has = given_.parent >= 0
    assert torch.equal(has, rows.parent >= 0)
    d2 = distance.rows(torch.arange(len(points)))
    chosen = d2[given_.parent[has], has.nonzero().squeeze(-1)]
    torch.testing.assert_close(chosen.sqrt(), rows.link[has], rtol=1e-9, atol=1e-12)
    assert bool((given_.level[given_.parent[has]] < given_.level[has]).all())


def _rbf_gp(n: int, obs: int, side: float, lengthscale: float, seed: int):
    """An RBF GP (noise sd 0.05) on ``obs`` of ``n`` points uniform in a square."""
    gen = torch.Generator().manual_seed(seed)
    C = side * torch.rand(n, 2, generator=gen, dtype=DTYPE)
    X = C[:obs]
    noise = 0.05 * torch.randn(obs, 1, generator=gen, dtype=DTYPE)
    Y = torch.sin(X[:, :1]) + noise
    model = SingleTaskGP(X, Y, covar_module=RBFKernel(), outcome_transform=None)
    model.covar_module.lengthscale = lengthscale
    model.likelihood.noise = 0.05**2
    return model.eval(), C


def test_tree_from_traversal_on_a_gp_posterior():
    # The low-rank path takes rows 32 at a time: same tree, same certificate.
    from ax_chaining.posterior import candidate_posterior

    model, C = _rbf_gp(600, 12, side=10.0, lengthscale=1.0, seed=3)
    post = candidate_posterior(model, C, path="low_rank")
    distance = post.distance
    res = chaining_covers(distance, t=13, cover="farthest_first")
    assert res.parents is not None and res.num_levels >= 3
    rows = chaining_tree(distance, res.covers, res.eps, res.bounded)
    given_ = chaining_tree(distance, res.covers, res.eps, res.bounded, res.parents)
    assert torch.equal(given_.parent, rows.parent)
    torch.testing.assert_close(given_.link, rows.link, rtol=1e-9, atol=1e-12)
    mean = post.mean.to(DTYPE)
    dist = distance.rows(torch.arange(12)).clamp_min(0).sqrt()
    delta_t = step_delta(DELTA, 13)
    torch.testing.assert_close(
        chaining_bound(mean, dist, torch.arange(12), given_, delta_t),
        chaining_bound(mean, dist, torch.arange(12), rows, delta_t),
    )


def test_tree_from_pairs_once_equals_tree_from_rows():
    # Greedy covers with most points in T_L: the tree takes each pair of the
    # low-rank distance's upper blocks once, both ways; the same tree as rows
    # of the dense posterior covariance give.
    from ax_chaining.posterior import candidate_posterior

    model, C = _rbf_gp(400, 15, side=6.0, lengthscale=0.3, seed=5)
    low_rank = candidate_posterior(model, C, path="low_rank").distance
    assert low_rank.upper_blocks
    low_rank.block_bytes = 8 * 400 * 16  # blocks of 16 rows: pairs across blocks
    with torch.no_grad():
        dense = DenseDistance(model.posterior(C).mvn.covariance_matrix)
    res = chaining_covers(low_rank, t=16, cover="greedy")
    assert 2 * int(res.cover_sizes[-1]) > 400  # the pairs route is taken
    pairs = chaining_tree(low_rank, res.covers, res.eps, res.bounded)
    rows = chaining_tree(dense, res.covers, res.eps, res.bounded)
    assert torch.equal(pairs.parent, rows.parent)
    torch.testing.assert_close(pairs.link, rows.link, rtol=1e-6, atol=1e-7)


def test_tree_refuses_parents_that_do_not_fit():
    distance, res, tree, _ = hand_setup()
    with pytest.raises(ValueError, match="3 parents and 3 squared links"):
        short = (tree.parent[:2], tree.link)
        chaining_tree(distance, res.covers, res.eps, res.bounded, short)
    # Point 2 (level 2) given no parent; point 0 (level 1) given one.
    bad = (torch.tensor([1, -1, -1]), torch.zeros(3, dtype=DTYPE))
    with pytest.raises(ValueError, match="do not fit the covers"):
        chaining_tree(distance, res.covers, res.eps, res.bounded, bad)
    ok = chaining_tree(
        distance, res.covers, res.eps, res.bounded, (tree.parent, tree.link.square())
    )
    assert torch.equal(ok.ancestors, tree.ancestors)


def _level_z(pairs, tail=GAUSSIAN):
    dt = step_delta(DELTA, 1)
    w = [1 / j**2 for j in range(1, len(pairs) + 1)]
    s = sum(w)
    p = [dt * wj / s / m for wj, m in zip(w, pairs, strict=True)]
    if tail is GAUSSIAN:
        return [zq(v) for v in p]
    return [math.sqrt(2 * math.log(1 / v)) for v in p]


@pytest.mark.parametrize("tail", [GAUSSIAN, CHERNOFF], ids=["gaussian", "chernoff"])
def test_chaining_actual_by_hand(tail):
    _, _, tree, dist = hand_setup()
    z1, z2, z3, z4 = _level_z([2, 4, 3, 3], tail)
    zmin = min(z1, z2, z3, z4)
    got = chaining_bound(
        MEAN, dist, torch.arange(3), tree, step_delta(DELTA, 1), "actual", tail
    )
    # x = 0. To x* = 1 (a root): one first link at any level. To x* = 2: first
    # link to its level-1 ancestor 1, then the chain link 1 -> 2 at level 2; or a
    # first link straight to 2 at level 2, 3 or 4.
    to_2 = min(z1 * D01 + z2 * D12, min(z2, z3, z4) * D02)
    b0 = max(0.0, 0.5 + zmin * D01, 1.0 + to_2)
    # x = 1: to 0 any level; to 2 via the chain link from 1 itself (first link
    # 1 -> 1 costs 0) or straight.
    b1 = max(0.0, -0.5 + zmin * D01, 0.5 + min(z2 * D12, min(z2, z3, z4) * D12))
    # x = 2: to 0 or to 1 (both roots) by one first link.
    b2 = max(0.0, -1.0 + zmin * D02, -0.5 + zmin * D12)
    assert got.tolist() == pytest.approx([b0, b1, b2], rel=1e-12)


def test_chaining_radius_by_hand():
    _, _, tree, dist = hand_setup()
    z = _level_z([2, 4, 3, 3])
    radius = [0.0, 1.0, 0.5, 0.25]  # link into level j is at most eps_{j-1}
    tail_r = [sum(radius[j + 1 :]) for j in range(4)]
    tail_c = [sum(z[k] * radius[k] for k in range(j + 1, 4)) for j in range(4)]

    def s(d):
        return min(z[i] * (d + tail_r[i]) + tail_c[i] for i in range(4))

    got = chaining_bound(MEAN, dist[:1], torch.tensor([0]), tree, step_delta(DELTA, 1))
    rad = chaining_bound(
        MEAN, dist[:1], torch.tensor([0]), tree, step_delta(DELTA, 1), "radius"
    )
    assert rad.item() == pytest.approx(max(0.5 + s(D01), 1.0 + s(D02)), rel=1e-12)
    assert got.item() <= rad.item()  # actual links never exceed their radii here


def test_union_by_hand():
    _, _, _, dist = hand_setup()
    dt = step_delta(DELTA, 1)
    idx = torch.arange(3)
    got = union_bound(MEAN, dist, idx, dt)
    pair = pairwise_bound(MEAN, dist, idx, dt)
    assert bool((got <= pair + 1e-12).all())
    # x = 0: B solves Phibar((B - 0.5) / d01) + Phibar((B - 1) / d02) = delta_t.
    nd = NormalDist()

    def excess(b, others):
        return sum(1 - nd.cdf((b - g) / d) for g, d in others) - dt

    for i, others in enumerate(
        [
            [(0.5, D01), (1.0, D02)],
            [(-0.5, D01), (0.5, D12)],
            [(-1.0, D02), (-0.5, D12)],
        ]
    ):
        b = got[i].item()
        assert excess(b, others) <= 0  # within budget: a valid bound
        assert excess(b * (1 - 1e-5), others) > 0  # and the smallest one
    # x = 2 is the best by far: its bound is set by its two weak rivals.
    assert got[2].item() < pair[2].item()
    # Two points: one pair, so the union and the pairwise bound agree.
    two = torch.tensor([[0.0, 0.5]], dtype=DTYPE)
    m2 = torch.tensor([0.0, 1.0], dtype=DTYPE)
    assert union_bound(m2, two, torch.tensor([0]), 0.05).item() == pytest.approx(
        1 + 0.5 * zq(0.05), rel=1e-6
    )
    chern = union_bound(m2, two, torch.tensor([0]), 0.05, tail=CHERNOFF)
    assert chern.item() == pytest.approx(
        1 + 0.5 * math.sqrt(2 * math.log(20)), rel=1e-6
    )


@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from(["gaussian", "chernoff", "student3"]),
    st.floats(1e-4, 0.2),
)
def test_tail_budget_solution_is_valid_and_the_smallest_to_rtol(seed, tail, delta):
    """Per entry, the solver's b is within budget and any b below it by more
    than rtol is not (or b is the lower end, already within budget), for gaps
    and distances over several orders of magnitude; an entry whose sum is not
    finite is still solved within budget."""
    from ax_chaining.certificate import StudentTail, tail_sum

    law = {"gaussian": GAUSSIAN, "chernoff": CHERNOFF, "student3": StudentTail(3)}[tail]
    g = torch.Generator().manual_seed(seed)
    m, n = 6, 40
    gap = torch.randn(m, n, generator=g, dtype=DTYPE) * 10.0 ** (
        3 * torch.rand(m, 1, generator=g, dtype=DTYPE) - 1
    )
    dist = torch.rand(m, n, generator=g, dtype=DTYPE) * 10.0 ** (
        2 * torch.rand(m, 1, generator=g, dtype=DTYPE) - 1
    )
    dist[:, 0] = 0.0  # an exact pair: lo is its gap, as union_bound sets it
    lo = gap[:, 0].clamp_min(0.0)
    lo[0] = gap[0].max() + 50 * dist[0].max()  # already within budget
    hi = lo + 1.0  # grown by the solver where not within budget

    def sums(b: torch.Tensor) -> torch.Tensor:
        out = tail_sum(b, gap, torch.where(dist > 0, dist, 0.0), law)
        return torch.where(torch.arange(m) == m - 1, torch.nan, out)

    rtol = 1e-6
    b = solve_tail_budget(sums, lo, hi, delta, rtol)
    s = tail_sum(b, gap, dist, law)
    below = tail_sum(b - 2 * rtol * b.abs(), gap, dist, law)
    for i in range(m - 1):
        assert float(s[i]) <= delta, (i, float(b[i]))
        assert float(b[i]) >= float(lo[i])
        if float(b[i]) - 2 * rtol * abs(float(b[i])) > float(lo[i]):
            assert float(below[i]) > delta, (i, float(b[i]))
    assert float(b[0]) == float(lo[0])
    assert math.isfinite(float(b[-1])) and float(b[-1]) >= float(lo[-1])


def test_union_respects_zero_distance():
    # x* = 1 has d(0, 1) = 0: f(1) - f(0) = mu(1) - mu(0) = 2 exactly.
    mean = torch.tensor([0.0, 2.0, -5.0], dtype=DTYPE)
    dist = torch.tensor([[0.0, 0.0, 1.0]], dtype=DTYPE)
    got = union_bound(mean, dist, torch.tensor([0]), 0.01)
    assert got.item() == pytest.approx(2.0, abs=1e-5)
    assert got.item() >= 2.0


def test_combined_is_the_min_at_full_delta():
    distance, _, tree, dist = hand_setup()
    idx = torch.arange(3)
    out = certificate_bounds(MEAN, distance, idx, t=4, delta=DELTA, tree=tree)
    full = step_delta(DELTA, 4)
    assert set(out) == {"union", "chaining", "bound"}
    torch.testing.assert_close(out["union"], union_bound(MEAN, dist, idx, full))
    torch.testing.assert_close(
        out["chaining"], chaining_bound(MEAN, dist, idx, tree, full)
    )
    torch.testing.assert_close(
        out["bound"], torch.minimum(out["union"], out["chaining"])
    )
    split = certificate_bounds(
        MEAN, distance, idx, t=4, delta=DELTA, tree=tree, split_delta=True
    )
    half = step_delta(DELTA / 2, 4)
    torch.testing.assert_close(split["union"], union_bound(MEAN, dist, idx, half))
    assert bool((split["bound"] >= out["bound"]).all())
    alone = certificate_bounds(MEAN, distance, idx, t=4, method="pairwise")
    assert set(alone) == {"pairwise", "bound"}
    torch.testing.assert_close(alone["bound"], pairwise_bound(MEAN, dist, idx, full))
    with pytest.raises(ValueError, match="needs the chaining tree"):
        certificate_bounds(MEAN, distance, idx, t=4, method="chaining")
    with pytest.raises(ValueError, match="`method` must be"):
        certificate_bounds(MEAN, distance, idx, t=4, method="best", tree=tree)


def test_ucb_lcb_and_recommend_by_hand():
    sigma = torch.tensor([1.0, 0.5, 0.25], dtype=DTYPE)
    b = ucb_lcb_bound(MEAN, sigma, torch.tensor([1, 2]), beta=4.0)
    ucb = max(0 + 2, 0.5 + 1, 1 + 0.5)
    assert b.tolist() == pytest.approx([ucb - (0.5 - 1), ucb - (1 - 0.5)])
    bounds = torch.tensor([0.3, 0.2, 0.2], dtype=DTYPE)
    idx = torch.tensor([0, 1, 2])
    assert recommend(bounds, idx, MEAN) == 2  # tie broken by the larger mean
    assert recommend(bounds, idx, MEAN, rule="max_mean") == 2
    assert recommend(bounds[:2], idx[:2], MEAN, rule="max_mean") == 1
    with pytest.raises(ValueError, match="`rule` must be"):
        recommend(bounds, idx, MEAN, rule="last")


@given(st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=30))
def test_running_minimum_is_monotone_and_tight(values):
    run = running_minimum(values)
    assert all(a >= b for a, b in zip(run.tolist(), run.tolist()[1:], strict=False))
    assert run.tolist() == [min(values[: i + 1]) for i in range(len(values))]


@given(
    st.integers(2, 12),
    st.integers(0, 2**31 - 1),
    st.sampled_from([GAUSSIAN, CHERNOFF]),
)
@example(n=2, seed=316092, tail=CHERNOFF)  # one pair: union = pairwise
def test_bounds_are_nonnegative_and_ordered(n, seed, tail):
    """Properties on random posteriors: B >= 0, B >= mu-gap, radius >= actual."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n + 1, generator=g, dtype=DTYPE)
    cov = A @ A.T / n
    mean = torch.randn(n, generator=g, dtype=DTYPE)
    distance = DenseDistance(cov)
    sig_min = float(torch.diagonal(cov).sqrt().min())
    res = chaining_covers(distance, t=2, scale=float(cov.diag().max().sqrt()))
    tree = chaining_tree(distance, res.covers, res.eps, res.bounded)
    idx = torch.arange(n)
    dist = distance.rows(idx).sqrt()
    dt = step_delta(DELTA, 2)
    gap = (mean.max() - mean).clamp_min(0)
    pair = pairwise_bound(mean, dist, idx, dt, tail)
    union = union_bound(mean, dist, idx, dt, tail)
    act = chaining_bound(mean, dist, idx, tree, dt, "actual", tail)
    rad = chaining_bound(mean, dist, idx, tree, dt, "radius", tail)
    assert bool((pair >= gap - 1e-12).all()) and bool((act >= gap - 1e-12).all())
    assert bool((union >= gap - 1e-12).all())
    assert bool((union <= pair * (1 + 1e-9) + 1e-12).all())
    assert bool((rad >= act - 1e-9).all())
    assert sig_min >= 0


def _posterior(n: int, obs: int = 20, seed: int = 0):
    """Mean and dense distance of an SE posterior on ``n`` random points."""
    g = torch.Generator().manual_seed(seed)
    X = 10.0 * torch.rand(n, 2, generator=g, dtype=DTYPE)
    K = torch.exp(-0.5 * torch.cdist(X, X).square())
    o = torch.randperm(n, generator=g)[:obs]
    A = torch.linalg.solve(K[o][:, o] + 1e-2 * torch.eye(obs, dtype=DTYPE), K[o])
    mean = A.T @ torch.sin(X[o, 0])
    return mean, DenseDistance(K - K[:, o] @ A, inplace=True)


@pytest.mark.parametrize("tail", [GAUSSIAN, CHERNOFF], ids=["gaussian", "chernoff"])
def test_blocks_of_any_size_give_the_same_bounds(tail):
    """A budget of a few kB (one certified point, a few candidates per block)
    gives every part bit for bit the bounds of one block."""
    mean, distance = _posterior(300)
    res = chaining_covers(distance, t=21)
    tree = chaining_tree(distance, res.covers, res.eps, res.bounded)
    idx = torch.arange(0, 300, 2)
    assert certified_block(300, 80, 2**12) == 1  # the blocks are real
    for method, links in [("combined", "actual"), ("chaining", "radius")]:
        kw = {"t": 21, "method": method, "tree": tree, "links": links, "tail": tail}
        whole = certificate_bounds(mean, distance, idx, **kw)
        for budget in (2**12, 2**16):
            blocked = certificate_bounds(
                mean, distance, idx, memory_budget=budget, **kw
            )
            assert blocked.keys() == whole.keys()
            for part in whole:
                assert torch.equal(blocked[part], whole[part]), (method, budget, part)
    # Given rows (float32 here) take the same blocks.
    dist = distance.rows(idx).sqrt().float()
    dt = step_delta(DELTA, 21)
    for fn in (union_bound, pairwise_bound):
        whole = fn(mean, dist, idx, dt, tail)
        assert torch.equal(fn(mean, dist, idx, dt, tail, memory_budget=2**12), whole)
    with pytest.raises(ValueError, match="`memory_budget` must be a positive int"):
        certificate_bounds(mean, distance, idx, t=21, tree=tree, memory_budget=0)
    with pytest.raises(TypeError, match="`memory_budget` must be an int"):
        union_bound(mean, dist, idx, dt, memory_budget=1e6)


def test_blocks_give_the_same_bounds_on_the_low_rank_route():
    # Rows of d computed by matrix products (the low-rank route) come in the
    # distance's batches whatever the budget, so they round the same.
    from ax_chaining.posterior import candidate_posterior

    g = torch.Generator().manual_seed(1)
    C = 10.0 * torch.rand(500, 2, generator=g, dtype=DTYPE)
    obs = torch.randperm(500, generator=g)[:15]
    model = se_model(C[obs], torch.sin(C[obs, :1]))
    post = candidate_posterior(model, C, path="low_rank")
    distance = post.distance
    assert distance.row_batch > 1
    res = chaining_covers(distance, t=16)
    tree = chaining_tree(distance, res.covers, res.eps, res.bounded)
    idx = torch.arange(0, 500, 3)
    whole = certificate_bounds(post.mean, distance, idx, t=16, tree=tree)
    for budget in (1, 2**16):
        blocked = certificate_bounds(
            post.mean, distance, idx, t=16, tree=tree, memory_budget=budget
        )
        assert all(torch.equal(blocked[k], whole[k]) for k in whole), budget


_PEAK_PRELUDE = """
import json
import torch
torch.set_num_threads(1)

def kib(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key))

def peak_mib(call):
    # Resident memory above the start of the call, at its peak (VmHWM, reset).
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = kib("VmRSS")
    out = call()
    return out, (kib("VmHWM") - before) / 1024
"""

_PEAK = """
from ax_chaining import chaining_covers, chaining_tree, certificate_bounds
from tests.test_certificate import _posterior

mean, distance = _posterior(3000)
res = chaining_covers(distance, t=21)
tree = chaining_tree(distance, res.covers, res.eps, res.bounded)
index = torch.arange(0, 3000, 3)
kw = {"t": 21, "tree": tree}
blocked, blocked_peak = peak_mib(
    lambda: certificate_bounds(mean, distance, index, memory_budget=BUDGET, **kw)
)
default, _ = peak_mib(lambda: certificate_bounds(mean, distance, index, **kw))
# What the bounds made first before they took blocks: every row of d at once.
_, rows_peak = peak_mib(lambda: distance.rows(index).sqrt())
print(json.dumps({
    "blocked": blocked_peak,
    "rows": rows_peak,
    "equal": all(torch.equal(default[k], blocked[k]) for k in default),
}))
"""


_PEAK_ACQF = """
from ax_chaining import ChainingUCB
from ax_chaining.certificate import CertificateOptions
from tests.test_certificate import se_model

g = torch.Generator().manual_seed(0)
C = 20.0 * torch.rand(3000, 2, generator=g, dtype=torch.float64)
obs = torch.randperm(3000, generator=g)[:30]
model = se_model(C[obs], torch.sin(C[obs, :1]))
# Small covers keep the step quick; the certificate's work is over all N.
small = ChainingUCB(model, C, path="low_rank", memory_budget=BUDGET, max_cover_size=200)
big = ChainingUCB(model, C, path="low_rank", max_cover_size=200)
none = CertificateOptions(calibration="none")
cert, peak = peak_mib(lambda: small.certificate(among="all", options=none))
reference = big.certificate(among="all", options=none)
_, rows_peak = peak_mib(lambda: torch.ones(3000, 3000, dtype=torch.float64))
print(json.dumps({
    "peak": peak,
    "rows": rows_peak,
    "equal": cert.index == reference.index and cert.bound == reference.bound,
}))
"""


def _peak_run(code: str) -> dict:
    """Run ``code`` in a fresh process where resident memory follows what is
    live (glibc maps every allocation above 64 kB on its own and gives freed
    memory back, else memory freed by one call hides the next one's)."""
    root = Path(__file__).resolve().parents[1]  # imports tests.test_certificate
    env = {
        **os.environ,
        "MALLOC_MMAP_THRESHOLD_": "65536",
        "MALLOC_TRIM_THRESHOLD_": "0",
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=root,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _needs_peak_reset() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak")


@pytest.mark.slow
def test_chaining_ucb_certificate_honours_the_acquisitions_memory_budget():
    """ChainingUCB(memory_budget=8 MiB).certificate(among="all") over 3000
    candidates: every candidate's row of d at once (what the certificate
    allocated before it took blocks) is 69 MiB; the call's peak resident memory
    stays within the acquisition's budget, with the default budget's result."""
    _needs_peak_reset()
    budget = 8 * 2**20
    code = textwrap.dedent(_PEAK_PRELUDE + _PEAK_ACQF)
    got = _peak_run(code.replace("BUDGET", str(budget)))
    assert got["equal"]
    assert got["rows"] > 4 * budget / 2**20  # the probe sees an N x N at once
    assert got["peak"] < budget / 2**20


@pytest.mark.slow
def test_certificate_stays_within_its_memory_budget():
    """1000 certified points of 3000 candidates: their rows of d alone take
    48 MB (24 MB, and as many for their square roots), which the bounds
    computed at once before they took blocks; with a 4 MiB budget the call's
    peak resident memory stays within it, and the bounds are those of the
    default budget. Measured in a fresh process from the kernel's peak
    resident memory (VmHWM, reset before each call; torch's CPU allocations
    are invisible to tracemalloc), which sees the rows when made at once."""
    _needs_peak_reset()
    budget = 4 * 2**20
    code = textwrap.dedent(_PEAK_PRELUDE + _PEAK)
    got = _peak_run(code.replace("BUDGET", str(budget)))
    assert got["equal"]
    assert got["rows"] > 4 * budget / 2**20  # the probe sees the rows at once
    assert got["blocked"] < budget / 2**20


# ---------------------------------------------------------------- BoTorch API


def se_model(X, Y, lengthscale=1.0, noise_sd=0.05):
    kernel = RBFKernel().to(X)
    kernel.lengthscale = lengthscale
    model = SingleTaskGP(
        X,
        Y,
        train_Yvar=torch.full_like(Y, noise_sd**2),
        covar_module=kernel,
        outcome_transform=None,
    )
    model.mean_module.constant.data.fill_(0.0)
    return model.eval()


@pytest.fixture
def small_problem():
    axis = torch.linspace(0, 6, 8, dtype=DTYPE)
    C = torch.cartesian_prod(axis, axis)
    g = torch.Generator().manual_seed(3)
    K = torch.exp(-0.5 * torch.cdist(C, C).square())
    f = torch.linalg.cholesky(K + 1e-9 * torch.eye(64, dtype=DTYPE)) @ torch.randn(
        64, generator=g, dtype=DTYPE
    )
    # 20 observations: the fewest from which the default check certifies.
    idx = torch.randperm(64, generator=g)[:20]
    Y = (f[idx] + 0.05 * torch.randn(20, generator=g, dtype=DTYPE)).unsqueeze(-1)
    return C, f, idx, se_model(C[idx], Y)


def test_certificate_api(small_problem):
    C, _, idx, model = small_problem
    acqf = ChainingUCB(model, C)
    cert = acqf.certificate()
    assert isinstance(cert, Certificate)
    assert sorted(cert.certified) == sorted(idx.tolist())  # the evaluated ones
    assert cert.index in cert.certified
    assert cert.bound == min(cert.bounds)
    torch.testing.assert_close(cert.x, C[cert.index])
    assert cert.t == 21 and cert.delta == DELTA and cert.method == "combined"
    assert cert.bound == pytest.approx(min(cert.components.values()))
    with pytest.raises(FrozenInstanceError):
        cert.bound = 0.0
    payload = json.loads(json.dumps(cert.as_dict()))
    assert payload["index"] == cert.index and payload["bound"] == cert.bound
    assert payload["x"] == C[cert.index].tolist()
    assert set(payload) >= {"index", "x", "bound", "delta", "t", "method"}
    # regret_bound at the candidates is the same certificate.
    rb = acqf.regret_bound(C[list(cert.certified)].unsqueeze(1))
    assert rb.tolist() == pytest.approx(list(cert.bounds), rel=1e-12)
    # Options.
    everywhere = acqf.certificate(among="all")
    assert len(everywhere.certified) == 64
    assert everywhere.bound <= cert.bound
    mask = torch.zeros(64, dtype=torch.bool)
    mask[[5, 9]] = True
    assert acqf.certificate(among=mask).certified == (5, 9)
    assert acqf.certificate(among=[9]).index == 9
    by_mean = acqf.certificate(options=CertificateOptions(rule="max_mean"))
    assert by_mean.index == max(cert.certified, key=lambda i: acqf.candidate_mean[i])
    for method in ("union", "pairwise", "chaining"):
        for links in ("actual", "radius"):
            for tail in (GAUSSIAN, CHERNOFF):
                opts = CertificateOptions(method=method, links=links, tail=tail)
                c = acqf.certificate(options=opts)
                assert c.bound >= 0 and math.isfinite(c.bound)

    def bound(**options):
        return acqf.certificate(options=CertificateOptions(**options)).bound

    assert (
        bound(tail=CHERNOFF, method="pairwise")
        > bound(tail=GAUSSIAN, method="pairwise")
        >= bound(tail=GAUSSIAN, method="union")
    )
    # The default for a fitted model (20 observations): Student-t tails with
    # n - 1 = 19 degrees of freedom for explored candidates, min(n - 1, 10) = 10
    # for the others; heavier than the Gaussian, so its bound is larger.
    assert cert.tail == "student-10/19@0.5"
    assert acqf.certificate().bound > bound(tail=GAUSSIAN)
    assert bound(split_delta=True) >= cert.bound


def test_certificate_bad_input(small_problem):
    C, _, _, model = small_problem
    acqf = ChainingUCB(model, C)
    with pytest.raises(ValueError, match="`among` must be 'all'"):
        acqf.certificate(among="evaluated")
    with pytest.raises(ValueError, match="`among` as a mask must have shape"):
        acqf.certificate(among=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="must index into 0..63"):
        acqf.certificate(among=[64])
    with pytest.raises(TypeError, match="boolean mask or 1-D integer indices"):
        acqf.certificate(among=torch.tensor([0.5]))
    with pytest.raises(ValueError, match="selects no candidate"):
        acqf.certificate(among=torch.zeros(64, dtype=torch.bool))
    with pytest.raises(ValueError, match="`links` must be"):
        acqf.certificate(options=CertificateOptions(links="paper"))
    with pytest.raises(ValueError, match="not a candidate"):
        acqf.regret_bound(torch.full((1, 1, 2), 0.123, dtype=DTYPE))
    # No evaluated candidate: the model was trained off the candidate set.
    off = se_model(C[:3] + 0.01, torch.zeros(3, 1, dtype=DTYPE))
    with pytest.raises(ValueError, match="no candidate is a training input"):
        ChainingUCB(off, C).certificate()


def test_pending_points_are_not_conditioned_on(small_problem):
    C, _, _, model = small_problem
    plain = ChainingUCB(model, C).certificate()
    pending = ChainingUCB(model, C, X_pending=C[[0, 20, 40]]).certificate()
    assert pending.bound == pytest.approx(plain.bound, rel=1e-9)
    assert pending.t == plain.t


def test_certificate_with_pending_points_uses_the_querys_own_build():
    """The certificate's covers are those of the build without pending points,
    with the acquisition's options: on the low-rank path the farthest-first
    covers stay within the default cap (2,048 centres) and the memory budget,
    as for a query without pending points (a second, uncapped build differs)."""
    g = torch.Generator().manual_seed(0)
    C = torch.rand(2600, 2, generator=g, dtype=DTYPE) * 20
    idx = torch.randperm(2600, generator=g)[:30]
    Y = torch.sin(C[idx, :1]) + 0.05 * torch.randn(30, 1, generator=g, dtype=DTYPE)
    model = se_model(C[idx], Y)
    plain = ChainingUCB(model, C, path="low_rank")
    pending = ChainingUCB(model, C, path="low_rank", X_pending=C[:3])
    assert int(plain.chaining.cover_sizes.max()) <= 2600
    assert bool(plain.chaining.bounded.any())  # the cap was reached
    chaining = CertificateOptions(method="chaining")
    a, b = plain.certificate(options=chaining), pending.certificate(options=chaining)
    assert b.bounds == a.bounds and b.components == a.components


def test_bound_beats_eq_ucb_at_the_query(small_problem):
    """At x_t the certificate is below the paper's Eq. (ucb) on these cases."""
    C, f, idx, model = small_problem
    for _ in range(3):
        acqf = ChainingUCB(model, C)
        x, _ = optimize_acqf_discrete(acqf, q=1, choices=C)
        sigma = acqf.mean_and_sigma(x.unsqueeze(0))[1]
        eq_ucb = acqf.chaining.regret_bound(sigma)
        assert acqf.regret_bound(x.unsqueeze(0)).item() <= eq_ucb.item()
        i = int(torch.cdist(x, C).argmin())
        idx = torch.cat([idx, torch.tensor([i])])
        model = se_model(C[idx], f[idx].unsqueeze(-1))


def test_soundness_small_seeded():
    """GP samples with the true prior: the certified regret exceeds the bound
    in at most a delta fraction of the steps (here: never)."""
    axis = torch.linspace(0, 6, 10, dtype=DTYPE)
    C = torch.cartesian_prod(axis, axis)
    K = torch.exp(-0.5 * torch.cdist(C, C).square())
    L = torch.linalg.cholesky(K + 1e-9 * torch.eye(100, dtype=DTYPE))
    steps = violations = 0
    ratios = []
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        f = L @ torch.randn(100, generator=g, dtype=DTYPE)
        idx = torch.randperm(100, generator=g)[:5]
        y = f[idx] + 0.05 * torch.randn(5, generator=g, dtype=DTYPE)
        for _ in range(12):
            acqf = ChainingUCB(se_model(C[idx], y.unsqueeze(-1)), C)
            # From 5 observations: the check and tails, not its minimum.
            cert = acqf.certificate(options=CertificateOptions(min_observations=1))
            assert cert.valid, cert.reason
            regret = float(f.max() - f[cert.index])
            steps += 1
            violations += regret > cert.bound
            ratios.append(regret / cert.bound)
            x, _ = optimize_acqf_discrete(acqf, q=1, choices=C)
            i = int(torch.cdist(x, C).argmin())
            idx = torch.cat([idx, torch.tensor([i])])
            noise = 0.05 * torch.randn(1, generator=g, dtype=DTYPE)
            y = torch.cat([y, f[i : i + 1] + noise])
    assert steps == 72
    assert violations <= DELTA * steps
    assert max(ratios) < 1.0


# ---------------------------------------------------------------- benchmark


def test_benchmark_small_preset_resumes(
    tmp_path, monkeypatch, capsys, summary_from_packed
):
    from benchmarks.__main__ import main

    monkeypatch.setenv("AX_CHAINING_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "cert"
    args = ["certificate", "--small", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    from benchmarks.certificate_bench import OTHERS, VARIANTS

    assert len(lines) == 2 * (len(VARIANTS) + len(OTHERS))
    assert {x["problem"] for x in lines} == {"grid", "se"}
    for x in lines:
        assert x["steps"] == 2 * 6 and 0 <= x["violation_fraction"] <= 1
    run = out / "grid" / "run000.json"
    record = json.loads(run.read_text())
    assert record["complete"] and len(record["variants"]["combined"]["bound"]) == 6
    v = record["variants"]
    for step in range(6):  # combined is the smaller of its parts, union <= pairwise
        assert v["combined"]["bound"][step] <= v["union"]["bound"][step] + 1e-12
        assert v["union"]["bound"][step] <= v["pairwise"]["bound"][step] + 1e-9
        assert v["combined"]["bound"][step] <= v["combined-split"]["bound"][step]
    # A second call reuses the finished runs (resume), byte for byte.
    stamp = run.stat().st_mtime_ns
    assert main([*args, "--table"]) == 0
    table = capsys.readouterr().out
    assert run.stat().st_mtime_ns == stamp
    assert (
        table.startswith("| problem | certificate |") and "| grid | combined |" in table
    )
    # The summary written by the run holds the same table; so does the one
    # remade from the packed runs.
    assert (out / "summary.md").read_text().split("```\n\n", 1)[1] == table
    capsys.readouterr()
    packed = summary_from_packed(
        "certificate", out, ["certificate", "--small"], ("rows",)
    )
    capsys.readouterr()
    assert main(["certificate", "--small", "--records", str(packed), "--table"]) == 0
    assert capsys.readouterr().out == table
    with pytest.raises(SystemExit, match="read by --summary-only"):
        main(["certificate", "--small", "--records", str(packed), "--out", str(out)])
    # Another configuration in the same directory is refused.
    with pytest.raises(ValueError, match="another configuration"):
        main([*args, "--iters", "3"])
    with pytest.raises(SystemExit):
        main(["certificate", "--problem", "himmelblau", "--out", str(out)])


def test_benchmark_scaling_rows(capsys, tmp_path):
    from benchmarks.certificate_bench import scaling

    rows = scaling([60], num_obs=5)
    assert rows[0]["n"] == 60 and rows[0]["union"] <= rows[0]["pairwise"] + 1e-9
    line = capsys.readouterr().out.splitlines()[0]
    assert json.loads(line)["n"] == 60
    from benchmarks.certificate_bench import main

    saved = tmp_path / "scaling.jsonl"
    saved.write_text(line + "\n")
    assert main(["--scaling-table", str(saved)]) == 0
    assert "| 60 | 20 | 5 |" in capsys.readouterr().out


def test_minimization_and_transforms(small_problem):
    """maximize=False certifies min f; Normalize/Standardize models find their
    evaluated candidates and report objective units."""
    from botorch.models.transforms import Normalize, Standardize

    C, f, idx, model = small_problem
    y = model.train_targets.unsqueeze(-1)
    flipped = se_model(C[idx], -y)
    up = ChainingUCB(model, C).certificate()
    down = ChainingUCB(flipped, C, maximize=False).certificate()
    assert down.index == up.index
    assert down.bound == pytest.approx(up.bound, rel=1e-9)
    assert down.mean == pytest.approx(-up.mean, rel=1e-9)

    scaled = SingleTaskGP(
        C[idx] * 10.0,
        3.0 * y + 1.0,
        input_transform=Normalize(d=2),
        outcome_transform=Standardize(m=1),
    ).eval()
    # An unfitted model (default hyperparameters): the LOO check would refuse
    # it; the transforms are what is tested here.
    none = CertificateOptions(calibration="none")
    cert = ChainingUCB(scaled, C * 10.0).certificate(options=none)
    assert sorted(cert.certified) == sorted(idx.tolist())
    assert math.isfinite(cert.bound) and cert.bound > 0


def test_benchmark_limit_small(tmp_path, capsys):
    """``limit --small``: the 30 x 30 grid, seed 0, 2,000 joint samples; the
    union bound beside the Monte Carlo quantile of the regret at three shares
    of delta, and ``--table`` of the line."""
    from ax_chaining.certificate import CheckSchedule
    from benchmarks.__main__ import main

    assert main(["limit", "--small"]) == 0
    out = capsys.readouterr().out
    (r,) = [json.loads(line) for line in out.splitlines()]
    assert (r["problem"], r["seed"], r["samples"], r["obs"]) == ("grid", 0, 2000, 35)
    shares = r["shares"]
    geometric = CheckSchedule("geometric", start=10)
    assert shares == {
        "per_step": 0.05,
        "every_step": pytest.approx(step_delta(0.05, 36)),
        "geometric": pytest.approx(geometric.share(0.05, geometric.next_check(35))),
    }
    q, b = r["mc_quantile"], r["union_bound"]
    # Smaller shares, higher levels: larger quantiles and bounds.
    assert q["per_step"] <= q["geometric"] <= q["every_step"]
    assert b["per_step"] <= b["geometric"] <= b["every_step"]
    # Only the per-step level has 100 samples beyond it; there the bound
    # (valid under the model) is above the quantile.
    assert r["mc_reliable"] == {
        "per_step": True,
        "geometric": False,
        "every_step": False,
    }
    assert b["per_step"] >= q["per_step"] > 0
    assert 0 <= r["true_regret"] <= r["f_range"]
    path = tmp_path / "limit.jsonl"
    path.write_text(out)
    assert main(["limit", "--table", str(path)]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| problem | seed | obs | MC quantile @ delta |")
    assert f"| grid | 0 | 35 | {q['per_step']:.4g} | {b['per_step']:.4g} |" in table
