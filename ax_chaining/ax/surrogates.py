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
* :func:`molecule_surrogate_spec`: the measured default for molecule
  libraries, from their SMILES (BayBE's model of a molecule).

The large objects are registered by content key
(:mod:`ax_chaining.kernels.registry`), so Ax's JSON stores the key only; call
the same function again after loading an experiment in a new process.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

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
from ax_chaining.kernels.features import (
    BASES,
    PRIORS,
    likelihood_options,
    open_features,
)

__all__ = [
    "DEFAULT_MOLECULE_ENCODING",
    "DEFAULT_MOLECULE_PRIOR",
    "MOLECULE_CLEANING",
    "MOLECULE_ENCODINGS",
    "candidate_index_parameter",
    "feature_table_surrogate_spec",
    "fingerprint_kernel_surrogate_spec",
    "molecule_surrogate_spec",
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
            :func:`~ax_chaining.descriptors.clean_features` gives by default);
            or the path of such a table saved with ``numpy.save`` (``.npy``),
            memory-mapped (:func:`~ax_chaining.kernels.open_features`).
        kernel: ``"matern52"``, ``"rbf"`` or ``"minmax"`` (counts).
        prior: ``"botorch"`` (BoTorch's dimension-scaled priors),
            ``"baybe"`` (BayBE's EDBO-smoothed Gamma priors) or ``"chen"``
            (BayBE 0.15's default for molecules; see
            :mod:`ax_chaining.kernels.features`).

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


MOLECULE_ENCODINGS = (
    "rdkit2d",
    "mordred",
    "fragments",
    "morgan_counts",
    "fragprints",
    "morgan_bits",
)
"""The encodings :func:`molecule_surrogate_spec` offers: those of
:data:`~ax_chaining.descriptors.ENCODINGS`, and ``"morgan_bits"`` (Tanimoto on
binary Morgan fingerprints, :func:`fingerprint_kernel_surrogate_spec`)."""

DEFAULT_MOLECULE_ENCODING = "mordred"
"""The encoding :func:`molecule_surrogate_spec` uses by default: Mordred's 2D
descriptors, as BayBE encodes a ``SubstanceParameter`` (chosen by measurement:
``docs/results/models.md``, ``docs/results/molecules.md``)."""

DEFAULT_MOLECULE_PRIOR = "chen"
"""The prior :func:`molecule_surrogate_spec` uses by default: BayBE 0.15's
``CHEN`` preset, which BayBE fits to a molecule parameter (chosen by
measurement: ``docs/results/models.md``, ``docs/results/molecules.md``)."""

MOLECULE_CLEANING: dict[str, dict[str, Any]] = {"mordred": {"max_correlation": 0.7}}
"""The cleaning options :func:`molecule_surrogate_spec` replaces, per
encoding, where its ``cleaning`` is None: Mordred's 1,613 descriptors are
decorrelated at 0.7, BayBE's threshold (many are near-copies of others:
on FreeSolv 204 columns remain, against 482 at
:func:`~ax_chaining.descriptors.default_cleaning`'s 0.95). Other encodings keep
:func:`~ax_chaining.descriptors.default_cleaning`."""


def molecule_surrogate_spec(
    smiles: Sequence[str],
    encoding: str = DEFAULT_MOLECULE_ENCODING,
    prior: str | None = None,
    kernel: str | None = None,
    path: str | os.PathLike | None = None,
    duplicates: str = "refuse",
    cleaning: dict[str, Any] | None = None,
    n_jobs: int | None = None,
    executor: Executor | None = None,
) -> SurrogateSpec:
    r"""The surrogate spec for a molecule library behind an item index.

    For :func:`candidate_index_parameter` ``(len(smiles))``: item ``i`` is
    ``smiles[i]``. The default is BayBE 0.15's own model of a molecule
    (a ``SubstanceParameter``): Mordred's 2D descriptors, cleaned, scaled to
    the unit cube and decorrelated at 0.7
    (:func:`~ax_chaining.descriptors.molecule_features`,
    :data:`MOLECULE_CLEANING`), under an ARD Matern-5/2 kernel with an output
    scale and BayBE's ``CHEN`` priors (``prior="chen"``:
    :func:`~ax_chaining.kernels.features.chen_priors`). It was chosen by
    measurement on ESOL, FreeSolv and Lipophilicity
    (``docs/results/molecules.md``, ``docs/results/validity.md``): in Ax loops
    over the table, qLogNEI on it ends level with BayBE on all three
    libraries, where the previous default (RDKit's descriptors under BoTorch's
    priors, ``encoding="rdkit2d", prior="botorch"``) fell short on
    Lipophilicity; Chaining-UCB on it is better than on the previous default
    on FreeSolv and Lipophilicity and worse on ESOL; and the certificate on it
    is narrower on ESOL and Lipophilicity, wider on FreeSolv, where it was
    violated in 1 of 10 Chaining-UCB runs from 10 and from 5 initial
    molecules (with the LOO scale's point estimate, the default before, in
    2 and 3 of 10), against none on the previous default
    (``docs/results/validity.md``). Its leave-one-out
    log-likelihood is lower than the previous default's
    (``docs/results/models.md``): it predicts less sharply and is less
    overconfident.

    Mordred needs the ``chem`` extra (``mordredcommunity``) and costs 30 to
    60 s per 1,000 molecules on one core (ESOL's small molecules to MOSES's
    drug-like ones; 10^5 MOSES molecules took 49 minutes in two processes):
    pass ``path`` to compute the features once, ``n_jobs`` to compute them on
    several cores, ``executor=client.get_executor()`` to compute them on a
    Dask cluster, or ``encoding="rdkit2d"`` (a few times faster) for
    libraries of 10^5 molecules and more.

    Args:
        smiles: The library, in item order.
        encoding: One of :data:`MOLECULE_ENCODINGS`. Descriptor encodings
            (``rdkit2d``, ``mordred``) get an ARD kernel on the cleaned
            descriptors; count encodings (``fragments``, ``morgan_counts``,
            ``fragprints``) the MinMax kernel on the counts; ``morgan_bits``
            Tanimoto on binary Morgan fingerprints (radius 2, 2,048 bits:
            :func:`fingerprint_kernel_surrogate_spec`).
        prior: ``"botorch"``, ``"baybe"`` or ``"chen"`` (see
            :mod:`ax_chaining.kernels.features`), or None:
            :data:`DEFAULT_MOLECULE_PRIOR` (``"chen"``), except with
            ``morgan_bits``, which takes ``"botorch"`` only (its only
            hyperparameter is the noise).
        kernel: For descriptor encodings, ``"rbf"`` or ``"matern52"``; default
            the prior's own (RBF for ``"botorch"``, as BoTorch's
            ``SingleTaskGP``; Matern-5/2 for ``"baybe"`` and ``"chen"``, as
            BayBE).
        path: Cache directory of the features (see
            :func:`~ax_chaining.descriptors.molecule_features`), or None. With
            a cache, the kernel maps the cached file and Ax's JSON stores its
            path (:func:`feature_table_surrogate_spec`). None with
            ``morgan_bits`` (:func:`~ax_chaining.chem.featurize_library`
            caches fingerprints).
        duplicates: ``"refuse"`` or ``"map"`` (see
            :func:`~ax_chaining.descriptors.molecule_features`).
        cleaning: Keyword arguments of
            :func:`~ax_chaining.descriptors.clean_features` replacing those of
            the encoding's :func:`~ax_chaining.descriptors.default_cleaning`
            (for example ``{"max_correlation": 0.7}``, BayBE's decorrelation
            threshold for its descriptor encodings); None: the encoding's
            entry of :data:`MOLECULE_CLEANING` (Mordred at 0.7), else its
            default. Not for ``morgan_bits`` (raw bits, nothing to clean).
        n_jobs: Worker processes that compute the encoding
            (:func:`~ax_chaining.descriptors.encode_molecules`; None: 1, -1:
            every core); the features do not depend on it. None with
            ``morgan_bits`` (refused otherwise).
        executor: A ``concurrent.futures.Executor`` that computes the encoding
            instead (for a Dask cluster, ``client.get_executor()``), or None;
            the features do not depend on it. None with ``morgan_bits``.

    Raises:
        ValueError: An unknown encoding, prior or kernel, an invalid or
            duplicate SMILES, cleaning options that ``clean_features`` does
            not take, or a cache made from another library.

    Example:
        >>> client.configure_experiment([candidate_index_parameter(len(smiles))])
        >>> gs = chaining_generation_strategy(
        ...     surrogate_spec=molecule_surrogate_spec(smiles)
        ... )
    """
    from ax_chaining.descriptors import (
        COUNT_ENCODINGS,
        checked_first_rows,
        molecule_features,
    )

    check_choice("encoding", encoding, MOLECULE_ENCODINGS)
    if prior is None:
        prior = "botorch" if encoding == "morgan_bits" else DEFAULT_MOLECULE_PRIOR
    check_choice("prior", prior, PRIORS)
    descriptors = encoding not in (*COUNT_ENCODINGS, "morgan_bits")
    if kernel is not None and not descriptors:
        raise ValueError(
            f"`kernel` must be None with encoding={encoding!r} (its kernel is fixed: "
            f"MinMax on counts, Tanimoto on bits), got {kernel!r}."
        )
    if kernel is not None:
        check_choice("kernel", kernel, ("rbf", "matern52"))
    if encoding == "morgan_bits":
        from ax_chaining.chem import morgan_fingerprints

        if cleaning is not None:
            raise ValueError(
                "`cleaning` must be None with encoding='morgan_bits' (Tanimoto "
                f"takes the raw bits), got {cleaning!r}."
            )
        if prior != "botorch":
            raise ValueError(
                "`prior` must be 'botorch' with encoding='morgan_bits' (Tanimoto "
                f"has no hyperparameter to put these priors on), got {prior!r}."
            )
        # Bits are computed here, in one process, and kept in memory (for a
        # cached, parallel featurization: chem.featurize_library).
        for name, value, default in (
            ("path", path, None),
            ("n_jobs", n_jobs, None),
            ("executor", executor, None),
        ):
            if value is not default:
                raise ValueError(
                    f"`{name}` must be None with encoding='morgan_bits' (the bits "
                    "are computed in this process; featurize_library caches and "
                    f"parallelizes them), got {value!r}."
                )
        checked_first_rows(smiles, duplicates)  # the same molecule has one row
        bits = morgan_fingerprints(smiles)
        return fingerprint_kernel_surrogate_spec(PackedFingerprints.from_bits(bits))
    if cleaning is None:
        cleaning = MOLECULE_CLEANING.get(encoding)
    table = molecule_features(
        smiles,
        encoding,
        path=path,
        duplicates=duplicates,
        cleaning=cleaning,
        n_jobs=n_jobs,
        executor=executor,
    )
    if not descriptors:
        kernel = "minmax"
    elif kernel is None:
        kernel = "rbf" if prior == "botorch" else "matern52"
    # A cached table goes by its file: memory-mapped, stored and pickled as
    # its path.
    features = table.tensor() if table.file is None else table.file
    return feature_table_surrogate_spec(features, kernel=kernel, prior=prior)
