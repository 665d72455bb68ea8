"""From a BoTorch model to the engine: the posterior mean and :math:`d_t` over
the candidates (the only module that reads BoTorch models for the engine).
Pending points are conditioned on at their posterior mean (GP-BUCB). The
routes ``"dense"`` and ``"low_rank"`` are described on "Large candidate sets"."""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
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
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
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
from ax_chaining.kernels import FeatureTableKernel, TanimotoKernel
from ax_chaining.kernels.precomputed import item_indices
from ax_chaining.level_graph import GRAPH_PEAK_EDGE_BYTES

__all__ = [
    "CandidatePosterior",
    "FeatureRows",
    "KernelRows",
    "LibraryRows",
    "ModelFactors",
    "PosteriorCache",
    "SERows",
    "candidate_posterior",
    "check_posterior_transform",
    "evaluated_candidates",
    "factor_blocks",
    "known_prior_variance",
    "library_kernel_parts",
    "low_rank_bytes",
    "low_rank_row_batch",
    "model_inputs",
    "num_training_points",
    "pending_factor_blocks",
    "pending_noise",
    "pending_rows",
    "posterior_at",
    "prior_variance",
    "require_low_rank",
    "row_budgets",
    "sign_flip",
    "supports_low_rank",
    "to_model",
    "training_mask",
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
        path: The route of the covers: ``"dense"`` or ``"low_rank"``.
        prior_variance: ``N`` prior variances (outcome units) where the route
            computed them, else None.
        pending_noise: Noise variances given to the pending points, or None.
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
    ``w y + b`` with ``|w| = 1`` (Ax's single objective), else None: it leaves
    :math:`d_t` unchanged, so the low-rank route stays exact under it."""
    if not isinstance(posterior_transform, ScalarizedPosteriorTransform):
        return None
    weights = posterior_transform.weights.reshape(-1)
    if getattr(model, "num_outputs", None) != 1 or weights.numel() != 1:
        return None
    w = float(weights[0])
    return (w, float(posterior_transform.offset)) if abs(w) == 1.0 else None


def require_low_rank(
    model: Model, posterior_transform: PosteriorTransform | None, what: str
) -> None:
    """Raise, naming ``what``, unless :func:`supports_low_rank`."""
    if not supports_low_rank(model, posterior_transform):
        raise UnsupportedError(
            f"{what} needs an exact single-output GP (ExactGP with a Gaussian "
            "likelihood, no or a Standardize outcome transform, no "
            "posterior_transform other than a single weight of +1 or -1); got "
            f"{type(model).__name__}."
        )


def supports_low_rank(
    model: Model, posterior_transform: PosteriorTransform | None
) -> bool:
    """Whether the low-rank route reproduces ``model.posterior`` exactly: a
    one-output ``ExactGP`` with a Gaussian likelihood, no or a ``Standardize``
    outcome transform, and no posterior transform but a :func:`sign_flip`."""
    return bool(
        (posterior_transform is None or sign_flip(model, posterior_transform))
        and isinstance(model, ExactGP)
        and getattr(model, "num_outputs", None) == 1
        and isinstance(
            model.likelihood, (GaussianLikelihood, FixedNoiseGaussianLikelihood)
        )
        and isinstance(
            getattr(model, "outcome_transform", None), (Standardize, type(None))
        )
        and model.train_inputs is not None
        and model.train_inputs[0].ndim == 2
        and hasattr(model, "covar_module")
    )


def _outcome_variance_scale(model: Model, like: Tensor) -> Tensor:
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
    """Prior variance :math:`k(x, x)` of the objective at ``X`` (``N x d``, raw
    inputs), in outcome units: models with a ``covar_module`` (one output, or
    batched outputs under a ``ScalarizedPosteriorTransform``), ``ModelListGP``,
    ``Standardize`` outcome transforms; else ``UnsupportedError``.

    Example:
        >>> prior_variance(model, candidates).sqrt().max()  # the default scale
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
    """The prior variances of ``post``'s candidates ``X``: its route's, else
    :func:`prior_variance`'s."""
    if post.prior_variance is not None:
        return post.prior_variance
    return prior_variance(model, X, posterior_transform)


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
    r"""Conditioning on pending points :math:`P` observed at their posterior mean:
    with :math:`S = k_t(P, P) + \mathrm{diag}(\text{noise}) = A A^\top` and
    :math:`E = A^{-1} k_t(P, Z)`, :math:`k_t(z, z' \mid P) = k_t(z, z') -
    e(z)^\top e(z')` (``cov_pp``: ``... x p x p``, ``cov_pz``: ``... x p x m``).

    Returns:
        ``(E, A)``.
    """
    A = psd_safe_cholesky(cov_pp + torch.diag_embed(noise.to(cov_pp)))
    return torch.linalg.solve_triangular(A, cov_pz, upper=False), A


def evaluated_candidates(
    model: Model, candidates: Tensor, given_dtype: torch.dtype | None = None
) -> Tensor:
    """Boolean mask of the candidates (``N x d`` in the model's dtype; given in
    ``given_dtype``) that are training inputs of ``model`` or of a model of its
    list, compared by :func:`training_mask`."""
    mask = torch.zeros(candidates.shape[0], dtype=torch.bool, device=candidates.device)
    for sub in getattr(model, "models", None) or [model]:
        sub.eval()  # BoTorch stores transformed training inputs in eval mode
        inputs = getattr(sub, "train_inputs", None)
        if inputs and inputs[0] is not None:
            train = inputs[0].reshape(-1, inputs[0].shape[-1])
            transform = getattr(sub, "input_transform", None)
            given = given_dtype or candidates.dtype
            mask |= training_mask(candidates, train, transform, given)
    return mask


def training_mask(C: Tensor, train: Tensor, transform, *dtypes) -> Tensor:
    """Which rows of ``C`` are rows of ``train`` once ``transform`` (an input
    transform or None) preprocesses them: within a relative tolerance of
    ``1e-9``, or ``1e-6`` where ``C``, ``train`` or ``dtypes`` hold float32."""
    with torch.no_grad():
        if transform is not None:
            C = transform.preprocess_transform(C)
        rtol = 1e-6 if torch.float32 in {C.dtype, train.dtype, *dtypes} else 1e-9
        return match_rows(C, train.to(C), rtol=rtol) >= 0


def posterior_at(
    model: Model,
    X: Tensor,
    posterior_transform: PosteriorTransform | None = None,
    X_pending: Tensor | None = None,
    noise: Tensor | None = None,
    factors: ModelFactors | None = None,
) -> tuple[Tensor, Tensor]:
    """Posterior mean and standard deviation of the objective at ``X`` (``b x 1 x
    d``), given pending points hallucinated at their mean (:func:`pending_rows`;
    ``noise``: :func:`pending_noise`). With an exact GP's ``factors`` holding
    ``X_pending`` (:meth:`ModelFactors.pending`), their effect comes from them.

    Returns:
        ``(mean, std)``, each of shape ``b``.
    """
    if X_pending is None or factors is not None:
        posterior = model.posterior(X, posterior_transform=posterior_transform)
        mean, var = posterior.mean[..., 0, 0], posterior.variance[..., 0, 0]
        if X_pending is not None:
            flat = X.reshape(-1, X.shape[-1])
            drop = factors.pending_variance_drop(X_pending, flat)
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


def to_model(model: Model, X: Tensor) -> Tensor:
    """``X`` on the model's device and in its floating dtype (``X`` itself when
    they match already)."""
    device = dtype = None
    for tensor in (*model.parameters(), *model.buffers()):
        device = device or tensor.device
        if tensor.is_floating_point():
            dtype = tensor.dtype
            break
    return X.to(device=device, dtype=dtype)  # X itself where they match


def model_inputs(model: Model, X: Tensor, name: str = "candidates") -> Tensor:
    """``X`` (``N x d``, checked) on the model's device and in its dtype; its
    width checked through the model's ``transform_inputs`` (ValueError)."""
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
    """Raise ``UnsupportedError`` unless the model has one output or
    ``posterior_transform`` is a ``PosteriorTransform``."""
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


class _Rows:
    r"""The protocol of a row source: prior covariance rows :math:`k(a,
    Z[\text{first}:\text{stop}])` over the ``n`` candidates ``Z`` (global column
    ``offset + column``), the points ``a`` given as :meth:`features` (a shard
    asks for rows of points held elsewhere). A source defines ``_fill(block,
    left, a, b)``, called per block of
    :func:`~ax_chaining.distances.column_blocks`, or overrides ``_rows``; the
    rows are then multiplied by ``scale``. ``exact`` sources equal
    ``covar_module``'s values, the others to round-off."""

    offset = 0
    scale = 1.0
    n: int

    def __call__(
        self, feats: Tensor, cols: int | None = None, first: int = 0
    ) -> Tensor:
        out = self._rows(feats, first, self.n if cols is None else cols)
        return out.mul_(self.scale) if self.scale != 1.0 else out

    def _rows(self, left: Tensor, first: int, stop: int) -> Tensor:
        out = left.new_empty(left.shape[0], stop - first)
        for a, b in column_blocks(first, stop, self.offset):
            self._fill(out[:, a - first : b - first], left, a, b)
        return out


class KernelRows(_Rows):
    """Rows through any ``covar_module`` (``Zt``: the candidates in model space),
    per block of :func:`~ax_chaining.distances.column_blocks`, or, for an
    ``exact`` kernel, in ranges of up to ``chunk``."""

    def __init__(
        self, covar_module, Zt: Tensor, offset: int = 0, exact: bool = False
    ) -> None:
        self.covar_module, self.Zt, self.offset = covar_module, Zt, int(offset)
        self.n, self.exact = Zt.shape[-2], exact
        # A tile of a fingerprint library's inverted index: a smaller range
        # would read a whole tile for a part.
        self.chunk = 2**16 if exact else COLUMN_BLOCK

    def features(self, idx: Tensor) -> Tensor:
        return self.Zt[idx]

    def ranges(self, first: int, stop: int) -> list[tuple[int, int]]:
        return list(column_blocks(first, stop, self.offset, self.chunk))

    def _rows(self, feats: Tensor, first: int, stop: int) -> Tensor:
        parts = [
            self.covar_module(feats, self.Zt[a:b]).to_dense()
            for a, b in self.ranges(first, stop)
        ]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def diag(self, first: int, stop: int) -> Tensor:
        """Prior variances (model space) of the candidates ``first..stop-1``."""
        cols = column_blocks(first, stop, self.offset)
        return torch.cat([self.covar_module(self.Zt[a:b], diag=True) for a, b in cols])


def _unscale(kernel) -> tuple[Tensor | None, object]:
    """``(outputscale, base_kernel)`` of a ``ScaleKernel``, else ``(None, kernel)``."""
    if type(kernel) is ScaleKernel:
        return kernel.outputscale.detach(), kernel.base_kernel
    return None, kernel


def _plain(*kernels) -> bool:
    """Whether none of ``kernels`` has ``active_dims`` or a batch shape."""
    return all(k.active_dims is None and k.batch_shape == torch.Size() for k in kernels)


class SERows(_Rows):
    r"""Rows of a plain SE kernel :math:`c\,\exp(-\tfrac12 \|(a - b)/\ell\|^2)`:
    the exponent is one product of :math:`[z_a, 1, \log c - \tfrac12\|z_a\|^2]`
    and :math:`[z_b, -\tfrac12\|z_b\|^2, 1]`, inputs scaled by the lengthscales
    and centred on the scaled training inputs' mean. :meth:`of` returns None for
    other kernels, batch shapes or ``active_dims``."""

    def __init__(self, Zs: Tensor, log_scale: float, offset: int = 0) -> None:
        self.n, self.log_scale, self.offset = Zs.shape[0], log_scale, int(offset)
        half_norm = 0.5 * Zs.square().sum(dim=-1)
        ones = torch.ones_like(half_norm).unsqueeze(-1)
        self._right = torch.cat([Zs, -half_norm.unsqueeze(-1), ones], dim=-1)

    @classmethod
    def of(
        cls, covar_module, Zt: Tensor, train_X: Tensor, offset: int = 0
    ) -> SERows | None:
        scale, base = _unscale(covar_module)
        if type(base) is not RBFKernel or Zt.ndim != 2 or train_X.ndim != 2:
            return None
        lengthscale = base.lengthscale.detach()
        if not _plain(covar_module, base) or lengthscale.shape[:-1] != (1,):
            return None
        lengthscale = lengthscale.reshape(-1)
        centre = (train_X.detach() / lengthscale).mean(dim=0)
        Zs = Zt.detach() / lengthscale - centre
        return cls(Zs, 0.0 if scale is None else math.log(float(scale)), offset)

    def features(self, idx: Tensor) -> Tensor:
        return self._right[idx].clone()

    def _rows(self, feats: Tensor, first: int, stop: int) -> Tensor:
        left = feats.clone()
        half = -left[:, -2]
        left[:, -2] = 1.0
        left[:, -1] = self.log_scale - half
        # Round-off may leave the exponent a few ulps above log c on the
        # diagonal; d_t^2 is clamped at 0 downstream, so no clamp here.
        out = super()._rows(left, first, stop)
        if out.device.type != "cpu":
            return out.exp_()
        # numpy's exp is faster than torch's on CPU float64 (same memory),
        # but single-threaded: split a large block over torch's threads.
        array, threads = out.numpy(), torch.get_num_threads()
        if array.size < _SPLIT_EXP or threads < 2:
            np.exp(array, out=array)
            return out
        views = np.array_split(array, threads)  # views of row ranges
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda v: np.exp(v, out=v), views))
        return out

    def _fill(self, block: Tensor, left: Tensor, a: int, b: int) -> None:
        block.copy_(left @ self._right[a:b].T)


