"""The fast engine: neighbour-list greedy covers equal the level-matrix ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ax_chaining.chaining import chaining_covers
from ax_chaining.covers import (
    greedy_dominating_set,
    greedy_dominating_set_csr,
    greedy_dominating_set_lazy,
)
from ax_chaining.distances import DenseDistance, MemoryBudgetError


def _features(n: int, r: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, r, generator=g, dtype=torch.float64).to(dtype)


def _radii(scale: float, num: int) -> list[float]:
    return [scale * 2.0 ** (1 - i) for i in range(1, num + 1)]


@st.composite
def instances(draw):
    """A pseudo-distance and radii: random low-rank covariances, sometimes on a
    grid (many exact ties and distances equal to a radius), sometimes with an
    asymmetric round-off perturbation, in float64 or float32."""
    n = draw(st.integers(1, 60))
    seed = draw(st.integers(0, 10_000))
    dtype = draw(st.sampled_from([torch.float64, torch.float32]))
    kind = draw(st.sampled_from(["lowrank", "grid", "asymmetric"]))
    if kind == "grid":
        # Points on an integer grid with cov = 8 - |x - x'|^2 / 2 (a valid
        # pseudo-distance d^2 = |x - x'|^2): distances are exact integers.
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, 4, (n, 2), generator=g).to(torch.float64)
        cov = 8.0 - torch.cdist(x, x).square() / 2
        scale = 4.0
    else:
        r = draw(st.integers(1, 6))
        phi = _features(n, r, seed, torch.float64)
        cov = phi @ phi.T / r + 1e-3 * torch.eye(n, dtype=torch.float64)
        scale = float(cov.diagonal().max().sqrt())
        if kind == "asymmetric":
            noise = _features(n, n, seed + 1, torch.float64)
            cov = cov + 1e-3 * noise  # rows and columns disagree
    num = draw(st.integers(1, 7))
    return DenseDistance(cov.to(dtype)), _radii(scale, num)


def _covers(distance, eps, **kwargs):
    """Algorithm 1's covers at the radii ``eps`` (scale eps_1; the floor below
    eps_L keeps the levels to at most len(eps))."""
    res = chaining_covers(
        distance,
        t=2,
        scale=eps[0],
        sigma_floor=0.75 * 2.0 ** (1 - len(eps)),
        **kwargs,
    )
    return [c.tolist() for c in res.covers], res.cover_sizes.tolist()


@given(instances())
def test_lists_equal_level_matrix_covers(instance):
    distance, eps = instance
    assert _covers(distance, eps, graph="lists", lazy=False) == _covers(
        distance, eps, graph="matrix"
    )


@given(instances())
def test_level_graph_equals_level_matrix(instance):
    distance, eps = instance
    graph = distance.level_graph(eps)
    dense = torch.zeros(distance.n, distance.n, dtype=torch.uint8)
    rows = torch.repeat_interleave(
        torch.arange(distance.n), graph.indptr.diff().to(torch.long)
    )
    dense[rows, graph.indices.long()] = graph.levels
    assert torch.equal(dense, distance.level_matrix(eps))
    assert torch.all(graph.levels >= 1)


@given(instances())
def test_lazy_coarse_levels_equal_level_matrix_covers(instance):
    """With every level but the last covered lazily from rows (the factor set
    to 0), the picks equal the level-matrix loop's on symmetric distances."""
    import ax_chaining.chaining as chaining

    distance, eps = instance
    d2 = distance.rows(torch.arange(distance.n))
    if not torch.equal(d2, d2.T):
        return  # the lazy loop reads a candidate's row, the lists its column
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chaining, "LAZY_EDGE_FACTOR", 0.0)
        lazy = _covers(distance, eps, graph="lists")
    assert lazy == _covers(distance, eps, graph="matrix")


@given(instances(), st.integers(0, 6))
def test_level_graph_counted_levels(instance, counted):
    distance, eps = instance
    counted = min(counted, len(eps) - 1)
    graph = distance.level_graph(eps, counted=counted)
    levels = distance.level_matrix(eps)
    assert graph.counted_levels == counted
    for i in range(counted):
        assert graph.degrees[i].tolist() == (levels >= i + 1).sum(dim=1).tolist()
    dense = torch.zeros(distance.n, distance.n, dtype=torch.uint8)
    rows = torch.repeat_interleave(
        torch.arange(distance.n), graph.indptr.diff().to(torch.long)
    )
    dense[rows, graph.indices.long()] = graph.levels
    expected = torch.where(levels > counted, levels, torch.zeros_like(levels))
    assert torch.equal(dense, expected)


