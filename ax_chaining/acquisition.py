"""Chaining-UCB and GP-UCB as BoTorch acquisition functions over a finite
candidate set, and BoTorch's UCB with an input constructor for Ax's
candidate-set nodes."""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, Protocol, get_args

import torch
from botorch.acquisition.acquisition import AcquisitionFunction
from botorch.acquisition.analytic import UpperConfidenceBound
from botorch.acquisition.input_constructors import acqf_input_constructor
from botorch.acquisition.objective import PosteriorTransform
from botorch.models.model import Model
from botorch.utils.transforms import t_batch_mode_transform
from torch import Tensor

from ax_chaining.certificate.bounds import ChainingTree, chaining_tree
from ax_chaining.certificate.calibration import (
    among_index,
    calibrate,
    issue_certificate,
)
from ax_chaining.certificate.certify import (
    Certificate,
    CertificateOptions,
    CertifiedSet,
    PosteriorSet,
    check_options,
)
from ax_chaining.certificate.schedule import DEFAULT_DELTA, step_delta
from ax_chaining.certificate.tails import resolve_tail
from ax_chaining.chaining import (
    BonusShape,
    ChainingResult,
    CoverMethod,
    HRadius,
    chaining_covers,
    reuse_covers,
)
from ax_chaining.checks import (
    check_choice,
    check_delta,
    check_float,
    check_int,
    match_rows,
    type_error,
)
from ax_chaining.distances import DEFAULT_MEMORY_BUDGET
from ax_chaining.posterior import (
    CandidatePosterior,
    Path,
    PosteriorCache,
    candidate_posterior,
    check_posterior_transform,
    evaluated_candidates,
    known_prior_variance,
    model_inputs,
    num_training_points,
    posterior_at,
    to_model,
)

#: Default cap on farthest-first cover sizes (low-rank path): a traversal costs
#: one row of N distances per centre; levels past the cap use |T_i| <= N.
DEFAULT_MAX_COVER_SIZE = 2048

__all__ = [
    "DEFAULT_MAX_COVER_SIZE",
    "GPUCB",
    "UCB",
    "CandidateStore",
    "ChainingOptions",
    "ChainingUCB",
    "default_t",
    "evaluated_candidates",
    "gp_ucb_beta",
]


PendingCovers = Literal["rebuild", "reuse"]


@dataclass(frozen=True)
class ChainingOptions:
    r"""The options of :class:`ChainingUCB` (see its Args), checked once.

    Example:
        >>> ChainingOptions(delta=0.1, path="dense").delta
        0.1
    """

    delta: float = DEFAULT_DELTA
    scale: float | None = None
    sigma_floor: float = 1e-6
    h_radius: HRadius = "algorithm"
    path: Path = "auto"
    cover: CoverMethod | None = None
    max_cover_size: int | None = None
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    pending_covers: PendingCovers = "rebuild"
    bonus: BonusShape = "paper"

    def __post_init__(self) -> None:
        checked = {
            "delta": check_delta(self.delta),
            "sigma_floor": check_float(
                "sigma_floor", self.sigma_floor, (lambda v: 0 <= v < 1, "in [0, 1)")
            ),
            "memory_budget": check_int("memory_budget", self.memory_budget, 1),
        }
        if self.scale is not None:
            rule = (lambda v: v > 0, "finite and > 0")
            checked["scale"] = check_float("scale", self.scale, rule)
        if self.max_cover_size is not None:
            size = check_int("max_cover_size", self.max_cover_size, 1)
            checked["max_cover_size"] = size
        for name, kind in zip(
            ("h_radius", "path", "cover", "pending_covers", "bonus"),
            (HRadius, Path, CoverMethod, PendingCovers, BonusShape),
            strict=True,
        ):
            value = getattr(self, name)
            if value is not None or name != "cover":
                check_choice(name, value, get_args(kind))
        for name, value in checked.items():  # plain floats and ints
            object.__setattr__(self, name, value)

    def as_dict(self) -> dict[str, Any]:
        """The options as keyword arguments of :class:`ChainingUCB`."""
        return asdict(self)


