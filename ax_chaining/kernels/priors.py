r"""GP hyperpriors of a unit-cube feature table by name (what Ax's JSON stores):
``"botorch"`` (``SingleTaskGP``'s dimension-scaled log-normal default), ``"baybe"``
(:func:`baybe_priors`) and ``"chen"`` (:func:`chen_priors`); on MinMax (counts) a
prior sets the output scale only."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
from gpytorch.kernels import Kernel, MaternKernel, RBFKernel, ScaleKernel
from gpytorch.priors import GammaPrior

from ax_chaining.checks import check_choice
from ax_chaining.kernels.fingerprints import MinMaxKernel

__all__ = ["PRIORS", "base_kernel", "baybe_priors", "chen_priors", "likelihood_options"]

#: The priors of a feature table's GP.
PRIORS = ("botorch", "baybe", "chen")

Gammas = dict[str, tuple[float, float, float]]


def baybe_priors(num_dims: int) -> Gammas:
    """BayBE's ``EDBO_SMOOTHED`` Gamma priors ``(concentration, rate, initial
    value)`` on the lengthscale, output scale and noise: linear in
    ``num_dims`` from BayBE's values at 8 to those at 75, constant outside.

    Example:
        >>> baybe_priors(200)["lengthscale"]
        (2.5, 0.55, 6.0)
    """

    def at(low: float, high: float) -> float:
        return float(np.interp(float(num_dims), (8.0, 75.0), (low, high)))

    return {
        "lengthscale": (at(1.2, 2.5), at(1.1, 0.55), at(0.2, 6.0)),
        "outputscale": (at(5.0, 3.5), at(0.5, 0.15), at(8.0, 15.0)),
        "noise": (at(1.05, 1.5), at(0.5, 0.1), at(0.1, 5.0)),
    }


def chen_priors(num_dims: int) -> Gammas:
    r"""BayBE 0.15's ``CHEN`` priors for ``num_dims`` features: with
    :math:`\ell = 0.4 \sqrt{d} + 4`, lengthscale :math:`\Gamma(2\ell, 2)` and
    output scale :math:`\Gamma(\ell, 1)`, both starting at :math:`\ell`
    (``(concentration, rate, initial value)``); no noise prior.

    Example:
        >>> chen_priors(100)["lengthscale"]
        (16.0, 2.0, 8.0)
    """
    ell = 0.4 * math.sqrt(float(num_dims)) + 4.0
    return {"lengthscale": (2.0 * ell, 2.0, ell), "outputscale": (ell, 1.0, ell)}


_PRESETS = {"baybe": baybe_priors, "chen": chen_priors}


def base_kernel(base: str, prior: str, num_dims: int) -> Kernel:
    """The kernel on ``num_dims`` feature columns (``base`` one of
    ``"matern52"``, ``"rbf"``, ``"minmax"``) with the hyperpriors of ``prior``:
    BoTorch's own module for ``"botorch"`` (MinMax bare); for the BayBE
    presets ARD with a Gamma lengthscale prior (or MinMax) in a
    ``ScaleKernel`` with a Gamma output-scale prior, at their initial values.

    Example:
        >>> base_kernel("matern52", "chen", 100).outputscale.item()
        8.0
    """
    check_choice("prior", prior, PRIORS)
    if prior == "botorch":
        if base == "minmax":
            return MinMaxKernel()
        return get_covar_module_with_dim_scaled_prior(
            ard_num_dims=num_dims, use_rbf_kernel=base == "rbf"
        )
    gammas = _PRESETS[prior](num_dims)
    if base == "minmax":
        kernel: Kernel = MinMaxKernel()
    else:
        concentration, rate, initial = gammas["lengthscale"]
        prior_kw = {"lengthscale_prior": GammaPrior(concentration, rate)}
        if base == "rbf":
            kernel = RBFKernel(ard_num_dims=num_dims, **prior_kw)
        else:
            kernel = MaternKernel(nu=2.5, ard_num_dims=num_dims, **prior_kw)
        kernel.lengthscale = initial
    concentration, rate, initial = gammas["outputscale"]
    scaled = ScaleKernel(kernel, outputscale_prior=GammaPrior(concentration, rate))
    scaled.outputscale = initial
    return scaled


def likelihood_options(prior: str, num_dims: int) -> dict[str, Any] | None:
    """``GaussianLikelihood`` options for ``prior``: None for ``"botorch"``
    (``SingleTaskGP``'s own), BayBE's Gamma noise prior for ``"baybe"`` (not
    its initial noise, which Ax's JSON cannot keep), ``{}`` for ``"chen"``.

    Example:
        >>> likelihood_options("baybe", 200)["noise_prior"].rate
        tensor(0.1000)
    """
    check_choice("prior", prior, PRIORS)
    if prior == "botorch":
        return None
    if prior == "chen":
        return {}
    concentration, rate, _ = baybe_priors(num_dims)["noise"]
    return {"noise_prior": GammaPrior(concentration, rate)}
