r"""From a BoTorch model to the engine: posterior mean, :math:`d_t` and the scale.

This is the only module that reads BoTorch models for the engine. It builds

* the posterior mean :math:`\mu_t` over the candidates,
* a :class:`~ax_chaining.distances.PseudoDistance` for :math:`d_t` (the latent
  function, no observation noise), conditioned on pending points with their
  posterior mean as hallucinated observations (exact for the covariance, which
  does not depend on the observed values),
* the largest prior standard deviation over the candidates (the default scale).

Two routes (``path``) build the covers:

``"dense"``
    Exact greedy covers (Algorithm 2) on the :math:`\epsilon_i`-graphs of
    :math:`d_t`, kept as neighbour lists
    (:func:`~ax_chaining.level_graph.build_level_graph`; memory follows
    the pairs within :math:`\epsilon_1`) or, where those would not fit the
    budget, as an ``N x N`` uint8 level matrix. For exact single-output GPs with
    a Gaussian likelihood and no or a ``Standardize`` outcome transform the
    graphs are built from rows of :math:`d_t` computed a block at a time as
    :math:`K - W^\top W`, so no float ``N x N`` matrix exists; for any other
    model the covariance comes from ``model.posterior(candidates).distribution``
    (about three float ``N x N`` matrices at its peak).
``"low_rank"``
    Rows of :math:`d_t` on demand from the prior kernel and :math:`W`, with
    ``O(N r)`` memory, and farthest-first nested covers; exact single-output
    GPs only.

``path="auto"`` takes the dense route for models without the low-rank form,
and for the others while ``N <= AUTO_EXACT_MAX_N`` (32,768: exact covers read
all ``N^2`` pairs) and the greedy covers' graph, estimated from a sample of
rows, fits in the memory budget; else the low-rank one. It raises
:class:`~ax_chaining.distances.MemoryBudgetError` when nothing fits.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import gpytorch
import numpy as np
import torch
from botorch.acquisition.objective import (
    PosteriorTransform,
    ScalarizedPosteriorTransform,
)
from botorch.exceptions import UnsupportedError
from botorch.models import ModelListGP
from botorch.models.model import Model
from botorch.models.transforms.outcome import Standardize
from gpytorch.likelihoods import FixedNoiseGaussianLikelihood, GaussianLikelihood
from gpytorch.models import ExactGP
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor

from ax_chaining.chaining import lazy_levels
from ax_chaining.checks import check_matrix, match_rows
from ax_chaining.distances import (
    COLUMN_BLOCK,
    DEFAULT_MEMORY_BUDGET,
    DenseDistance,
    LowRankDistance,
    MemoryBudgetError,
    PseudoDistance,
    column_blocks,
    dense_memory_bytes,
    format_bytes,
)
from ax_chaining.kernels.precomputed import item_indices
from ax_chaining.level_graph import GRAPH_PEAK_EDGE_BYTES

__all__ = [
    "CandidatePosterior",
    "FeatureRows",
    "KernelRows",
    "LibraryRows",
    "LowRankFactors",
    "ModelFactors",
    "PosteriorCache",
    "PosteriorMemory",
    "SERows",
    "cached_factors",
    "candidate_posterior",
    "check_path",
    "choose_path",
    "dense_posterior",
    "check_posterior_transform",
    "evaluated_candidates",
    "factor_blocks",
    "known_prior_variance",
    "library_kernel_parts",
    "low_rank_posterior",
    "low_rank_row_batch",
    "model_device_dtype",
    "model_inputs",
    "num_training_points",
    "pending_factor_blocks",
    "pending_noise",
    "pending_rows",
    "posterior_at",
    "prior_variance",
    "row_budgets",
    "sign_flip",
    "supports_low_rank",
    "to_model",
]

Path = Literal["auto", "dense", "low_rank"]

#: Largest N for which ``path="auto"`` builds exact greedy covers (they read
#: all N^2 pairs of d_t; beyond, farthest-first covers on rows on demand).
AUTO_EXACT_MAX_N = 32_768

#: Candidates per call when a quantity is computed in chunks.
_CHUNK = 8192
#: Entries of a kernel block above which its exponential is split over threads.
_SPLIT_EXP = 2**22
#: Candidates per posterior call for the mean (kept small in case a model
#: builds a covariance anyway).
_MEAN_CHUNK = 2048


@dataclass
class CandidatePosterior:
    """Posterior quantities over the candidates that the engine consumes.

    Attributes:
        mean: ``N`` posterior means of the (transformed) objective.
        distance: The pseudo-distance :math:`d_t` over the candidates.
        path: Which route built ``distance``: ``"dense"`` or ``"low_rank"``.
        prior_variance: ``N`` prior variances in outcome units where the route
            computed them on the way (low-rank form), else None.
        pending_noise: Observation-noise variances given to the pending points,
            or None without pending points.
        reason: Why ``path="auto"`` left the exact greedy covers, or None.
    """

    mean: Tensor
    distance: PseudoDistance
    path: str
    prior_variance: Tensor | None = None
    pending_noise: Tensor | None = None
    reason: str | None = None


def num_training_points(model: Model) -> int | None:
    """Number of observations the model is conditioned on, or None if unknown."""
    if isinstance(model, ModelListGP):
        counts = [num_training_points(m) for m in model.models]
        return None if any(c is None for c in counts) else max(counts)
    inputs = getattr(model, "train_inputs", None)
    if not inputs or inputs[0] is None:
        return None
    return int(inputs[0].shape[-2])


def sign_flip(
    model: Model, posterior_transform: PosteriorTransform | None
) -> tuple[float, float] | None:
    """``(w, b)`` when ``posterior_transform`` maps a single output ``y`` to
    ``w y + b`` with ``|w| = 1``, else None.

    This is what Ax passes for one objective (``w = -1`` to minimize): it leaves
    every variance, hence :math:`d_t`, unchanged and only maps the mean, so the
    low-rank route stays exact under it.
    """
    if not isinstance(posterior_transform, ScalarizedPosteriorTransform):
        return None
    weights = posterior_transform.weights.reshape(-1)
    if getattr(model, "num_outputs", None) != 1 or weights.numel() != 1:
        return None
    w = float(weights[0])
    return (w, float(posterior_transform.offset)) if abs(w) == 1.0 else None


def supports_low_rank(model: Model, posterior_transform: PosteriorTransform | None):
    """Whether the low-rank route reproduces ``model.posterior`` exactly."""
    if posterior_transform is not None and sign_flip(model, posterior_transform):
        posterior_transform = None
    if posterior_transform is not None or not isinstance(model, ExactGP):
        return False
    if getattr(model, "num_outputs", None) != 1:
        return False
    if not isinstance(
        model.likelihood, (GaussianLikelihood, FixedNoiseGaussianLikelihood)
    ):
        return False
    transform = getattr(model, "outcome_transform", None)
    if transform is not None and not isinstance(transform, Standardize):
        return False
    inputs = model.train_inputs
    return inputs is not None and inputs[0].ndim == 2 and hasattr(model, "covar_module")


def _outcome_variance_scale(model: Model, like: Tensor) -> Tensor:
    """Factor that maps model-space variances to outcome units, per output."""
    transform = getattr(model, "outcome_transform", None)
    if transform is None:
        return torch.ones(1, dtype=like.dtype, device=like.device)
    if isinstance(transform, Standardize):
        return transform.stdvs.to(like).reshape(-1).square()
    raise UnsupportedError(
        f"Cannot infer the prior scale through a {type(transform).__name__} outcome "
        "transform; pass scale= explicitly (the largest prior standard deviation of "
        "the objective over the candidates)."
    )


def prior_variance(
    model: Model, X: Tensor, posterior_transform: PosteriorTransform | None = None
) -> Tensor:
    r"""Prior variance :math:`k(x, x)` of the objective at ``X``, in outcome units.

    Supports GPyTorch models with a ``covar_module`` (single output, or batched
    multi-output with a :class:`ScalarizedPosteriorTransform`, outputs
    independent a priori), :class:`ModelListGP`, and ``Standardize`` outcome
    transforms.

    Args:
        model: A BoTorch model.
        X: ``N x d`` inputs in the model's raw input space.
        posterior_transform: None or a ``ScalarizedPosteriorTransform``.

    Returns:
        ``N`` prior variances.
    """
    if isinstance(model, ModelListGP):
        per_output = torch.stack(
            [prior_variance(m, X) for m in model.models], dim=-1
        )  # N x m
    else:
        covar_module = getattr(model, "covar_module", None)
        if covar_module is None:
            raise UnsupportedError(
                f"Cannot read the prior of a {type(model).__name__} (no covar_module); "
                "pass scale= explicitly."
            )
        with torch.no_grad():
            Xt = model.transform_inputs(X)
            chunks = [
                covar_module(Xt[i : i + _CHUNK], diag=True)
                for i in range(0, Xt.shape[0], _CHUNK)
            ]
        var = torch.cat(chunks, dim=-1)  # N, or m x N for batched multi-output
        var = var.reshape(-1, X.shape[0]).T  # N x m
        per_output = var * _outcome_variance_scale(model, var)
    if posterior_transform is None:
        if per_output.shape[-1] != 1:
            raise UnsupportedError(
                "Must specify a posterior_transform when using a multi-output model."
            )
        return per_output[:, 0]
    if isinstance(posterior_transform, ScalarizedPosteriorTransform):
        weights = posterior_transform.weights.to(per_output)
        return (per_output * weights.square()).sum(dim=-1)
    raise UnsupportedError(
        f"Cannot infer the prior scale through a {type(posterior_transform).__name__}; "
        "pass scale= explicitly."
    )


def known_prior_variance(
    post: CandidatePosterior,
    model: Model,
    X: Tensor,
    posterior_transform: PosteriorTransform | None = None,
) -> Tensor:
    """The prior variances of ``post``'s candidates ``X``: those its route
    computed, else :func:`prior_variance` (the same units either way)."""
    if post.prior_variance is not None:
        return post.prior_variance
    return prior_variance(model, X, posterior_transform)


def _posterior_mean(
    model: Model, X: Tensor, posterior_transform: PosteriorTransform | None
) -> Tensor:
    # Only the mean is needed: GPyTorch would otherwise build a chunk x chunk
    # predictive covariance for every chunk.
    with torch.no_grad(), gpytorch.settings.skip_posterior_variances():
        chunks = [
            model.posterior(
                X[i : i + _MEAN_CHUNK], posterior_transform=posterior_transform
            ).mean.reshape(-1)
            for i in range(0, X.shape[0], _MEAN_CHUNK)
        ]
    return torch.cat(chunks)


def pending_noise(
    model: Model, X_pending: Tensor, posterior_transform: PosteriorTransform | None
) -> Tensor:
    """Observation-noise variance a hallucinated observation at ``X_pending`` gets."""
    with torch.no_grad():
        noisy = model.posterior(
            X_pending, observation_noise=True, posterior_transform=posterior_transform
        ).variance.reshape(-1)
        latent = model.posterior(
            X_pending, posterior_transform=posterior_transform
        ).variance.reshape(-1)
    return (noisy - latent).clamp_min(0)


def pending_rows(
    cov_pp: Tensor, noise: Tensor, cov_pz: Tensor
) -> tuple[Tensor, Tensor]:
    r"""Conditioning on pending points, the one formula every route uses.

    A pending point :math:`P` treated as observed at its posterior mean leaves
    :math:`\mu_t` unchanged and lowers the covariance by a term that does not
    depend on the value (GP-BUCB, Desautels et al., 2014): with
    :math:`S = k_t(P, P) + \mathrm{diag}(\text{noise}) = A A^\top` and
    :math:`E = A^{-1} k_t(P, Z)`,

    .. math::

        k_t(z, z' \mid P) = k_t(z, z') - e(z)^\top e(z').

    Args:
        cov_pp: ``... x p x p`` posterior covariance of the pending points.
        noise: ``p`` observation-noise variances given to them.
        cov_pz: ``... x p x m`` posterior covariance of the pending points and
            the points ``Z``.

    Returns:
        ``(E, A)``: ``E`` is ``... x p x m``; ``A`` the Cholesky factor of ``S``.
    """
    A = psd_safe_cholesky(cov_pp + torch.diag_embed(noise.to(cov_pp)))
    return torch.linalg.solve_triangular(A, cov_pz, upper=False), A


def evaluated_candidates(
    model: Model, candidates: Tensor, given_dtype: torch.dtype | None = None
) -> Tensor:
    """Boolean mask of the candidates that are training inputs of ``model``.

    Compared in the model's input space (``input_transform.preprocess_transform``
    applied to the candidates, as BoTorch does to the training inputs), within a
    relative tolerance of ``1e-9`` (``1e-6`` where candidates or training inputs
    are float32, e.g. float32 candidates converted to a float64 model: the same
    points then differ by float32 round-off). Model lists: a training input of
    any model.

    Args:
        model: The model.
        candidates: ``N x d`` candidates on the model's device and dtype.
        given_dtype: The dtype the candidates had before conversion, if any.
    """
    models = list(getattr(model, "models", None) or [model])
    mask = torch.zeros(candidates.shape[0], dtype=torch.bool, device=candidates.device)
    for sub in models:
        sub.eval()  # BoTorch stores transformed training inputs in eval mode
        inputs = getattr(sub, "train_inputs", None)
        if not inputs or inputs[0] is None:
            continue
        with torch.no_grad():
            transform = getattr(sub, "input_transform", None)
            C = candidates
            if transform is not None:
                C = transform.preprocess_transform(candidates)
            train = inputs[0].reshape(-1, inputs[0].shape[-1])
            dtypes = {C.dtype, train.dtype, given_dtype or C.dtype}
            rtol = 1e-6 if torch.float32 in dtypes else 1e-9
            mask |= match_rows(C, train.to(C), rtol=rtol) >= 0
    return mask


def posterior_at(
    model: Model,
    X: Tensor,
    posterior_transform: PosteriorTransform | None = None,
    X_pending: Tensor | None = None,
    noise: Tensor | None = None,
    cache: PosteriorCache | None = None,
) -> tuple[Tensor, Tensor]:
    """Posterior mean and standard deviation of the objective at ``X`` (``b x 1 x
    d``), given pending points hallucinated at their mean (:func:`pending_rows`).

    Args:
        model: The model.
        X: ``b x 1 x d`` points.
        posterior_transform: Optional transform to a single output.
        X_pending: ``p x d`` pending points, or None.
        noise: Their observation-noise variances (:func:`pending_noise`).
        cache: The :class:`PosteriorCache` of the candidates' factor, if any: an
            exact GP then computes the pending points' effect from it.

    Returns:
        ``(mean, std)``, each of shape ``b``.
    """
    if X_pending is None or (cache is not None and cache.factors is not None):
        posterior = model.posterior(X, posterior_transform=posterior_transform)
        mean, var = posterior.mean[..., 0, 0], posterior.variance[..., 0, 0]
        if X_pending is not None:
            # Exact GPs: a rank-p correction of the plain variance, from the
            # factor the candidates' build made.
            flat = X.reshape(-1, X.shape[-1])
            drop = cache.factors.pending_variance_drop(X_pending, flat)  # type: ignore[union-attr]
            if drop is None:
                raise RuntimeError("pending points differ from the cached factor's")
            var = var - drop.reshape(var.shape).to(var)
        return mean, var.clamp_min(0).sqrt()
    # Any other Gaussian model: the joint posterior of each point and P.
    p = X_pending.shape[0]
    P = X_pending.expand(*X.shape[:-2], p, X.shape[-1])
    joint = model.posterior(
        torch.cat([X, P], dim=-2), posterior_transform=posterior_transform
    )
    cov = joint.distribution.covariance_matrix  # ... x (1 + p) x (1 + p)
    e, _ = pending_rows(cov[..., 1:, 1:], noise, cov[..., 1:, :1])
    var = cov[..., 0, 0] - e.square().sum(dim=(-2, -1))
    return joint.mean[..., 0, 0], var.clamp_min(0).sqrt()


def model_device_dtype(model: Model) -> tuple[torch.device | None, torch.dtype | None]:
    """The device and floating dtype of the model's parameters and buffers."""
    device = dtype = None
    for tensor in (*model.parameters(), *model.buffers()):
        device = device or tensor.device
        if tensor.is_floating_point():
            return device, tensor.dtype
    return device, dtype


