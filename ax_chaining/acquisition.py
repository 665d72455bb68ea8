r"""Chaining-UCB and GP-UCB as BoTorch acquisition functions, and the stock UCB
baseline with an input constructor for Ax's candidate-set nodes.

Chaining-UCB and GP-UCB use the same iteration index ``t``: by default the
number of observations the model holds, plus the number of pending points, plus
one. In Algorithm 1 of Contal et al. (2015) the ``t``-th query is chosen from
``t - 1`` observations, and the ``n_0`` initial points of their experiments
count as observations.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from botorch.acquisition.acquisition import AcquisitionFunction
from botorch.acquisition.analytic import UpperConfidenceBound
from botorch.acquisition.input_constructors import acqf_input_constructor
from botorch.acquisition.objective import PosteriorTransform
from botorch.exceptions import UnsupportedError
from botorch.models.model import Model
from botorch.utils.transforms import t_batch_mode_transform
from torch import Tensor

from ax_chaining.certificate import (
    Certificate,
    ChainingTree,
    Links,
    Method,
    Rule,
    Tail,
    certificate_bounds,
    chaining_tree,
    recommend,
)
from ax_chaining.chaining import (
    ChainingResult,
    CoverMethod,
    HRadius,
    _check_delta,
    _check_positive_int,
    chaining_covers,
    reuse_covers,
)
from ax_chaining.checks import check_float, check_int
from ax_chaining.distances import DEFAULT_MEMORY_BUDGET, PseudoDistance
from ax_chaining.posterior import (
    Path,
    PosteriorCache,
    candidate_posterior,
    num_training_points,
    prior_variance,
)

#: Default cap on farthest-first cover sizes (low-rank path): a traversal costs
#: one row of N distances per centre; levels past the cap use |T_i| <= N.
DEFAULT_MAX_COVER_SIZE = 2048

__all__ = [
    "DEFAULT_MAX_COVER_SIZE",
    "GPUCB",
    "UCB",
    "ChainingUCB",
    "check_chaining_options",
    "default_t",
    "evaluated_candidates",
    "gp_ucb_beta",
]


PendingCovers = Literal["rebuild", "reuse"]

_CHOICES: dict[str, Any] = {
    "h_radius": HRadius,
    "path": Path,
    "cover": CoverMethod,
    "pending_covers": PendingCovers,
}
_RANGES: dict[str, tuple[Any, str]] = {
    "delta": (lambda v: 0 < v < 1, "(0, 1)"),
    "beta": (lambda v: v >= 0, ">= 0"),
    "scale": (lambda v: v > 0, "finite and > 0"),
    "sigma_floor": (lambda v: 0 <= v < 1, "[0, 1)"),
}


def check_chaining_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A checked copy of acquisition options, by name, before any model step.

    ``delta``, ``scale``, ``sigma_floor``, ``h_radius``, ``path``, ``cover``,
    ``max_cover_size``, ``memory_budget`` and ``pending_covers`` as in
    :class:`ChainingUCB` (``delta``
    also of :class:`GPUCB`, ``beta`` of :class:`UCB`); None where the default is
    None. Floats come back as floats; other names are left as they are.

    Example:
        >>> check_chaining_options({"delta": 0.1, "path": "dense"})
        {'delta': 0.1, 'path': 'dense'}
    """
    out = dict(options)
    for name, value in out.items():
        if value is None and name in ("scale", "cover", "max_cover_size"):
            continue
        if name in _CHOICES:
            choices = typing.get_args(_CHOICES[name])
            if value not in choices:
                raise ValueError(f"`{name}` must be one of {choices}, got {value!r}.")
        elif name in ("max_cover_size", "memory_budget"):
            out[name] = check_int(name, value, 1)
        elif name in _RANGES:
            out[name] = check_float(name, value, _RANGES[name])
    return out


def default_t(model: Model, num_pending: int = 0) -> int:
    """Iteration index: observations in ``model`` + pending points + 1.

    Args:
        model: A BoTorch model conditioned on its training data.
        num_pending: Number of pending points conditioned on as well.

    Returns:
        ``t >= 1``.
    """
    n = num_training_points(model)
    if n is None:
        raise ValueError(
            f"Cannot count the observations of a {type(model).__name__}; pass t= "
            "explicitly (number of observations plus one)."
        )
    if n == 0:
        raise ValueError(
            "The model has no training data; Chaining-UCB needs a model conditioned "
            "on at least one observation (run an initial design first)."
        )
    return n + num_pending + 1