def default_t(model: Model, num_pending: int = 0) -> int:
    """Iteration index ``t >= 1``: observations in ``model`` + pending points + 1
    (in Algorithm 1 of Contal et al. (2015) the ``t``-th query is chosen from
    ``t - 1`` observations, initial points included)."""
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


def gp_ucb_beta(num_candidates: int, t: int, delta: float = DEFAULT_DELTA) -> float:
    r"""GP-UCB schedule of Srinivas et al. (2010, Theorem 1), finite :math:`X`.

    .. math::

        \beta_t = 2 \log\big(|X|\, t^2 \pi^2 / (6 \delta)\big).

    Example:
        >>> round(gp_ucb_beta(100, t=1, delta=0.05), 4)  # 2 log(100 pi^2 / 0.3)
        16.3942
    """
    num_candidates = check_int("num_candidates", num_candidates, 1)
    t = check_int("t", t, 1)
    delta = check_delta(delta)
    return 2.0 * math.log(num_candidates * t**2 * math.pi**2 / (6.0 * delta))


def positive_scale(scale: float) -> float:
    """The default ``scale`` (the largest prior standard deviation), if > 0."""
    if not scale > 0:
        raise ValueError(
            "The prior variance is 0 on every candidate; pass scale= explicitly."
        )
    return scale