class FeatureRows(_Rows):
    r"""Rows of a :class:`~ax_chaining.kernels.FeatureTableKernel` with an RBF or
    Matern-3/2 or 5/2 base (ARD or not, optionally in ``ScaleKernel``\ s): with
    :math:`z = F / \ell - c` (rows scaled, centred on the scaled training rows'
    mean), a block is :math:`s\,\kappa(\|z_a - z_b\|)` from one ``addmm``
    clamped at 0. :meth:`of` returns None for other bases (Matern-1/2 would
    amplify the round-off of :math:`r^2 \approx 0`), batch shapes and
    ``active_dims``."""

    def __init__(
        self,
        table: Tensor,
        items: Tensor,
        inv_lengthscale: Tensor,
        train: Tensor,
        scale: float,
        profile: str,
        offset: int = 0,
    ) -> None:
        self.table, self.items, self.inv_lengthscale = table, items, inv_lengthscale
        self.scale, self.profile, self.offset = scale, profile, int(offset)
        self.n = items.shape[0]
        self.centre = self._gather(train).mul_(inv_lengthscale).mean(dim=0)

    @classmethod
    def of(
        cls, covar_module, Zt: Tensor, train_X: Tensor, offset: int = 0
    ) -> FeatureRows | None:
        outer, kernel = _unscale(covar_module)
        scale = 1.0 if outer is None else float(outer)
        if type(kernel) is not FeatureTableKernel or Zt.ndim != 2 or train_X.ndim != 2:
            return None
        inner, base = _unscale(kernel.base_kernel)
        matern = type(base) is MaternKernel and base.nu in (1.5, 2.5)
        if type(base) is not RBFKernel and not matern:
            return None
        profile = f"matern{base.nu}" if matern else "rbf"
        lengthscale = base.lengthscale.detach()
        plain = _plain(covar_module, kernel, kernel.base_kernel, base)
        if not plain or lengthscale.shape[:-1] != (1,):
            return None
        if inner is not None:
            scale *= float(inner)
        inv = 1.0 / lengthscale.reshape(-1).to(device=Zt.device, dtype=Zt.dtype)
        items, train = (
            item_indices(
                X, kernel.num_items, kernel.normalized_inputs, "FeatureTableKernel"
            )
            for X in (Zt, train_X)
        )
        return cls(kernel.features, items, inv, train, scale, profile, offset)

    def _gather(self, items: Tensor) -> Tensor:
        return self.table[items.to(self.table.device)].to(self.inv_lengthscale)

    def _scaled(self, items: Tensor) -> tuple[Tensor, Tensor]:
        z = self._gather(items).mul_(self.inv_lengthscale).sub_(self.centre)
        return z, z.square().sum(dim=-1)

    def features(self, idx: Tensor) -> Tensor:
        z, sq = self._scaled(self.items[idx.to(self.items.device)])
        return torch.cat([z, sq.unsqueeze(-1)], dim=-1)

    def _fill(self, block: Tensor, feats: Tensor, a: int, b: int) -> None:
        z_b, sq_b = self._scaled(self.items[a:b])
        block.copy_(torch.addmm(sq_b, feats[:, :-1], z_b.T, alpha=-2.0))
        block.add_(feats[:, -1:]).clamp_(min=0.0)
        _profile(block, self.profile)


