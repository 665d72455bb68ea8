r"""Test problems of Contal, Malherbe & Vayatis (2015), Section 4: random directed
graphs under the shortest-path kernel, and a GP sample on a grid; deterministic
given ``seed`` (never the global random state)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from torch import Tensor

from ax_chaining.checks import check_int
from ax_chaining.kernels import PrecomputedKernel

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

__all__ = [
    "DEFAULT_NOISE_STD",
    "DiscreteProblem",
    "fixed_se_kernel",
    "graph_problem",
    "grid_problem",
    "shortest_path_features",
]

#: Observation noise standard deviation of every experiment of the paper.
DEFAULT_NOISE_STD = 0.05

_DTYPE = torch.float64


@dataclass
class DiscreteProblem:
    r"""A finite-candidate maximization problem: ``N x d`` inputs ``X`` (graphs:
    ``X[i] = i``), noise-free values ``f`` observed with noise ``noise_std``,
    the true kernel ``covar_module`` and a JSON ``info``; for graphs, features
    :math:`\Phi` (``covar_module(X, X) = features @ features.T``) and the graphs.

    Example:
        >>> problem = graph_problem(n=100)
        >>> problem.n, problem.optimum >= problem.f[0].item()
        (100, True)
    """

    name: str
    X: Tensor
    f: Tensor
    noise_std: float = DEFAULT_NOISE_STD
    covar_module: Kernel | None = None
    info: dict[str, Any] = field(default_factory=dict)
    features: Tensor | None = None
    graph_num_nodes: np.ndarray | None = None
    graph_edges: list[np.ndarray] | None = None

    @property
    def n(self) -> int:
        """Number of candidates ``N``."""
        return self.X.shape[0]

    @property
    def optimum(self) -> float:
        """The maximum of ``f`` over the candidates."""
        return self.f.max().item()

    @property
    def argmax(self) -> int:
        """The index of the (first) maximizer of ``f``."""
        return int(torch.argmax(self.f))

    def graph(self, i: int) -> nx.DiGraph:
        """Candidate ``i`` of a graph problem as a ``networkx.DiGraph``."""
        import networkx as nx

        if self.graph_edges is None or self.graph_num_nodes is None:
            raise ValueError(f"Problem {self.name!r} has no graphs.")
        g = nx.empty_graph(int(self.graph_num_nodes[i]), create_using=nx.DiGraph)
        g.add_edges_from(map(tuple, self.graph_edges[i].tolist()))
        return g


def fixed_se_kernel(
    lengthscale: float = 1.0, outputscale: float = 1.0, dtype: torch.dtype = _DTYPE
) -> ScaleKernel:
    r"""The SE kernel :math:`s \exp(-\lVert x - x' \rVert^2 / (2 \ell^2))` as
    ``ScaleKernel(RBFKernel())``, its hyperparameters fixed (no gradient).

    Example:
        >>> k = fixed_se_kernel(lengthscale=1.0)
        >>> x = torch.zeros(1, 2, dtype=torch.float64)
        >>> float(k(x, x + 1.0).to_dense())  # exp(-2 / 2)
        0.36787944117144233
    """
    kernel = ScaleKernel(RBFKernel()).to(dtype)
    kernel.base_kernel.lengthscale = lengthscale
    kernel.outputscale = outputscale
    kernel.requires_grad_(False)
    return kernel


def grid_problem(side: int = 30, seed: int = 0) -> tuple[Tensor, Tensor]:
    r"""``side x side`` grid on :math:`[0, 6]^2` and the GP sample :math:`L z`,
    :math:`L L^\top = K + 10^{-10} I` (SE kernel, lengthscale 1), ``z ~ N(0, I)``.

    Example:
        >>> X, f = grid_problem(side=5)
        >>> X.shape, f.shape
        (torch.Size([25, 2]), torch.Size([25]))
    """
    axis = torch.linspace(0.0, 6.0, side, dtype=_DTYPE)
    X = torch.cartesian_prod(axis, axis)
    K = torch.cdist(X, X, compute_mode="donot_use_mm_for_euclid_dist")
    K.pow_(2).mul_(-0.5).exp_()
    K.diagonal().add_(1e-10)
    z = torch.randn(
        X.shape[0], generator=torch.Generator().manual_seed(seed), dtype=_DTYPE
    )
    return X, torch.linalg.cholesky(K) @ z


def shortest_path_features(
    num_nodes: int, edges: np.ndarray | list[tuple[int, int]], max_length: int
) -> np.ndarray:
    r"""Shortest-path length histogram of a directed graph (Borgwardt & Kriegel).

    Entry :math:`\ell - 1` counts the ordered pairs :math:`u \ne v` whose
    shortest path has :math:`\ell = 1..` ``max_length`` (``>= num_nodes - 1``)
    edges.

    Example:
        >>> shortest_path_features(3, [(0, 1), (1, 2)], max_length=2)
        array([2., 1.])
    """
    from scipy.sparse.csgraph import floyd_warshall

    if max_length < num_nodes - 1:
        raise ValueError(
            f"`max_length` must be at least num_nodes - 1 = {num_nodes - 1}, got "
            f"{max_length}."
        )
    adjacency = np.zeros((num_nodes, num_nodes))
    e = np.asarray(edges, dtype=np.intp).reshape(-1, 2)
    adjacency[e[:, 0], e[:, 1]] = 1.0
    dist = floyd_warshall(adjacency, directed=True, unweighted=True)
    off = dist[~np.eye(num_nodes, dtype=bool)]
    lengths = off[np.isfinite(off)].astype(np.int64)
    return np.bincount(lengths, minlength=max_length + 1)[1:].astype(np.float64)


def graph_problem(
    n: int = 10_000,
    seed: int = 0,
    max_nodes: int = 19,
    min_nodes: int = 2,
    edge_prob_range: tuple[float, float] = (0.1, 0.5),
) -> DiscreteProblem:
    r"""Random directed graphs with the normalized shortest-path kernel.

    Graph ``i`` is ``networkx.gnp_random_graph(k_i, p_i, directed=True)``,
    :math:`k_i \sim \mathcal{U}\{` ``min_nodes..max_nodes`` :math:`\}`,
    :math:`p_i \sim \mathcal{U}` ``[edge_prob_range]``, redrawn until it has an
    edge. With :math:`\phi = h / \lVert h \rVert` for its
    :func:`shortest_path_features` :math:`h`, :math:`k(g, g') = \langle
    \phi(g), \phi(g') \rangle` and :math:`f = \Phi w`, :math:`w \sim
    \mathcal{N}(0, I)`.

    Example:
        >>> problem = graph_problem(n=100, seed=0)
        >>> g = problem.graph(problem.argmax)  # a networkx.DiGraph
    """
    import networkx as nx

    n, seed = check_int("n", n, 1), check_int("seed", seed, 0)
    if not 2 <= min_nodes <= max_nodes:
        raise ValueError(
            "Expected 2 <= `min_nodes` <= `max_nodes`, got "
            f"min_nodes={min_nodes}, max_nodes={max_nodes}."
        )
    p_lo, p_hi = (float(p) for p in edge_prob_range)
    if not 0.0 < p_lo <= p_hi <= 1.0:
        raise ValueError(
            f"`edge_prob_range` must satisfy 0 < low <= high <= 1, got "
            f"{edge_prob_range}."
        )
    rng = np.random.default_rng(seed)
    num_feat = max_nodes - 1
    hist = np.empty((n, num_feat), dtype=np.float64)
    num_nodes = np.empty(n, dtype=np.int64)
    edges_list: list[np.ndarray] = []
    for i in range(n):
        k = int(rng.integers(min_nodes, max_nodes + 1))
        p = float(rng.uniform(p_lo, p_hi))
        while True:
            g = nx.gnp_random_graph(
                k, p, seed=int(rng.integers(2**63 - 1)), directed=True
            )
            if g.number_of_edges() > 0:
                break
        edges = np.array(sorted(g.edges()), dtype=np.int64).reshape(-1, 2)
        num_nodes[i] = k
        edges_list.append(edges)
        hist[i] = shortest_path_features(k, edges, max_length=num_feat)
    w = rng.standard_normal(num_feat)

    H = torch.from_numpy(hist)
    norms = H.norm(dim=-1)
    Phi = H / norms.unsqueeze(-1)
    gram = H @ H.T  # integer-valued, hence exact and exactly symmetric
    for start in range(0, n, 2048):
        gram[start : start + 2048].div_(norms[start : start + 2048, None] * norms)
    gram.fill_diagonal_(1.0)
    f = Phi @ torch.from_numpy(w)
    info = {
        "problem": "graph",
        "n": n,
        "seed": seed,
        "min_nodes": min_nodes,
        "max_nodes": max_nodes,
        "edge_prob_range": [p_lo, p_hi],
        "generator": "networkx.gnp_random_graph(k, p, seed, directed=True), "
        "k ~ U{min_nodes..max_nodes}, p ~ U[edge_prob_range], redrawn until >= 1 "
        "edge; all randomness from numpy.random.default_rng(seed)",
        "kernel": "normalized shortest-path kernel (delta kernel on path lengths): "
        "cosine similarity of histograms of finite shortest-path lengths 1.."
        f"{num_feat} over ordered pairs of distinct nodes (Floyd-Warshall)",
        "sampler": "f = Phi @ w, w ~ N(0, I), exact since K = Phi Phi^T",
        "feature_dim": num_feat,
        "num_distinct_features": int(np.unique(hist, axis=0).shape[0]),
        "mean_num_edges": float(np.mean([e.shape[0] for e in edges_list])),
        "noise_std": DEFAULT_NOISE_STD,
    }
    return DiscreteProblem(
        name="graph",
        X=torch.arange(n, dtype=_DTYPE).unsqueeze(-1),
        f=f,
        covar_module=PrecomputedKernel(gram),
        info=info,
        features=Phi,
        graph_num_nodes=num_nodes,
        graph_edges=edges_list,
    )
