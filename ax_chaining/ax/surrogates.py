r"""Surrogate specs for a finite library behind one item-index parameter
(:func:`candidate_index_parameter`). Large objects are registered by content
key, so Ax's JSON stores the key only; call the same function again after
loading an experiment in a new process."""

import os

from ax.api.configs import RangeParameterConfig
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from ax.generators.torch.botorch_modular.utils import ModelConfig
from botorch.models import SingleTaskGP
from gpytorch.likelihoods import GaussianLikelihood
from torch import Tensor

from ax_chaining.checks import check_choice, check_int, type_error
from ax_chaining.kernels import (
    FeatureTableKernel,
    PackedFingerprints,
    PrecomputedKernel,
    TanimotoKernel,
    register_features,
    register_fingerprints,
    register_gram,
)
from ax_chaining.kernels.features import BASES, open_features
from ax_chaining.kernels.priors import PRIORS, likelihood_options

__all__ = [
    "candidate_index_parameter",
    "feature_table_surrogate_spec",
    "fingerprint_kernel_surrogate_spec",
    "precomputed_kernel_surrogate_spec",
]


def candidate_index_parameter(
    num_items: int, name: str = "item"
) -> RangeParameterConfig:
    """An Ax parameter config for an item index ``0 .. num_items - 1``
    (``num_items >= 2``).

    Example:
        >>> client.configure_experiment(parameters=[candidate_index_parameter(100)])
    """
    last = check_int("num_items", num_items, 2) - 1
    return RangeParameterConfig(name=name, bounds=(0, last), parameter_type="int")


def precomputed_kernel_surrogate_spec(gram: Tensor) -> SurrogateSpec:
    """An Ax ``SurrogateSpec`` whose GP covariance over an item index is
    ``gram`` (``n x n``, symmetric PSD), the prior of the standardized objective.

    Example:
        >>> spec = precomputed_kernel_surrogate_spec(gram)
    """
    if not isinstance(gram, Tensor):
        raise type_error("gram", "a torch.Tensor", gram)
    return _spec(PrecomputedKernel, {"gram": register_gram(gram)})


def fingerprint_kernel_surrogate_spec(
    library: PackedFingerprints, metric: str = "tanimoto"
) -> SurrogateSpec:
    """An Ax ``SurrogateSpec`` whose GP covariance is the Tanimoto kernel of
    ``library`` (row ``i`` for item ``i``), evaluated from the packed bits (no
    Gram matrix); ``metric``: ``"tanimoto"``, the only library mode.

    Example:
        >>> spec = fingerprint_kernel_surrogate_spec(library)
    """
    if not isinstance(library, PackedFingerprints):
        raise type_error("library", "a PackedFingerprints", library)
    check_choice("metric", metric, ("tanimoto",))
    return _spec(TanimotoKernel, {"library": register_fingerprints(library)})


def feature_table_surrogate_spec(
    features: Tensor | str | os.PathLike,
    kernel: str = "matern52",
    prior: str = "botorch",
) -> SurrogateSpec:
    r"""An Ax ``SurrogateSpec`` whose GP sees each item's row of a feature table through
    :class:`~ax_chaining.kernels.FeatureTableKernel`, with the noise prior of ``prior``.
    A tensor is stored by content key, a ``.npy`` file by its path (memory-mapped).

    Args:
        features: ``N x d`` finite table in the unit cube, row ``i`` for item
            ``i``, or the path of such a table saved with ``numpy.save``.
        kernel: ``"matern52"``, ``"rbf"`` or ``"minmax"`` (counts).
        prior: A preset of :mod:`ax_chaining.kernels.priors`: ``"botorch"``,
            ``"baybe"`` or ``"chen"``.

    Example:
        >>> table = molecule_features(smiles, "rdkit2d", path="cache/library")
        >>> spec = feature_table_surrogate_spec(table.tensor(), prior="baybe")
        >>> spec = feature_table_surrogate_spec(table.file)  # the cached .npy
    """
    if isinstance(features, str | os.PathLike):
        stored: str = os.path.abspath(os.fspath(features))
        num_dims = open_features(stored).shape[-1]
    elif isinstance(features, Tensor):
        stored, num_dims = register_features(features), features.shape[-1]
    else:
        raise type_error(
            "features", "a torch.Tensor or the path of a .npy table", features
        )
    check_choice("kernel", kernel, BASES)
    check_choice("prior", prior, PRIORS)
    options = likelihood_options(prior, num_dims)
    return _spec(
        FeatureTableKernel,
        {"features": stored, "base": kernel, "prior": prior},
        likelihood_class=None if options is None else GaussianLikelihood,
        likelihood_options=options or {},
    )


def _spec(kernel: type, options: dict, **kwargs: object) -> SurrogateSpec:
    """A single-task GP's spec with ``kernel`` over the normalized item index."""
    config = ModelConfig(
        botorch_model_class=SingleTaskGP,
        covar_module_class=kernel,
        covar_module_options={**options, "normalized_inputs": True},
        **kwargs,  # type: ignore[arg-type]
    )
    return SurrogateSpec(model_configs=[config])