def _profile(sq: Tensor, profile: str) -> None:
    r""":math:`r^2 \mapsto` the profile :math:`e^{-r^2/2}`, :math:`(1 + \sqrt3 r)
    e^{-\sqrt3 r}` or :math:`(1 + \sqrt5 r + \tfrac53 r^2) e^{-\sqrt5 r}`, in
    place."""
    if profile == "rbf":
        sq.mul_(-0.5).exp_()
        return
    r = sq.sqrt_()
    root = math.sqrt(3.0) if profile == "matern1.5" else math.sqrt(5.0)
    decay = torch.exp(r * -root)
    r.mul_(root)
    if profile == "matern2.5":
        # 1 + sqrt5 r + 5/3 r^2, from r: (sqrt5 r) + (sqrt5 r)^2 / 3 + 1.
        r.add_(r.square().div_(3.0))
    r.add_(1.0).mul_(decay)


class LibraryRows(_Rows):
    """Rows of a library-mode ``TanimotoKernel`` (optionally in a ``ScaleKernel``)
    straight from :meth:`~ax_chaining.kernels.PackedFingerprints.tanimoto`, one
    call per block, no GPyTorch call, computed where the candidates live."""

    def __init__(self, base, scale: float, Zt: Tensor) -> None:
        self.library, self.scale, self.route = base.library, scale, base.route
        n = len(base.library)
        items = item_indices(Zt, n, base.normalized_inputs, "TanimotoKernel").cpu()
        self.items, self.n, self.device = items, items.numel(), Zt.device
        # Contiguous items: a slice of the library's columns (the fast case).
        start = int(items[0]) if self.n else 0
        contiguous = self.n and torch.equal(items, torch.arange(start, start + self.n))
        self.start = start if contiguous else None

    @classmethod
    def of(cls, covar_module, Zt: Tensor) -> LibraryRows | None:
        parts = library_kernel_parts(covar_module)
        return None if parts is None or Zt.ndim != 2 else cls(*parts, Zt)

    def features(self, idx: Tensor) -> Tensor:
        return self.items[idx.cpu()]

    def _rows(self, feats: Tensor, first: int, stop: int) -> Tensor:
        if self.start is None:
            columns = self.items[first:stop]
        else:
            columns = slice(self.start + first, self.start + stop)
        return self.library.tanimoto(
            feats, columns, route=self.route, device=self.device
        )


