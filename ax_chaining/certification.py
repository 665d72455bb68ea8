r"""From a BoTorch model and a finite candidate set to a regret certificate.

:mod:`ax_chaining.certificate` holds the bounds; this module decides when and
from which model one is issued:

* **The schedule of checks** (:class:`CheckSchedule`). A certificate is a
  statement about one step; a user who stops on the first certificate below a
  tolerance looks at many steps, so :math:`\delta` is split over the steps at
  which certificates are *checked*: the :math:`j`-th check gets
  :math:`\delta_j = 6 \delta / (\pi^2 j^2)`. Since
  :math:`\sum_{j \ge 1} 6 / (\pi^2 j^2) = 1`, the union bound gives: with
  probability at least :math:`1 - \delta`, every check's bound holds, and so
  does the bound at whichever check a stopping rule stops (a function of the
  data). Checking every step (the default, :math:`j = t` = observations + 1)
  spends :math:`\delta` over all steps; checking every ``k`` trials, or on a
  geometric schedule, spends it over far fewer checks, so each gets more.
  A step that is not a check issues no certificate.
* **The model's calibration** (:func:`loo_check`, ``calibration="loo"``, the
  default for fitted models): the leave-one-out standardized residuals
  :math:`z_i = (y_i - \mu_{-i}(x_i)) / \sigma_{-i}(x_i)` of the training data
  under the model (closed form for exact GPs). Under the model each is
  :math:`N(0, 1)`. If they are significantly overdispersed (a chi-square test
  of :math:`\sum z_i^2` at level ``alpha``), or one lies beyond the Bonferroni
  threshold :math:`\bar\Phi^{-1}(\alpha / (2n))`, the certificate is
  **refused** (``valid=False``, with the reason); otherwise every posterior
  standard deviation is multiplied by :math:`c = \max(1, \sqrt{\overline{z^2}})`.
  This is a heuristic safeguard, not a guarantee: it can only make a bound
  larger (so it costs little where the model is right, and a false refusal
  has probability about ``alpha`` per check), and it cannot see a misfit that
  the data do not show, such as outliers far from every observation (measured
  on FreeSolv, docs: "The certificate"). ``calibration="none"`` is the plain
  model-based certificate, for known (true) hyperparameters.
* **Residuals of the loop** (:mod:`ax_chaining.forecast`): a
  :class:`~ax_chaining.forecast.ResidualCalibration` as ``calibration`` takes
  the scale and the tails' degrees of freedom from the one-step-ahead
  forecast residuals of the loop, or from its audit queries (what is
  guaranteed there, and what is a heuristic). ``calibration="forecast"`` or
  ``"audit"`` without residuals (a plain BoTorch model keeps no history of its
  forecasts) falls back to ``"loo"`` and says so in the certificate's
  ``checks`` (``fallback_loo``); in an Ax loop,
  :func:`~ax_chaining.ax.certify` reads the residuals the steps recorded.
* **The rank statement** (:mod:`ax_chaining.rank`): every certificate also
  says among how many of the best candidates its point is
  (``rank_bound``), with the same calibration and share of :math:`\delta`.
* **Tails** (``tail``, :func:`resolve_tail`): Gaussian (exact under the
  model), the paper's Chernoff bound, :class:`StudentTail` (Student-t tails
  with ``dof`` degrees of freedom) or :class:`ExplorationTail`. ``"auto"`` (the
  default) takes Gaussian tails under ``calibration="none"`` (the model taken
  as true) and, under ``calibration="loo"`` (fitted hyperparameters), an
  :class:`ExplorationTail`: for a candidate the data have reached (its
  posterior variance at most :data:`EXPLORED_RATIO` = 1/2 of its prior
  variance), Student-t tails with ``n - 1`` degrees of freedom, what the
  conjugate treatment of an unknown overall scale gives (applied here at the
  *fitted* scale, not multiplied by an estimate of it); for a candidate the
  data have not reached, heavier ones, ``min(n - 1,`` :data:`AUTO_DOF_CAP`
  ``)``, however many points are observed. The value of an unexplored
  candidate is the prior's guess, and the prior's Gaussian tails are what no
  data have checked: the values of real libraries can lie far out in the tail
  of any Gaussian fitted to the molecules a loop has seen (FreeSolv's best lie
  five standard deviations above its median, far from everything measured),
  and the leave-one-out check sees only what was measured. Near the data the
  fitted model interpolates, which that check does test. Both are
  heuristics, not guarantees; the threshold and the cap were chosen by
  measurement (docs: "The certificate"). ``tail="student"`` keeps ``n - 1``
  everywhere (the previous default), a :class:`StudentTail` any one law.
* **The model** (:func:`certify_model`): the posterior over the candidates of
  the model given, at the check's share of :math:`\delta`.

**Assumptions of every bound here.** (i) The objective is a sample of the
model's GP prior with its hyperparameters, and observations carry the model's
Gaussian noise; (ii) the certified point and everything the bound is built from
are functions of the data (and of randomness independent of the objective).
Points chosen adaptively by any acquisition satisfy (ii). Hyperparameters
fitted to the data break (i): the bound is then a statement about the fitted
model, and is measured where the two part (docs: "The certificate").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

import numpy as np
import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.models.model import Model
from torch import Tensor

from ax_chaining.certificate import (
    Certificate,
    Method,
    Rule,
    Tail,
    TailLaw,
    make_certificate,
    refused_certificate,
)
from ax_chaining.checks import (
    as_index,
    check_bool,
    check_choice,
    check_delta,
    check_float,
    check_int,
)
from ax_chaining.distances import DEFAULT_MEMORY_BUDGET, PseudoDistance
from ax_chaining.forecast import ResidualCalibration
from ax_chaining.posterior import (
    candidate_posterior,
    check_posterior_transform,
    evaluated_candidates,
    known_prior_variance,
    model_inputs,
    num_training_points,
    supports_low_rank,
)
from ax_chaining.rank import RankOptions, rank_statement

__all__ = [
    "AUTO_DOF_CAP",
    "EXPLORED_RATIO",
    "ExplorationTail",
    "Calibration",
    "CalibrationChoice",
    "CheckSchedule",
    "EVERY_STEP",
    "LooCheck",
    "StudentTail",
    "TailChoice",
    "certify_model",
    "issue_certificate",
    "bind_tail",
    "loo_check",
    "resolve_tail",
]

ScheduleKind = Literal["every", "every_k", "geometric"]
Calibration = Literal["loo", "none", "forecast", "audit"]
#: ``calibration`` of the certificates: a named one or residuals to calibrate on.
CalibrationChoice = Calibration | ResidualCalibration


@dataclass(frozen=True)
class CheckSchedule:
    r"""The steps at which certificates are checked; :math:`\delta` is spent on
    them only (module docstring).

    * ``"every"`` (default): every step; the check of a model with ``n``
      observations has index :math:`j = t = n + 1`, so
      :math:`\delta_j` is :func:`~ax_chaining.certificate.step_delta`.
    * ``"every_k"``: after ``start``, ``start + k``, ``start + 2k``, ...
      observations; the check after ``start + (j - 1) k`` has index :math:`j`.
    * ``"geometric"``: after :math:`n_1 = \texttt{start}` observations and
      :math:`n_j = \max(n_{j-1} + 1, \lceil \texttt{start} \cdot
      \texttt{ratio}^{j-1} \rceil)`: about :math:`\log_{\texttt{ratio}}
      (n / \texttt{start})` checks up to ``n``.

    Example:
        >>> s = CheckSchedule("geometric", start=10)
        >>> [n for n in range(1, 100) if s.index(n) is not None]
        [10, 20, 40, 80]
        >>> round(s.share(0.05, 40) / CheckSchedule().share(0.05, 40), 1)
        186.8

    Args:
        kind: ``"every"``, ``"every_k"`` or ``"geometric"``.
        k: The spacing of ``"every_k"``.
        start: The number of observations of the first check (``"every_k"``
            and ``"geometric"``).
        ratio: The growth of ``"geometric"`` (> 1).
    """

    kind: ScheduleKind = "every"
    k: int = 1
    start: int = 1
    ratio: float = 2.0

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, get_args(ScheduleKind))
        check_int("k", self.k, 1)
        check_int("start", self.start, 1)
        check_float("ratio", self.ratio, (lambda v: v > 1, "> 1"))

    def index(self, num_observations: int) -> int | None:
        """The check index :math:`j \\ge 1` of the step with that many
        observations, or None if it is not a check."""
        n = check_int("num_observations", num_observations, 0)
        if self.kind == "every":
            return n + 1 if n >= 1 else None
        if n < self.start:
            return None
        if self.kind == "every_k":
            j, rest = divmod(n - self.start, self.k)
            return j + 1 if rest == 0 else None
        j, at = 1, self.start
        while at < n:
            j += 1
            at = max(at + 1, math.ceil(self.start * self.ratio ** (j - 1)))
        return j if at == n else None

    def next_check(self, num_observations: int) -> int:
        """The number of observations of the first check at or after this step."""
        n = max(1, check_int("num_observations", num_observations, 0))
        while self.index(n) is None:
            n += 1
        return n

    def share(self, delta: float, num_observations: int) -> float:
        r""":math:`\delta_j = 6 \delta / (\pi^2 j^2)` of this step's check.

        Raises:
            ValueError: The step is not a check.
        """
        j = self.index(num_observations)
        if j is None:
            raise ValueError(
                f"{num_observations} observations is not a check of {self}; the "
                f"next check is after {self.next_check(num_observations)}."
            )
        return 6.0 * check_delta(delta) / (math.pi**2 * j**2)


#: The default schedule: a check at every step.
EVERY_STEP = CheckSchedule()


class StudentTail:
    r"""Student-t tails with ``dof`` degrees of freedom for the certificate.

    :math:`P[T > z]` and its inverse. ``isf`` is SciPy's ``stdtrit`` (exact,
    float64). ``sf`` is evaluated on a fine grid, rounding ``z`` down to the
    grid (``exact=False``, default): the grid is uniform in
    :math:`\operatorname{asinh} z` with step ``h = 1e-3`` over
    :math:`|z| \le 10^8`, so a term :math:`P[T > z]` is replaced by
    :math:`P[T > z']` with :math:`z - 1.001\, h \sqrt{1 + z^2} \le z' \le z`: never
    smaller, so every bound stays valid, and a union bound at most about
    :math:`h \sqrt{1 + z^2}\, d` larger (0.1% of its ``z`` part at
    :math:`z \approx 7`). One ``stdtr`` call per grid point and ``dof`` (cached)
    instead of one per candidate pair and bisection step: a certificate over
    4,200 candidates costs a gather instead of about 10 s.
    ``exact=True`` calls ``stdtr`` for every term.

    Example:
        >>> round(float(StudentTail(5).isf(torch.tensor(0.025))), 4)
        2.5706
    """

    #: Grid step in asinh(z), and the grid's reach.
    GRID_STEP: float = 1e-3
    GRID_MAX: float = math.asinh(1e8)

    def __init__(self, dof: float, exact: bool = False) -> None:
        self.dof = check_float("dof", dof, (lambda v: v > 0, "> 0"))
        self.exact = check_bool("exact", exact)
        self.name = f"student-{self.dof:g}"

    def sf(self, z: Tensor) -> Tensor:
        if self.exact:
            from scipy.special import stdtr

            values = stdtr(self.dof, -z.detach().cpu().double().numpy())
            return torch.as_tensor(values, dtype=z.dtype, device=z.device)
        table = _student_sf_table(self.dof).to(device=z.device)
        u = torch.asinh(z.to(torch.float64))
        k = torch.floor((u + self.GRID_MAX) / self.GRID_STEP)
        k = k.clamp(0, table.numel() - 1).long()
        return table[k].to(z.dtype)

    def isf(self, p: Tensor) -> Tensor:
        from scipy.special import stdtrit

        values = -stdtrit(self.dof, p.detach().cpu().double().numpy())
        return torch.as_tensor(values, dtype=torch.float64, device=p.device)


@functools.lru_cache(maxsize=8)
def _student_sf_table(dof: float) -> Tensor:
    """:math:`P[T > z_k]` at ``z_k = sinh(-GRID_MAX + k h)`` (see StudentTail)."""
    from scipy.special import stdtr

    h, top = StudentTail.GRID_STEP, StudentTail.GRID_MAX
    u = np.arange(int(math.ceil(2 * top / h)) + 1) * h - top
    return torch.as_tensor(stdtr(dof, -np.sinh(u)), dtype=torch.float64)


#: ``tail`` of the certificates: a named law, ``"auto"``, or a :class:`TailLaw`.
TailChoice = Literal["auto", "gaussian", "chernoff", "student"]
#: The most degrees of freedom of ``tail="auto"``'s tails for unexplored
#: candidates (module docstring): with 12 or more, the certificate was
#: violated on FreeSolv; with 8 or fewer everywhere, it stayed above 10% of
#: the range after 60 queries on GP samples.
AUTO_DOF_CAP = 10
#: A candidate whose posterior variance is at most this fraction of its prior
#: variance counts as explored for ``tail="auto"`` (module docstring).
EXPLORED_RATIO = 0.5


class ExplorationTail:
    r"""Student-t tails that depend on how far the data have reached.

    For a candidate :math:`x'` with posterior variance :math:`s_t^2(x')` and
    prior variance :math:`k(x', x')`, the pair :math:`(x, x')` of the union
    bound gets Student-t tails with ``light_dof`` degrees of freedom if
    :math:`s_t^2(x') \le` ``ratio`` :math:`k(x', x')` (explored), else with
    ``heavy_dof`` (unexplored). ``isf`` is the heavy law's (the larger
    quantile), so bounds built from quantiles (pairwise, chaining) stay valid
    for either. Bind it to the candidates' variance ratios with :meth:`bind`
    before summing tails over them.

    Example:
        >>> law = ExplorationTail(heavy_dof=10, light_dof=49)
        >>> bound = law.bind(torch.tensor([0.1, 0.9]))  # explored, unexplored
        >>> z = torch.tensor([[6.0, 6.0]])
        >>> bool(bound.sf(z)[0, 1] > bound.sf(z)[0, 0])
        True

    Args:
        heavy_dof: Degrees of freedom for unexplored candidates.
        light_dof: Degrees of freedom for explored candidates (>= heavy_dof).
        ratio: The variance ratio up to which a candidate is explored.
    """

    def __init__(
        self, heavy_dof: float, light_dof: float, ratio: float = EXPLORED_RATIO
    ) -> None:
        self.heavy = StudentTail(heavy_dof)
        self.light = StudentTail(light_dof)
        if self.light.dof < self.heavy.dof:
            raise ValueError(
                f"`light_dof` must be at least `heavy_dof`={heavy_dof:g} (lighter "
                f"tails for explored candidates), got {light_dof:g}."
            )
        self.ratio = check_float("ratio", ratio, (lambda v: 0 < v < 1, "in (0, 1)"))
        self.name = f"student-{self.heavy.dof:g}/{self.light.dof:g}@{self.ratio:g}"

    def bind(self, variance_ratio: Tensor) -> _BoundExplorationTail:
        """The law over candidates with these posterior-to-prior variance ratios."""
        return _BoundExplorationTail(self, variance_ratio > self.ratio)

    def sf(self, z: Tensor) -> Tensor:
        """The heavy law's (candidates unknown: the conservative side)."""
        return self.heavy.sf(z)

    def isf(self, p: Tensor) -> Tensor:
        return self.heavy.isf(p)


