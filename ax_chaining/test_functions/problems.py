r"""The test problems of Contal, Malherbe & Vayatis (2015), Section 4, and a 1-D toy.

Each is a finite set of candidates with a noise-free objective to maximize,
observed with Gaussian noise of standard deviation 0.05; every factory is
deterministic given its ``seed`` (its own generator, never the global state).
"""

from __future__ import annotations

import copy
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from torch import Tensor

from ax_chaining.checks import check_int
from ax_chaining.io import write_atomic
from ax_chaining.kernels import PrecomputedKernel

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

__all__ = [
    "DEFAULT_NOISE_STD",
    "DiscreteProblem",
    "JITTERS",
    "default_cache_dir",
    "fit_isotropic_se_lengthscale",
    "fixed_se_kernel",
    "graph_problem",
    "grid_problem",
    "himmelblau",
    "himmelblau_objective",
    "himmelblau_problem",
    "se_problem",
    "shortest_path_features",
    "toy_1d_problem",
]

#: Observation noise standard deviation of every experiment of the paper.
DEFAULT_NOISE_STD = 0.05

_DTYPE = torch.float64

#: Absolute jitters added to the prior Gram matrix (variance 1), tried in turn
#: until its Cholesky factorization succeeds (``info["jitter"]`` of a GP sample).
JITTERS: tuple[float, ...] = (0.0, *(float(f"1e-{k}") for k in range(12, 3, -1)))
_SE_CACHE_VERSION = 1
_SE_SIDE = 20.0
_HIMMELBLAU_SCALE = 100.0
_HIMMELBLAU_TREND = (0.1, 0.05)
_HIMMELBLAU_BOUND = 5.0


@dataclass
class DiscreteProblem:
    r"""A finite-candidate-set maximization problem.

    Attributes:
        name: ``"se"``, ``"himmelblau"``, ``"graph"`` or ``"toy_1d"``.
        X: ``N x d`` float64 candidate inputs of the GP (graphs: ``X[i] = i``).
        f: ``N`` float64 noise-free objective values, to be maximized.
        noise_std: Standard deviation of the Gaussian observation noise.
        covar_module: The true prior kernel, hyperparameters fixed, or ``None``
            if it must be learned (:meth:`get_covar_module`).
        learn_hyperparameters: Whether the kernel must be learned (Himmelblau).
        info: JSON-serializable description (seed, domain, generator, jitter).
        features: Optional ``N x p`` float64 features with
            ``covar_module(X, X) = features @ features.T`` (graphs).
        graph_num_nodes: Graphs: ``N`` int64 node counts.
        graph_edges: Graphs: ``N`` int64 arrays ``m_i x 2`` of directed edges
            (:meth:`graph`).

    Example:
        >>> problem = toy_1d_problem(n=50)
        >>> regret = problem.simple_regret([0, 1])
    """

    name: str
    X: Tensor
    f: Tensor
    noise_std: float = DEFAULT_NOISE_STD
    covar_module: Kernel | None = None
    learn_hyperparameters: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    features: Tensor | None = None
    graph_num_nodes: np.ndarray | None = None
    graph_edges: list[np.ndarray] | None = None

    @property
    def n(self) -> int:
        """Number of candidates ``N``."""
        return self.X.shape[0]

    @property
    def dim(self) -> int:
        """Number of input columns ``d``."""
        return self.X.shape[-1]

    @property
    def optimum(self) -> float:
        """The maximum of ``f`` over the candidates."""
        return self.f.max().item()

    @property
    def argmax(self) -> int:
        """The index of the (first) maximizer of ``f``."""
        return int(torch.argmax(self.f))

    def observe(
        self, indices: Tensor | int, generator: torch.Generator | None = None
    ) -> Tensor:
        """``f[indices] + noise_std * eps``, ``eps ~ N(0, 1)`` drawn from the
        CPU ``generator``, with the shape of ``indices``."""
        idx = torch.as_tensor(indices, dtype=torch.long)
        values = self.f[idx]
        eps = torch.randn(
            values.shape, generator=generator, dtype=values.dtype, device="cpu"
        )
        return values + self.noise_std * eps.to(values.device)

    def simple_regret(self, indices: Tensor | list[int]) -> float:
        """Simple regret ``max_x f(x) - max_{i in indices} f(x_i)`` of the
        (non-empty) queried ``indices``."""
        idx = torch.as_tensor(indices, dtype=torch.long).reshape(-1)
        return self.optimum - self.f[idx].max().item()

    def get_covar_module(
        self, n_subset: int = 500, seed: int = 0, noise_std: float | None = None
    ) -> Kernel:
        r"""The kernel, hyperparameters fixed, every method uses on this problem.

        A deep copy of :attr:`covar_module` (a Gram matrix is shared), or an
        isotropic SE kernel fitted by :func:`fit_isotropic_se_lengthscale` to
        noisy observations (``noise_std``, default :attr:`noise_std`) at
        ``n_subset`` random candidates, deterministic given ``seed``.
        """
        if self.covar_module is not None:
            return copy.deepcopy(self.covar_module)
        noise_std = self.noise_std if noise_std is None else noise_std
        gen = torch.Generator().manual_seed(seed)
        y = self.f + noise_std * torch.randn(self.n, generator=gen, dtype=_DTYPE)
        return fit_isotropic_se_lengthscale(
            self.X, y, n_subset=n_subset, seed=seed, noise_std=noise_std
        )

    def graph(self, i: int) -> nx.DiGraph:
        """Candidate ``i`` of a graph problem as a ``networkx.DiGraph``."""
        import networkx as nx

        if self.graph_edges is None or self.graph_num_nodes is None:
            raise ValueError(f"Problem {self.name!r} has no graphs.")
        g = nx.DiGraph()
        g.add_nodes_from(range(int(self.graph_num_nodes[i])))
        g.add_edges_from(map(tuple, self.graph_edges[i].tolist()))
        return g


