r"""Surrogate specs for a finite set of items behind one item-index parameter.

An Ax experiment over a finite library (molecules, graphs, strings) has one
integer parameter, the item index ``0 .. N - 1``
(:func:`candidate_index_parameter`); the surrogate spec says what the GP sees
of item ``i``:

* :func:`precomputed_kernel_surrogate_spec`: a precomputed ``N x N`` Gram matrix;
* :func:`fingerprint_kernel_surrogate_spec`: Tanimoto on a packed fingerprint
  library (no ``N x N`` matrix);
* :func:`feature_table_surrogate_spec`: an ARD RBF / Matern (or MinMax) kernel
  on row ``i`` of an ``N x d`` feature table;
* :func:`~ax_chaining.molecules.molecule_surrogate_spec`: the measured default
  for molecule
  libraries, from their SMILES (BayBE's model of a molecule).

The large objects are registered by content key
(:mod:`ax_chaining.kernels.registry`), so Ax's JSON stores the key only; call
the same function again after loading an experiment in a new process.
"""

from __future__ import annotations

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
    """An Ax parameter config for an item index ``0 .. num_items - 1``: with
    :func:`precomputed_kernel_surrogate_spec`, any finite set of objects (graphs,
    strings, molecules) given their Gram matrix.

    Args:
        num_items: Number of items ``n >= 2``.
        name: Parameter name.

    Example:
        >>> client.configure_experiment(parameters=[candidate_index_parameter(100)])
    """
    last = check_int("num_items", num_items, 2) - 1
    return RangeParameterConfig(name=name, bounds=(0, last), parameter_type="int")


def precomputed_kernel_surrogate_spec(gram: Tensor) -> SurrogateSpec:
    """An Ax ``SurrogateSpec`` whose GP covariance is a precomputed Gram matrix.

    For an item index (:func:`candidate_index_parameter`), which Ax normalizes
    to ``[0, 1]`` and ``PrecomputedKernel`` maps back to a row of ``gram``: the
    prior covariance of the standardized objective. Stored as in ``register_gram``.

    Args:
        gram: ``n x n`` symmetric PSD Gram matrix (the paper has ``k(g, g) = 1``).

    Example:
        >>> gs = chaining_generation_strategy(
        ...     surrogate_spec=precomputed_kernel_surrogate_spec(gram)
        ... )
    """
    if not isinstance(gram, Tensor):
        raise type_error("gram", "a torch.Tensor", gram)
    config = ModelConfig(
        botorch_model_class=SingleTaskGP,
        covar_module_class=PrecomputedKernel,
        covar_module_options={"gram": register_gram(gram), "normalized_inputs": True},
    )
    return SurrogateSpec(model_configs=[config])


def fingerprint_kernel_surrogate_spec(
    library: PackedFingerprints, metric: str = "tanimoto"
) -> SurrogateSpec:
    """An Ax ``SurrogateSpec`` whose GP covariance is a fingerprint kernel over a
    molecule library, evaluated from the packed bits (no Gram matrix).

    For an item index (:func:`candidate_index_parameter` with ``len(library)``
    items): ``TanimotoKernel`` in library mode with ``normalized_inputs=True``.
    The library is registered (:func:`~ax_chaining.kernels.register_fingerprints`)
    and the JSON stores its content key only; call this function or
    ``register_fingerprints`` again after loading an experiment in a new process.

    Args:
        library: The candidates' fingerprints, row ``i`` for item ``i``.
        metric: ``"tanimoto"`` (binary fingerprints; the only library mode).

    Example:
        >>> library = featurize_library("train.csv.gz", "cache/moses").fingerprints
        >>> client = Client()
        >>> client.configure_experiment([candidate_index_parameter(len(library))])
        >>> client.configure_optimization(objective="score")
        >>> client.set_generation_strategy(chaining_generation_strategy(
        ...     surrogate_spec=fingerprint_kernel_surrogate_spec(library)))
        >>> for index, p in client.get_next_trials(max_trials=4).items():
        ...     client.complete_trial(index, raw_data={"score": score(p["item"])})
    """
    if not isinstance(library, PackedFingerprints):
        raise type_error("library", "a PackedFingerprints", library)
    check_choice("metric", metric, ("tanimoto",))
    config = ModelConfig(
        botorch_model_class=SingleTaskGP,
        covar_module_class=TanimotoKernel,
        covar_module_options={
            "library": register_fingerprints(library),
            "normalized_inputs": True,
        },
    )
    return SurrogateSpec(model_configs=[config])


def feature_table_surrogate_spec(
    features: Tensor | str | os.PathLike,
    kernel: str = "matern52",
    prior: str = "botorch",
) -> SurrogateSpec:
    r"""An Ax ``SurrogateSpec`` whose GP sees each item's row of a feature table.

    For an item index (:func:`candidate_index_parameter` with ``N`` items): a
    ``SingleTaskGP`` whose covariance is
    :class:`~ax_chaining.kernels.FeatureTableKernel` (the index mapped to row
    ``i`` of ``features``, then an ARD kernel whose lengthscales Ax fits), with
    the noise prior of ``prior``. A tensor is registered
    (:func:`~ax_chaining.kernels.register_features`) and the JSON stores its
    key only (a saved experiment reopens in a process that registered the same
    table); a file's path is stored as it is (the experiment reopens wherever
    the file is), and a pickled model carries the path, not the table (what a
    sharded step sends its workers). Rows are gathered per call, so a
    memory-mapped table is read in the blocks the chaining engine asks for.

    Args:
        features: ``N x d`` floating table, row ``i`` for item ``i``, cleaned
            (finite; in the unit cube for the priors' scale, as
            :func:`~ax_chaining.molecules.clean_features` gives by default);
            or the path of such a table saved with ``numpy.save`` (``.npy``),
            memory-mapped (:func:`~ax_chaining.kernels.open_features`).
        kernel: ``"matern52"``, ``"rbf"`` or ``"minmax"`` (counts).
        prior: ``"botorch"`` (BoTorch's dimension-scaled priors),
            ``"baybe"`` (BayBE's EDBO-smoothed Gamma priors) or ``"chen"``
            (BayBE 0.15's default for molecules; see
            :mod:`ax_chaining.kernels.priors`).

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
    config = ModelConfig(
        botorch_model_class=SingleTaskGP,
        covar_module_class=FeatureTableKernel,
        covar_module_options={
            "features": stored,
            "base": kernel,
            "prior": prior,
            "normalized_inputs": True,
        },
        likelihood_class=None if options is None else GaussianLikelihood,
        likelihood_options=options or {},
    )
    return SurrogateSpec(model_configs=[config])