class _BoundExplorationTail:
    """An :class:`ExplorationTail` over ``N`` candidates: ``sf`` of ``... x N``
    standardized differences takes each column's law."""

    def __init__(self, law: ExplorationTail, unexplored: Tensor) -> None:
        self.law, self.unexplored, self.name = law, unexplored, law.name

    def sf(self, z: Tensor) -> Tensor:
        mask = self.unexplored.to(z.device)
        if z.shape[-1] != mask.numel():
            raise ValueError(
                f"The tail law is bound to {mask.numel()} candidates; got "
                f"differences over {z.shape[-1]}."
            )
        return torch.where(mask, self.law.heavy.sf(z), self.law.light.sf(z))

    def isf(self, p: Tensor) -> Tensor:
        return self.law.isf(p)


def resolve_tail(
    tail: TailChoice | TailLaw,
    calibration: CalibrationChoice,
    num_observations: int,
) -> Tail | TailLaw:
    """The tail law a certificate uses.

    ``"auto"`` (the default): when ``calibration="loo"`` (fitted
    hyperparameters), an :class:`ExplorationTail` with ``n - 1`` degrees of
    freedom for explored candidates and ``min(n - 1,`` :data:`AUTO_DOF_CAP`
    ``)`` for the others (at least 1; module docstring); Gaussian when
    ``calibration="none"`` (the model taken as true, where Gaussian tails are
    exact). ``"student"``: Student-t tails with ``n - 1`` degrees of freedom
    everywhere (the previous default), whatever the calibration.

    Example:
        >>> resolve_tail("auto", "loo", 50).name
        'student-10/49@0.5'
        >>> resolve_tail("student", "loo", 50).dof
        49.0
    """
    if not isinstance(tail, str):
        return tail
    check_choice("tail", tail, get_args(TailChoice))
    calibration = _named(calibration)
    if tail == "auto" and isinstance(calibration, ResidualCalibration):
        dof = calibration.fit().dof
        return "gaussian" if math.isinf(dof) else StudentTail(dof)
    if tail == "auto":
        if calibration == "none":
            return "gaussian"
        light = max(1, num_observations - 1)
        return ExplorationTail(min(light, AUTO_DOF_CAP), light)
    if tail == "student":
        return StudentTail(max(1, num_observations - 1))
    return tail  # type: ignore[return-value]