def library_kernel_parts(covar_module) -> tuple[object, float] | None:
    """``(TanimotoKernel, output scale)`` of a library-mode Tanimoto kernel
    (optionally in a ``ScaleKernel``, no ``active_dims``), else None."""
    scale, base = _unscale(covar_module)
    scale = 1.0 if scale is None else float(scale)
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
    """The factor :math:`W = c^{1/2} L^{-1} k(X_n, Z)` into ``out[:r]`` and the
    posterior means (outcome units, returned) over ``kernel``'s candidates, per
    block of :func:`~ax_chaining.distances.column_blocks`: the one place one
    machine and a shard compute them."""
    r, root = L.shape[-1], out_var.sqrt()
    mean = torch.empty(kernel.n, dtype=out.dtype, device=out.device)
    for cross, a, b in _kernel_blocks(kernel, train_features):
        W = torch.linalg.solve_triangular(L, cross, upper=False)
        # m(z) + w(z)^T L^{-1} (y - m(X_n)) from the same factor: no
        # predictive covariance, which model.posterior would build.
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
    into ``out`` (``p x m``), per block: :math:`k_t(P, z) = c\, k(P, z) -
    W_P^\top w(z)` (``W``: the candidates' factor; ``W_p``, ``A``:
    :meth:`ModelFactors.pending`)."""
    for cov, a, b in _kernel_blocks(kernel, pending_features):
        block = cov.clone().addmm_(W_p.T, W[:, a:b], beta=float(out_var), alpha=-1.0)
        out[:, a:b] = torch.linalg.solve_triangular(A, block, upper=False)


def _kernel_blocks(
    kernel: KernelRows, feats: Tensor
) -> Iterator[tuple[Tensor, int, int]]:
    """``(k(feats, Z[a:b]), a, b)`` per block of
    :func:`~ax_chaining.distances.column_blocks`, computed per ``kernel.ranges``."""
    for a0, b0 in kernel.ranges(0, kernel.n):
        cross = kernel(feats, b0, a0)
        for a, b in column_blocks(a0, b0, kernel.offset):
            yield cross[:, a - a0 : b - a0], a, b


class ModelFactors:
    r"""What the posterior over any candidates needs of an exact single-output GP,
    small enough (``r x r``) to send to other machines: the Cholesky factor
    :math:`L` of :math:`K_n + \eta^2 I`, the whitened residual :math:`L^{-1}(y -
    m(X_n))`, the outcome scale :math:`c`, and, given pending points, their
    :math:`W_P` and :math:`A`."""

    def __init__(self, model: ExactGP, like: Tensor) -> None:
        self.model = model
        self.train_X = train_X = model.train_inputs[0]
        self.covar_module = covar_module = model.covar_module
        self.mean_module = model.mean_module
        self.outcome_transform = getattr(model, "outcome_transform", None)
        self.out_var = _outcome_variance_scale(model, like)[0]
        K_train = covar_module(train_X).to_dense()
        noise = model.likelihood.noise.reshape(-1).expand(train_X.shape[0])
        self.L = L = psd_safe_cholesky(K_train + torch.diag_embed(noise))
        residual = (model.train_targets - model.mean_module(train_X)).unsqueeze(-1)
        self.whitened = torch.linalg.solve_triangular(L, residual, upper=False)
        self._pending: tuple[Tensor, Tensor, Tensor, Tensor] | None = None

    def _whiten(self, Xt: Tensor) -> Tensor:
        cross = self.covar_module(self.train_X, Xt).to_dense()
        W = torch.linalg.solve_triangular(self.L, cross, upper=False)
        return W.mul_(self.out_var.sqrt())

    def pending(
        self, X_pending: Tensor, noise: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        r"""``(Pt, W_P, A)`` for pending points (raw inputs): :math:`W_P = c^{1/2}
        L^{-1} k(X_n, P)`, :math:`A A^\top = k_t(P, P) + \mathrm{diag}(\text{noise})`;
        kept for :meth:`pending_variance_drop`."""
        Pt = self.model.transform_inputs(X_pending)
        W_p = self._whiten(Pt)
        cov_pp = self.covar_module(Pt, Pt).to_dense()
        cov_pp = cov_pp.addmm_(W_p.T, W_p, beta=float(self.out_var), alpha=-1.0)
        A = psd_safe_cholesky(cov_pp + torch.diag_embed(noise.to(cov_pp)))
        self._pending = (X_pending.clone(), Pt, W_p, A)
        return Pt, W_p, A

    def pending_variance_drop(self, X_pending: Tensor, X: Tensor) -> Tensor | None:
        r""":math:`\|A^{-1} k_t(P, x)\|^2` at ``X`` (``b x d``) for the pending
        points of the last :meth:`pending` call; None if that was for others."""
        if self._pending is None or not torch.equal(self._pending[0], X_pending):
            return None
        _, Pt, W_p, A = self._pending
        Xt = self.model.transform_inputs(X)
        w = self._whiten(Xt)
        k_px = self.covar_module(Pt, Xt).to_dense()
        k_px = k_px.mul_(self.out_var).addmm_(W_p.T, w, alpha=-1.0)
        e = torch.linalg.solve_triangular(A, k_px, upper=False)
        return e.square().sum(dim=0)


class _LowRankFactors:
    """The candidates' factor :math:`W`, posterior mean and prior rows of an exact
    single-output GP; pending points append rows to :math:`W` (:meth:`condition`)."""

    def __init__(self, model: ExactGP, Z: Tensor) -> None:
        self.model_factors = mf = ModelFactors(model, Z)
        self.Zt = Zt = model.transform_inputs(Z)
        self.out_var = mf.out_var
        self._library = LibraryRows.of(mf.covar_module, Zt)
        self.kernel = KernelRows(mf.covar_module, Zt, exact=self._library is not None)
        self.factor = Zt.new_empty(mf.train_X.shape[-2], Zt.shape[-2])
        self.mean = factor_blocks(
            self.kernel,
            mf.train_X,
            mf.L,
            mf.whitened,
            mf.mean_module,
            mf.outcome_transform,
            mf.out_var,
            self.factor,
        )

    @cached_property
    def rows(self) -> _Rows:
        """The fastest rows that apply (computed on first use)."""
        mf = self.model_factors
        return (
            SERows.of(mf.covar_module, self.Zt, mf.train_X)
            or FeatureRows.of(mf.covar_module, self.Zt, mf.train_X)
            or self._library
            or self.kernel
        )

    def prior_rows(self, idx: Tensor, first: int = 0) -> Tensor:
        """Model-space prior covariance of ``Z[idx]`` and ``Z[first:]``."""
        return self.rows(self.rows.features(idx), None, first).to(self.Zt)

    @cached_property
    def prior_variance(self) -> Tensor:
        return self.kernel.diag(0, self.Zt.shape[-2]) * self.out_var

    def condition(self, X_pending: Tensor, noise: Tensor) -> Tensor:
        """The ``(r + p) x N`` factor given pending points (:func:`pending_rows`)."""
        Pt, W_p, A = self.model_factors.pending(X_pending, noise)
        W = self.factor
        r, n = W.shape
        out = W.new_empty(r + Pt.shape[-2], n)
        out[:r] = W
        pending_factor_blocks(self.kernel, Pt, W_p, A, W, self.out_var, out[r:])
        return out


class PosteriorCache:
    """The candidates' factor, posterior mean and prior variance (which pending
    points leave unchanged), kept by :func:`candidate_posterior` for later calls
    with the same model and candidates; a refit model needs a new one."""

    def __init__(self) -> None:
        self.factors: _LowRankFactors | None = None
        self._key: tuple | None = None

    def factors_for(self, model: Model, candidates: Tensor) -> _LowRankFactors:
        key = (id(model), candidates.data_ptr(), tuple(candidates.shape))
        if self.factors is None or self._key != key:
            self.factors, self._key = _LowRankFactors(model, candidates), key
        return self.factors


def row_budgets(memory_budget: int) -> tuple[int, int]:
    """Bytes of a block of rows of :math:`d_t`, and of a farthest-first pool
    (which must hold many rows per call at large ``N``)."""
    # A few MiB keep a block's passes (kernel, correction, thresholds) in cache.
    block_bytes = max(2**20, min(4 * 2**20, memory_budget // 32))
    pool_bytes = max(block_bytes, min(512 * 2**20, memory_budget // 8))
    return block_bytes, pool_bytes


def low_rank_bytes(r: int, p: int, n: int, itemsize: int, pool_bytes: int) -> int:
    """Peak bytes of the low-rank route over ``n`` candidates, ``r`` observations
    and ``p`` pending points."""
    return (r + 2 * p + 6) * (n + p) * itemsize + 4 * pool_bytes


def low_rank_row_batch(n: int, itemsize: int, memory_budget: int) -> int:
    """Rows per farthest-first batch over ``n`` candidates: a pool of ``2 * batch``
    rows fits in the pool's budget."""
    pool_bytes = row_budgets(memory_budget)[1]
    return max(1, min(32, pool_bytes // (2 * n * itemsize)))


def _budget_error(what: str, n: int, need: int, budget: int) -> MemoryBudgetError:
    hint = (
        "use path='low_rank' (exact single-output GPs)"
        if what == "The dense path"
        else "lower max_cover_size"
    )
    return MemoryBudgetError(
        f"{what} for N={n} candidates needs about {format_bytes(need)}, "
        f"above memory_budget={format_bytes(budget)}. Pass a larger "
        f"memory_budget, {hint}, or use fewer candidates."
    )


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
    r"""Posterior mean and pseudo-distance :math:`d_t` over ``candidates``.

    ``"low_rank"`` (exact single-output GPs, :func:`supports_low_rank`) computes
    rows of :math:`d_t` on demand from the prior kernel and the factor :math:`W`
    (``O(N r)`` memory); ``"dense"`` builds the exact greedy covers, from those
    rows where the model has the low-rank form, else from ``model.posterior``'s
    ``N x N`` covariance; ``"auto"`` takes the dense route without the
    low-rank form, or while ``N <=`` :data:`AUTO_EXACT_MAX_N` and the greedy
    covers' graph fits the budget beside the low-rank form.

    Example:
        >>> post = candidate_posterior(model, candidates, path="low_rank")
        >>> post.mean.shape, post.distance.n

    Args:
        X_pending: ``p x d`` points conditioned on at their posterior mean.
        path: ``"auto"``, ``"dense"`` or ``"low_rank"``.
        memory_budget: Bytes the largest allocations may take (else
            ``MemoryBudgetError``, before any allocation).
        cache: A :class:`PosteriorCache` to fill and reuse (a batch then
            computes only the pending points' rows of the factor).
        first_radius: :math:`\epsilon_1`, for ``"auto"``'s estimate (default the
            largest prior standard deviation).
    """
    low_rank_form = supports_low_rank(model, posterior_transform)
    if path not in ("auto", "dense", "low_rank"):
        raise ValueError(f"path must be 'auto', 'dense' or 'low_rank', got {path!r}.")
    if path == "low_rank":
        require_low_rank(model, posterior_transform, "path='low_rank'")
    p = 0 if X_pending is None else X_pending.shape[0]
    n, itemsize = candidates.shape[0], candidates.element_size()
    r = num_training_points(model) or 0
    block_bytes, pool_bytes = row_budgets(memory_budget)
    low_rank_need = low_rank_bytes(r, p, n, itemsize, pool_bytes)
    # Without the low-rank form: model.posterior's covariance (about three
    # N x N copies at its peak) and the greedy covers' graph (at most 2 N^2
    # bytes, as a level matrix).
    dense_bytes = dense_memory_bytes(n, candidates.dtype, 3.0) + 4 * block_bytes
    if not low_rank_form and dense_bytes > memory_budget:
        raise _budget_error("The dense path", n, dense_bytes, memory_budget)
    if low_rank_form and path != "dense" and low_rank_need > memory_budget:
        raise _budget_error("The low-rank path", n, low_rank_need, memory_budget)
    model.eval()
    noise = pending_noise(model, X_pending, posterior_transform) if p else None
    prior_var = reason = None
    with torch.no_grad():
        if low_rank_form:
            factors = (cache or PosteriorCache()).factors_for(model, candidates)
            flip = sign_flip(model, posterior_transform)
            mean = factors.mean if flip is None else flip[0] * factors.mean + flip[1]
            factor = factors.factor
            if p:
                factor = factors.condition(X_pending.to(candidates), noise)
            # Both routes read rows of d_t on demand: the dense one into the
            # graphs of the exact greedy covers, a block at a time.
            prior_var = factors.prior_variance
            distance = LowRankDistance(
                factors.prior_rows,
                prior_var,
                factor,
                block_bytes=block_bytes,
                prior_scale=float(factors.out_var),
                prior_block=factors.prior_rows,
            )
            distance.row_batch = low_rank_row_batch(n, itemsize, memory_budget)
            if not p:  # one r x N factor kept, not two (equal values)
                factors.factor = distance.factor
            if not first_radius:
                # eps_1 = the largest prior standard deviation (the default scale).
                first_radius = float(prior_var.max().clamp_min(0).sqrt())
        else:  # any Gaussian posterior: its covariance, pending points included
            Z = torch.cat([candidates, X_pending.to(candidates)]) if p else candidates
            # Only the mean: GPyTorch would otherwise build a chunk x chunk
            # covariance.
            chunks = [candidates[i : i + _MEAN_CHUNK] for i in range(0, n, _MEAN_CHUNK)]
            with gpytorch.settings.skip_posterior_variances():
                means = [
                    model.posterior(c, posterior_transform=posterior_transform).mean
                    for c in chunks
                ]
            mean = torch.cat([m.reshape(-1) for m in means])
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
            distance = DenseDistance(cov, inplace=True, block_bytes=block_bytes)
        route = path
        if path == "auto":
            route, need = "dense", low_rank_need
            if low_rank_form and n > AUTO_EXACT_MAX_N:
                route = "low_rank"
            elif low_rank_form and GRAPH_PEAK_EDGE_BYTES * n * n + need > memory_budget:
                # The pairs within eps_1, from sampled rows (dense coarse levels
                # are covered lazily and keep no edges), or a level matrix
                # where the lists are larger.
                radii = [first_radius * 2.0**-i for i in range(8)]
                counted, edges = lazy_levels(distance, radii)
                graph = GRAPH_PEAK_EDGE_BYTES * edges
                if graph + need > memory_budget:
                    graph = 2 * n * n
                if graph + need > memory_budget:
                    route = "low_rank"
                    reason = (
                        f"greedy covers of N={n} need about {format_bytes(graph)} "
                        f"({edges:,} pairs within eps_{counted + 1}), above "
                        f"memory_budget={format_bytes(memory_budget)}"
                    )
    return CandidatePosterior(mean, distance, route, prior_var, noise, reason)
