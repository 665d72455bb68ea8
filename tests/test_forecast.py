"""Calibration from the loop's own forecast residuals: by hand, and on a GP
sample with and without planted outliers (a loop with the true
hyperparameters, each query's prediction taken before it is observed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from botorch.models import SingleTaskGP
from gpytorch.kernels import RBFKernel

from ax_chaining.certificate import CertificateOptions, certify_model, resolve_tail
from ax_chaining.certificate.residuals import (
    ResidualCalibration,
    conformal_quantile,
    upper_quantile_rank,
)

DTYPE = torch.float64
NOISE_SD = 0.05


def standardized_residuals(observed, mean, sd) -> np.ndarray:
    """(y_i - mu_i) / s_i of predictions made before observing."""
    y, m, s = (
        np.asarray(a, dtype=np.float64).reshape(-1) for a in (observed, mean, sd)
    )
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise ValueError(f"`sd` must be finite and positive, got {s}.")
    return (y - m) / s


def test_quantile_ranks_by_hand() -> None:
    assert conformal_quantile([0.1, 0.5, 0.2, 0.9], 0.6) == 0.5  # ceil(5 * .6) = 3
    assert conformal_quantile([0.1, 0.5], 0.9) == math.inf
    # P(Bin(40, .8) <= 35) = 0.9568 >= 0.9 > P(Bin(40, .8) <= 34) = 0.8921.
    assert upper_quantile_rank(40, 0.8, 0.9) == 36
    assert upper_quantile_rank(10, 0.8, 0.9) == 11  # 1 - .8^10 = .893 < .9


def test_fit_by_hand_and_fallback() -> None:
    # 12 residuals, rank 12 (1 - .8^12 = .931 >= .9): q = max |z| = 1.9,
    # scale 1.9 / Phi^-1(0.9) = 1.4826; Gaussian tails keep the maximum.
    z = [0.3, -1.1, 0.8, 0.1, -0.4, 1.9, -0.7, 0.2, 0.5, -0.9, 1.2, 0.05]
    fit = ResidualCalibration(tuple(z)).fit()
    assert fit.scale == pytest.approx(1.9 / 1.2815516, rel=1e-6)
    assert math.isinf(fit.dof)
    # Audits take the conformal rank: ceil(13 * .8) = 11th smallest = 1.2.
    audit = ResidualCalibration(tuple(z), source="audit").fit()
    assert audit.scale == pytest.approx(1.2 / 1.2815516, rel=1e-6)
    few = ResidualCalibration((0.1, 0.2, 0.3))
    assert not few.usable()
    with pytest.raises(ValueError, match="too few"):
        few.fit()
    assert resolve_tail(None, few, 30).name.startswith("student-10/")  # as "loo"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="`source` must be"):
        ResidualCalibration((0.1,), source="past")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`residuals` must be finite"):
        ResidualCalibration((0.1, math.nan))
    with pytest.raises(ValueError, match="`sd` must be finite and positive"):
        standardized_residuals([1.0], [0.0], [0.0])


def test_an_outlier_gives_heavier_tails() -> None:
    rng = np.random.default_rng(0)
    z = rng.standard_normal(40)
    light = ResidualCalibration(tuple(z)).fit()
    z[:3] = [8.0, -7.0, 9.0]
    heavy = ResidualCalibration(tuple(z)).fit()
    assert math.isinf(light.dof) and heavy.dof <= 5


# ---------------------------------------------------------------------------
# A loop that records its forecasts, on a GP sample with and without outliers.
# ---------------------------------------------------------------------------


def _model(X: torch.Tensor, y: torch.Tensor) -> SingleTaskGP:
    """The true model: SE kernel, lengthscale 0.1, variance 1, known noise."""
    kernel = RBFKernel().to(X)
    kernel.lengthscale = 0.1
    model = SingleTaskGP(
        X,
        y.unsqueeze(-1),
        train_Yvar=torch.full((y.numel(), 1), NOISE_SD**2, dtype=DTYPE),
        covar_module=kernel,
        outcome_transform=None,
    )
    model.mean_module.constant.data.fill_(0.0)
    return model.eval()


def _library(seed: int, outliers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """200 points of [0, 1], a GP sample, and ``outliers`` of them raised by 6."""
    X = torch.linspace(0, 1, 200, dtype=DTYPE).unsqueeze(-1)
    K = torch.exp(-0.5 * torch.cdist(X, X).square() / 0.1**2)
    g = torch.Generator().manual_seed(seed)
    L = torch.linalg.cholesky(K + 1e-8 * torch.eye(200, dtype=DTYPE))
    f = L @ torch.randn(200, generator=g, dtype=DTYPE)
    f[torch.randperm(200, generator=g)[:outliers]] += 6.0
    return X, f


def _loop(X: torch.Tensor, f: torch.Tensor, seed: int, queries: int = 40):
    """Uniform queries; each one's forecast taken before observing it."""
    g = torch.Generator().manual_seed(1000 + seed)
    order = torch.randperm(X.shape[0], generator=g)[: queries + 3]
    y = f[order] + NOISE_SD * torch.randn(order.numel(), generator=g, dtype=DTYPE)
    mean, sd = [], []
    for i in range(3, order.numel()):
        post = _model(X[order[:i]], y[:i]).posterior(
            X[order[i : i + 1]], observation_noise=True
        )
        mean.append(float(post.mean.detach()))
        sd.append(float(post.variance.detach().sqrt()))
    z = standardized_residuals(y[3:].numpy(), mean, sd)
    return _model(X[order], y), z, order


# Seeds whose loop queries at least one outlier (seed 0 queries none: no
# residual can see them, the calibration's limit).
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_forecast_calibration_widens_on_outliers_and_not_on_a_gp_sample(seed):
    ratios = {}
    for outliers in (0, 12):
        X, f = _library(seed, outliers)
        model, z, order = _loop(X, f, seed)
        if outliers:
            _, clean = _library(seed, 0)
            assert bool((f[order[3:]] > clean[order[3:]]).any())
        none = CertificateOptions(calibration="none")
        residuals = CertificateOptions(calibration=ResidualCalibration(tuple(z)))
        plain = certify_model(model, X, options=none)
        fitted = certify_model(model, X, options=residuals)
        ratios[outliers] = fitted.bound / plain.bound
        assert fitted.rank_bound is not None and 1 <= fitted.rank_bound <= 200
    # On the GP sample the residuals are i.i.d. N(0, 1): Gaussian tails and a
    # scale near 1 (at least the 0.8 quantile's upper confidence bound).
    assert 0.8 <= ratios[0] <= 1.5
    # With outliers the forecasts miss by about 6 / sd: heavier tails, and
    # a bound at least twice as wide.
    assert ratios[12] >= 2.0