@dataclass(frozen=True)
class LooCheck:
    """The outcome of :func:`loo_check`.

    Attributes:
        scale: The factor on the posterior standard deviations (>= 1).
        valid: False when the check refuses to certify.
        reason: Why (empty when valid).
        stats: ``n``, ``mean_z2`` (mean squared LOO residual), ``p_overdispersed``
            (chi-square p-value), ``max_z`` and ``max_z_threshold``.
    """

    scale: float
    valid: bool
    reason: str
    stats: dict[str, float]


def loo_residuals(model: Model) -> Tensor | None:
    r"""Leave-one-out standardized residuals of an exact single-output GP.

    :math:`z_i = [K^{-1} r]_i / \sqrt{[K^{-1}]_{ii}}` with :math:`K` the
    training covariance plus noise and :math:`r` the centred training targets
    (Rasmussen and Williams, 2006, eq. 5.12): the residual of :math:`y_i`
    predicted from the other observations, over its predictive standard
    deviation, with the model's hyperparameters. None for models without that
    form (model lists, batched or non-Gaussian likelihoods).
    """
    if not supports_low_rank(model, None):
        return None
    model.eval()
    X = model.train_inputs[0]
    r = model.train_targets - model.mean_module(X)
    noise = model.likelihood.noise.reshape(-1).expand(X.shape[0])
    K = model.covar_module(X).to_dense() + torch.diag_embed(noise)
    L, info = torch.linalg.cholesky_ex(K)
    if int(info) != 0:
        return None
    inverse = torch.cholesky_inverse(L)
    return (inverse @ r) / inverse.diagonal().sqrt()