@given(
    n=st.integers(1, 80),
    r=st.integers(1, 5),
    seed=st.integers(0, 10_000),
    num=st.integers(1, 6),
    counted=st.integers(0, 5),
    step=st.integers(1, 30),
)
def test_symmetric_level_graph_equals_full_rows(n, r, seed, num, counted, step):
    """Each pair computed once (upper blocks, mirrored) gives the graph that
    full rows give: the same neighbours in the same order, levels, degrees."""
    from ax_chaining.distances import LowRankDistance

    g = torch.Generator().manual_seed(seed)
    Z = torch.rand(n, 2, generator=g, dtype=torch.float64) * 4
    K = torch.exp(-0.5 * torch.cdist(Z, Z).square())
    W = 0.3 * torch.randn(r, n, generator=g, dtype=torch.float64)
    eps = _radii(1.0, num)
    counted = min(counted, num - 1)
    graphs = []
    for block in (None, lambda idx, first: K[idx, first:].clone()):
        distance = LowRankDistance(
            lambda idx: K[idx].clone(), K.diagonal().clone(), W, prior_block=block
        )
        distance.block_bytes = step * n * 8  # blocks of `step` rows
        graphs.append(distance.level_graph(eps, counted=counted))
    full, upper = graphs
    assert torch.equal(full.indptr, upper.indptr)
    assert torch.equal(full.indices, upper.indices)
    assert torch.equal(full.levels, upper.levels)
    if counted:
        assert torch.equal(full.degrees, upper.degrees)


def test_lazy_greedy_by_hand():
    # Path 0-1-2-3-4 plus an isolated 5, with degree bounds all 6: the lazy
    # loop must find the same picks as the exact loop (1, then 3, then 5).
    adjacency = torch.eye(6, dtype=torch.bool)
    for a, b in [(0, 1), (1, 2), (2, 3), (3, 4)]:
        adjacency[a, b] = adjacency[b, a] = True
    balls = adjacency.numpy()
    picks = greedy_dominating_set_lazy(
        lambda idx: balls[idx], np.ones(6, dtype=bool), np.full(6, 6), batch=2
    )
    assert picks.tolist() == [1, 3, 5]
    # Only the outside points are covered, and only they are centres.
    outside = np.array([True, True, False, False, True, True])
    picks = greedy_dominating_set_lazy(
        lambda idx: balls[idx], outside, np.full(6, 6), batch=1
    )
    assert picks.tolist() == [0, 4, 5]


@given(
    n=st.integers(1, 40),
    p=st.floats(0.0, 1.0),
    seed=st.integers(0, 10_000),
    batch=st.integers(1, 8),
)
def test_lazy_greedy_equals_dense_greedy(n, p, seed, batch):
    g = torch.Generator().manual_seed(seed)
    adjacency = torch.rand(n, n, generator=g) < p
    adjacency |= adjacency.T.clone()
    adjacency.fill_diagonal_(True)
    balls = adjacency.numpy()
    bound = balls.sum(axis=1) + np.arange(n) % 3  # loose upper bounds
    picks = greedy_dominating_set_lazy(
        lambda idx: balls[idx], np.ones(n, dtype=bool), bound, batch=batch
    )
    assert picks.tolist() == greedy_dominating_set(adjacency).tolist()


@given(
    n=st.integers(1, 40),
    p=st.floats(0.0, 1.0),
    seed=st.integers(0, 10_000),
    symmetric=st.booleans(),
)
def test_csr_greedy_equals_dense_greedy(n, p, seed, symmetric):
    g = torch.Generator().manual_seed(seed)
    adjacency = torch.rand(n, n, generator=g) < p
    if symmetric:
        adjacency |= adjacency.T.clone()
    adjacency.fill_diagonal_(True)
    rows, cols = adjacency.nonzero(as_tuple=True)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(adjacency.sum(dim=1).numpy(), out=indptr[1:])
    picks = greedy_dominating_set_csr(indptr, cols.numpy().astype(np.int32))
    assert picks.tolist() == greedy_dominating_set(adjacency).tolist()


