"""The fast engine: neighbour-list greedy covers equal the level-matrix ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ax_chaining.chaining import _greedy_levels, _greedy_levels_matrix
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


@given(instances())
def test_lists_equal_level_matrix_covers(instance):
    distance, eps = instance
    lists = _greedy_levels(distance, eps, graph="lists")
    matrix = _greedy_levels_matrix(distance, eps)
    for a, b in zip(lists[0], matrix[0], strict=True):
        assert a.tolist() == b.tolist()
    assert lists[1:] == matrix[1:]


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
        lazy = _greedy_levels(distance, eps, graph="lists")
    matrix = _greedy_levels_matrix(distance, eps)
    for a, b in zip(lazy[0], matrix[0], strict=True):
        assert a.tolist() == b.tolist()
    assert lazy[1:] == matrix[1:]


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
    with pytest.raises(MemoryBudgetError, match="memory_budget"):
        _greedy_levels(distance, [1.0, 0.5], graph="matrix", memory_budget=1000)
    # 40,000 pairs as lists (16 bytes each at the peak) exceed 300 kB; the
    # level matrix (2 bytes a pair) fits: "auto" takes it, with the same covers.
    auto = _greedy_levels(distance, [1.0, 0.5], memory_budget=300_000)
    assert [c.tolist() for c in auto[0]] == [[0], [0]]
    sparse = DenseDistance(torch.eye(200, dtype=torch.float64))  # d = sqrt(2)
    with pytest.raises(MemoryBudgetError, match="neighbour lists"):
        _greedy_levels(sparse, [1.0, 0.5], graph="lists", memory_budget=100)


@pytest.mark.parametrize("ard", [False, True])
@pytest.mark.parametrize("scaled", [False, True])
def test_se_rows_equal_covar_module(ard, scaled):
    from gpytorch.kernels import RBFKernel, ScaleKernel

    from ax_chaining.posterior import _SERows

    g = torch.Generator().manual_seed(0)
    Z = 20.0 * torch.rand(300, 3, generator=g, dtype=torch.float64)
    kernel = RBFKernel(ard_num_dims=3 if ard else None).to(torch.float64)
    kernel.lengthscale = torch.tensor([0.7, 1.3, 2.0] if ard else [1.1])
    if scaled:
        kernel = ScaleKernel(kernel).to(torch.float64)
        kernel.outputscale = 2.5
    rows = _SERows.of(kernel, Z)
    assert rows is not None
    idx = torch.tensor([0, 7, 299, 7])
    with torch.no_grad():
        expected = kernel(Z[idx], Z).to_dense()
    torch.testing.assert_close(rows(idx, None), expected, atol=1e-13, rtol=0)
    # Columns from `first` on, and a large block's exponential split over
    # threads (forced here by a threshold of 0), give the same values.
    torch.testing.assert_close(rows(idx, None, 5), expected[:, 5:], atol=1e-13, rtol=0)
    with pytest.MonkeyPatch.context() as patch:
        import ax_chaining.posterior as posterior

        patch.setattr(posterior, "_SPLIT_EXP", 0)
        patch.setattr(torch, "get_num_threads", lambda: 3)
        split = rows(idx, None)
    torch.testing.assert_close(split, expected, atol=1e-13, rtol=0)


def test_se_rows_only_for_plain_se_kernels():
    from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel

    from ax_chaining.posterior import _SERows

    Z = torch.rand(10, 2, dtype=torch.float64)
    assert _SERows.of(ScaleKernel(MaternKernel()), Z) is None
    assert _SERows.of(RBFKernel(active_dims=[0]), Z) is None
    assert _SERows.of(RBFKernel(batch_shape=torch.Size([2])), Z) is None