def loo_check(model: Model, alpha: float = 0.01) -> LooCheck:
    """The calibration check of the module docstring (``calibration="loo"``).

    Example:
        >>> check = loo_check(model)
        >>> check.valid, check.scale, check.stats["mean_z2"]

    Args:
        model: A fitted model.
        alpha: The level of the overdispersion and tail tests.

    Returns:
        A :class:`LooCheck`; for a model without closed-form LOO residuals,
        valid with scale 1 and ``stats`` empty.
    """
    from scipy.stats import chi2, norm

    alpha = check_float("alpha", alpha, (lambda v: 0 < v < 1, "in (0, 1)"))
    z = loo_residuals(model)
    if z is None or z.numel() < 3:
        return LooCheck(1.0, True, "", {})
    z = z.detach().double()
    n = z.numel()
    sum_z2 = float(z.square().sum())
    p_over = float(chi2.sf(sum_z2, n))
    max_z = float(z.abs().max())
    threshold = float(norm.isf(alpha / (2 * n)))
    stats = {
        "n": float(n),
        "mean_z2": sum_z2 / n,
        "p_overdispersed": p_over,
        "max_z": max_z,
        "max_z_threshold": threshold,
    }
    if p_over < alpha:
        why = (
            f"the model is overconfident: its leave-one-out residuals have mean "
            f"square {sum_z2 / n:.3g} (1 expected; chi-square p = {p_over:.2g} < "
            f"{alpha:g}). Check the kernel and its hyperparameters."
        )
        return LooCheck(math.sqrt(sum_z2 / n), False, why, stats)
    if max_z > threshold:
        why = (
            f"an observation lies {max_z:.3g} leave-one-out standard deviations "
            f"from its prediction, beyond {threshold:.3g} (Bonferroni at level "
            f"{alpha:g}): the model's tails are too light for these data."
        )
        return LooCheck(1.0, False, why, stats)
    return LooCheck(max(1.0, math.sqrt(sum_z2 / n)), True, "", stats)