def gp_ucb_beta(num_candidates: int, t: int, delta: float = 0.05) -> float:
    r"""GP-UCB schedule of Srinivas et al. (2010, Theorem 1), finite :math:`X`.

    .. math::

        \beta_t = 2 \log\big(|X|\, t^2 \pi^2 / (6 \delta)\big).
    """
    num_candidates = _check_positive_int("num_candidates", num_candidates)
    t = _check_positive_int("t", t)
    delta = _check_delta(delta)
    return 2.0 * math.log(num_candidates * t**2 * math.pi**2 / (6.0 * delta))


def evaluated_candidates(model: Model, candidates: Tensor) -> Tensor:
    """Boolean mask of the candidates that are training inputs of ``model``.

    Compared in the model's input space (``input_transform.preprocess_transform``
    applied to the candidates, as BoTorch does to the training inputs), with a
    relative tolerance of ``1e-9``. Model lists: a training input of any model.
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
            C = (
                candidates
                if transform is None
                else transform.preprocess_transform(candidates)
            )
            train = inputs[0].reshape(-1, inputs[0].shape[-1]).to(C)
            tol = 1e-9 * (1.0 + float(train.abs().max()))
            for start in range(0, C.shape[0], 4096):
                d = torch.cdist(
                    C[start : start + 4096],
                    train,
                    compute_mode="donot_use_mm_for_euclid_dist",
                )
                mask[start : start + 4096] |= d.min(dim=-1).values <= tol
    return mask


@dataclass
class _CertificateState:
    """Posterior without pending points, and the chaining tree (one step)."""

    mean: Tensor
    distance: PseudoDistance
    tree: ChainingTree
    t: int
    _last: tuple[Tensor, Tensor] | None = None

    def rows(self, index: Tensor) -> Tensor:
        """``d_t(x, .)`` for the points ``index``; the last set is kept (variants
        of one step certify the same points)."""
        if self._last is not None and torch.equal(self._last[0], index):
            return self._last[1]
        dist = self.distance.rows(index).to(torch.float64).clamp_min(0.0).sqrt()
        self._last = (index.clone(), dist)
        return dist


def _check_candidates(candidates: Any, model: Model) -> Tensor:
    if not isinstance(candidates, Tensor):
        raise TypeError(
            f"candidates must be a torch.Tensor of shape N x d, got "
            f"{type(candidates).__name__}."
        )
    if candidates.ndim != 2:
        raise ValueError(
            f"candidates must be a 2-D tensor of shape N x d, got shape "
            f"{tuple(candidates.shape)}."
        )
    if candidates.shape[0] == 0:
        raise ValueError("candidates is empty: Chaining-UCB needs N >= 1 candidates.")
    if not candidates.is_floating_point():
        raise TypeError(f"candidates must be floating point, got {candidates.dtype}.")
    if not torch.isfinite(candidates).all():
        bad = (~torch.isfinite(candidates)).any(dim=-1).nonzero().squeeze(-1)
        raise ValueError(
            f"candidates contains NaN or inf in {bad.numel()} row(s), first at row "
            f"{int(bad[0])}; every candidate must be finite."
        )
    device, dtype = _model_device(model), _model_dtype(model)
    if (device is not None and candidates.device != device) or (
        dtype is not None and candidates.dtype != dtype
    ):
        # BoTorch models live on one device with one dtype; follow them (float64
        # candidates of a float32 model are rounded to float32) rather than fail
        # deep inside GPyTorch with a dtype mismatch.
        candidates = candidates.to(device=device, dtype=dtype)
    d = _input_dim(model)
    if d is not None and candidates.shape[-1] != d:
        raise ValueError(
            f"candidates has d={candidates.shape[-1]} columns, but the model was "
            f"trained on d={d} inputs."
        )
    return candidates


def _model_device(model: Model) -> torch.device | None:
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return None


def _model_dtype(model: Model) -> torch.dtype | None:
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return None


def _input_dim(model: Model) -> int | None:
    models = getattr(model, "models", None)
    if models:
        return _input_dim(models[0])
    original = getattr(model, "_original_train_inputs", None)
    if original is not None:
        return int(original.shape[-1])
    if getattr(model, "input_transform", None) is not None:
        return None  # transformed inputs may have another width
    inputs = getattr(model, "train_inputs", None)
    if inputs and isinstance(inputs[0], torch.Tensor):
        return int(inputs[0].shape[-1])
    return None


class ChainingUCB(AcquisitionFunction):
    r"""Chaining-UCB (Contal, Malherbe and Vayatis, 2015) on a finite candidate set.

    A GP-UCB whose exploration bonus is calibrated from covering numbers of the
    candidate set :math:`X` under the posterior pseudo-distance
    :math:`d_t(x, x') = \sqrt{\sigma_t^2(x) - 2 k_t(x, x') + \sigma_t^2(x')}`:

    .. math::

        \mathrm{ChainingUCB}(x) = \mu_t(x)
            + \sum_{i:\, \sigma_t^{\min} \le \epsilon_i < \sigma_t(x)} H_i,
        \qquad
        H_i = \epsilon_i \sqrt{2 \log\frac{(|T_i| + 1)\, i^2 t^2 \pi^4}{36 \delta}},

    with radii :math:`\epsilon_i = s\, 2^{1-i}`, nested greedy covers
    :math:`T_i` (Algorithms 1 and 2 of the paper), :math:`\sigma_t^{\min} =
    \min_{x \in X} \sigma_t(x)`, and :math:`\mu_t, \sigma_t, k_t` the posterior of
    the latent function (no observation noise). For ``maximize=False`` the mean
    enters with a minus sign, as in :class:`UpperConfidenceBound`.

    The covers are built once, at construction (and again when pending points
    change). ``forward`` evaluates at any ``X``, not only at candidates; the bonus
    is a step function of :math:`\sigma_t(x)`.

    Defaults and deviations from the paper (each can be changed):

    * ``scale`` :math:`s`: the paper's kernel has :math:`k(x, x) \le 1` and
      :math:`s = 1`. The default is the largest prior standard deviation over the
      candidates, so multiplying the objective by :math:`c > 0` multiplies every
      :math:`H_i` by :math:`c` and leaves the selected point unchanged.
    * ``t``: observations + pending points + 1, shared with :class:`GPUCB`.
    * ``sigma_floor``: relative floor on :math:`\sigma_t^{\min}` (noise-free
      data give :math:`\sigma_t^{\min} = 0` and infinitely many levels).
    * ``h_radius``: ``"algorithm"`` writes :math:`H_i` with :math:`\epsilon_i`
      (the box of Algorithm 1, default); ``"proof"`` with :math:`\epsilon_{i-1}`.
    * ``path`` / ``cover``: the dense exact path with greedy covers (default when
      it fits in the memory budget), or rows on demand with farthest-first
      nested covers for large candidate sets (see :mod:`ax_chaining.chaining`).
    * ``pending_covers``: with pending points (a batch), ``"rebuild"`` (default)
      runs Algorithm 1 again on the posterior given them; ``"reuse"`` keeps the
      covers built without them, which stay valid covers since pending points
      only shrink :math:`d_t` (:func:`~ax_chaining.chaining.reuse_covers`): a
      batch then costs one build, with :math:`H_i` usually a little larger.

    :meth:`certificate` and :meth:`regret_bound` give a regret certificate valid
    at any candidate chosen from the data (:mod:`ax_chaining.certificate`); the
    paper's Eq. (ucb) stays available as ``acqf.chaining.regret_bound`` for
    comparison only.

    Example:
        >>> model = SingleTaskGP(train_X, train_Y)
        >>> candidates = torch.rand(1000, 2, dtype=torch.float64)
        >>> acqf = ChainingUCB(model, candidates)
        >>> x_next, _ = optimize_acqf_discrete(acqf, q=1, choices=candidates)
        >>> acqf.chaining.cover_sizes, acqf.regret_bound(x_next.unsqueeze(0))

    Args:
        model: A fitted single-outcome model (or multi-output with a
            ``posterior_transform``) with a Gaussian posterior.
        candidates: ``N x d`` tensor, the finite search space :math:`X`, in the
            same input space as the ``X`` passed to ``forward``.
        delta: Confidence parameter :math:`\delta \in (0, 1)`.
        t: Iteration index :math:`t \ge 1`; default observations + pending + 1.
        posterior_transform: Maps a multi-output posterior to a single output.
        maximize: If True, consider the problem a maximization problem.
        X_pending: ``p x d`` points already chosen but not yet observed; they are
            conditioned on with their posterior mean as observations (GP-BUCB).
        scale: :math:`s`, the radius of the first level; default the largest prior
            standard deviation over the candidates.
        sigma_floor: Floor on :math:`\sigma_t^{\min}`, relative to ``scale``.
        h_radius: ``"algorithm"`` or ``"proof"``.
        path: ``"auto"``, ``"dense"`` or ``"low_rank"``.
        cover: ``"greedy"`` or ``"farthest_first"``; default greedy on the dense
            path and farthest-first on the low-rank path.
        max_cover_size: Size cap for farthest-first covers (default
            ``min(N, 2048)`` on the low-rank path); deeper levels use
            :math:`|T_i| \le N`.
        memory_budget: Bytes the largest allocations may take (default 4 GiB).
        pending_covers: ``"rebuild"`` or ``"reuse"`` the covers when pending
            points are set (see above).
    """

    def __init__(
        self,
        model: Model,
        candidates: Tensor,
        delta: float = 0.05,
        t: int | None = None,
        posterior_transform: PosteriorTransform | None = None,
        maximize: bool = True,
        X_pending: Tensor | None = None,
        scale: float | None = None,
        sigma_floor: float = 1e-6,
        h_radius: HRadius = "algorithm",
        path: Path = "auto",
        cover: CoverMethod | None = None,
        max_cover_size: int | None = None,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        pending_covers: PendingCovers = "rebuild",
    ) -> None:
        super().__init__(model=model)
        if posterior_transform is None and model.num_outputs != 1:
            raise UnsupportedError(
                "Must specify a posterior_transform when using a multi-output model "
                f"(the model has {model.num_outputs} outputs)."
            )
        if posterior_transform is not None and not isinstance(
            posterior_transform, PosteriorTransform
        ):
            raise UnsupportedError(
                "posterior_transform must be a PosteriorTransform, got "
                f"{type(posterior_transform).__name__}."
            )
        self.posterior_transform = posterior_transform
        self.maximize = maximize
        self._options = check_chaining_options(
            dict(
                delta=delta,
                scale=scale,
                sigma_floor=sigma_floor,
                h_radius=h_radius,
                path=path,
                cover=cover,
                max_cover_size=max_cover_size,
                memory_budget=memory_budget,
                pending_covers=pending_covers,
            )
        )
        self.delta = self._options.pop("delta")
        self._scale = self._options.pop("scale")
        if t is not None:
            t = _check_positive_int("t", t)
        elif num_training_points(model) == 0:
            default_t(model)  # raises the no-training-data error
        self._t = t
        self.register_buffer("candidates", _check_candidates(candidates, model))
        self.set_X_pending(X_pending)
        self._built()  # bad input and memory errors surface here, not later

    @property
    def t(self) -> int:
        """The iteration index used in :math:`H_i`."""
        return self.chaining.t

    @property
    def scale(self) -> float:
        """The radius :math:`s` of the first level."""
        return self.chaining.scale

    def set_X_pending(self, X_pending: Tensor | None = None) -> None:
        r"""Condition on pending points; the covers follow on the next use.

        A pending point is treated as observed at its posterior mean, which leaves
        :math:`\mu_t` unchanged and shrinks :math:`k_t` exactly as a real
        observation would (GP-BUCB, Desautels et al., 2014).

        The covers are rebuilt from scratch (Algorithm 1 on the new posterior)
        when the acquisition function is next evaluated or :attr:`chaining` is
        read, not here: ``optimize_acqf_discrete`` sets pending points once more
        after its last pick, and then restores the original ones, whose covers
        are kept. The candidates' posterior factor is reused; a pending point
        only adds a row to it.

        Args:
            X_pending: ``p x d`` pending points, or None.
        """
        if X_pending is not None:
            if X_pending.ndim != 2 or X_pending.shape[-1] != self.candidates.shape[-1]:
                raise ValueError(
                    f"X_pending must have shape p x {self.candidates.shape[-1]}, got "
                    f"{tuple(X_pending.shape)}."
                )
            X_pending = X_pending.detach().to(self.candidates)
            if X_pending.shape[0] == 0:
                X_pending = None
        self.X_pending = X_pending
        self._state = None
        base = getattr(self, "_base_state", None)
        if X_pending is None and base is not None:
            self._state = base

    @property
    def chaining(self) -> ChainingResult:
        """Levels, covers and :math:`H_i` for the current pending points."""
        return self._built()[0]

    @property
    def candidate_mean(self) -> Tensor:
        """Posterior mean over the candidates."""
        return self._built()[1]

    @property
    def candidate_sigma(self) -> Tensor:
        """Posterior standard deviation over the candidates (given pending points)."""
        return self._built()[2]

    @property
    def _pending_noise(self) -> Tensor | None:
        return self._built()[3]

    def _built(self) -> tuple[ChainingResult, Tensor, Tensor, Tensor | None]:
        if getattr(self, "_state", None) is None:
            self._build()
        return self._state

    @torch.no_grad()
    def _build(self) -> None:
        opts = self._options
        p = 0 if self.X_pending is None else self.X_pending.shape[0]
        t = self._t if self._t is not None else default_t(self.model, p)
        if not hasattr(self, "_posterior_cache"):
            self._posterior_cache = PosteriorCache()
        post = candidate_posterior(
            self.model,
            self.candidates,
            posterior_transform=self.posterior_transform,
            X_pending=self.X_pending,
            path=opts["path"],
            memory_budget=opts["memory_budget"],
            cache=self._posterior_cache,
            first_radius=self._scale,
        )
        if self._scale is not None:
            scale = self._scale
        else:
            prior_var = post.prior_variance
            if prior_var is None:
                prior_var = prior_variance(
                    self.model, self.candidates, self.posterior_transform
                )
            scale = float(prior_var.max().clamp_min(0).sqrt())
            if not scale > 0:
                raise ValueError(
                    "The prior variance is 0 on every candidate; pass scale= "
                    "explicitly."
                )
        cover = opts["cover"] or (
            "greedy" if post.path == "dense" else "farthest_first"
        )
        max_cover_size = opts["max_cover_size"]
        if max_cover_size is None and post.path == "low_rank":
            max_cover_size = min(post.distance.n, DEFAULT_MAX_COVER_SIZE)
        base = getattr(self, "_base_state", None)
        if p and opts["pending_covers"] == "reuse" and base is not None:
            chaining = reuse_covers(base[0], post.distance, t)
            self._state = (chaining, post.mean, post.distance.sigma, post.pending_noise)
            return
        chaining = chaining_covers(
            post.distance,
            t=t,
            delta=self.delta,
            scale=scale,
            sigma_floor=opts["sigma_floor"],
            h_radius=opts["h_radius"],
            cover=cover,
            max_cover_size=max_cover_size,
            memory_budget=opts["memory_budget"],
        )
        chaining.info.update(path=post.path)
        if post.reason is not None:
            chaining.info.update(reason=post.reason)
        self._state = (chaining, post.mean, post.distance.sigma, post.pending_noise)
        if self.X_pending is None:
            self._base_state = self._state

    def _mean_and_sigma(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """Posterior mean and std at ``X`` (``b x 1 x d``), given pending points."""
        if self.X_pending is None:
            posterior = self.model.posterior(
                X, posterior_transform=self.posterior_transform
            )
            mean = posterior.mean.squeeze(-1).squeeze(-1)
            var = posterior.variance.squeeze(-1).squeeze(-1)
            return mean, var.clamp_min(0).sqrt()
        noise = self._pending_noise  # builds the state for these pending points
        factors = getattr(self, "_posterior_cache", None)
        factors = None if factors is None else factors.factors
        if factors is not None:
            # Exact GPs: the pending points' effect is a rank-p correction of
            # the plain posterior variance, from the factor the build made.
            flat = X.reshape(-1, X.shape[-1])
            drop = factors.pending_variance_drop(self.X_pending, flat)
            if drop is not None:
                posterior = self.model.posterior(
                    X, posterior_transform=self.posterior_transform
                )
                mean = posterior.mean.squeeze(-1).squeeze(-1)
                var = posterior.variance.squeeze(-1).squeeze(-1)
                var = var - drop.reshape(var.shape).to(var)
                return mean, var.clamp_min(0).sqrt()
        p = self.X_pending.shape[0]
        P = self.X_pending.expand(*X.shape[:-2], p, X.shape[-1])
        posterior = self.model.posterior(
            torch.cat([X, P], dim=-2), posterior_transform=self.posterior_transform
        )
        mean = posterior.mean[..., 0, 0]
        cov = posterior.distribution.covariance_matrix  # ... x (1 + p) x (1 + p)
        S = cov[..., 1:, 1:] + torch.diag_embed(noise.to(cov))
        c = cov[..., 1:, :1]
        solved = torch.linalg.solve(S, c)
        var = cov[..., 0, 0] - (c * solved).sum(dim=(-2, -1))
        return mean, var.clamp_min(0).sqrt()

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: Tensor) -> Tensor:
        r"""Evaluate Chaining-UCB at ``X``.

        Args:
            X: A ``(b1 x ... bk) x 1 x d``-dim batched tensor of design points.

        Returns:
            A ``(b1 x ... bk)``-dim tensor of Chaining-UCB values.
        """
        mean, sigma = self._mean_and_sigma(X)
        return (mean if self.maximize else -mean) + self.chaining.bonus(sigma)

    @torch.no_grad()
    @t_batch_mode_transform(expected_q=1, assert_output_shape=False)
    def regret_bound(self, X: Tensor) -> Tensor:
        r"""Regret certificate :math:`B_t(x)` at candidate points ``X``.

        With probability at least :math:`1 - \delta` (jointly over all steps),
        :math:`\max_{x^\star \in X} f(x^\star) - f(x) \le B_t(x)` for any ``x``
        chosen from the data, the query :math:`x_t` included: the default
        certificate of :meth:`certificate` (``method="combined"``), see
        :mod:`ax_chaining.certificate`. It assumes the model's prior and
        hyperparameters are the true ones.

        The paper's Eq. (ucb) is kept, for comparison only, as
        :meth:`ChainingResult.regret_bound` (``acqf.chaining.regret_bound``); its
        derivation does not cover points other than the query, and has gaps (see
        :mod:`ax_chaining.certificate`).

        Args:
            X: A ``(b1 x ... bk) x 1 x d``-dim batched tensor of candidates (rows
                of ``candidates``).

        Returns:
            A ``(b1 x ... bk)``-dim tensor of bounds, in objective units.
        """
        flat = X.detach().reshape(-1, X.shape[-1])
        index = self._candidate_index(flat)
        state = self._certificate_state()
        bounds = certificate_bounds(
            state.mean,
            state.distance,
            index,
            t=state.t,
            delta=self.delta,
            tree=state.tree,
            dist=state.rows(index),
        )["bound"]
        return bounds.to(X).reshape(X.shape[:-2])

    @torch.no_grad()
    def certificate(
        self,
        among: Tensor | Sequence[int] | str | None = None,
        rule: Rule = "min_bound",
        method: Method = "combined",
        links: Links = "actual",
        tail: Tail = "gaussian",
        delta: float | None = None,
        t: int | None = None,
        split_delta: bool = False,
    ) -> Certificate:
        r"""A regret certificate for a recommended candidate.

        With probability at least :math:`1 - \delta`, jointly over all steps,
        :math:`\max_{x^\star \in X} f(x^\star) - f(\texttt{x}) \le
        \texttt{bound}` (objective units), assuming the model's GP prior and
        hyperparameters are the true ones. The bound uses the posterior given the
        observations only (pending points are not conditioned on).

        Example:
            >>> acqf = ChainingUCB(model, candidates)
            >>> cert = acqf.certificate()  # the evaluated candidate with least bound
            >>> cert.index, cert.bound, cert.as_dict()

        Args:
            among: The candidates that may be recommended: None (default) for the
                evaluated ones (candidates that are training inputs of the
                model), ``"all"`` for every candidate, a boolean mask of length
                ``N``, or indices.
            rule: ``"min_bound"`` (default): the point with the smallest bound;
                ``"max_mean"``: the point with the largest posterior mean.
            method: ``"combined"`` (default: the smaller of the union and the
                chaining bound), ``"union"`` (union bound over the candidates,
                budget spread by the data), ``"pairwise"`` (union bound with
                :math:`\delta_t / (N - 1)` per pair) or ``"chaining"``.
            links: ``"actual"`` (default, pseudo-distances along the chain) or
                ``"radius"`` (the paper's radii).
            tail: ``"gaussian"`` (default, exact quantile) or ``"chernoff"``.
            delta: Confidence parameter; default the acquisition's ``delta``.
            t: Step whose share of ``delta`` is used (default: observations + 1,
                or the ``t`` given at construction); each step must use its own.
            split_delta: With ``"combined"``, ``delta / 2`` for each part (not
                needed for validity; see :mod:`ax_chaining.certificate`).

        Returns:
            A frozen :class:`~ax_chaining.certificate.Certificate`.
        """
        delta = self.delta if delta is None else _check_delta(delta)
        state = self._certificate_state()
        t = state.t if t is None else _check_positive_int("t", t)
        index = self._certified_index(among)
        tree = None if method in ("union", "pairwise") else state.tree
        parts = certificate_bounds(
            state.mean,
            state.distance,
            index,
            t=t,
            delta=delta,
            method=method,
            tree=tree,
            links=links,
            tail=tail,
            dist=state.rows(index),
            split_delta=split_delta,
        )
        bounds = parts["bound"]
        pos = recommend(bounds, index, state.mean, rule)
        best = int(index[pos])
        return Certificate(
            index=best,
            x=self.candidates[best].detach().clone(),
            bound=float(bounds[pos]),
            delta=float(delta),
            t=int(t),
            method=method,
            rule=rule,
            links=links,
            tail=tail,
            mean=float(state.mean[best]) * (1.0 if self.maximize else -1.0),
            components={k: float(v[pos]) for k, v in parts.items() if k != "bound"},
            certified=tuple(int(i) for i in index.tolist()),
            bounds=tuple(float(b) for b in bounds.tolist()),
            split_delta=bool(split_delta),
        )

    @torch.no_grad()
    def _certificate_state(self) -> _CertificateState:
        """Posterior (no pending points) and chaining tree, cached per build."""
        cached = getattr(self, "_certificate_cache", None)
        if cached is not None and cached[0] is self.chaining:
            return cached[1]
        opts = self._options
        post = candidate_posterior(
            self.model,
            self.candidates,
            posterior_transform=self.posterior_transform,
            X_pending=None,
            path=opts["path"],
            memory_budget=opts["memory_budget"],
        )
        t = self._t if self._t is not None else default_t(self.model, 0)
        chaining = self.chaining
        if self.X_pending is not None:
            # The covers of the query were built on the posterior given the
            # pending points; the radius form needs covers of this posterior.
            chaining = chaining_covers(
                post.distance,
                t=t,
                delta=self.delta,
                scale=self.chaining.scale,
                sigma_floor=opts["sigma_floor"],
                h_radius=opts["h_radius"],
                cover=self.chaining.cover_method,
                max_cover_size=opts["max_cover_size"],
            )
        tree = chaining_tree(
            post.distance, chaining.covers, chaining.eps, chaining.bounded
        )
        mean = post.mean.to(torch.float64)
        state = _CertificateState(
            mean=mean if self.maximize else -mean,
            distance=post.distance,
            tree=tree,
            t=t,
        )
        self._certificate_cache = (self.chaining, state)
        return state

    def _candidate_index(self, X: Tensor) -> Tensor:
        """Row of ``candidates`` equal to each row of ``X`` (ValueError if none)."""
        C = self.candidates
        X = X.detach().to(C)
        tol = 1e-9 * (1.0 + float(C.abs().max()))
        index = torch.empty(X.shape[0], dtype=torch.long, device=C.device)
        for start in range(0, X.shape[0], 1024):
            d = torch.cdist(
                X[start : start + 1024], C, compute_mode="donot_use_mm_for_euclid_dist"
            )
            val, arg = d.min(dim=-1)
            if bool((val > tol).any()):
                bad = start + int((val > tol).nonzero()[0])
                raise ValueError(
                    f"regret_bound: row {bad} of X is not a candidate; the "
                    "certificate is defined on the candidate set (it needs the "
                    "row of d_t of the point over the candidates)."
                )
            index[start : start + 1024] = arg
        return index

    def _certified_index(self, among: Tensor | Sequence[int] | str | None) -> Tensor:
        n, device = self.candidates.shape[0], self.candidates.device
        if among is None:
            mask = evaluated_candidates(self.model, self.candidates)
            if not bool(mask.any()):
                raise ValueError(
                    "certificate: no candidate is a training input of the model, so "
                    "none is 'evaluated'; pass among='all', a boolean mask or "
                    "indices of the candidates that may be recommended."
                )
            return mask.nonzero().squeeze(-1)
        if isinstance(among, str):
            if among != "all":
                raise ValueError(
                    f"among must be None, 'all', a boolean mask or indices, got "
                    f"{among!r}."
                )
            return torch.arange(n, device=device)
        among = torch.as_tensor(among, device=device)
        if among.dtype == torch.bool:
            if among.shape != (n,):
                raise ValueError(
                    f"among as a mask must have shape ({n},), got {tuple(among.shape)}."
                )
            index = among.nonzero().squeeze(-1)
        else:
            if among.is_floating_point():
                raise TypeError(
                    f"among must hold integer indices or booleans, got {among.dtype}."
                )
            index = among.reshape(-1).long()
            if index.numel() and (int(index.min()) < 0 or int(index.max()) >= n):
                raise ValueError(
                    f"among has indices outside [0, {n}): {index.tolist()[:10]}."
                )
        if index.numel() == 0:
            raise ValueError("among selects no candidate.")
        return index


class GPUCB(UpperConfidenceBound):
    r"""GP-UCB with the schedule of Srinivas et al. (2010) for a finite set.

    .. math::

        \mathrm{UCB}(x) = \mu_t(x) + \sqrt{\beta_t}\, \sigma_t(x), \qquad
        \beta_t = 2 \log\big(|X|\, t^2 \pi^2 / (6 \delta)\big),

    the competitor of Chaining-UCB in Contal et al. (2015). ``t`` follows the
    same convention as :class:`ChainingUCB` (observations + pending + 1).

    Example:
        >>> model = SingleTaskGP(train_X, train_Y)
        >>> acqf = GPUCB(model, num_candidates=candidates.shape[0])
        >>> x_next, _ = optimize_acqf_discrete(acqf, q=1, choices=candidates)

    Args:
        model: A fitted single-outcome GP model.
        num_candidates: :math:`|X|`, the size of the finite search space.
        delta: Confidence parameter :math:`\delta \in (0, 1)`.
        t: Iteration index; default observations + pending + 1.
        posterior_transform: Maps a multi-output posterior to a single output.
        maximize: If True, consider the problem a maximization problem.
        X_pending: Pending points; they count in the default ``t`` only (the
            analytic UCB does not condition on them).
    """

    def __init__(
        self,
        model: Model,
        num_candidates: int,
        delta: float = 0.05,
        t: int | None = None,
        posterior_transform: PosteriorTransform | None = None,
        maximize: bool = True,
        X_pending: Tensor | None = None,
    ) -> None:
        p = 0 if X_pending is None else int(X_pending.shape[0])
        t = _check_positive_int("t", t) if t is not None else default_t(model, p)
        beta = gp_ucb_beta(num_candidates, t, delta)
        super().__init__(
            model=model,
            beta=beta,
            posterior_transform=posterior_transform,
            maximize=maximize,
        )
        self.num_candidates = int(num_candidates)
        self.delta = float(delta)
        self.t = t


class UCB(UpperConfidenceBound):
    r"""BoTorch's ``UpperConfidenceBound`` (:math:`\mu + \sqrt{\beta}\sigma`), with
    an input constructor that ignores the ``X_pending`` Ax passes and the set.

    Example:
        >>> acqf = UCB(model, beta=0.2)
    """


@acqf_input_constructor(UCB)
def construct_inputs_ucb(
    model: Model,
    beta: float = 0.2,
    posterior_transform: PosteriorTransform | None = None,
    maximize: bool = True,
    X_pending: Tensor | None = None,
    candidates: Tensor | None = None,
) -> dict[str, Any]:
    return {
        "model": model,
        "beta": beta,
        "posterior_transform": posterior_transform,
        "maximize": maximize,
    }


@acqf_input_constructor(ChainingUCB)
def construct_inputs_chaining_ucb(
    model: Model,
    candidates: Tensor,
    posterior_transform: PosteriorTransform | None = None,
    delta: float = 0.05,
    t: int | None = None,
    maximize: bool = True,
    X_pending: Tensor | None = None,
    scale: float | None = None,
    sigma_floor: float = 1e-6,
    h_radius: HRadius = "algorithm",
    path: Path = "auto",
    cover: CoverMethod | None = None,
    max_cover_size: int | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    pending_covers: PendingCovers = "rebuild",
) -> dict[str, Any]:
    r"""Construct kwargs for :class:`ChainingUCB`.

    Every argument is that of :class:`ChainingUCB`; they are listed one by one
    because BoTorch's input-constructor registry rejects unknown keywords.

    Args:
        model: The model.
        candidates: ``N x d`` candidate set (in the model's input space).
        posterior_transform: Optional posterior transform.
        delta: Confidence parameter.
        t: Iteration index (default observations + pending + 1).
        maximize: If True, maximize.
        X_pending: Pending points.
        scale: Radius of the first level (default: largest prior std).
        sigma_floor: Floor on the smallest posterior std, relative to ``scale``.
        h_radius: ``"algorithm"`` or ``"proof"``.
        path: ``"auto"``, ``"dense"`` or ``"low_rank"``.
        cover: ``"greedy"`` or ``"farthest_first"`` (default by path).
        max_cover_size: Size cap of farthest-first covers.
        memory_budget: Bytes the largest allocations may take.
        pending_covers: ``"rebuild"`` or ``"reuse"`` covers for pending points.

    Returns:
        A dict mapping kwarg names of the constructor to values.
    """
    return {
        "model": model,
        "candidates": candidates,
        "posterior_transform": posterior_transform,
        "delta": delta,
        "t": t,
        "maximize": maximize,
        "X_pending": X_pending,
        "scale": scale,
        "sigma_floor": sigma_floor,
        "h_radius": h_radius,
        "path": path,
        "cover": cover,
        "max_cover_size": max_cover_size,
        "memory_budget": memory_budget,
        "pending_covers": pending_covers,
    }


@acqf_input_constructor(GPUCB)
def construct_inputs_gp_ucb(
    model: Model,
    num_candidates: int | None = None,
    candidates: Tensor | None = None,
    posterior_transform: PosteriorTransform | None = None,
    delta: float = 0.05,
    t: int | None = None,
    maximize: bool = True,
    X_pending: Tensor | None = None,
) -> dict[str, Any]:
    r"""Construct kwargs for :class:`GPUCB`.

    Args:
        model: The model.
        num_candidates: Size of the finite search space.
        candidates: The ``N x d`` finite search space; gives ``num_candidates``
            when that is not given (how the Ax layer passes it).
        posterior_transform: Optional posterior transform.
        delta: Confidence parameter.
        t: Iteration index (default observations + pending + 1).
        maximize: If True, maximize.
        X_pending: Pending points (counted in the default ``t``).

    Returns:
        A dict mapping kwarg names of the constructor to values.
    """
    if num_candidates is None:
        if candidates is None:
            raise ValueError(
                "GPUCB needs the size of the finite search space: pass "
                "`num_candidates` (an int) or `candidates` (an N x d tensor); got "
                "neither."
            )
        num_candidates = int(candidates.shape[0])
    return {
        "model": model,
        "num_candidates": num_candidates,
        "posterior_transform": posterior_transform,
        "delta": delta,
        "t": t,
        "maximize": maximize,
        "X_pending": X_pending,
    }