def test_greedy_by_hand_on_lists():
    # Path 0-1-2-3-4 plus an isolated 5: 1 and 3 have degree 3; 1 wins the tie
    # and covers {0, 1, 2}; then 3 covers {3, 4}; 5 holds only itself.
    adjacency = torch.eye(6, dtype=torch.bool)
    for a, b in [(0, 1), (1, 2), (2, 3), (3, 4)]:
        adjacency[a, b] = adjacency[b, a] = True
    indptr = np.concatenate([[0], np.cumsum(adjacency.sum(dim=1).numpy())])
    indices = adjacency.nonzero()[:, 1].numpy().astype(np.int32)
    assert greedy_dominating_set_csr(indptr, indices).tolist() == [1, 3, 5]


def test_lists_respect_memory_budget():
    cov = torch.eye(200, dtype=torch.float64) * 0.1 + 0.9  # every pair within eps_1
    distance = DenseDistance(cov)
    eps = [1.0, 0.5]
    with pytest.raises(MemoryBudgetError, match="memory_budget"):
        _covers(distance, eps, graph="matrix", memory_budget=1000, lazy=False)
    # 40,000 pairs as lists (16 bytes each at the peak) exceed 300 kB; the
    # level matrix (2 bytes a pair) fits: "auto" takes it, with the same covers.
    auto = _covers(distance, eps, memory_budget=300_000, lazy=False)
    assert auto[0] == [[0]]  # one level: every sigma is 1 = eps_1
    sparse = DenseDistance(torch.eye(200, dtype=torch.float64))  # d = sqrt(2)
    with pytest.raises(MemoryBudgetError, match="neighbour lists"):
        _covers(sparse, eps, graph="lists", memory_budget=100, lazy=False)


def _se_gp(kernel, Z: torch.Tensor, n: int = 25) -> object:
    from botorch.models import SingleTaskGP

    g = torch.Generator().manual_seed(1)
    idx = torch.randperm(Z.shape[0], generator=g)[:n]
    y = torch.sin(Z[idx].sum(-1, keepdim=True))
    model = SingleTaskGP(Z[idx], y, covar_module=kernel, outcome_transform=None)
    return model.eval()


@pytest.mark.parametrize("ard", [False, True])
@pytest.mark.parametrize("scaled", [False, True])
def test_low_rank_se_rows_equal_the_dense_posterior(ard, scaled):
    """The low-rank route's rows of d_t^2 (a plain SE kernel in three passes)
    equal the dense posterior's, on one thread and with a large block's
    exponential split over two."""
    from gpytorch.kernels import RBFKernel, ScaleKernel

    from ax_chaining.posterior import candidate_posterior

    g = torch.Generator().manual_seed(0)
    Z = 20.0 * torch.rand(3000, 3, generator=g, dtype=torch.float64)
    kernel = RBFKernel(ard_num_dims=3 if ard else None).to(torch.float64)
    kernel.lengthscale = torch.tensor([0.7, 1.3, 2.0] if ard else [1.1])
    if scaled:
        kernel = ScaleKernel(kernel).to(torch.float64)
        kernel.outputscale = 2.5
    model = _se_gp(kernel, Z)
    low = candidate_posterior(model, Z, path="low_rank").distance
    dense = candidate_posterior(model, Z, path="dense").distance
    idx = torch.tensor([0, 7, 2999, 7])
    torch.testing.assert_close(low.rows(idx), dense.rows(idx), atol=1e-11, rtol=0)
    big = torch.arange(0, 3000, 2)  # 1,500 x 3,000 entries: split over threads
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        split = low.rows(big)
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(split, dense.rows(big), atol=1e-11, rtol=0)


@pytest.mark.parametrize("kind", ["matern", "active_dims", "product"])
def test_low_rank_rows_of_other_kernels_equal_the_dense_posterior(kind):
    from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel

    from ax_chaining.posterior import candidate_posterior

    g = torch.Generator().manual_seed(2)
    Z = 5.0 * torch.rand(200, 2, generator=g, dtype=torch.float64)
    kernel = {
        "matern": lambda: ScaleKernel(MaternKernel()),
        "active_dims": lambda: RBFKernel(active_dims=[0]),
        "product": lambda: RBFKernel(active_dims=[0]) * MaternKernel(active_dims=[1]),
    }[kind]().to(torch.float64)
    model = _se_gp(kernel, Z, n=15)
    low = candidate_posterior(model, Z, path="low_rank").distance
    dense = candidate_posterior(model, Z, path="dense").distance
    idx = torch.arange(0, 200, 7)
    torch.testing.assert_close(low.rows(idx), dense.rows(idx), atol=1e-11, rtol=0)