@torch.no_grad()
def certify_model(
    model: Model,
    candidates: Tensor,
    among: Tensor | Sequence[int] | str | None = None,
    *,
    delta: float = 0.05,
    schedule: CheckSchedule | None = None,
    posterior_transform: PosteriorTransform | None = None,
    maximize: bool = True,
    method: Method = "union",
    tail: TailChoice | TailLaw = "auto",
    rule: Rule = "min_bound",
    calibration: CalibrationChoice = "loo",
    alpha: float = 0.01,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    rank: RankOptions | None = None,
) -> Certificate:
    r"""A regret certificate from any model, whatever chose its data.

    With probability at least :math:`1 - \delta` over all checks of
    ``schedule``, :math:`\max_{x^\star} f(x^\star) - f(x) \le` ``bound`` for
    the recommended candidate ``x``, under the assumptions of the module
    docstring. ``method`` is ``"union"`` (default; the chaining bound needs the
    covers of :class:`~ax_chaining.ChainingUCB`, whose ``certificate`` adds it)
    or ``"pairwise"``.

    Example:
        >>> cert = certify_model(model, candidates)  # the evaluated candidates
        >>> cert.index, cert.bound

    Args:
        model: A fitted single-outcome model (or multi-output with a
            ``posterior_transform``) with a Gaussian posterior.
        candidates: The ``N x d`` finite search space, in the model's inputs.
        among: The candidates that may be recommended: None (the evaluated
            ones: training inputs of the model), ``"all"``, a boolean mask or
            indices.
        delta: Confidence parameter.
        schedule: The checks over which ``delta`` is spent (default every step).
        posterior_transform: Maps a multi-output posterior to one output.
        maximize: If False, the objective is minimized.
        method: ``"union"`` or ``"pairwise"``.
        tail: ``"auto"`` (default: under ``calibration="loo"`` Student-t
            tails with ``n - 1`` degrees of freedom for explored candidates
            and ``min(n - 1, 10)`` for the others, Gaussian under ``"none"``;
            :func:`resolve_tail`), ``"gaussian"``, ``"chernoff"``,
            ``"student"`` or a :class:`StudentTail`.
        rule: ``"min_bound"`` or ``"max_mean"``.
        calibration: ``"loo"`` (default, for fitted hyperparameters),
            ``"none"`` (the model's hyperparameters are the true ones), or a
            :class:`~ax_chaining.forecast.ResidualCalibration` (``"forecast"``
            and ``"audit"`` without residuals fall back to ``"loo"``).
        alpha: The level of the ``"loo"`` check's tests.
        memory_budget: Bytes the posterior and the certificate's temporaries
            may take.
        rank: How the rank statement is computed (:mod:`ax_chaining.rank`).

    Returns:
        A :class:`~ax_chaining.certificate.Certificate`.
    """
    check_posterior_transform(model, posterior_transform)
    check_choice("method", method, ("union", "pairwise"))
    delta = check_delta(delta)
    given_dtype = getattr(candidates, "dtype", None)
    candidates = model_inputs(model, candidates)
    n_obs = num_training_points(model)
    if not n_obs:
        raise ValueError("The model holds no observation; nothing to certify yet.")
    schedule = schedule or CheckSchedule()
    share = schedule.share(delta, n_obs)
    if among is None:
        mask = evaluated_candidates(model, candidates, given_dtype)
        if not bool(mask.any()):
            raise ValueError(
                "certify_model: no candidate is a training input of the model; "
                "pass among='all', a boolean mask or indices."
            )
        index = mask.nonzero().squeeze(-1)
    elif isinstance(among, str):
        check_choice("among", among, ("all",))
        index = torch.arange(candidates.shape[0], device=candidates.device)
    else:
        index = as_index("among", among, candidates.shape[0], candidates.device)
    path = "low_rank" if supports_low_rank(model, posterior_transform) else "dense"
    post = candidate_posterior(
        model,
        candidates,
        posterior_transform=posterior_transform,
        path=path,
        memory_budget=memory_budget,
    )
    mean = post.mean.to(torch.float64)
    mean = mean if maximize else -mean
    prior_var = known_prior_variance(post, model, candidates, posterior_transform)
    return issue_certificate(
        model,
        mean,
        post.distance,
        index,
        candidates,
        calibration=calibration,
        alpha=alpha,
        t=n_obs + 1,
        delta=delta,
        share=share,
        method=method,
        tail=tail,
        rule=rule,
        sign=1.0 if maximize else -1.0,
        prior_var=prior_var,
        memory_budget=memory_budget,
        rank=rank,
    )