def to_model(model: Model, X: Tensor) -> Tensor:
    """``X`` on the model's device and in its floating dtype (``X`` itself when
    they match already)."""
    device, dtype = model_device_dtype(model)
    if (device is not None and X.device != device) or (
        dtype is not None and X.dtype != dtype
    ):
        X = X.to(device=device, dtype=dtype)
    return X


def model_inputs(model: Model, X: Tensor, name: str = "candidates") -> Tensor:
    """``X`` (``N x d``, checked) on the model's device and in its dtype.

    BoTorch models live on one device with one dtype; inputs are converted to
    them (float64 points of a float32 model are rounded to float32) rather than
    failing deep inside GPyTorch. The width is checked against the model's
    training inputs through its public ``transform_inputs``.
    """
    X = to_model(model, check_matrix(name, X))
    models = getattr(model, "models", None) or [model]
    inputs = getattr(models[0], "train_inputs", None)
    if inputs and isinstance(inputs[0], Tensor):
        width = inputs[0].shape[-1]
        try:
            with torch.no_grad():
                got = models[0].transform_inputs(X[:1]).shape[-1]
        except (RuntimeError, ValueError, IndexError) as e:
            raise ValueError(
                f"`{name}` has d={X.shape[-1]} columns, which the model's input "
                f"transform cannot take ({e})."
            ) from e
        if got != width:
            raise ValueError(
                f"`{name}` has d={X.shape[-1]} columns, but the model was trained "
                f"on inputs of another width ({width} after its input transform)."
            )
    return X


