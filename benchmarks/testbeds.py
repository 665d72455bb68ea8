r"""The benchmarks' problems and objectives: the paper's SE, Himmelblau and Figure 1
problems (Contal, Malherbe & Vayatis, 2015, Section 4), the MOSES library and its
multi-property objective, and the likelihood of a feature table's priors.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gpytorch.kernels import Kernel, RBFKernel, ScaleKernel
from gpytorch.likelihoods import GaussianLikelihood
from torch import Tensor

from ax_chaining.checks import check_int
from ax_chaining.io import write_atomic
from ax_chaining.kernels.priors import likelihood_options
from ax_chaining.test_functions import problems
from ax_chaining.test_functions.problems import (
    DEFAULT_NOISE_STD,
    DiscreteProblem,
    fixed_se_kernel,
)

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
class BenchmarkProblem(DiscreteProblem):
    r"""A :class:`~ax_chaining.test_functions.problems.DiscreteProblem` of the
    paper's experiments: noisy observations, regret, and the kernel every
    method uses (learned where ``learn_hyperparameters``, as for Himmelblau).

    Example:
        >>> problem = toy_1d_problem(n=50)
        >>> regret = problem.simple_regret([0, 1])
    """

    learn_hyperparameters: bool = False

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
        """``max_x f(x) - max_{i in indices} f(x_i)`` of the queried ``indices``."""
        idx = torch.as_tensor(indices, dtype=torch.long).reshape(-1)
        return self.optimum - self.f[idx].max().item()

    def get_covar_module(
        self, n_subset: int = 500, seed: int = 0, noise_std: float | None = None
    ) -> Kernel:
        r"""A deep copy of :attr:`covar_module`, or an isotropic SE kernel fitted
        by :func:`fit_isotropic_se_lengthscale` to noisy observations at
        ``n_subset`` random candidates (``seed``)."""
        if self.covar_module is not None:
            return copy.deepcopy(self.covar_module)
        noise_std = self.noise_std if noise_std is None else noise_std
        gen = torch.Generator().manual_seed(seed)
        y = self.f + noise_std * torch.randn(self.n, generator=gen, dtype=_DTYPE)
        return fit_isotropic_se_lengthscale(
            self.X, y, n_subset=n_subset, seed=seed, noise_std=noise_std
        )


def graph_problem(n: int = 10_000, seed: int = 0, **options) -> BenchmarkProblem:
    """:func:`ax_chaining.test_functions.problems.graph_problem` as a
    :class:`BenchmarkProblem`."""
    return BenchmarkProblem(**vars(problems.graph_problem(n, seed, **options)))


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
    return Path(env) if env else Path.home() / ".cache" / "ax_chaining"


def _load_se_cache(path: Path, n: int, seed: int) -> tuple[Tensor, Tensor, dict]:
    """A cached SE sample, validated; raises on any inconsistency."""
    data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or data.get("version") != _SE_CACHE_VERSION:
        raise ValueError("unexpected cache format")
    X, f = data["X"], data["f"]
    info = json.loads(data["info"])
    ok = all(
        isinstance(t, Tensor) and t.dtype == _DTYPE and t.shape == shape
        for t, shape in ((X, (n, 2)), (f, (n,)))
    )
    ok = ok and bool(torch.isfinite(X).all()) and bool(torch.isfinite(f).all())
    if not (ok and info.get("n") == n and info.get("seed") == seed):
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
) -> BenchmarkProblem:
    r"""An exact sample of a 2-D isotropic SE Gaussian process (the paper's "SE").

    ``n`` i.i.d. uniform points in :math:`[0, 20]^2` and :math:`f = L z`,
    :math:`L L^\top = K + \delta I` with
    :math:`k(x, x') = \exp(-\lVert x - x' \rVert^2 / 2)` and the smallest
    working jitter :math:`\delta` of :data:`JITTERS`; cached as
    ``se_problem_v1_n{n}_seed{seed}.pt`` in ``cache_dir`` (default
    :func:`default_cache_dir`) unless ``use_cache=False``, an unreadable file
    regenerated with a warning.

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
                message = f"Ignoring unreadable SE problem cache file {path} ({e!r})"
                warnings.warn(
                    f"{message}; regenerating it.", RuntimeWarning, stacklevel=2
                )
    if loaded is None:
        X, f, info = _sample_se(n, seed)
        if path is not None:
            obj = {"version": _SE_CACHE_VERSION, "X": X, "f": f}
            obj["info"] = json.dumps(info)
            try:
                write_atomic(path, lambda fh: torch.save(obj, fh), binary=True)
            except OSError as e:
                message = f"Could not write SE problem cache file {path} ({e!r})."
                warnings.warn(message, RuntimeWarning, stacklevel=2)
    else:
        X, f, info = loaded
    return BenchmarkProblem(
        "se", X, f, covar_module=fixed_se_kernel(1.0, 1.0), info=info
    )


def himmelblau(X: Tensor) -> Tensor:
    r"""Himmelblau's function :math:`h(x, y) = (x^2 + y - 11)^2 + (x + y^2 - 7)^2`
    on ``... x 2`` inputs; its four global minima (value 0) are at :math:`(3, 2)`,
    :math:`(-2.805, 3.131)`, :math:`(-3.779, -3.283)` and :math:`(3.584, -1.848)`.

    Example:
        >>> himmelblau(torch.tensor([3.0, 2.0]))
        tensor(0.)
    """
    x, y = X[..., 0], X[..., 1]
    return (x**2 + y - 11) ** 2 + (x + y**2 - 7) ** 2


def himmelblau_objective(X: Tensor) -> Tensor:
    r"""The Himmelblau benchmark objective (to maximize),
    :math:`f(x, y) = -h(x, y) / 100 + 0.1 x + 0.05 y` on ``... x 2`` inputs.

    On :math:`[-5, 5]^2` the values lie in :math:`[-8.05, 0.41]`, and the trend
    breaks the symmetry of the maxima, at about :math:`(3.108, 2.078)` (global,
    0.4074), :math:`(3.665, -1.678)` (0.2742), :math:`(-2.639, 3.188)` (-0.1144)
    and :math:`(-3.665, -3.187)` (-0.5341).

    Example:
        >>> himmelblau_objective(torch.tensor([3.0, 2.0]))
        tensor(0.4000)
    """
    a, b = _HIMMELBLAU_TREND
    return -himmelblau(X) / _HIMMELBLAU_SCALE + a * X[..., 0] + b * X[..., 1]


def himmelblau_problem(n: int = 10_000, seed: int = 0) -> BenchmarkProblem:
    r"""Himmelblau's function with a linear trend (the paper's "Himmelblau"):
    :func:`himmelblau_objective` at ``n`` i.i.d. uniform points of
    :math:`[-5, 5]^2`; its kernel learned as in the paper
    (:meth:`BenchmarkProblem.get_covar_module`).

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
    return BenchmarkProblem("himmelblau", X, f, learn_hyperparameters=True, info=info)


def fit_isotropic_se_lengthscale(
    X: Tensor,
    y: Tensor,
    n_subset: int = 500,
    seed: int = 0,
    noise_std: float | None = DEFAULT_NOISE_STD,
) -> ScaleKernel:
    r"""Fit an isotropic SE bandwidth by maximum marginal likelihood on a subset.

    The kernel :math:`s \exp(-\lVert x - x' \rVert^2 / (2 \ell^2))` (no priors,
    no transforms) on ``n_subset`` random points of ``(X, y)``: as in the paper
    only :math:`\ell` is learned, from 1, with :math:`s =
    \max(\widehat{\mathrm{Var}}(y) - \sigma^2, 10^{-6})`; ``noise_std=None``
    learns the noise (and :math:`\sigma = 0`).

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
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randperm(X.shape[0], generator=gen)[:n_subset]
    train_X, train_Y = X[idx], y[idx].unsqueeze(-1)
    noise_var = 0.0 if noise_std is None else float(noise_std) ** 2
    train_Yvar = None if noise_std is None else torch.full_like(train_Y, noise_var)
    covar = ScaleKernel(RBFKernel()).to(_DTYPE)
    covar.base_kernel.lengthscale = 1.0
    covar.outputscale = max(train_Y.var().item() - noise_var, 1e-6)
    covar.raw_outputscale.requires_grad_(False)
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
            model.train()
            with torch.no_grad():
                value = mll(model(train_X), train_Y.squeeze(-1)).item()
        except Exception:  # pragma: no cover
            value = math.nan
    if not math.isfinite(value):  # pragma: no cover
        raise RuntimeError("All marginal-likelihood fits failed.")
    return fixed_se_kernel(
        lengthscale=covar.base_kernel.lengthscale.item(),
        outputscale=covar.outputscale.item(),
    )


def toy_1d_problem(
    n: int = 500, seed: int = 0, lengthscale: float = 0.08
) -> BenchmarkProblem:
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
    return BenchmarkProblem("toy_1d", X, f, covar_module=kernel, info=info)


def feature_table_likelihood(prior: str, num_dims: int) -> GaussianLikelihood:
    """The likelihood that goes with a feature table's ``prior``: BoTorch's
    log-normal noise prior for ``"botorch"``, else
    ``GaussianLikelihood(**likelihood_options(prior, num_dims))``.

    Example:
        >>> likelihood = feature_table_likelihood("chen", F.shape[1])
        >>> model = SingleTaskGP(X, Y, covar_module=kernel, likelihood=likelihood)
    """
    from botorch.models.utils.gpytorch_modules import (
        get_gaussian_likelihood_with_lognormal_prior,
    )

    options = likelihood_options(prior, num_dims)
    if options is None:
        return get_gaussian_likelihood_with_lognormal_prior()
    return GaussianLikelihood(**options)


# The MOSES training set (1.58 M ZINC molecules) and a multi-property objective
# a medicinal chemist would screen for, in the style of GuacaMol's (a geometric
# mean of desirabilities in [0, 1]), computed with RDKit.

#: The wheel that ships the MOSES data set.
MOSES_REQUIREMENT = "molsets==0.3.1"
_MEMBER = "moses/dataset/data/train.csv.gz"


def moses_smiles(cache_dir: str | Path) -> list[str]:
    """The 1,584,663 SMILES of the MOSES training set, in file order, from the
    ``molsets`` wheel downloaded (not installed) into ``cache_dir`` once."""
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    csv_path = cache / "moses_train.csv.gz"
    if not csv_path.exists():
        wheels = sorted(cache.glob("molsets-0.3.1-*.whl"))
        if not wheels:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
                + [MOSES_REQUIREMENT, "-d", str(cache)],
                check=True,
            )
            wheels = sorted(cache.glob("molsets-0.3.1-*.whl"))
        with zipfile.ZipFile(wheels[0]) as wheel:
            data = wheel.read(_MEMBER)
        write_atomic(csv_path, lambda fh: fh.write(data), binary=True)
    with gzip.open(csv_path, "rt") as fh:
        lines = fh.read().splitlines()
    column = lines[0].split(",").index("SMILES")
    return [line.split(",")[column] for line in lines[1:] if line]