def issue_certificate(
    model: Model,
    mean: Tensor,
    distance: PseudoDistance,
    index: Tensor,
    candidates: Tensor,
    *,
    calibration: CalibrationChoice = "loo",
    alpha: float = 0.01,
    sign: float = 1.0,
    prior_var: Tensor,
    rank: RankOptions | None = None,
    **bounds: Any,
) -> Certificate:
    """The certificate of a model's posterior: its calibration first (refused,
    or the spread widened), then the bound (``bounds``: the keywords of
    :func:`~ax_chaining.certificate.make_certificate`; ``tail`` may be any
    :data:`TailChoice`, see :func:`resolve_tail`). The one place where a
    certificate is issued, for :func:`certify_model` and ``ChainingUCB``.
    ``prior_var``: the candidates' prior variances in the posterior's units,
    for the default tails. ``rank``: the options of its rank statement
    (:func:`~ax_chaining.rank.rank_statement`, same tails, scale and share)."""
    check = calibrate(model, calibration, alpha)
    n_obs = num_training_points(model)
    law = resolve_tail(bounds.get("tail", "auto"), calibration, n_obs)
    bounds["tail"] = bind_tail(law, distance.variance, prior_var)
    if not check.valid:
        refused = refused_certificate(
            mean,
            index,
            candidates,
            t=bounds["t"],
            delta=bounds["delta"],
            reason=check.reason,
            checks=check.stats,
            sign=sign,
        )
        # No statement: the point is among all N.
        return replace(refused, rank_bound=distance.n, rank_method="refused")
    cert = make_certificate(
        mean,
        distance,
        index,
        candidates,
        sign=sign,
        scale=check.scale,
        checks=check.stats,
        **bounds,
    )
    stmt = rank_statement(
        mean,
        distance,
        cert.index,
        cert.share,
        bounds["tail"],
        scale=check.scale,
        options=rank,
        memory_budget=bounds.get("memory_budget", DEFAULT_MEMORY_BUDGET),
    )
    return replace(
        cert,
        rank_bound=stmt.rank_bound,
        expected_better=stmt.expected_better,
        rank_tolerance=stmt.tolerance,
        rank_method=stmt.method,
    )