def check_posterior_transform(
    model: Model, posterior_transform: PosteriorTransform | None
) -> None:
    """A single-output model, or a ``PosteriorTransform`` to one output."""
    if posterior_transform is None and model.num_outputs != 1:
        raise UnsupportedError(
            "Must specify a posterior_transform when using a multi-output model "
            f"(the model has {model.num_outputs} outputs)."
        )
    if posterior_transform is not None and not isinstance(
        posterior_transform, PosteriorTransform
    ):
        raise UnsupportedError(
            "`posterior_transform` must be a PosteriorTransform, got "
            f"{type(posterior_transform).__name__}."
        )


class KernelRows:
    r"""Prior covariance rows :math:`k(a, Z[\text{first}:\text{stop}])` through a
    GPyTorch ``covar_module`` (any kernel).

    The points ``a`` come as *features* (:meth:`features`: their transformed
    inputs), so rows can be asked for points held elsewhere (a shard of
    :mod:`ax_chaining.distributed` asks for the rows of another shard's points
    over its own columns). A kernel built on matrix products is evaluated per
    block of :func:`~ax_chaining.distances.column_blocks` (global candidate
    index ``offset + column``); an *exact* kernel, whose values do not depend
    on how columns are grouped (a fingerprint library's integer counts), in
    ranges of up to ``chunk`` columns.
    """

    def __init__(
        self, covar_module, Zt: Tensor, offset: int = 0, exact: bool = False
    ) -> None:
        self.covar_module, self.Zt, self.offset = covar_module, Zt, int(offset)
        self.exact = exact
        # Exact kernels: ranges of 2^16 columns, a tile of the library's
        # inverted index (a smaller range would read a whole tile for a part).
        self.chunk = 2**16 if exact else COLUMN_BLOCK

    @property
    def n(self) -> int:
        return self.Zt.shape[-2]

    def features(self, idx: Tensor) -> Tensor:
        """What :meth:`__call__` needs of the points ``idx`` (local indices)."""
        return self.Zt[idx]

    def ranges(self, first: int, stop: int) -> list[tuple[int, int]]:
        """The column ranges a row computation is split into."""
        return list(column_blocks(first, stop, self.offset, self.chunk))

    def __call__(
        self, feats: Tensor, cols: int | None = None, first: int = 0
    ) -> Tensor:
        stop = self.n if cols is None else cols
        parts = [
            self.covar_module(feats, self.Zt[a:b]).to_dense()
            for a, b in self.ranges(first, stop)
        ]
        if len(parts) == 1:
            return parts[0]
        return torch.cat(parts, dim=-1)

    def diag(self, first: int, stop: int) -> Tensor:
        """Prior variances (model space) of the candidates ``first..stop-1``."""
        return torch.cat(
            [
                self.covar_module(self.Zt[a:b], diag=True)
                for a, b in column_blocks(first, stop, self.offset)
            ]
        )