def mpo(smiles: str) -> float:
    r"""The multi-property objective of one molecule (larger is better; an
    unparsable SMILES scores ``nan``):

    .. math::

        \mathrm{MPO}(m) = \big(d_{\log P}(m)\; d_{\mathrm{TPSA}}(m)\;
        d_{\mathrm{Fsp3}}(m)\big)^{1/3},

    with :math:`d_{\log P} = \exp(-(\log P - 2.5)^2 / 2)` (Crippen logP,
    ``Descriptors.MolLogP``), :math:`d_{\mathrm{TPSA}} = \exp(-((\mathrm{TPSA}
    - 65) / 25)^2 / 2)` (``rdMolDescriptors.CalcTPSA``) and
    :math:`d_{\mathrm{Fsp3}} = \sqrt{\mathrm{Fsp3}}`
    (``rdMolDescriptors.CalcFractionCSP3``). Each term is smooth, so the best
    molecules are not tied; RDKit's QED is left out (ten times the cost).
    """
    from rdkit import Chem, RDLogger
    from rdkit.Chem import Descriptors, rdMolDescriptors

    RDLogger.DisableLog("rdApp.*")
    mol = Chem.MolFromSmiles(smiles) if isinstance(smiles, str) else None
    if mol is None:
        return math.nan
    logp = Descriptors.MolLogP(mol)
    tpsa = rdMolDescriptors.CalcTPSA(mol)
    fsp3 = rdMolDescriptors.CalcFractionCSP3(mol)
    d_logp = math.exp(-0.5 * (logp - 2.5) ** 2)
    d_tpsa = math.exp(-0.5 * ((tpsa - 65.0) / 25.0) ** 2)
    d_fsp3 = math.sqrt(fsp3)
    return (d_logp * d_tpsa * d_fsp3) ** (1.0 / 3.0)


