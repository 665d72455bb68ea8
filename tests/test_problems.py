"""Tests for :mod:`ax_chaining.test_functions.problems` and the paper's other
problems, kept with the benchmarks (small ``n`` for speed)."""

from __future__ import annotations

import json
import math
import os
import warnings

import networkx as nx
import numpy as np
import pytest
import torch

from ax_chaining.kernels import PrecomputedKernel
from ax_chaining.test_functions.problems import (
    DiscreteProblem,
    fixed_se_kernel,
    graph_problem,
    shortest_path_features,
)
from benchmarks.testbeds import (
    JITTERS,
    BenchmarkProblem,
    fit_isotropic_se_lengthscale,
    himmelblau,
    himmelblau_objective,
    himmelblau_problem,
    se_problem,
    toy_1d_problem,
)


def _assert_same(a: DiscreteProblem, b: DiscreteProblem) -> None:
    assert torch.equal(a.X, b.X)
    assert torch.equal(a.f, b.f)
    assert a.info == b.info


def _assert_basic(p: DiscreteProblem, n: int, d: int) -> None:
    assert p.X.shape == (n, d)
    assert p.f.shape == (n,)
    assert p.X.dtype == torch.float64
    assert p.f.dtype == torch.float64
    assert torch.isfinite(p.X).all() and torch.isfinite(p.f).all()
    assert p.noise_std == 0.05
    assert p.n == n
    assert p.optimum == p.f.max().item()
    assert p.f[p.argmax].item() == p.optimum
    json.dumps(p.info)  # JSON-serializable


# ---------------------------------------------------------------------------
# SE
# ---------------------------------------------------------------------------


def test_se_problem_basic(tmp_path) -> None:
    p = se_problem(n=300, seed=0, cache_dir=tmp_path)
    _assert_basic(p, 300, 2)
    assert p.name == "se"
    assert (p.X >= 0).all() and (p.X <= 20).all()
    # the design fills the square
    assert p.X.min() < 1 and p.X.max() > 19
    assert not p.learn_hyperparameters
    assert p.info["n"] == 300 and p.info["seed"] == 0
    assert p.info["jitter"] in JITTERS
    # the true kernel: exp(-d^2 / 2), fixed hyperparameters
    k = p.covar_module
    assert k is not None
    assert all(not q.requires_grad for q in k.parameters())
    x = torch.zeros(1, 2, dtype=torch.float64)
    assert k(x, x + torch.tensor([1.0, 1.0])).to_dense().item() == pytest.approx(
        math.exp(-1.0)
    )
    assert k(x, x).to_dense().item() == pytest.approx(1.0)


def test_se_problem_deterministic_and_seed_dependent(tmp_path) -> None:
    a = se_problem(n=200, seed=3, use_cache=False)
    b = se_problem(n=200, seed=3, cache_dir=tmp_path)
    c = se_problem(n=200, seed=4, use_cache=False)
    _assert_same(a, b)
    assert not torch.equal(a.X, c.X)
    assert not torch.equal(a.f, c.f)


def test_se_sample_has_the_prior_covariance() -> None:
    """Pooled over seeds: E[f^2] = 1 and E[f(x) f(x')] = exp(-|x - x'|^2 / 2)."""
    sq, near, mid, far = [], [], [], []
    n = 300
    iu = torch.triu_indices(n, n, 1)
    for seed in range(16):
        p = se_problem(n=n, seed=seed, use_cache=False)
        sq.append((p.f**2).mean().item())
        d = torch.cdist(p.X, p.X)[iu[0], iu[1]]
        prod = (p.f[:, None] * p.f[None, :])[iu[0], iu[1]]
        near.append(prod[d < 0.5].mean().item())
        mid.append(prod[(d > 1.0) & (d < 1.4)].mean().item())
        far.append(prod[d > 4.0].mean().item())
    assert np.mean(sq) == pytest.approx(1.0, abs=0.2)
    # E[exp(-d^2/2)] for d uniform in a disk of radius 0.5: ~0.94
    assert np.mean(near) == pytest.approx(0.94, abs=0.25)
    # E[exp(-d^2/2)] for 1 < d < 1.4: ~0.49 (0.24 for bandwidth 1/sqrt(2),
    # 0.70 for bandwidth sqrt(2))
    assert np.mean(mid) == pytest.approx(0.49, abs=0.15)
    assert abs(np.mean(far)) < 0.05