class SERows:
    r"""Rows of a plain SE kernel, :math:`c\,\exp(-\tfrac12 \|(a - b)/\ell\|^2)`.

    GPyTorch's ``RBFKernel`` (optionally in a ``ScaleKernel``) makes about
    eight passes over a block of rows with its temporaries; rows of :math:`d_t`
    are most of Chaining-UCB's time, so this computes the same values in three:
    one ``addmm`` for :math:`a^\top b - \tfrac12\|b\|^2`, one broadcast
    subtraction of :math:`\tfrac12\|a\|^2 - \log c` and an in-place
    exponential. Inputs are scaled by the lengthscales (read through the
    kernels' public properties) and centred on the mean of the scaled training
    inputs, as GPyTorch centres each call (on the first argument's mean; a
    centre that does not depend on the candidates gives the same bits for any
    part of them). Values agree with ``covar_module`` to round-off (tested);
    any other kernel, batch shape or ``active_dims`` goes through
    ``covar_module``. Products are taken per block of
    :func:`~ax_chaining.distances.column_blocks` (global index ``offset +
    column``).
    """

    exact = False

    def __init__(self, Zs: Tensor, log_scale: float, offset: int = 0) -> None:
        self.Zs = Zs
        self.half_norm = half_norm = 0.5 * Zs.square().sum(dim=-1)
        self.log_scale = log_scale
        self.offset = int(offset)
        # The exponent z_a.z_b - |z_b|^2/2 - (|z_a|^2/2 - log c) as one matrix
        # product [z_a, 1, log c - |z_a|^2/2] . [z_b, -|z_b|^2/2, 1]: no
        # further pass over the block before the exponential.
        ones = torch.ones_like(half_norm).unsqueeze(-1)
        self._right = torch.cat([Zs, -half_norm.unsqueeze(-1), ones], dim=-1)

    @classmethod
    def of(
        cls, covar_module, Zt: Tensor, train_X: Tensor, offset: int = 0
    ) -> SERows | None:
        from gpytorch.kernels import RBFKernel, ScaleKernel

        scale = torch.ones((), dtype=Zt.dtype, device=Zt.device)
        base = covar_module
        if type(covar_module) is ScaleKernel:
            scale = covar_module.outputscale
            base = covar_module.base_kernel
        if type(base) is not RBFKernel or Zt.ndim != 2 or train_X.ndim != 2:
            return None
        if any(k.active_dims is not None for k in (covar_module, base)):
            return None
        if covar_module.batch_shape != torch.Size() or base.batch_shape != torch.Size():
            return None
        lengthscale = base.lengthscale.detach()
        if scale.numel() != 1 or lengthscale.shape[:-1] != (1,):
            return None
        lengthscale = lengthscale.reshape(-1)
        centre = (train_X.detach() / lengthscale).mean(dim=0)
        Zs = Zt.detach() / lengthscale - centre
        return cls(Zs, math.log(float(scale.detach())), offset)

    @property
    def n(self) -> int:
        return self.Zs.shape[0]

    def features(self, idx: Tensor) -> Tensor:
        """``[z_a, -|z_a|^2/2, 1]`` of the points ``idx`` (local indices)."""
        return self._right[idx].clone()

    def __call__(
        self, feats: Tensor, cols: int | None = None, first: int = 0
    ) -> Tensor:
        stop = self.n if cols is None else cols
        left = feats.clone()
        half = -left[:, -2]
        left[:, -2] = 1.0
        left[:, -1] = self.log_scale - half
        # Round-off may leave the exponent a few ulps above log c on the
        # diagonal; d_t^2 is clamped at 0 downstream, so no clamp here.
        out = torch.empty(
            left.shape[0], stop - first, dtype=left.dtype, device=left.device
        )
        for a, b in column_blocks(first, stop, self.offset):
            out[:, a - first : b - first] = left @ self._right[a:b].T
        if out.device.type == "cpu":
            # numpy's vectorised exp is several times faster than torch's on
            # CPU float64; same array, no copy.
            array = out.numpy()
            threads = torch.get_num_threads()
            if array.size < _SPLIT_EXP or threads < 2:
                np.exp(array, out=array)
                return out
            # A large request (a farthest-first chunk at N ~ 10^6): numpy's
            # exp runs on one thread, so split the rows over torch's threads.
            views = np.array_split(array, threads)  # views of row ranges
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(lambda v: np.exp(v, out=v), views))
            return out
        return out.exp_()


class FeatureRows:
    r"""Rows of a :class:`~ax_chaining.kernels.FeatureTableKernel` with an RBF
    or a Matern-3/2 or 5/2 base kernel (ARD or not, optionally inside
    ``ScaleKernel``\ s).

    With the table's rows scaled by the lengthscales and centred,
    :math:`z = F / \ell - c`, a block of rows is
    :math:`s\,\kappa(\|z_a - z_b\|)` with :math:`\|z_a - z_b\|^2 = \|z_a\|^2
    + \|z_b\|^2 - 2 z_a^\top z_b` (one ``addmm``, clamped at 0 as GPyTorch
    does) and :math:`\kappa` the base kernel's profile: :math:`e^{-r^2/2}`
    (RBF), :math:`(1 + \sqrt3 r) e^{-\sqrt3 r}` or
    :math:`(1 + \sqrt5 r + \tfrac53 r^2) e^{-\sqrt5 r}` (Matern 3/2, 5/2).
    The candidates' scaled rows are made per block of
    :func:`~ax_chaining.distances.column_blocks` from the table (never a
    scaled copy of the whole table: it may be a memory map), so a block's
    values do not depend on which rows are asked for or on which shard.

    GPyTorch's kernel makes about a dozen passes and a ``LinearOperator`` per
    block, and for a single row broadcasts differences instead of taking a
    product; over ``10^5`` candidates and 200 features (one CPU thread) this
    was 2.2 times faster for 32 rows and 16 times for one. The centre
    :math:`c` is the mean of the scaled training rows (GPyTorch centres each
    call on its first argument's mean): values agree with ``covar_module`` to
    round-off (tested). Other bases go through ``covar_module``: MinMax, and
    Matern-1/2, whose profile :math:`e^{-r}` turns the round-off of
    :math:`r^2 \approx 0` into an error of its square root (``1e-8`` for
    ``1e-16``); so do batch shapes and ``active_dims``.
    """

    exact = False

    def __init__(
        self,
        table: Tensor,
        items: Tensor,
        inv_lengthscale: Tensor,
        centre: Tensor,
        scale: float,
        profile: str,
        offset: int = 0,
    ) -> None:
        self.table, self.items = table, items
        self.inv_lengthscale, self.centre = inv_lengthscale, centre
        self.scale, self.profile, self.offset = scale, profile, int(offset)

    @classmethod
    def of(
        cls, covar_module, Zt: Tensor, train_X: Tensor, offset: int = 0
    ) -> FeatureRows | None:
        from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel

        from ax_chaining.kernels.features import FeatureTableKernel

        scale = 1.0
        kernel = covar_module
        if type(kernel) is ScaleKernel:
            scale *= float(kernel.outputscale.detach())
            kernel = kernel.base_kernel
        if type(kernel) is not FeatureTableKernel or Zt.ndim != 2 or train_X.ndim != 2:
            return None
        base = kernel.base_kernel
        outer = [covar_module, kernel, base]
        if type(base) is ScaleKernel:
            if base.outputscale.numel() != 1:
                return None
            scale *= float(base.outputscale.detach())
            base = base.base_kernel
        if type(base) is RBFKernel:
            profile = "rbf"
        elif type(base) is MaternKernel and base.nu in (1.5, 2.5):
            profile = f"matern{base.nu}"
        else:
            return None
        modules = [*outer, base]
        if any(k.active_dims is not None for k in modules):
            return None
        if any(k.batch_shape != torch.Size() for k in modules):
            return None
        lengthscale = base.lengthscale.detach()
        if lengthscale.shape[:-1] != (1,):
            return None
        table = kernel.features
        dtype, device = Zt.dtype, Zt.device
        inv = 1.0 / lengthscale.reshape(-1).to(device=device, dtype=dtype)
        n = kernel.num_items
        items = item_indices(Zt, n, kernel.normalized_inputs, "FeatureTableKernel")
        train = item_indices(train_X, n, kernel.normalized_inputs, "FeatureTableKernel")
        centre = (cls._gather(table, train, dtype, device) * inv).mean(dim=0)
        return cls(table, items, inv, centre, scale, profile, offset)

    @staticmethod
    def _gather(table: Tensor, items: Tensor, dtype, device) -> Tensor:
        rows = table[items.to(table.device)]
        return rows.to(device=device, dtype=dtype)

    def _scaled(self, items: Tensor) -> tuple[Tensor, Tensor]:
        """``z`` and ``|z|^2`` of the items ``items``."""
        dtype, device = self.centre.dtype, self.centre.device
        z = self._gather(self.table, items, dtype, device).mul_(self.inv_lengthscale)
        z.sub_(self.centre)
        return z, z.square().sum(dim=-1)

    @property
    def n(self) -> int:
        return self.items.shape[0]

    def features(self, idx: Tensor) -> Tensor:
        """``[z_a, |z_a|^2]`` of the points ``idx`` (local indices)."""
        z, sq = self._scaled(self.items[idx.to(self.items.device)])
        return torch.cat([z, sq.unsqueeze(-1)], dim=-1)

    def __call__(
        self, feats: Tensor, cols: int | None = None, first: int = 0
    ) -> Tensor:
        stop = self.n if cols is None else cols
        z_a, sq_a = feats[:, :-1], feats[:, -1:]
        out = torch.empty(
            feats.shape[0], stop - first, dtype=feats.dtype, device=feats.device
        )
        for a, b in column_blocks(first, stop, self.offset):
            z_b, sq_b = self._scaled(self.items[a:b])
            block = out[:, a - first : b - first]
            block.copy_(torch.addmm(sq_b, z_a, z_b.T, alpha=-2.0))
            block.add_(sq_a).clamp_(min=0.0)
            _profile(block, self.profile)
        return out.mul_(self.scale) if self.scale != 1.0 else out


