r"""The default model of a molecule library (encoding, cleaning, prior,
kernel): the one place to change it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ax_chaining.checks import check_choice
from ax_chaining.kernels import PackedFingerprints
from ax_chaining.kernels.priors import PRIORS
from ax_chaining.molecules.encodings import (
    COUNT_ENCODINGS,
    ENCODINGS,
    checked_first_rows,
    molecule_features,
    morgan_fingerprints,
)

if TYPE_CHECKING:
    from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec

__all__ = [
    "DEFAULT_MOLECULE_ENCODING",
    "DEFAULT_MOLECULE_PRIOR",
    "MOLECULE_CLEANING",
    "MOLECULE_ENCODINGS",
    "molecule_surrogate_spec",
]

MOLECULE_ENCODINGS = (*ENCODINGS, "morgan_bits")
""":data:`~ax_chaining.molecules.ENCODINGS` and ``"morgan_bits"`` (Tanimoto)."""

DEFAULT_MOLECULE_ENCODING = "mordred"
"""Mordred's 2D descriptors, as BayBE's ``SubstanceParameter``."""

DEFAULT_MOLECULE_PRIOR = "chen"
"""BayBE 0.15's ``CHEN`` preset, which BayBE fits to a molecule parameter."""

MOLECULE_CLEANING: dict[str, dict[str, Any]] = {"mordred": {"max_correlation": 0.7}}
"""Per encoding, options replacing :func:`~ax_chaining.molecules.default_cleaning`'s."""


def molecule_surrogate_spec(
    smiles: Sequence[str],
    encoding: str = DEFAULT_MOLECULE_ENCODING,
    prior: str | None = None,
    kernel: str | None = None,
    path: str | os.PathLike | None = None,
    duplicates: str = "refuse",
    cleaning: dict[str, Any] | None = None,
    n_jobs: int | None = None,
) -> SurrogateSpec:
    r"""The Ax surrogate spec of a molecule library behind an item index.

    Item ``i`` of :func:`~ax_chaining.ax.candidate_index_parameter`
    ``(len(smiles))`` is ``smiles[i]``. By default, BayBE 0.15's model:
    Mordred's 2D descriptors cleaned to the unit cube and decorrelated at 0.7,
    under an ARD Matern-5/2 kernel with an output scale and the ``CHEN``
    priors. Count encodings get MinMax, ``morgan_bits`` Tanimoto.

    Args:
        encoding: One of :data:`MOLECULE_ENCODINGS`.
        prior: One of :data:`~ax_chaining.kernels.priors.PRIORS`, or None:
            :data:`DEFAULT_MOLECULE_PRIOR` (``"botorch"`` with ``morgan_bits``).
        kernel: ``"rbf"`` or ``"matern52"`` for descriptors (else None);
            default RBF under ``"botorch"``, else Matern-5/2.
        path, duplicates, n_jobs: As in
            :func:`~ax_chaining.molecules.molecule_features`.
        cleaning: :func:`~ax_chaining.molecules.clean_features` options
            (None: :data:`MOLECULE_CLEANING`'s, if any).

    Example:
        >>> client.configure_experiment([candidate_index_parameter(len(smiles))])
        >>> gs = qlognei_generation_strategy(
        ...     surrogate_spec=molecule_surrogate_spec(smiles, path="cache/lib"))
    """
    from ax_chaining.ax.surrogates import (
        feature_table_surrogate_spec,
        fingerprint_kernel_surrogate_spec,
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
        options = {"cleaning": cleaning, "path": path, "n_jobs": n_jobs}
        for name, value in options.items():
            if value is not None:
                raise ValueError(
                    f"`{name}` must be None with encoding='morgan_bits' (raw bits, "
                    "computed here; featurize_library caches and parallelizes "
                    f"them), got {value!r}."
                )
        if prior != "botorch":
            raise ValueError(
                "`prior` must be 'botorch' with encoding='morgan_bits' (Tanimoto "
                f"has no hyperparameter to put these priors on), got {prior!r}."
            )
        checked_first_rows(smiles, duplicates)  # the same molecule has one row
        bits = PackedFingerprints.from_bits(morgan_fingerprints(smiles))
        return fingerprint_kernel_surrogate_spec(bits)
    table = molecule_features(
        smiles,
        encoding,
        path=path,
        duplicates=duplicates,
        cleaning=MOLECULE_CLEANING.get(encoding) if cleaning is None else cleaning,
        n_jobs=n_jobs,
    )
    if not descriptors:
        kernel = "minmax"
    elif kernel is None:
        kernel = "rbf" if prior == "botorch" else "matern52"
    # A cached table goes by its file: memory-mapped, stored and pickled as its path.
    features = table.tensor() if table.file is None else table.file
    return feature_table_surrogate_spec(features, kernel=kernel, prior=prior)