def bind_tail(
    law: Tail | TailLaw, variance: Tensor, prior_var: Tensor
) -> Tail | TailLaw:
    """``law``, bound to the candidates' posterior-to-prior variance ratios if
    it is an :class:`ExplorationTail` (``variance``: their posterior variances,
    ``prior_var``: their prior variances in the same units,
    :func:`~ax_chaining.posterior.known_prior_variance`)."""
    if not isinstance(law, ExplorationTail):
        return law
    prior_var = prior_var.to(variance)
    ratio = variance / prior_var.clamp_min(torch.finfo(prior_var.dtype).tiny)
    return law.bind(ratio)


def _named(calibration: CalibrationChoice) -> Calibration | ResidualCalibration:
    """``calibration`` as it acts: residuals too few to use, and
    ``"forecast"`` or ``"audit"`` without residuals, act as ``"loo"``."""
    if isinstance(calibration, ResidualCalibration):
        return calibration if calibration.usable() else "loo"
    check_choice("calibration", calibration, get_args(Calibration))
    return "loo" if calibration in ("forecast", "audit") else calibration


def calibrate(
    model: Model, calibration: CalibrationChoice, alpha: float = 0.01
) -> LooCheck:
    """The calibration ``calibration`` of ``model``: :func:`loo_check`, none,
    or the fit of a :class:`~ax_chaining.forecast.ResidualCalibration`
    (``valid``, its scale; ``stats`` prefixed ``forecast_`` or ``audit_``).
    Where residuals are missing or too few, :func:`loo_check` with
    ``fallback_loo = 1`` (and ``<source>_residuals``, their number) in its
    stats."""
    acting = _named(calibration)
    if isinstance(acting, ResidualCalibration):
        fit = acting.fit()
        stats = {f"{acting.source}_{k}": v for k, v in fit.stats.items()}
        return LooCheck(fit.scale, True, "", stats)
    if acting == "none":
        return LooCheck(1.0, True, "", {})
    check = loo_check(model, alpha)
    if acting is calibration:
        return check
    source = getattr(calibration, "source", calibration)
    given = len(getattr(calibration, "residuals", ()))
    extra = {"fallback_loo": 1.0, f"{source}_residuals": float(given)}
    return replace(check, stats={**check.stats, **extra})