def _profile(sq: Tensor, profile: str) -> None:
    r"""Replace squared scaled distances :math:`r^2` by the kernel's profile
    :math:`\kappa(r)` in place (see :class:`FeatureRows`)."""
    if profile == "rbf":
        sq.mul_(-0.5).exp_()
        return
    r = sq.sqrt_()
    root = math.sqrt(3.0) if profile == "matern1.5" else math.sqrt(5.0)
    decay = torch.exp(r * -root)
    if profile == "matern1.5":
        r.mul_(root).add_(1.0)
    else:
        # 1 + sqrt5 r + 5/3 r^2, from r: (sqrt5 r) + (sqrt5 r)^2 / 3 + 1.
        r.mul_(root)
        r.add_(r.square().div_(3.0)).add_(1.0)
    r.mul_(decay)


class LibraryRows:
    r"""Rows of a fingerprint kernel in library mode (``TanimotoKernel`` over a
    :class:`~ax_chaining.kernels.PackedFingerprints`, optionally in a
    ``ScaleKernel``), straight from the library's fast exact route.

    The candidates' item indices are mapped once; a block of rows against the
    candidates from ``first`` on is then one call of
    :meth:`~ax_chaining.kernels.PackedFingerprints.tanimoto` (a slice of the
    library where the candidates are its items in order, as
    ``candidate_index_parameter`` gives), with no GPyTorch call and no mapping
    of ``N`` inputs per block. Values equal ``covar_module``'s (tested), and
    do not depend on how the columns are grouped (integer counts, one rounded
    division).
    """

    exact = True

    def __init__(
        self,
        library,
        items: Tensor,
        scale: float,
        route: str,
        device: torch.device | None = None,
    ) -> None:
        self.library, self.items, self.scale, self.route = library, items, scale, route
        # Rows are computed where the candidates live: on a GPU by the
        # library's matmul route (route "auto"), on the CPU by its fastest one.
        self.device = torch.device("cpu") if device is None else device
        n = items.numel()
        self.contiguous = n > 0 and bool(
            torch.equal(items, torch.arange(int(items[0]), int(items[0]) + n))
        )

    @classmethod
    def of(cls, covar_module, Zt: Tensor) -> LibraryRows | None:
        parts = library_kernel_parts(covar_module)
        if parts is None or Zt.ndim != 2:
            return None
        base, scale = parts
        n = len(base.library)
        items = item_indices(Zt, n, base.normalized_inputs, "TanimotoKernel").cpu()
        return cls(base.library, items, scale, base.route, Zt.device)

    def features(self, idx: Tensor) -> Tensor:
        """The item indices of the points ``idx``."""
        return self.items[idx.cpu()]

    def __call__(
        self, feats: Tensor, cols: int | None = None, first: int = 0
    ) -> Tensor:
        stop = self.items.numel() if cols is None else cols
        if self.contiguous:
            start = int(self.items[0])
            columns = slice(start + first, start + stop)
        else:
            columns = self.items[first:stop]
        out = self.library.tanimoto(
            feats, columns, route=self.route, device=self.device
        )
        return out.mul_(self.scale) if self.scale != 1.0 else out


def library_kernel_parts(covar_module) -> tuple[object, float] | None:
    """``(TanimotoKernel, output scale)`` of a library-mode Tanimoto kernel
    (optionally in a ``ScaleKernel``, no ``active_dims``), else None."""
    from gpytorch.kernels import ScaleKernel

    from ax_chaining.kernels import TanimotoKernel

    scale, base = 1.0, covar_module
    if type(covar_module) is ScaleKernel:
        scale = float(covar_module.outputscale.detach())
        base = covar_module.base_kernel
    if type(base) is not TanimotoKernel or base.library is None:
        return None
    if base.active_dims is not None or covar_module.active_dims is not None:
        return None
    return base, scale


def factor_blocks(
    kernel: KernelRows,
    train_features: Tensor,
    L: Tensor,
    whitened: Tensor,
    mean_module,
    outcome_transform,
    out_var: Tensor,
    out: Tensor,
) -> Tensor:
    r"""The factor :math:`W = c^{1/2} L^{-1} k(X_n, Z)` into ``out[:r]`` and the
    posterior mean over ``kernel``'s candidates, block by block.

    ``out`` is ``(r + k) x m`` (rows past ``r`` are left alone); the kernel is
    evaluated in its ranges, the triangular solve and the mean's product per
    block of :func:`~ax_chaining.distances.column_blocks`: the one place both
    one machine and a shard of :mod:`ax_chaining.distributed` compute them.

    Returns:
        The ``m`` posterior means (outcome units).
    """
    n, r = kernel.n, L.shape[-1]
    mean = torch.empty(n, dtype=out.dtype, device=out.device)
    root = out_var.sqrt()
    for a0, b0 in kernel.ranges(0, n):
        cross = kernel(train_features, b0, a0)
        for a, b in column_blocks(a0, b0, kernel.offset):
            W = torch.linalg.solve_triangular(L, cross[:, a - a0 : b - a0], upper=False)
            # Posterior mean in model space, m(z) + w(z)^T L^{-1} (y - m(X_n)),
            # from the same factor: one matrix-vector product, no predictive
            # covariance (which model.posterior would build chunk by chunk).
            m = mean_module(kernel.Zt[a:b]) + (W.T @ whitened).squeeze(-1)
            if outcome_transform is not None:
                m = outcome_transform.untransform(m.unsqueeze(-1))[0].squeeze(-1)
            mean[a:b] = m
            out[:r, a:b] = W.mul_(root)
    return mean


