r"""From a BoTorch model to its certificate: the model's calibration check
(:func:`calibrate`, a heuristic that can only widen or refuse a bound), then
the bound (:func:`issue_certificate`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from botorch.acquisition.objective import PosteriorTransform
from botorch.models.model import Model
from torch import Tensor

from ax_chaining.certificate.bounds import recommend
from ax_chaining.certificate.certify import (
    DEFAULT_SCALE_LEVEL,
    LOO_MIN_OBSERVATIONS,
    Certificate,
    CertificateOptions,
    CertifiedSet,
    PosteriorSet,
    check_options,
)
from ax_chaining.certificate.residuals import ResidualCalibration
from ax_chaining.certificate.schedule import DEFAULT_DELTA, CheckSchedule, step_delta
from ax_chaining.certificate.tails import (
    CalibrationChoice,
    acting_calibration,
    resolve_tail,
)
from ax_chaining.checks import as_index, check_choice, check_delta, check_int
from ax_chaining.distances import DEFAULT_MEMORY_BUDGET
from ax_chaining.posterior import (
    candidate_posterior,
    check_posterior_transform,
    evaluated_candidates,
    known_prior_variance,
    model_inputs,
    num_training_points,
    supports_low_rank,
)

__all__ = [
    "LooCheck",
    "among_index",
    "calibrate",
    "certify_model",
    "issue_certificate",
    "loo_check",
    "loo_residuals",
]


@dataclass(frozen=True)
class LooCheck:
    """The outcome of :func:`loo_check`: the ``scale`` on the posterior
    standard deviations, whether it is ``valid`` (else the ``reason``), its
    ``stats`` (``n``, ``mean_z2``, ``p_overdispersed``, ``max_z``,
    ``max_z_threshold``) and whether it could not run for want of observations
    (``unchecked``: the model is neither confirmed nor rejected)."""

    scale: float
    valid: bool
    reason: str
    stats: dict[str, float]
    unchecked: bool = False


def loo_residuals(model: Model) -> Tensor | None:
    r"""Leave-one-out standardized residuals of an exact single-output GP,
    :math:`z_i = [K^{-1} r]_i / \sqrt{[K^{-1}]_{ii}}` (:math:`K` the training
    covariance plus noise, :math:`r` the centred targets; Rasmussen and
    Williams, 2006, eq. 5.12), or None for models without that form."""
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


def loo_check(
    model: Model,
    alpha: float = 0.01,
    min_observations: int = LOO_MIN_OBSERVATIONS,
    scale_level: float | None = DEFAULT_SCALE_LEVEL,
) -> LooCheck:
    r"""The leave-one-out calibration check (``calibration="loo"``).

    Under the model each residual :math:`z_i` (:func:`loo_residuals`) is
    :math:`N(0, 1)`. The check refuses (``valid=False``) with fewer than
    ``min_observations`` observations (``unchecked``), when the residuals are
    overdispersed (:math:`\sum_i z_i^2` against :math:`\chi^2_n` at level
    ``alpha``) or when one lies beyond :math:`\bar\Phi^{-1}(\alpha / (2n))`
    (Bonferroni); otherwise its ``scale`` :math:`c = \max(1, \sqrt{\sum_i z_i^2 /
    \chi^2_{n, \gamma}})` widens every posterior standard deviation, with
    :math:`\chi^2_{n, \gamma}` the ``scale_level`` quantile :math:`\gamma`
    (the variance's upper confidence limit), or :math:`\max(1,
    \sqrt{\overline{z^2}})` for ``scale_level=None``. A model without
    closed-form LOO residuals passes with scale 1 and no ``stats``.

    Example:
        >>> check = loo_check(model)
        >>> check.valid, check.scale, check.stats["mean_z2"]
    """
    from scipy.stats import chi2, norm

    alpha = check_delta(alpha, "alpha")
    min_observations = check_int("min_observations", min_observations, 1)
    if scale_level is not None:
        scale_level = check_delta(scale_level, "scale_level")
    n_obs = num_training_points(model) or 0
    if n_obs < min_observations:
        why = (
            f"unchecked: only {n_obs} observations, and the leave-one-out check "
            f"needs min_observations={min_observations} (with fewer it cannot "
            "see a tail heavier than the model's). The numbers hold if the "
            "model is right."
        )
        stats = {"n": float(n_obs), "min_observations": float(min_observations)}
        return LooCheck(1.0, False, why, stats, unchecked=True)
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
    variance = sum_z2 / (n if scale_level is None else float(chi2.ppf(scale_level, n)))
    return LooCheck(max(1.0, math.sqrt(variance)), True, "", stats)


def calibrate(
    model: Model,
    calibration: CalibrationChoice,
    alpha: float = 0.01,
    min_observations: int = LOO_MIN_OBSERVATIONS,
    scale_level: float | None = DEFAULT_SCALE_LEVEL,
) -> LooCheck:
    """The calibration ``calibration`` of ``model``: :func:`loo_check`, none, or
    the fit of a :class:`~ax_chaining.certificate.residuals.ResidualCalibration`
    (``stats`` prefixed by its source); without enough residuals,
    :func:`loo_check` with ``fallback_loo`` and ``<source>_residuals`` stats."""
    acting = acting_calibration(calibration)
    if isinstance(acting, ResidualCalibration):
        fit = acting.fit()
        stats = {f"{acting.source}_{k}": v for k, v in fit.stats.items()}
        return LooCheck(fit.scale, True, "", stats)
    if acting == "none":
        return LooCheck(1.0, True, "", {})
    check = loo_check(model, alpha, min_observations, scale_level)
    if acting is calibration:
        return check
    source = getattr(calibration, "source", calibration)
    given = len(getattr(calibration, "residuals", ()))
    extra = {"fallback_loo": 1.0, f"{source}_residuals": float(given)}
    return replace(check, stats={**check.stats, **extra})


def issue_certificate(
    model: Model,
    candidates: CertifiedSet,
    index: Tensor,
    *,
    t: int,
    delta: float,
    share: float | None = None,
    options: CertificateOptions | None = None,
    sign: float = 1.0,
) -> Certificate:
    """The certificate among candidates ``index`` of ``candidates``, whose
    posterior is ``model``'s: its calibration (:func:`calibrate`), the bound,
    the recommended point and its rank statement. Where the check could not run
    for want of observations, the numbers are the model's own (scale 1),
    marked ``valid=False`` with the ``reason``; where it rejected the model,
    ``bound`` is ``inf`` and the point is among all ``N``.

    Args:
        t: Step (observations + 1).
        share: The check's share of ``delta``; default ``step_delta(delta, t)``.
        sign: ``-1`` where the set's means are the negated model's.
    """
    opts = check_options(options)
    method = opts.method or candidates.methods[0]
    check_choice("method", method, candidates.methods)
    check = calibrate(
        model, opts.calibration, opts.alpha, opts.min_observations, opts.scale_level
    )
    n_obs = num_training_points(model) or 0
    law = candidates.bind(resolve_tail(opts.tail, opts.calibration, n_obs))
    mean, x = candidates.values(index)
    mean = mean.to(torch.float64)
    out = {"delta": float(delta), "t": int(t), "certified": tuple(index.tolist())}
    out |= {"checks": dict(check.stats), "reason": check.reason}
    chosen = {"method": method, "links": opts.links, "split_delta": opts.split_delta}
    if not check.valid and not check.unchecked:  # no rank statement: among all N
        pos = int(torch.argmax(mean))
        out |= {"bound": math.inf, "method": "refused", "rule": "max_mean"}
        out["valid"] = False
        if candidates.ranks:
            out |= {"rank_bound": candidates.n, "rank_method": "refused"}
    else:
        share = step_delta(delta, t) if share is None else share
        kw = {"share": share, "tail": law, "scale": check.scale}
        parts = candidates.bounds(index, **kw, **chosen)
        bounds = parts.pop("bound")
        pos = recommend(bounds, torch.arange(len(index)), mean, opts.rule)
        out |= {"bound": float(bounds[pos]), "rule": opts.rule, "tail": law.name}
        out |= {"share": float(share), "valid": check.valid, **chosen}
        out |= {"components": {k: float(v[pos]) for k, v in parts.items()}}
        out |= {"bounds": tuple(float(b) for b in bounds.tolist())}
        if candidates.ranks:
            s = candidates.rank(int(index[pos]), **kw, options=opts.rank)
            out |= {"rank_bound": s.rank_bound, "rank_method": s.method}
            out |= {"expected_better": s.expected_better, "rank_tolerance": s.tolerance}
    return Certificate(
        int(index[pos]), x[pos].detach().clone(), mean=float(mean[pos]) * sign, **out
    )


def among_index(
    among: Tensor | Sequence[int] | str | None,
    n: int,
    evaluated: Tensor | None,
    device: torch.device | None = None,
    detail: str = "",
) -> Tensor:
    """Indices of the candidates that may be recommended: the ``evaluated``
    mask's (``among=None``), every candidate (``"all"``), a mask or indices."""
    if among is None:
        if evaluated is None or not bool(evaluated.any()):
            raise ValueError(
                f"certificate: no candidate is a training input of the model{detail}"
                ", so none is 'evaluated'; pass among='all', a boolean mask or "
                "indices of the candidates that may be recommended."
            )
        return evaluated.nonzero().squeeze(-1)
    if isinstance(among, str):
        check_choice("among", among, ("all",))
        return torch.arange(n, device=device)
    index = as_index("among", among, n, device)
    if index.numel() == 0:
        raise ValueError("`among` selects no candidate; expected at least one.")
    return index


@torch.no_grad()
def certify_model(
    model: Model,
    candidates: Tensor,
    among: Tensor | Sequence[int] | str | None = None,
    *,
    delta: float = DEFAULT_DELTA,
    options: CertificateOptions | None = None,
    posterior_transform: PosteriorTransform | None = None,
    maximize: bool = True,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> Certificate:
    r"""A regret certificate from any model, whatever chose its data.

    With probability at least :math:`1 - \delta` over all checks of
    ``options.schedule``, :math:`\max_{x^\star} f(x^\star) - f(x) \le`
    ``bound`` for the recommended candidate ``x``, under the assumptions of
    :mod:`ax_chaining.certificate`; the union or pairwise bound.

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
    """
    opts = check_options(options)
    check_posterior_transform(model, posterior_transform)
    delta = check_delta(delta)
    given_dtype = getattr(candidates, "dtype", None)
    candidates = model_inputs(model, candidates)
    n_obs = num_training_points(model) or 0
    if not n_obs:
        raise ValueError("The model holds no observation; nothing to certify yet.")
    share = (opts.schedule or CheckSchedule()).share(delta, n_obs)
    evaluated = None
    if among is None:
        evaluated = evaluated_candidates(model, candidates, given_dtype)
    index = among_index(among, candidates.shape[0], evaluated, candidates.device)
    path = "low_rank" if supports_low_rank(model, posterior_transform) else "dense"
    post = candidate_posterior(
        model,
        candidates,
        posterior_transform=posterior_transform,
        path=path,
        memory_budget=memory_budget,
    )
    mean = post.mean.to(torch.float64)
    posterior = PosteriorSet(
        mean=mean if maximize else -mean,
        distance=post.distance,
        candidates=candidates,
        prior_var=known_prior_variance(post, model, candidates, posterior_transform),
        memory_budget=memory_budget,
    )
    return issue_certificate(
        model,
        posterior,
        index,
        t=n_obs + 1,
        delta=delta,
        share=share,
        options=opts,
        sign=1.0 if maximize else -1.0,
    )