def _chunk(smiles: Sequence[str]) -> np.ndarray:
    return np.array([mpo(s) for s in smiles], dtype=np.float64)


def mpo_scores(
    smiles: Sequence[str],
    cache: str | Path | None = None,
    workers: int = 2,
    progress: bool = True,
    chunk_size: int = 20_000,
) -> np.ndarray:
    """:func:`mpo` of every molecule, in parallel; with ``cache`` (a ``.npy``
    path) kept there and reused for the same SMILES in the same order (their
    SHA-256 beside it), an interrupted run resuming from its finished chunks."""
    check_int("workers", workers, 1)
    check_int("chunk_size", chunk_size, 1)
    items = list(smiles)
    digest = hashlib.sha256("\n".join(map(str, items)).encode()).hexdigest()
    meta = {"num_smiles": len(items), "smiles_sha256": digest}
    path = None if cache is None else Path(cache)
    starts = list(range(0, len(items), chunk_size))
    done: dict[int, np.ndarray] = {}
    if path is not None:
        side = path.with_suffix(".json")
        if path.exists() and side.exists() and json.loads(side.read_text()) == meta:
            return np.load(path)
        parts = path.with_name(path.name + ".parts")
        manifest = parts / "manifest.json"
        if parts.exists() and (
            not manifest.exists() or json.loads(manifest.read_text()) != meta
        ):
            shutil.rmtree(parts)  # parts of other SMILES
        parts.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps(meta))
        for start in starts:
            if (part := parts / f"{start:012d}.npy").exists():
                done[start] = np.load(part)
    todo = [s for s in starts if s not in done]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        initial = sum(len(v) for v in done.values())
        bar = tqdm(total=len(items), initial=initial, desc="MPO", unit="mol")
    with ProcessPoolExecutor(max_workers=workers) as pool:
        chunks = (items[s : s + chunk_size] for s in todo)
        for start, values in zip(todo, pool.map(_chunk, chunks), strict=True):
            done[start] = values
            if path is not None:
                part = parts / f"{start:012d}.npy"
                write_atomic(part, lambda fh, v=values: np.save(fh, v), binary=True)
            if bar is not None:
                bar.update(len(values))
    if bar is not None:
        bar.close()
    result = np.concatenate([done[s] for s in starts]) if starts else np.zeros(0)
    if path is not None:
        write_atomic(path, lambda fh: np.save(fh, result), binary=True)
        path.with_suffix(".json").write_text(json.dumps(meta))
        shutil.rmtree(parts)
    return result