class CandidateStore(Protocol):
    """Where a :class:`ChainingUCB`'s candidates are held (a tensor, or the
    shards of :class:`~ax_chaining.distributed.ShardedCandidates`) and how a step
    of Algorithm 1, with a ``chaining`` and a ``posterior``, is built on them."""

    candidates: Any

    def pending_inputs(self, X_pending: Tensor) -> Tensor:
        """``X_pending`` checked, as the step conditions on it."""

    def build(self, X_pending: Tensor | None, t: int) -> Any:
        """Algorithm 1 on the posterior given ``X_pending``."""

    def mean_and_sigma(self, X: Tensor, step: Any) -> tuple[Tensor, Tensor]:
        """Posterior mean (not negated) and standard deviation at ``X``
        (``(b1 x ... bk) x 1 x d``), given ``step``'s pending points."""

    def among(self, among: Tensor | Sequence[int] | str | None) -> Tensor:
        """Indices of the candidates that may be recommended (None: evaluated ones)."""

    def match(self, rows: Tensor) -> Tensor:
        """The candidate index of each row of ``rows`` (raises for a non-candidate)."""

    def certified(self, base: Any) -> CertifiedSet:
        """The candidates as the certificate reads them, on the step without pending
        points."""


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
    the latent function (the mean negated for ``maximize=False``). The covers
    are rebuilt when pending points change; ``forward`` evaluates at any ``X``.

    Example:
        >>> acqf = ChainingUCB(SingleTaskGP(train_X, train_Y), candidates)
        >>> x_next, _ = optimize_acqf_discrete(acqf, q=1, choices=candidates)
        >>> acqf.chaining.cover_sizes, acqf.regret_bound(x_next)

    Args:
        model: A fitted single-outcome model (or multi-output with a
            ``posterior_transform``) with a Gaussian posterior.
        candidates: ``N x d`` tensor, the finite search space :math:`X`, in the
            input space of ``forward``'s ``X``; or ``ShardedCandidates``.
        delta: Confidence parameter :math:`\delta \in (0, 1)`.
        t: Iteration index :math:`t \ge 1`; default observations + pending + 1
            (shared with :class:`GPUCB`).
        posterior_transform: Maps a multi-output posterior to a single output.
        maximize: If True, consider the problem a maximization problem.
        X_pending: ``p x d`` points chosen but not yet observed, conditioned on
            at their posterior mean (GP-BUCB).
        scale: :math:`s` (the paper's :math:`s = 1` for :math:`k(x, x) \le 1`);
            default the largest prior standard deviation over the candidates,
            so that scaling the objective by :math:`c > 0` scales every
            :math:`H_i` by :math:`c` and keeps the selected point.
        sigma_floor: Floor on :math:`\sigma_t^{\min}`, relative to ``scale``
            (noise-free data give :math:`\sigma_t^{\min} = 0`).
        h_radius: ``"algorithm"`` writes :math:`H_i` with :math:`\epsilon_i`
            (Algorithm 1); ``"proof"`` with :math:`\epsilon_{i-1}`.
        path: ``"auto"``, ``"dense"`` (exact, greedy covers) or ``"low_rank"``
            (rows on demand; :mod:`ax_chaining.posterior`).
        cover: ``"greedy"`` or ``"farthest_first"``; default greedy on the dense
            path and farthest-first on the low-rank path.
        max_cover_size: Size cap for farthest-first covers (default
            ``min(N, 2048)`` on the low-rank path); deeper levels use
            :math:`|T_i| \le N`.
        memory_budget: Bytes the largest allocations may take (default 4 GiB).
        pending_covers: With pending points, ``"rebuild"`` runs Algorithm 1
            again given them; ``"reuse"`` keeps the covers built without them
            (still covers: pending points only shrink :math:`d_t`).
        bonus: ``"paper"`` (the staircase above) or ``"continuous"``
            (:func:`~ax_chaining.chaining.chaining_bonus`).
    """

    #: Its input constructor takes the candidate set (Ax's candidate-set nodes).
    takes_candidates = True

    def __init__(
        self,
        model: Model,
        candidates: Any,
        delta: float = DEFAULT_DELTA,
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
        bonus: BonusShape = "paper",
    ) -> None:
        """Check the arguments and build the first step (see the class's Args)."""
        given = locals()
        super().__init__(model=model)
        names = (f.name for f in fields(ChainingOptions))
        self.options = ChainingOptions(**{name: given[name] for name in names})
        self.posterior_transform = posterior_transform
        self.maximize = maximize
        if t is not None:
            t = check_int("t", t, 1)
        elif num_training_points(model) == 0:
            default_t(model)  # raises the no-training-data error
        self._t = t
        self._base: Any = None
        if isinstance(candidates, Tensor):
            self.store: CandidateStore = TensorCandidates(self, candidates)
        elif hasattr(candidates, "chaining_store"):
            self.store = candidates.chaining_store(self)
        else:
            expected = "an N x d torch.Tensor or a ShardedCandidates"
            raise type_error("candidates", expected, candidates)
        self.set_X_pending(X_pending)
        self._current()

    @property
    def candidates(self) -> Any:
        """The candidates (a tensor in the model's inputs, or the shards)."""
        return self.store.candidates

    @property
    def delta(self) -> float:
        r"""The confidence parameter :math:`\delta`."""
        return self.options.delta

    @property
    def t(self) -> int:
        """The iteration index used in :math:`H_i`."""
        return self.chaining.t

    @property
    def scale(self) -> float:
        """The radius :math:`s` of the first level."""
        return self.chaining.scale

    @property
    def chaining(self) -> ChainingResult:
        """Levels, covers and :math:`H_i` for the current pending points."""
        return self._current().chaining

    @property
    def candidate_mean(self) -> Tensor:
        """Posterior mean over the candidates (given pending points)."""
        return self._current().posterior.mean

    @property
    def candidate_sigma(self) -> Tensor:
        """Posterior standard deviation over the candidates (given pending points)."""
        return self._current().posterior.distance.sigma

    def set_X_pending(self, X_pending: Tensor | None = None) -> None:
        r"""Condition on ``p x d`` pending points (or None), treated as observed at
        their posterior mean: :math:`\mu_t` unchanged, :math:`k_t` shrunk as by a
        real observation (GP-BUCB, Desautels et al., 2014); the covers are rebuilt
        lazily, on the next evaluation or read of :attr:`chaining`."""
        if X_pending is not None:
            X_pending = self.store.pending_inputs(X_pending)
        self.X_pending = X_pending
        self._step: Any = None

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: Tensor) -> Tensor:
        """Chaining-UCB at ``X`` (``(b1 x ... bk) x 1 x d``): ``b1 x ... bk`` values."""
        mean, sigma = self.mean_and_sigma(X)
        bonus = self.chaining.bonus(sigma, self.options.bonus)
        return ((mean if self.maximize else -mean) + bonus).to(X.dtype)

    def mean_and_sigma(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """Posterior mean (of the objective, not negated) and standard deviation at
        ``X`` (``(b1 x ... bk) x 1 x d``), given pending points."""
        return self.store.mean_and_sigma(X, self._current())

    def _current(self) -> Any:
        if self._step is None:
            pending = self.X_pending
            self._step = self._base_step() if pending is None else self._build(pending)
        return self._step

    def _base_step(self) -> Any:
        """The step without pending points (the query's and the certificate's)."""
        if self._base is None:
            self._base = self._build(None)
        return self._base

    @torch.no_grad()
    def _build(self, X_pending: Tensor | None) -> Any:
        p = 0 if X_pending is None else X_pending.shape[0]
        t = self._t if self._t is not None else default_t(self.model, p)
        return self.store.build(X_pending, t)

    @torch.no_grad()
    def regret_bound(self, X: Tensor) -> Tensor:
        r"""Regret certificate :math:`B_t(x)` at candidate points ``X``: with
        probability at least :math:`1 - \delta` (jointly over all steps),
        :math:`\max_{x^\star \in X} f(x^\star) - f(x) \le B_t(x)` for any ``x``
        chosen from the data; :meth:`certificate`'s default (``"loo"`` calibration,
        ``inf`` where that check rejects the model, and the model's own numbers,
        which :meth:`certificate` marks unchecked, below its minimum of
        observations).

        Args:
            X: Rows of ``candidates``: ``N x d`` (as ``optimize_acqf_discrete``
                returns them, any ``q``), or ``(b1 x ... bk) x q x d``.

        Returns:
            One bound per row (objective units): ``N``, or ``(b1 x ... bk) x q``
            (``b1 x ... bk`` for ``q = 1``, BoTorch's batch convention).
        """
        if X.ndim < 2:
            shape = tuple(X.shape)
            raise ValueError(
                f"`X` must have shape N x d or (b1 x ... bk) x q x d, got {shape}."
            )
        shape = X.shape[:-1] if X.ndim == 2 or X.shape[-2] != 1 else X.shape[:-2]
        index = self.store.match(X.reshape(-1, X.shape[-1]))
        check = calibrate(self.model, "loo")
        if not check.valid and not check.unchecked:
            return torch.full(shape, math.inf, dtype=X.dtype, device=X.device)
        base = self._base_step()
        certified = self.store.certified(base)
        n_obs = num_training_points(self.model)
        bounds = certified.bounds(
            index,
            scale=check.scale,
            tail=certified.bind(resolve_tail(None, "loo", n_obs)),
            share=step_delta(self.delta, base.chaining.t),
            method=certified.methods[0],
            links="actual",
            split_delta=False,
        )["bound"]
        return bounds.to(X).reshape(shape)

    @torch.no_grad()
    def certificate(
        self,
        among: Tensor | Sequence[int] | str | None = None,
        options: CertificateOptions | None = None,
        delta: float | None = None,
        t: int | None = None,
    ) -> Certificate:
        r"""A regret certificate for a recommended candidate.

        With probability at least :math:`1 - \delta`, jointly over all steps (or
        ``options.schedule``'s checks), :math:`\max_{x^\star \in X} f(x^\star) -
        f(\texttt{x}) \le \texttt{bound}` if the model's GP prior is the true one,
        from the posterior and covers without pending points; the default
        leave-one-out calibration refuses or widens it where the data show the
        model overconfident (:mod:`ax_chaining.certificate.calibration`).

        Example:
            >>> cert = acqf.certificate()  # the evaluated candidate with least bound
            >>> cert.index, cert.bound, cert.as_dict()

        Args:
            among: The candidates that may be recommended: None (the evaluated
                ones), ``"all"``, a boolean mask of length ``N``, or indices.
            options: :class:`~ax_chaining.certificate.CertificateOptions`.
            delta: Confidence parameter; default the acquisition's.
            t: Step whose share of ``delta`` is used (default observations + 1, or
                the ``t`` given at construction); each step must use its own.
        """
        opts = check_options(options)
        delta = self.delta if delta is None else check_delta(delta)
        base = self._base_step()
        share = None
        if t is None and opts.schedule is not None:
            share = opts.schedule.share(delta, base.chaining.t - 1)
        t = base.chaining.t if t is None else check_int("t", t, 1)
        return issue_certificate(
            self.model,
            self.store.certified(base),
            self.store.among(among),
            t=t,
            delta=delta,
            share=share,
            options=opts,
            sign=1.0 if self.maximize else -1.0,
        )


@dataclass
class ChainingStep:
    """One build of Algorithm 1 on a tensor: the posterior, the covers, and the
    chaining tree the certificate builds on first use."""

    posterior: CandidatePosterior
    chaining: ChainingResult
    tree: ChainingTree | None = field(default=None, repr=False)


class TensorCandidates:
    """The :class:`CandidateStore` of an ``N x d`` tensor (in the model's dtype
    and device): :func:`~ax_chaining.posterior.candidate_posterior`'s routes."""

    def __init__(self, acqf: ChainingUCB, candidates: Tensor) -> None:
        check_posterior_transform(acqf.model, acqf.posterior_transform)
        self.acqf = acqf
        self.given_dtype = candidates.dtype
        self.candidates = model_inputs(acqf.model, candidates)
        self.cache = PosteriorCache()

    def pending_inputs(self, X_pending: Tensor) -> Tensor:
        X_pending = model_inputs(self.acqf.model, X_pending, "X_pending")
        if X_pending.shape[-1] != self.candidates.shape[-1]:
            raise ValueError(
                f"`X_pending` must have shape p x {self.candidates.shape[-1]}, "
                f"got {tuple(X_pending.shape)}."
            )
        return X_pending

    def mean_and_sigma(self, X: Tensor, step: ChainingStep) -> tuple[Tensor, Tensor]:
        acqf, factors = self.acqf, self.cache.factors
        return posterior_at(
            acqf.model,
            X.to(self.candidates),
            acqf.posterior_transform,
            acqf.X_pending,
            step.posterior.pending_noise,
            None if factors is None else factors.model_factors,
        )

    def build(self, X_pending: Tensor | None, t: int) -> ChainingStep:
        acqf, opts = self.acqf, self.acqf.options
        post = candidate_posterior(
            acqf.model,
            self.candidates,
            posterior_transform=acqf.posterior_transform,
            X_pending=X_pending,
            path=opts.path,
            memory_budget=opts.memory_budget,
            cache=self.cache,
            first_radius=opts.scale,
        )
        if X_pending is not None and opts.pending_covers == "reuse":
            base = acqf._base_step().chaining
            return ChainingStep(post, reuse_covers(base, post.distance, t))
        scale = opts.scale or positive_scale(
            float(self.prior_variance(post).max().clamp_min(0).sqrt())
        )
        low_rank = post.path == "low_rank"
        max_cover_size = opts.max_cover_size
        if max_cover_size is None and low_rank:
            max_cover_size = min(post.distance.n, DEFAULT_MAX_COVER_SIZE)
        chaining = chaining_covers(
            post.distance,
            t=t,
            delta=opts.delta,
            scale=scale,
            sigma_floor=opts.sigma_floor,
            h_radius=opts.h_radius,
            cover=opts.cover or ("farthest_first" if low_rank else "greedy"),
            max_cover_size=max_cover_size,
            memory_budget=opts.memory_budget,
        )
        chaining.info.update(path=post.path)
        if post.reason is not None:
            chaining.info.update(reason=post.reason)
        return ChainingStep(post, chaining)

    def prior_variance(self, post: CandidatePosterior) -> Tensor:
        model, transform = self.acqf.model, self.acqf.posterior_transform
        return known_prior_variance(post, model, self.candidates, transform)

    def match(self, rows: Tensor) -> Tensor:
        index = match_rows(rows, self.candidates)
        if bool((index < 0).any()):
            bad = int((index < 0).nonzero()[0])
            raise ValueError(
                f"regret_bound: row {bad} of `X` is not a candidate; expected rows "
                "of `candidates` (the certificate needs the row of d_t of the "
                "point over the candidates)."
            )
        return index

    def among(self, among: Tensor | Sequence[int] | str | None) -> Tensor:
        c, given = self.candidates, self.given_dtype
        evaluated = None
        if among is None:
            evaluated = evaluated_candidates(self.acqf.model, c, given)
        detail = f" (candidates given in {given}, compared in the model's {c.dtype})"
        return among_index(among, c.shape[0], evaluated, c.device, detail)

    def certified(self, base: ChainingStep) -> PosteriorSet:
        if base.tree is None:
            c = base.chaining
            # Farthest-first covers recorded the tree's parents as they were
            # built; greedy covers leave them to chaining_tree.
            base.tree = chaining_tree(
                base.posterior.distance, c.covers, c.eps, c.bounded, c.parents
            )
        mean = base.posterior.mean.to(torch.float64)
        return PosteriorSet(
            mean=mean if self.acqf.maximize else -mean,
            distance=base.posterior.distance,
            candidates=self.candidates,
            prior_var=self.prior_variance(base.posterior),
            tree=base.tree,
            memory_budget=self.acqf.options.memory_budget,
        )


class UCB(UpperConfidenceBound):
    r"""BoTorch's ``UpperConfidenceBound`` (:math:`\mu + \sqrt{\beta}\sigma`), with
    an input constructor that ignores the ``X_pending`` Ax passes and the set,
    evaluated at points converted to the model's dtype and device (GPyTorch
    fails on, or caches in, the first points' dtype).

    Example:
        >>> acqf = UCB(model, beta=0.2)
    """

    #: Its input constructor accepts (and ignores) the candidate set.
    takes_candidates = True

    @t_batch_mode_transform(expected_q=1)
    def forward(self, X: Tensor) -> Tensor:
        return super().forward(to_model(self.model, X)).to(X.dtype)


class GPUCB(UCB):
    r"""GP-UCB with the schedule of Srinivas et al. (2010) for a finite set, the
    competitor of Chaining-UCB in Contal et al. (2015):

    .. math::

        \mathrm{UCB}(x) = \mu_t(x) + \sqrt{\beta_t}\, \sigma_t(x), \qquad
        \beta_t = 2 \log\big(|X|\, t^2 \pi^2 / (6 \delta)\big),

    ``t`` as in :class:`ChainingUCB` (observations + pending + 1).

    Example:
        >>> acqf = GPUCB(model, num_candidates=candidates.shape[0])
        >>> x_next, _ = optimize_acqf_discrete(acqf, q=1, choices=candidates)

    Args:
        num_candidates: :math:`|X|`, the size of the finite search space.
        delta: Confidence parameter :math:`\delta \in (0, 1)`.
        X_pending: Pending points; they count in the default ``t`` only.
    """

    def __init__(
        self,
        model: Model,
        num_candidates: int,
        delta: float = DEFAULT_DELTA,
        t: int | None = None,
        posterior_transform: PosteriorTransform | None = None,
        maximize: bool = True,
        X_pending: Tensor | None = None,
    ) -> None:
        p = 0 if X_pending is None else int(X_pending.shape[0])
        t = check_int("t", t, 1) if t is not None else default_t(model, p)
        super().__init__(
            model=model,
            beta=gp_ucb_beta(num_candidates, t, delta),
            posterior_transform=posterior_transform,
            maximize=maximize,
        )
        self.num_candidates = int(num_candidates)
        self.delta = float(delta)
        self.t = t


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
def construct_inputs_chaining_ucb(**kwargs: Any) -> dict[str, Any]:
    """:class:`ChainingUCB`'s own arguments, unchanged (checked when it is built);
    its signature is :class:`ChainingUCB`'s, which BoTorch's registry reads to
    refuse unknown keywords."""
    return kwargs


construct_inputs_chaining_ucb.__signature__ = inspect.signature(  # type: ignore[attr-defined]
    ChainingUCB
).replace(return_annotation="dict[str, Any]")


@acqf_input_constructor(GPUCB)
def construct_inputs_gp_ucb(
    model: Model,
    num_candidates: int | None = None,
    candidates: Tensor | None = None,
    posterior_transform: PosteriorTransform | None = None,
    delta: float = DEFAULT_DELTA,
    t: int | None = None,
    maximize: bool = True,
    X_pending: Tensor | None = None,
) -> dict[str, Any]:
    """Kwargs for :class:`GPUCB`; ``candidates`` (``N x d``, as the Ax layer passes
    the set) gives ``num_candidates`` when it is None."""
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