def test_se_cache_roundtrip(tmp_path) -> None:
    p1 = se_problem(n=150, seed=1, cache_dir=tmp_path)
    (path,) = tmp_path.glob("*.pt")
    assert "n150" in path.name and "seed1" in path.name
    # A sample that is not loaded is written again (see the corrupt-cache
    # test): an old stamp and the same bytes after the call mean it was read.
    os.utime(path, ns=(10**9, 10**9))
    data = path.read_bytes()
    p2 = se_problem(n=150, seed=1, cache_dir=tmp_path)
    _assert_same(p1, p2)
    assert path.stat().st_mtime_ns == 10**9 and path.read_bytes() == data
    # another (n, seed) is not served from this cache entry
    p3 = se_problem(n=150, seed=2, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.pt"))) == 2
    assert p3.info["seed"] == 2 and not torch.equal(p3.f, p1.f)
    assert path.stat().st_mtime_ns == 10**9


@pytest.mark.parametrize(
    "corrupt",
    [
        b"this is not a torch file",
        b"",
        "wrong_content",
    ],
)
def test_se_corrupt_cache_is_regenerated(tmp_path, corrupt) -> None:
    p1 = se_problem(n=120, seed=5, cache_dir=tmp_path)
    (path,) = tmp_path.glob("*.pt")
    if corrupt == "wrong_content":
        torch.save({"version": 1, "X": torch.zeros(3), "f": 1, "info": "{}"}, path)
    else:
        path.write_bytes(corrupt)
    with pytest.warns(RuntimeWarning, match="regenerating"):
        p2 = se_problem(n=120, seed=5, cache_dir=tmp_path)
    _assert_same(p1, p2)
    # the file was rewritten and is valid again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p3 = se_problem(n=120, seed=5, cache_dir=tmp_path)
    _assert_same(p1, p3)


def test_se_cache_dir_from_env_and_disabled(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AX_CHAINING_CACHE", str(tmp_path / "env_cache"))
    se_problem(n=50, seed=0)
    assert len(list((tmp_path / "env_cache").glob("*.pt"))) == 1
    se_problem(n=60, seed=0, use_cache=False)
    assert len(list((tmp_path / "env_cache").glob("*.pt"))) == 1


@pytest.mark.parametrize(
    ("n", "seed", "error", "match"),
    [
        (0, 0, ValueError, "`n` must be a positive int, got 0"),
        (10, -1, ValueError, "`seed` must be >= 0, got -1"),
        (2.5, 0, TypeError, "`n` must be an int, got float"),
        (10, True, TypeError, "`seed` must be an int, got bool"),
    ],
)
def test_bad_n_seed(n, seed, error, match) -> None:
    with pytest.raises(error, match=match):
        se_problem(n=n, seed=seed, use_cache=False)
    with pytest.raises(error, match=match):
        himmelblau_problem(n=n, seed=seed)


# ---------------------------------------------------------------------------
# Himmelblau
# ---------------------------------------------------------------------------


def test_himmelblau_function() -> None:
    minima = torch.tensor(
        [
            [3.0, 2.0],
            [-2.805118, 3.131312],
            [-3.779310, -3.283186],
            [3.584428, -1.848127],
        ],
        dtype=torch.float64,
    )
    assert torch.allclose(
        himmelblau(minima), torch.zeros(4, dtype=torch.float64), atol=1e-9
    )
    assert himmelblau(torch.tensor([0.0, 0.0])).item() == pytest.approx(170.0)
    # objective = -h / 100 + 0.1 x + 0.05 y
    x = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    expected = -((1 - 2 - 11) ** 2 + (1 + 4 - 7) ** 2) / 100 + 0.1 - 0.1
    assert himmelblau_objective(x).item() == pytest.approx(expected)


def test_himmelblau_problem_basic() -> None:
    p = himmelblau_problem(n=500, seed=0)
    _assert_basic(p, 500, 2)
    assert p.name == "himmelblau"
    assert (p.X.abs() <= 5).all()
    assert torch.equal(p.f, himmelblau_objective(p.X))
    assert p.covar_module is None and p.learn_hyperparameters
    assert p.info["domain"] == [[-5.0, 5.0], [-5.0, 5.0]]
    assert p.info["trend"] == [0.1, 0.05]
    # O(1) range
    assert -9 < p.f.min() and p.f.max() < 0.41
    assert 0.5 < p.f.std() < 2.0
    _assert_same(p, himmelblau_problem(n=500, seed=0))
    assert not torch.equal(p.X, himmelblau_problem(n=500, seed=1).X)


def test_himmelblau_maxima_where_documented() -> None:
    from scipy.optimize import minimize

    def neg(v):
        return -himmelblau_objective(torch.tensor(v, dtype=torch.float64)).item()

    documented = himmelblau_problem(n=1).info["continuous_local_maxima"]
    starts = [[3, 2], [3.58, -1.85], [-2.81, 3.13], [-3.78, -3.28]]
    for start, (x, y, value) in zip(starts, documented, strict=True):
        res = minimize(neg, start, method="BFGS", options={"gtol": 1e-10})
        assert res.x == pytest.approx([x, y], abs=1e-3)
        assert -res.fun == pytest.approx(value, abs=1e-5)
    # sorted by value, the trend breaks the symmetry by more than the noise
    values = [m[2] for m in documented]
    assert values == sorted(values, reverse=True)
    assert values[0] - values[1] > 2 * 0.05
    # the discrete maximizer of a dense design is near the global maximum
    p = himmelblau_problem(n=5000, seed=0)
    best = p.X[p.argmax]
    assert torch.linalg.norm(best - torch.tensor([3.1078, 2.0777])) < 0.3
    assert p.optimum == pytest.approx(values[0], abs=0.02)
    assert p.optimum <= values[0] + 1e-9


def test_fit_isotropic_se_lengthscale() -> None:
    p = himmelblau_problem(n=2000, seed=0)
    k = p.get_covar_module(n_subset=200, seed=0)
    ell = k.base_kernel.lengthscale.item()
    assert 1.0 < ell < 3.0
    assert k.outputscale.item() == pytest.approx(p.f.var().item(), rel=0.5)
    assert all(not q.requires_grad for q in k.parameters())
    # deterministic; same kernel for every caller
    k2 = fit_isotropic_se_lengthscale(
        p.X,
        p.f
        + 0.05
        * torch.randn(
            p.n, generator=torch.Generator().manual_seed(0), dtype=torch.float64
        ),
        n_subset=200,
        seed=0,
    )
    assert k2.base_kernel.lengthscale.item() == pytest.approx(ell, rel=1e-6)
    with pytest.raises(ValueError, match="shape"):
        fit_isotropic_se_lengthscale(p.X, p.f[:-1])


def test_fixed_se_kernel() -> None:
    k = fixed_se_kernel(lengthscale=2.0, outputscale=3.0)
    x = torch.zeros(1, 1, dtype=torch.float64)
    assert k(x, x + 2.0).to_dense().item() == pytest.approx(3.0 * math.exp(-0.5))
    assert all(not q.requires_grad for q in k.parameters())


# ---------------------------------------------------------------------------
# Graphs
# ---------------------------------------------------------------------------


def test_shortest_path_features_hand_computed() -> None:
    # path 0 -> 1 -> 2: lengths 1, 1 (0-1, 1-2) and 2 (0-2); reverse unreachable
    path = shortest_path_features(3, [(0, 1), (1, 2)], max_length=3)
    assert path.tolist() == [2.0, 1.0, 0.0]
    # directed 3-cycle: every ordered pair reachable, 3 at length 1, 3 at length 2
    cycle = shortest_path_features(3, [(0, 1), (1, 2), (2, 0)], max_length=3)
    assert cycle.tolist() == [3.0, 3.0, 0.0]
    # a single edge plus an isolated node
    edge = shortest_path_features(3, [(2, 0)], max_length=3)
    assert edge.tolist() == [1.0, 0.0, 0.0]

    # the normalized SP kernel: <h, h'> / (|h| |h'|)
    def k(a, b):
        return a @ b / (np.linalg.norm(a) * np.linalg.norm(b))

    assert k(path, cycle) == pytest.approx(9 / math.sqrt(5 * 18))  # = 3 / sqrt(10)
    assert k(path, edge) == pytest.approx(2 / math.sqrt(5))
    assert k(cycle, edge) == pytest.approx(3 / math.sqrt(18))
    with pytest.raises(ValueError, match="max_length"):
        shortest_path_features(5, [(0, 1)], max_length=3)


def test_shortest_path_features_match_networkx() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        g = nx.gnp_random_graph(
            int(rng.integers(2, 20)), 0.2, seed=int(rng.integers(1000)), directed=True
        )
        h = np.zeros(18)
        for u, lengths in nx.all_pairs_shortest_path_length(g):
            for v, length in lengths.items():
                if u != v:
                    h[length - 1] += 1
        got = shortest_path_features(g.number_of_nodes(), list(g.edges()), 18)
        assert got.tolist() == h.tolist()


@pytest.fixture(scope="module")
def graph300() -> DiscreteProblem:
    return graph_problem(n=300, seed=0)


def test_graph_problem_basic(graph300) -> None:
    p = graph300
    _assert_basic(p, 300, 1)
    assert p.name == "graph"
    assert torch.equal(p.X[:, 0], torch.arange(300, dtype=torch.float64))
    assert isinstance(p.covar_module, PrecomputedKernel)
    assert p.features is not None and p.features.shape == (300, 18)
    assert p.graph_edges is not None and len(p.graph_edges) == 300


def test_graph_kernel_properties(graph300) -> None:
    K = graph300.covar_module.gram
    assert K.shape == (300, 300) and K.dtype == torch.float64
    assert torch.equal(K.diagonal(), torch.ones(300, dtype=torch.float64))
    assert torch.equal(K, K.T)
    assert torch.linalg.eigvalsh(K).min().item() >= -1e-8
    assert (K >= 0).all() and (K <= 1 + 1e-12).all()
    Phi = graph300.features
    assert torch.allclose(K, Phi @ Phi.T, atol=1e-12)
    # the kernel looked up by index equals the one recomputed from the graphs
    k = graph300.covar_module
    idx = [0, 7, 123, 299]
    X = graph300.X[idx]
    hs = [
        shortest_path_features(
            graph300.graph(i).number_of_nodes(), list(graph300.graph(i).edges()), 18
        )
        for i in idx
    ]
    H = np.stack([h / np.linalg.norm(h) for h in hs])
    assert np.allclose(k(X).to_dense().numpy(), H @ H.T, atol=1e-12)


def test_graphs_are_directed_small_nonempty(graph300) -> None:
    p = graph300
    sizes = set()
    for i in range(p.n):
        g = p.graph(i)
        assert isinstance(g, nx.DiGraph) and g.is_directed()
        assert 2 <= g.number_of_nodes() < 20
        assert g.number_of_nodes() == int(p.graph_num_nodes[i])
        assert g.number_of_edges() >= 1
        assert nx.number_of_selfloops(g) == 0
        sizes.add(g.number_of_nodes())
    assert len(sizes) > 10  # node counts spread over 2..19
    # some graphs are genuinely directed (not symmetric)
    assert any(
        not all(p.graph(i).has_edge(v, u) for u, v in p.graph(i).edges())
        for i in range(20)
    )


def test_graph_objective_is_in_feature_span_and_deterministic(graph300) -> None:
    p = graph300
    w = torch.linalg.lstsq(p.features, p.f[:, None], driver="gelsd").solution
    assert torch.allclose(p.features @ w[:, 0], p.f, atol=1e-10)
    q = graph_problem(n=300, seed=0)
    _assert_same(p, q)
    assert torch.equal(p.covar_module.gram, q.covar_module.gram)
    assert all(
        np.array_equal(a, b) for a, b in zip(p.graph_edges, q.graph_edges, strict=True)
    )
    r = graph_problem(n=300, seed=1)
    assert not torch.equal(p.f, r.f)
    assert not torch.equal(p.covar_module.gram, r.covar_module.gram)


def test_graph_objective_has_unit_prior_variance() -> None:
    sq = [(graph_problem(n=100, seed=s).f ** 2).mean().item() for s in range(30)]
    assert np.mean(sq) == pytest.approx(1.0, abs=0.35)


def test_graph_problem_options() -> None:
    p = graph_problem(n=50, seed=0, max_nodes=5)
    assert p.features.shape == (50, 4)
    assert int(p.graph_num_nodes.max()) <= 5
    with pytest.raises(ValueError, match="min_nodes"):
        graph_problem(n=5, min_nodes=1)
    with pytest.raises(ValueError, match="edge_prob_range"):
        graph_problem(n=5, edge_prob_range=(0.0, 0.5))


# ---------------------------------------------------------------------------
# Toy 1-D and helpers
# ---------------------------------------------------------------------------


def test_toy_1d_problem() -> None:
    p = toy_1d_problem(n=200, seed=0)
    _assert_basic(p, 200, 1)
    assert torch.equal(p.X[:, 0], torch.linspace(0, 1, 200, dtype=torch.float64))
    assert p.info["jitter"] in JITTERS
    assert p.covar_module is not None
    _assert_same(p, toy_1d_problem(n=200, seed=0))
    assert not torch.equal(p.f, toy_1d_problem(n=200, seed=1).f)
    # multi-modal: several interior local maxima
    f = p.f
    n_max = int(((f[1:-1] > f[:-2]) & (f[1:-1] > f[2:])).sum())
    assert n_max >= 2


def test_observe_and_regret() -> None:
    p = himmelblau_problem(n=300, seed=0)
    gen = torch.Generator().manual_seed(0)
    idx = torch.arange(300).repeat(20)
    y = p.observe(idx, generator=gen)
    assert y.shape == idx.shape
    assert (y - p.f[idx]).std().item() == pytest.approx(0.05, rel=0.1)
    y2 = p.observe(idx, generator=torch.Generator().manual_seed(0))
    assert torch.equal(y, y2)
    assert p.simple_regret([p.argmax]) == 0.0
    assert p.simple_regret([0, 1]) == pytest.approx(p.optimum - p.f[:2].max().item())
    assert p.simple_regret(torch.tensor([0])) >= 0.0


def test_get_covar_module_returns_copy_of_true_kernel(graph300) -> None:
    k = BenchmarkProblem(**vars(graph300)).get_covar_module()
    assert k is not graph300.covar_module
    assert k.gram.data_ptr() == graph300.covar_module.gram.data_ptr()
    se = se_problem(n=50, seed=0, use_cache=False)
    k_se = se.get_covar_module()
    assert k_se.base_kernel.lengthscale.item() == pytest.approx(1.0)