def fixed_se_kernel(
    lengthscale: float = 1.0, outputscale: float = 1.0, dtype: torch.dtype = _DTYPE
) -> ScaleKernel:
    r"""An isotropic SE kernel with fixed hyperparameters.

    .. math::

        k(x, x') = s \exp\left(-\frac{\lVert x - x' \rVert^2}{2 \ell^2}\right)

    as ``ScaleKernel(RBFKernel())`` of ``dtype`` with ``requires_grad=False``
    on every parameter (so ``fit_gpytorch_mll`` leaves them alone).

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
    r"""``side x side`` grid on :math:`[0, 6]^2` and an exact GP sample on it:
    :math:`L z`, :math:`L L^\top = K + 10^{-10} I` for the SE kernel of
    lengthscale 1, ``z`` from ``torch.Generator().manual_seed(seed)``.

    Example:
        >>> X, f = grid_problem(side=5)
        >>> X.shape, f.shape
        (torch.Size([25, 2]), torch.Size([25]))
    """
    axis = torch.linspace(0.0, 6.0, side, dtype=_DTYPE)
    X = torch.cartesian_prod(axis, axis)
    K = _se_gram(X, lengthscale=1.0)
    K.diagonal().add_(1e-10)
    z = torch.randn(
        X.shape[0], generator=torch.Generator().manual_seed(seed), dtype=_DTYPE
    )
    return X, torch.linalg.cholesky(K) @ z


def _cholesky_sample(K: Tensor, z: Tensor) -> tuple[Tensor, float]:
    """``L z`` with ``L L^T = K + jitter I`` for the smallest working jitter
    (``K``'s diagonal is overwritten), and that jitter."""
    diag = K.diagonal().clone()
    for jitter in JITTERS:
        K.diagonal().copy_(diag + jitter)
        L, info = torch.linalg.cholesky_ex(K)
        if int(info) == 0:
            f = L @ z
            if bool(torch.isfinite(f).all()):
                return f, jitter
        del L
    raise RuntimeError(  # pragma: no cover - SE Gram with jitter 1e-4 is PD
        f"Cholesky failed for all jitters up to {JITTERS[-1]}."
    )


def _se_gram(X: Tensor, lengthscale: float) -> Tensor:
    r"""``exp(-||x - x'||^2 / (2 l^2))`` built in place (one ``N x N`` tensor)."""
    K = torch.cdist(X, X, compute_mode="donot_use_mm_for_euclid_dist")
    K.pow_(2).mul_(-0.5 / lengthscale**2).exp_()
    return K


def default_cache_dir() -> Path:
    """Where the problems and benchmarks cache what they compute once:
    ``$AX_CHAINING_CACHE`` if set, else ``~/.cache/ax_chaining``."""
    env = os.environ.get("AX_CHAINING_CACHE")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "ax_chaining"


def _load_se_cache(path: Path, n: int, seed: int) -> tuple[Tensor, Tensor, dict]:
    """A cached SE sample, validated; raises on any inconsistency."""
    data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or data.get("version") != _SE_CACHE_VERSION:
        raise ValueError("unexpected cache format")
    X, f = data["X"], data["f"]
    info = json.loads(data["info"])
    ok = (
        isinstance(X, Tensor)
        and isinstance(f, Tensor)
        and X.dtype == _DTYPE
        and f.dtype == _DTYPE
        and X.shape == (n, 2)
        and f.shape == (n,)
        and bool(torch.isfinite(X).all())
        and bool(torch.isfinite(f).all())
        and info.get("n") == n
        and info.get("seed") == seed
    )
    if not ok:
        raise ValueError("cache content does not match (n, seed)")
    return X, f, info


def _sample_se(n: int, seed: int) -> tuple[Tensor, Tensor, dict]:
    gen = torch.Generator().manual_seed(seed)
    X = _SE_SIDE * torch.rand(n, 2, generator=gen, dtype=_DTYPE)
    z = torch.randn(n, generator=gen, dtype=_DTYPE)
    K = _se_gram(X, lengthscale=1.0)
    f, jitter = _cholesky_sample(K, z)
    del K
    info = {
        "problem": "se",
        "n": n,
        "seed": seed,
        "domain": [[0.0, _SE_SIDE], [0.0, _SE_SIDE]],
        "design": "uniform i.i.d. in the square [0, 20]^2",
        "kernel": "isotropic SE exp(-||x - x'||^2 / 2), lengthscale 1, variance 1",
        "lengthscale": 1.0,
        "outputscale": 1.0,
        "sampler": "Cholesky of the float64 prior Gram + jitter * I",
        "jitter": jitter,
        "rng": "torch.Generator(cpu).manual_seed(seed): X = 20 * rand(n, 2), "
        "then z = randn(n); f = L z",
        "noise_std": DEFAULT_NOISE_STD,
    }
    return X, f, info


def se_problem(
    n: int = 10_000,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
) -> DiscreteProblem:
    r"""An exact sample of a 2-D isotropic SE Gaussian process (the paper's "SE").

    ``n`` i.i.d. uniform points in :math:`[0, 20]^2` and :math:`f = L z`,
    :math:`L L^\top = K + \delta I` with
    :math:`k(x, x') = \exp(-\lVert x - x' \rVert^2 / 2)` and the smallest
    working jitter :math:`\delta` of :data:`JITTERS` (``info["jitter"]``). It
    costs ``O(n^3)`` time and ``2 n^2`` float64 entries, so it is cached
    (atomically) as ``se_problem_v1_n{n}_seed{seed}.pt`` in ``cache_dir``
    (default :func:`default_cache_dir`; ``use_cache=False``: neither read nor
    written); an unreadable or mismatched file is regenerated with a warning.
    The kernel is ``fixed_se_kernel(1.0, 1.0)``.

    Example:
        >>> problem = se_problem(n=200, seed=0, use_cache=False)
        >>> problem.X.shape, problem.f.shape
        (torch.Size([200, 2]), torch.Size([200]))
    """
    n, seed = check_int("n", n, 1), check_int("seed", seed, 0)
    loaded = path = None
    if use_cache:
        folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        path = folder / f"se_problem_v{_SE_CACHE_VERSION}_n{n}_seed{seed}.pt"
        if path.exists():
            try:
                loaded = _load_se_cache(path, n, seed)
            except Exception as e:
                warnings.warn(
                    f"Ignoring unreadable SE problem cache file {path} ({e!r}); "
                    "regenerating it.",
                    RuntimeWarning,
                    stacklevel=2,
                )
    if loaded is None:
        X, f, info = _sample_se(n, seed)
        if path is not None:
            obj = {"version": _SE_CACHE_VERSION, "X": X, "f": f}
            obj["info"] = json.dumps(info)
            try:
                write_atomic(path, lambda fh: torch.save(obj, fh), binary=True)
            except OSError as e:
                warnings.warn(
                    f"Could not write SE problem cache file {path} ({e!r}).",
                    RuntimeWarning,
                    stacklevel=2,
                )
    else:
        X, f, info = loaded
    return DiscreteProblem(
        "se", X, f, covar_module=fixed_se_kernel(1.0, 1.0), info=info
    )


def himmelblau(X: Tensor) -> Tensor:
    r"""Himmelblau's function :math:`h(x, y) = (x^2 + y - 11)^2 + (x + y^2 - 7)^2`.

    on ``... x 2`` inputs; its four global minima (value 0) are at :math:`(3, 2)`,
    :math:`(-2.805, 3.131)`, :math:`(-3.779, -3.283)` and :math:`(3.584, -1.848)`.

    Example:
        >>> himmelblau(torch.tensor([3.0, 2.0]))
        tensor(0.)
    """
    x, y = X[..., 0], X[..., 1]
    return (x**2 + y - 11) ** 2 + (x + y**2 - 7) ** 2


def himmelblau_objective(X: Tensor) -> Tensor:
    r"""The Himmelblau benchmark objective (to maximize).

    .. math::

        f(x, y) = -\frac{h(x, y)}{100} + 0.1 x + 0.05 y

    on ``... x 2`` inputs, :math:`h` from :func:`himmelblau`: on
    :math:`[-5, 5]^2` the values lie in :math:`[-8.05, 0.41]`, and the trend
    breaks the symmetry of the maxima, at about :math:`(3.108, 2.078)` (global,
    0.4074), :math:`(3.665, -1.678)` (0.2742), :math:`(-2.639, 3.188)` (-0.1144)
    and :math:`(-3.665, -3.187)` (-0.5341).

    Example:
        >>> himmelblau_objective(torch.tensor([3.0, 2.0]))
        tensor(0.4000)
    """
    a, b = _HIMMELBLAU_TREND
    return -himmelblau(X) / _HIMMELBLAU_SCALE + a * X[..., 0] + b * X[..., 1]


def himmelblau_problem(n: int = 10_000, seed: int = 0) -> DiscreteProblem:
    r"""Himmelblau's function with a linear trend (the paper's "Himmelblau").

    ``n`` i.i.d. uniform points of :math:`[-5, 5]^2` (``torch.Generator`` of
    ``seed``) and :func:`himmelblau_objective`. The kernel is learned
    (``covar_module=None``): as in the paper, an isotropic SE bandwidth by
    marginal likelihood (:meth:`DiscreteProblem.get_covar_module`).

    Example:
        >>> problem = himmelblau_problem(n=1000, seed=0)
        >>> kernel = problem.get_covar_module(n_subset=200, seed=0)
    """
    n, seed = check_int("n", n, 1), check_int("seed", seed, 0)
    gen = torch.Generator().manual_seed(seed)
    b = _HIMMELBLAU_BOUND
    X = -b + 2 * b * torch.rand(n, 2, generator=gen, dtype=_DTYPE)
    f = himmelblau_objective(X)
    info = {
        "problem": "himmelblau",
        "n": n,
        "seed": seed,
        "domain": [[-b, b], [-b, b]],
        "design": "uniform i.i.d. in [-5, 5]^2, X = -5 + 10 * rand(n, 2)",
        "objective": "f(x, y) = -h(x, y) / 100 + 0.1 * x + 0.05 * y, "
        "h(x, y) = (x^2 + y - 11)^2 + (x + y^2 - 7)^2",
        "scale": 1.0 / _HIMMELBLAU_SCALE,
        "trend": list(_HIMMELBLAU_TREND),
        "continuous_local_maxima": [
            [3.1078, 2.0777, 0.407443],
            [3.6648, -1.6777, 0.274215],
            [-2.6389, 3.1881, -0.114435],
            [-3.6654, -3.1867, -0.534128],
        ],
        "kernel": "isotropic SE, bandwidth learned by marginal likelihood",
        "noise_std": DEFAULT_NOISE_STD,
    }
    return DiscreteProblem("himmelblau", X, f, learn_hyperparameters=True, info=info)


def fit_isotropic_se_lengthscale(
    X: Tensor,
    y: Tensor,
    n_subset: int = 500,
    seed: int = 0,
    noise_std: float | None = DEFAULT_NOISE_STD,
    learn_outputscale: bool = False,
    lengthscale_inits: tuple[float, ...] = (1.0,),
) -> ScaleKernel:
    r"""Fit an isotropic SE bandwidth by maximum marginal likelihood on a subset.

    A ``SingleTaskGP`` with a constant mean (discarded) and the kernel
    :math:`s \exp(-\lVert x - x' \rVert^2 / (2 \ell^2))`, no priors and no
    transforms, is fitted by ``fit_gpytorch_mll`` to ``n_subset`` random points of
    ``(X, y)`` (``seed``) from each of ``lengthscale_inits``; the largest
    marginal likelihood wins. As in the paper only :math:`\ell` is learned by
    default, with :math:`s = \max(\widehat{\mathrm{Var}}(y) - \sigma^2,
    10^{-6})` on the subset; ``learn_outputscale=True`` learns :math:`s` too
    (on a smooth polynomial it tends to an ill-conditioned prior, a huge
    variance with a bandwidth wider than the domain).

    Args:
        X: ``N x d`` inputs.
        y: ``N`` (or ``N x 1``) noisy observations.
        n_subset: Points used for the fit (all if ``>= N``).
        seed: Seed of the subset.
        noise_std: Known noise standard deviation :math:`\sigma`; ``None``
            learns the noise (and :math:`\sigma = 0` above).
        learn_outputscale: Whether to learn :math:`s` too.
        lengthscale_inits: Initial bandwidths of the restarts.

    Returns:
        ``ScaleKernel(RBFKernel())`` (float64) with every parameter fixed.

    Example:
        >>> problem = himmelblau_problem(n=1000)
        >>> k = fit_isotropic_se_lengthscale(problem.X, problem.f, n_subset=200)
    """
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    X = torch.as_tensor(X, dtype=_DTYPE)
    y = torch.as_tensor(y, dtype=_DTYPE).reshape(-1)
    if X.dim() != 2 or X.shape[0] != y.shape[0]:
        raise ValueError(
            "fit_isotropic_se_lengthscale expects `X` of shape N x d and `y` of "
            f"shape N, got {tuple(X.shape)} and {tuple(y.shape)}."
        )
    if n_subset < 2:
        raise ValueError(f"`n_subset` must be at least 2, got {n_subset}.")
    if not lengthscale_inits:
        raise ValueError("`lengthscale_inits` must not be empty.")
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randperm(X.shape[0], generator=gen)[:n_subset]
    train_X, train_Y = X[idx], y[idx].unsqueeze(-1)
    noise_var = 0.0 if noise_std is None else float(noise_std) ** 2
    train_Yvar = None if noise_std is None else torch.full_like(train_Y, noise_var)
    scale0 = max(train_Y.var().item() - noise_var, 1e-6)
    best: tuple[float, float, float] | None = None
    for ell0 in lengthscale_inits:
        covar = ScaleKernel(RBFKernel()).to(_DTYPE)
        covar.base_kernel.lengthscale = ell0
        covar.outputscale = scale0
        covar.raw_outputscale.requires_grad_(learn_outputscale)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = SingleTaskGP(
                train_X,
                train_Y,
                train_Yvar=train_Yvar,
                covar_module=covar,
                outcome_transform=None,
                input_transform=None,
            )
            mll = ExactMarginalLogLikelihood(model.likelihood, model)
            try:
                fit_gpytorch_mll(mll)
            except Exception:  # pragma: no cover - keep the other restarts
                continue
            model.train()
            with torch.no_grad():
                value = mll(model(train_X), train_Y.squeeze(-1)).item()
        ell = covar.base_kernel.lengthscale.item()
        scale = covar.outputscale.item()
        if math.isfinite(value) and (best is None or value > best[0]):
            best = (value, ell, scale)
    if best is None:  # pragma: no cover
        raise RuntimeError("All marginal-likelihood fits failed.")
    return fixed_se_kernel(lengthscale=best[1], outputscale=best[2])


def shortest_path_features(
    num_nodes: int, edges: np.ndarray | list[tuple[int, int]], max_length: int
) -> np.ndarray:
    r"""Shortest-path length histogram of a directed graph (Borgwardt & Kriegel).

    Entry :math:`\ell - 1` of the float64 array counts the ordered pairs
    :math:`u \ne v` of nodes ``0..num_nodes - 1`` whose shortest path (in edges,
    Floyd-Warshall) has length :math:`\ell = 1..` ``max_length`` (at least
    ``num_nodes - 1``); unreachable pairs are left out. The shortest-path kernel
    with a delta kernel on lengths is the dot product of these histograms.

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

    Graph ``i`` is ``networkx.gnp_random_graph(k_i, p_i, directed=True)`` with
    :math:`k_i \sim \mathcal{U}\{` ``min_nodes..max_nodes`` :math:`\}` and
    :math:`p_i \sim \mathcal{U}` ``[edge_prob_range]``, redrawn until it has an
    edge (all from ``numpy.random.default_rng(seed)``). With :math:`h(g)` its
    :func:`shortest_path_features` and :math:`\phi = h / \lVert h \rVert`,
    :math:`k(g, g') = \langle \phi(g), \phi(g') \rangle` (Borgwardt & Kriegel,
    2005): the Gram is computed exactly from the integer histograms (diagonal
    exactly 1) into a :class:`~ax_chaining.kernels.PrecomputedKernel`, and
    :math:`f = \Phi w`, :math:`w \sim \mathcal{N}(0, I)`, is an exact sample at
    ``O(n)`` cost. ``X`` is the ``n x 1`` item index, ``features`` :math:`\Phi`,
    and ``graph_num_nodes``, ``graph_edges`` the graphs
    (:meth:`DiscreteProblem.graph`).

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
    block = 2048
    for start in range(0, n, block):
        stop = min(start + block, n)
        gram[start:stop].div_(norms[start:stop, None] * norms[None, :])
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


def toy_1d_problem(
    n: int = 500, seed: int = 0, lengthscale: float = 0.08
) -> DiscreteProblem:
    r"""An exact GP sample on ``n`` equispaced points of :math:`[0, 1]` (Figure 1),
    kernel :math:`\exp(-(x - x')^2 / (2 \ell^2))` (``lengthscale``), by Cholesky
    with the smallest working jitter (``info["jitter"]``).

    Example:
        >>> problem = toy_1d_problem(n=200, seed=1)
        >>> problem.X.shape
        torch.Size([200, 1])
    """
    n, seed = check_int("n", n, 2), check_int("seed", seed, 0)
    if not lengthscale > 0:
        raise ValueError(f"`lengthscale` must be positive, got {lengthscale}.")
    gen = torch.Generator().manual_seed(seed)
    X = torch.linspace(0.0, 1.0, n, dtype=_DTYPE).unsqueeze(-1)
    z = torch.randn(n, generator=gen, dtype=_DTYPE)
    f, jitter = _cholesky_sample(_se_gram(X, lengthscale), z)
    info = {
        "problem": "toy_1d",
        "n": n,
        "seed": seed,
        "domain": [[0.0, 1.0]],
        "design": "regular grid linspace(0, 1, n)",
        "kernel": "SE exp(-(x - x')^2 / (2 l^2)), variance 1",
        "lengthscale": float(lengthscale),
        "outputscale": 1.0,
        "sampler": "Cholesky of the float64 prior Gram + jitter * I",
        "jitter": jitter,
        "noise_std": DEFAULT_NOISE_STD,
    }
    kernel = fixed_se_kernel(float(lengthscale), 1.0)
    return DiscreteProblem("toy_1d", X, f, covar_module=kernel, info=info)