def pending_factor_blocks(
    kernel: KernelRows,
    pending_features: Tensor,
    W_p: Tensor,
    A: Tensor,
    W: Tensor,
    out_var: Tensor,
    out: Tensor,
) -> None:
    r"""The rows :math:`A^{-1} k_t(P, Z)` that pending points add to the factor,
    into ``out`` (``p x m``), block by block (see :func:`factor_blocks`).

    :math:`k_t(P, z) = c\, k(P, z) - W_P^\top w(z)`, with ``W`` the
    candidates' ``r x m`` factor and ``W_p``, ``A`` from
    :meth:`ModelFactors.pending`.
    """
    n = kernel.n
    for a0, b0 in kernel.ranges(0, n):
        cov = kernel(pending_features, b0, a0)
        for a, b in column_blocks(a0, b0, kernel.offset):
            block = cov[:, a - a0 : b - a0].clone()
            block.addmm_(W_p.T, W[:, a:b], beta=float(out_var), alpha=-1.0)
            out[:, a:b] = torch.linalg.solve_triangular(A, block, upper=False)


class ModelFactors:
    r"""What the posterior over any candidates needs of an exact single-output
    GP: the Cholesky factor :math:`L` of :math:`K_n + \eta^2 I`, the whitened
    residual :math:`L^{-1}(y - m(X_n))`, the outcome scale, and, given pending
    points, their rows :math:`W_P` and the factor :math:`A` of their
    covariance. Small (``r x r``), so they can be sent to other machines.
    """

    def __init__(self, model: ExactGP, like: Tensor) -> None:
        self.model = model
        self.train_X = train_X = model.train_inputs[0]
        self.covar_module = covar_module = model.covar_module
        self.mean_module = model.mean_module
        self.outcome_transform = getattr(model, "outcome_transform", None)
        self.out_var = _outcome_variance_scale(model, like)[0]
        noise = model.likelihood.noise.reshape(-1)
        K_train = covar_module(train_X).to_dense()
        K_train = K_train + torch.diag_embed(noise.expand(train_X.shape[0]))
        self.L = L = psd_safe_cholesky(K_train)
        residual = (model.train_targets - model.mean_module(train_X)).unsqueeze(-1)
        self.whitened = torch.linalg.solve_triangular(L, residual, upper=False)
        self._pending: tuple[Tensor, Tensor, Tensor, Tensor] | None = None

    def pending(
        self, X_pending: Tensor, noise: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        r"""``(Pt, W_P, A)`` for pending points ``X_pending`` (raw inputs).

        :math:`W_P = c^{1/2} L^{-1} k(X_n, P)` and :math:`A A^\top = k_t(P, P)
        + \mathrm{diag}(\text{noise})` (:func:`pending_rows`); kept for
        :meth:`pending_variance_drop`.
        """
        Pt = self.model.transform_inputs(X_pending)
        W_p = torch.linalg.solve_triangular(
            self.L, self.covar_module(self.train_X, Pt).to_dense(), upper=False
        ).mul_(self.out_var.sqrt())
        cov_pp = self.covar_module(Pt, Pt).to_dense()
        cov_pp = cov_pp.addmm_(W_p.T, W_p, beta=float(self.out_var), alpha=-1.0)
        A = psd_safe_cholesky(cov_pp + torch.diag_embed(noise.to(cov_pp)))
        self._pending = (X_pending.clone(), Pt, W_p, A)
        return Pt, W_p, A

    def pending_variance_drop(self, X_pending: Tensor, X: Tensor) -> Tensor | None:
        r"""How much the pending points lower the variance at ``X`` (``b x d``).

        :math:`\|A^{-1} k_t(P, x)\|^2`, with :math:`A` and :math:`P` from the last
        :meth:`pending` call; None if that call was for other pending points.
        """
        if self._pending is None or not torch.equal(self._pending[0], X_pending):
            return None
        _, Pt, W_p, A = self._pending
        Xt = self.model.transform_inputs(X)
        w = torch.linalg.solve_triangular(
            self.L, self.covar_module(self.train_X, Xt).to_dense(), upper=False
        ).mul_(self.out_var.sqrt())
        k_px = self.covar_module(Pt, Xt).to_dense()
        k_px = k_px.mul_(self.out_var).addmm_(W_p.T, w, alpha=-1.0)
        e = torch.linalg.solve_triangular(A, k_px, upper=False)
        return e.square().sum(dim=0)


class LowRankFactors:
    r"""Prior kernel and :math:`W = L^{-1} K(X_n, Z)` of an exact single-output GP.

    Built once per model and candidate set; pending points only add rows to
    :math:`W` (:meth:`condition`), so a batch reuses the candidates' factor.
    Every product over the candidates is taken per block of
    :func:`~ax_chaining.distances.column_blocks` (see
    :data:`~ax_chaining.distances.COLUMN_BLOCK`).
    """

    def __init__(self, model: ExactGP, Z: Tensor) -> None:
        self.model = model
        self.model_factors = mf = ModelFactors(model, Z)
        self.Zt = model.transform_inputs(Z)
        self.train_X = mf.train_X
        self.covar_module = mf.covar_module
        self.out_var = mf.out_var
        self.L = mf.L
        library = LibraryRows.of(self.covar_module, self.Zt)
        self.kernel = KernelRows(self.covar_module, self.Zt, exact=library is not None)
        r = self.train_X.shape[-2]
        self.factor = torch.empty(
            r, self.Zt.shape[-2], dtype=self.Zt.dtype, device=self.Zt.device
        )
        self.mean = factor_blocks(
            self.kernel,
            self.train_X,
            mf.L,
            mf.whitened,
            mf.mean_module,
            mf.outcome_transform,
            mf.out_var,
            self.factor,
        )
        self._library = library
        self._prior_variance: Tensor | None = None
        self._fast_rows: SERows | FeatureRows | LibraryRows | bool | None = None

    def prior_rows(
        self, idx: Tensor, cols: int | None = None, first: int = 0
    ) -> Tensor:
        """Model-space prior covariance of ``Z[idx]`` and ``Z[first:cols]``.

        Multiply by :attr:`out_var` for outcome units. For a plain SE kernel
        (see :class:`SERows`) it is computed in three passes over the block,
        for a feature table's RBF or Matern kernel in a few
        (:class:`FeatureRows`); for a fingerprint library from the library
        (:class:`LibraryRows`);
        otherwise by the model's ``covar_module``.
        """
        if self._fast_rows is None:
            self._fast_rows = (
                SERows.of(self.covar_module, self.Zt, self.train_X)
                or FeatureRows.of(self.covar_module, self.Zt, self.train_X)
                or self._library
                or False
            )
        rows = self._fast_rows or self.kernel
        out = rows(rows.features(idx), cols, first)
        return out.to(device=self.Zt.device, dtype=self.Zt.dtype)

    def prior_variance(self) -> Tensor:
        if self._prior_variance is None:
            var = self.kernel.diag(0, self.Zt.shape[-2])
            self._prior_variance = var * self.out_var
        return self._prior_variance

    def condition(self, X_pending: Tensor, noise: Tensor) -> Tensor:
        r"""Factor of the posterior given pending points as observations.

        Conditioning on ``p`` more points :math:`P` with noise variances
        ``noise`` appends ``p`` rows to :math:`W`: with
        :math:`S = k_t(P, P) + \mathrm{diag}(\text{noise}) = A A^\top`, the new
        rows are :math:`A^{-1} k_t(P, Z)` (a rank-``p`` update that does not
        depend on the observed values). Only kernel entries that involve ``P``
        are computed; the candidates' factor is reused.

        Returns:
            The ``(r + p) x N`` factor over the candidates.
        """
        Pt, W_p, A = self.model_factors.pending(X_pending, noise)
        r, n = self.factor.shape
        out = torch.empty(
            r + Pt.shape[-2], n, dtype=self.factor.dtype, device=self.factor.device
        )
        out[:r] = self.factor
        pending_factor_blocks(
            self.kernel, Pt, W_p, A, self.factor, self.out_var, out[r:]
        )
        return out

    def pending_variance_drop(self, X_pending: Tensor, X: Tensor) -> Tensor | None:
        """See :meth:`ModelFactors.pending_variance_drop`."""
        return self.model_factors.pending_variance_drop(X_pending, X)


class PosteriorCache:
    """What the posterior over one candidate set lets a batch reuse.

    :func:`candidate_posterior` fills it on the first call and reads it on
    later ones with the same model and candidates: the candidates' factor
    :math:`W`, posterior mean and prior variance, which pending points leave
    unchanged (they only append rows to :math:`W`). Keep one per model and
    candidate set; a model refit needs a new one.
    """

    def __init__(self) -> None:
        self.factors: LowRankFactors | None = None
        self._key: tuple | None = None

    @staticmethod
    def _key_of(model: Model, candidates: Tensor) -> tuple:
        return (id(model), candidates.data_ptr(), tuple(candidates.shape))

    def get(self, model: Model, candidates: Tensor) -> LowRankFactors | None:
        if self.factors is not None and self._key == self._key_of(model, candidates):
            return self.factors
        return None

    def put(self, model: Model, candidates: Tensor, factors: LowRankFactors) -> None:
        self._key = self._key_of(model, candidates)
        self.factors = factors


def row_budgets(memory_budget: int) -> tuple[int, int]:
    """Bytes of a block of rows, and of a farthest-first pool of rows."""
    # Rows are computed a block at a time (a farthest-first pool is one larger
    # block); a kernel call makes a few temporaries of a block's size. A few
    # MiB keep a block's passes (kernel, correction, thresholds) in cache:
    # measured at N = 10^4, 4 MiB blocks made the row pass faster than 32.
    block_bytes = max(2**20, min(4 * 2**20, memory_budget // 32))
    # A farthest-first pool: each call reads the whole r x N factor, so at
    # large N the rows must come many per call (at N = 10^6, pools of 64 rows
    # took 27 s against 40 s for pools of 16).
    pool_bytes = max(block_bytes, min(512 * 2**20, memory_budget // 8))
    return block_bytes, pool_bytes


def low_rank_row_batch(n: int, itemsize: int, memory_budget: int) -> int:
    """Rows per farthest-first batch on the low-rank route over ``n``
    candidates: a pool of ``2 * batch`` rows fits in the pool's budget."""
    pool_bytes = row_budgets(memory_budget)[1]
    return max(1, min(32, pool_bytes // (2 * n * itemsize)))


@dataclass(frozen=True)
class PosteriorMemory:
    """Bytes the two routes need over ``n`` candidates, against the budget.

    Attributes:
        n: The number of candidates.
        itemsize: Bytes of one of their values.
        budget: The memory budget.
        block_bytes: Bytes of a block of rows of :math:`d_t`.
        pool_bytes: Bytes of a farthest-first pool of rows.
        low_rank: Bytes of the low-rank form (factor, pending rows, pools).
        dense: Bytes of the dense covariance (models without the low-rank form).
    """

    n: int
    itemsize: int
    budget: int
    block_bytes: int
    pool_bytes: int
    low_rank: int
    dense: int

    @classmethod
    def of(
        cls, model: Model, candidates: Tensor, num_pending: int, memory_budget: int
    ) -> PosteriorMemory:
        n, itemsize = candidates.shape[0], candidates.element_size()
        r, p = num_training_points(model) or 0, num_pending
        block_bytes, pool_bytes = row_budgets(memory_budget)
        low_rank = (r + 2 * p + 6) * (n + p) * itemsize + 4 * pool_bytes
        # Models without the low-rank form: the float covariance from
        # model.posterior (about three N x N copies at its peak) plus the greedy
        # covers' graph (at most 2 N^2 bytes: it is kept as a level matrix where
        # neighbour lists would be larger).
        dense = dense_memory_bytes(n, candidates.dtype, 3.0) + 4 * block_bytes
        return cls(n, itemsize, memory_budget, block_bytes, pool_bytes, low_rank, dense)

    def check(self, path: Path, low_rank_form: bool) -> None:
        """Refuse, before any allocation, a route that cannot fit the budget.

        Raises:
            MemoryBudgetError: The dense covariance (models without the low-rank
                form) or the low-rank form (unless ``path="dense"``) does not fit.
        """
        if not low_rank_form and self.dense > self.budget:
            raise self._error(self.dense, "The dense path")
        if low_rank_form and path != "dense" and self.low_rank > self.budget:
            raise self._error(self.low_rank, "The low-rank path")

    def _error(self, need: int, what: str) -> MemoryBudgetError:
        hint = (
            "use path='low_rank' (exact single-output GPs)"
            if what == "The dense path"
            else "lower max_cover_size"
        )
        return MemoryBudgetError(
            f"{what} for N={self.n} candidates needs about {format_bytes(need)}, "
            f"above memory_budget={format_bytes(self.budget)}. Pass a larger "
            f"memory_budget, {hint}, or use fewer candidates."
        )


def check_path(
    path: Path, model: Model, posterior_transform: PosteriorTransform | None
) -> bool:
    """Validate ``path`` for ``model``; whether the model has the low-rank form.

    Raises:
        ValueError: ``path`` is not one of the routes.
        UnsupportedError: ``path="low_rank"`` for a model without the low-rank form.
    """
    low_rank_form = supports_low_rank(model, posterior_transform)
    if path not in ("auto", "dense", "low_rank"):
        raise ValueError(f"path must be 'auto', 'dense' or 'low_rank', got {path!r}.")
    if path == "low_rank" and not low_rank_form:
        raise UnsupportedError(
            "path='low_rank' needs an exact single-output GP (ExactGP with a Gaussian "
            "likelihood, no or a Standardize outcome transform, no "
            "posterior_transform other than a single weight of +1 or -1); got "
            f"{type(model).__name__}."
        )
    return low_rank_form


def choose_path(
    path: Path,
    distance: PseudoDistance,
    memory: PosteriorMemory,
    low_rank_form: bool,
    first_radius: float | None = None,
) -> tuple[Path, str | None]:
    r"""The route of the covers (the module docstring's rule), and why
    ``path="auto"`` left the exact greedy covers (else None).

    Args:
        path: The caller's ``path``.
        distance: :math:`d_t` over the candidates (its edges are estimated).
        memory: What the routes need.
        low_rank_form: Whether the model has the low-rank form.
        first_radius: :math:`\epsilon_1` of the covers, for the estimate of
            the greedy covers' memory (needed for ``path="auto"`` with the
            low-rank form).
    """
    n = memory.n
    if path != "auto":
        return path, None
    if not low_rank_form:
        return "dense", None
    if n > AUTO_EXACT_MAX_N:
        # Exact greedy covers read all N^2 pairs of d_t: past this size
        # farthest-first covers on rows on demand are the practical choice.
        return "low_rank", None
    if GRAPH_PEAK_EDGE_BYTES * n * n + memory.low_rank <= memory.budget:
        return "dense", None  # even a complete graph fits: no need to sample
    # Greedy covers keep the pairs within eps_1, as neighbour lists
    # (estimated from a sample of rows), or as a level matrix where the lists
    # would not fit the budget. Dense coarse levels are covered lazily and
    # keep no edges (chaining.lazy_levels): the lists hold the first sparse one.
    if first_radius is None:
        raise ValueError("`first_radius` is needed to estimate the greedy covers.")
    radii = [first_radius * 2.0**-i for i in range(8)]
    counted, edges = lazy_levels(distance, radii)
    graph = GRAPH_PEAK_EDGE_BYTES * edges
    if graph + memory.low_rank > memory.budget:
        graph = 2 * n * n  # a level matrix, where lists are larger
    if graph + memory.low_rank <= memory.budget:
        return "dense", None
    return "low_rank", (
        f"greedy covers of N={n} need about {format_bytes(graph)} "
        f"({edges:,} pairs within eps_{counted + 1}), above "
        f"memory_budget={format_bytes(memory.budget)}"
    )


def cached_factors(
    model: Model, candidates: Tensor, cache: PosteriorCache | None
) -> LowRankFactors:
    """The candidates' low-rank factors: from ``cache`` where it holds them for
    this model and these candidates, else built (and put in ``cache``)."""
    factors = None if cache is None else cache.get(model, candidates)
    if factors is None:
        factors = LowRankFactors(model, candidates)
        if cache is not None:
            cache.put(model, candidates, factors)
    return factors


def low_rank_posterior(
    factors: LowRankFactors,
    flip: tuple[float, float] | None,
    X_pending: Tensor | None,
    noise: Tensor | None,
    memory: PosteriorMemory,
) -> tuple[Tensor, LowRankDistance]:
    """Mean and :math:`d_t` from the low-rank factors (``flip``: ``(w, b)`` of
    the posterior transform), conditioned on ``X_pending`` (rows of :math:`d_t`
    on demand, a block at a time)."""
    n = memory.n
    mean = factors.mean
    if flip is not None:
        mean = flip[0] * mean + flip[1]
    factor = factors.factor
    if X_pending is not None and X_pending.shape[0]:
        factor = factors.condition(X_pending, noise)
    # Both routes read rows of d_t on demand: the dense one turns them, a
    # block at a time, into the graphs of the exact greedy covers; the
    # low-rank one never holds more than a pool of rows.
    distance = LowRankDistance(
        lambda idx: factors.prior_rows(idx, n),
        factors.prior_variance(),
        factor,
        block_bytes=memory.block_bytes,
        prior_scale=float(factors.out_var),
        prior_block=lambda idx, first: factors.prior_rows(idx, n, first),
    )
    distance.row_batch = low_rank_row_batch(n, memory.itemsize, memory.budget)
    return mean, distance


def dense_posterior(
    model: Model,
    candidates: Tensor,
    posterior_transform: PosteriorTransform | None,
    X_pending: Tensor | None,
    noise: Tensor | None,
    block_bytes: int,
) -> tuple[Tensor, DenseDistance]:
    """Mean and :math:`d_t` from ``model.posterior``'s covariance over the
    candidates (and ``X_pending``, conditioned on), for any Gaussian posterior.

    Raises:
        UnsupportedError: The posterior has no Gaussian covariance.
    """
    n = candidates.shape[0]
    p = 0 if X_pending is None else X_pending.shape[0]
    Z = candidates if not p else torch.cat([candidates, X_pending.to(candidates)])
    mean = _posterior_mean(model, candidates, posterior_transform)
    post = model.posterior(Z, posterior_transform=posterior_transform)
    try:
        cov = post.distribution.covariance_matrix
    except AttributeError as e:
        raise UnsupportedError(
            f"{type(post).__name__} has no Gaussian covariance; Chaining-UCB "
            "needs a Gaussian posterior."
        ) from e
    cov = cov.reshape(Z.shape[0], Z.shape[0])
    if p:
        extra, _ = pending_rows(cov[n:, n:], noise, cov[n:, :n])
        cov = cov[:n, :n].addmm_(extra.T, extra, alpha=-1.0)
    return mean, DenseDistance(cov, inplace=True, block_bytes=block_bytes)


def candidate_posterior(
    model: Model,
    candidates: Tensor,
    posterior_transform: PosteriorTransform | None = None,
    X_pending: Tensor | None = None,
    path: Path = "auto",
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    cache: PosteriorCache | None = None,
    first_radius: float | None = None,
) -> CandidatePosterior:
    r"""Posterior mean and pseudo-distance over ``candidates``.

    Args:
        model: A fitted BoTorch model.
        candidates: ``N x d`` candidates in the model's raw input space.
        posterior_transform: Optional transform to a single-output posterior.
        X_pending: Optional ``p x d`` points conditioned on with their posterior
            mean as observations.
        path: ``"auto"``, ``"dense"`` or ``"low_rank"`` (see the module docstring).
        memory_budget: Bytes the largest allocations may take.
        cache: Optional :class:`PosteriorCache`, filled on the first call and
            reused by later calls with the same model and candidates (a batch:
            only the pending points' rows of the factor are computed).
        first_radius: :math:`\epsilon_1` of the covers, for ``path="auto"``'s
            estimate of the greedy covers' memory (default: the largest prior
            standard deviation over the candidates).

    Returns:
        A :class:`CandidatePosterior`.
    """
    low_rank_form = check_path(path, model, posterior_transform)
    p = 0 if X_pending is None else X_pending.shape[0]
    memory = PosteriorMemory.of(model, candidates, p, memory_budget)
    memory.check(path, low_rank_form)
    model.eval()
    noise = pending_noise(model, X_pending, posterior_transform) if p else None
    prior_var = None
    with torch.no_grad():
        if low_rank_form:
            factors = cached_factors(model, candidates, cache)
            flip = sign_flip(model, posterior_transform)
            pending = None if not p else X_pending.to(candidates)
            mean, distance = low_rank_posterior(factors, flip, pending, noise, memory)
            prior_var = factors.prior_variance()
            if not first_radius:
                # eps_1 = the largest prior standard deviation (the default scale).
                first_radius = float(prior_var.max().clamp_min(0).sqrt())
        else:
            mean, distance = dense_posterior(
                model,
                candidates,
                posterior_transform,
                X_pending,
                noise,
                memory.block_bytes,
            )
        route, reason = choose_path(path, distance, memory, low_rank_form, first_radius)
    return CandidatePosterior(
        mean=mean,
        distance=distance,
        path=route,
        prior_variance=prior_var,
        pending_noise=noise,
        reason=reason,
    )
