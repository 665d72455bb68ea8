r"""Descriptor encodings of molecule libraries, their cleaning and their cache.

An *encoding* turns each SMILES of a library into a row of numbers:

* ``rdkit2d``: RDKit's 2D descriptors, all of
  ``rdkit.Chem.Descriptors.CalcMolDescriptors`` (polarity, hydrogen bonding,
  size, charges, fragment counts; 217 in RDKit 2026.09), for an ARD kernel;
* ``mordred``: Mordred's 2D descriptors (1,613; the optional
  ``mordredcommunity`` package), for an ARD kernel;
* ``fragments``: RDKit's 85 ``fr_*`` functional-group counts, for MinMax;
* ``morgan_counts``: the count Morgan fingerprint (radius, width), for MinMax;
* ``fragprints``: ``fragments`` beside ``morgan_counts`` (GAUCHE's
  "fragprints", with counts), for MinMax.

Descriptors need cleaning before a GP can use them (:func:`clean_features`), in
named steps, each switchable, always in this order:

1. ``nonfinite``: drop the columns with a NaN or infinite value (a descriptor
   that fails on some molecule);
2. ``constant``: drop the columns with a single value over the library;
3. ``scale``: ``"unit"`` maps each column to :math:`[0, 1]` (min-max over the
   library, the cube Ax and BayBE normalize inputs to, which their priors
   assume), ``"standardize"`` to mean 0 and standard deviation 1;
4. ``decorrelate``: of each pair of columns with :math:`|\rho| >`
   ``max_correlation``, drop the later one (columns visited in order; a column
   is kept when it is within the threshold of every column kept before it:
   deterministic, and no two kept columns exceed the threshold).

Count encodings (``fragments``, ``morgan_counts``, ``fragprints``) are meant
for the MinMax kernel, which needs the raw non-negative counts: their default
cleaning only drops all-zero columns (which MinMax ignores anyway).

:func:`molecule_features` computes an encoding and cleans it; with ``path``
the result is cached there (``features.npy``, memory-mapped on reopening) beside
a manifest holding the SHA-256 of the SMILES list (as
:func:`~ax_chaining.chem.featurize_library` hashes it) and every option: a
second call with the same library and options reads the cache, a call with a
changed library or other options is refused with what differs.

Duplicate molecules (the same canonical SMILES, e.g. ``"OCC"`` and
``"CCO"``) are refused by default, naming both rows; with
``duplicates="map"`` every item keeps its row (the item index is unchanged)
and duplicates get the same features, computed once.

rdkit is needed (the ``chem`` extra); ``mordred`` needs ``mordredcommunity``
too (both in the ``chem`` extra: ``pip install 'ax-chaining[chem]'``).

Encoding is the slow part of a large library (Mordred: about 30 s per 1,000
molecules on one core; RDKit's descriptors about a tenth of that), and each
molecule's row depends on that molecule alone: ``n_jobs`` splits the library
into contiguous chunks encoded by that many worker processes, in order, so
the result is the same array as with one process. ``executor`` maps the same
chunks on an executor the caller holds instead: ``client.get_executor()`` of a
Dask ``distributed.Client`` spreads them over a cluster (its workers need this
package and the ``chem`` extra). Either way the raw table is gathered in this
process before it is cleaned (cleaning needs every row: constant columns and
correlations are properties of the whole library), so it must fit in memory:
Mordred's 1,613 columns take about 13 GB per million molecules in float64.

Example:
    >>> from ax_chaining.descriptors import molecule_features
    >>> table = molecule_features(["CCO", "c1ccccc1O", "CC(=O)N"], "rdkit2d")
    >>> table.values.shape[0], len(table.names) == table.values.shape[1]
    (3, True)
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ax_chaining.checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    type_error,
)
from ax_chaining.chem import parse_smiles, smiles_sha256
from ax_chaining.io import write_atomic

__all__ = [
    "CLEANING_STEPS",
    "COUNT_ENCODINGS",
    "ENCODINGS",
    "EXECUTOR_CHUNK",
    "CleanedFeatures",
    "MoleculeFeatures",
    "clean_features",
    "default_cleaning",
    "encode_molecules",
    "molecule_features",
]

ENCODINGS = ("rdkit2d", "mordred", "fragments", "morgan_counts", "fragprints")
"""The encodings :func:`encode_molecules` computes."""

COUNT_ENCODINGS = ("fragments", "morgan_counts", "fragprints")
"""The encodings of non-negative counts, meant for the MinMax kernel."""

CLEANING_STEPS = ("nonfinite", "constant", "scale", "decorrelate")
"""The cleaning steps of :func:`clean_features`, in the order they run."""

EXECUTOR_CHUNK = 1000
"""Molecules per task when :func:`encode_molecules` maps on a caller's
executor: about 30 s of Mordred on one core, long enough to pay for a task's
overhead on a cluster, short enough to spread a library over many workers."""

_SCALES = ("unit", "standardize")
_DUPLICATES = ("refuse", "map")
_CACHE_FORMAT = "ax_chaining.molecule_features"
_MANIFEST = "manifest.json"


@dataclass(frozen=True)
class CleanedFeatures:
    r"""What :func:`clean_features` kept, and what each step dropped.

    Attributes:
        values: ``N x d`` float64 array of the kept, scaled columns.
        names: The names of the kept columns.
        dropped: For each step of :data:`CLEANING_STEPS` that ran, the names of
            the columns it dropped (in input order).
        offset: Per kept column, what was subtracted before dividing by ``scale``.
        scale: Per kept column, the divisor (1 where no scaling ran).
    """

    values: np.ndarray
    names: tuple[str, ...]
    dropped: dict[str, tuple[str, ...]]
    offset: np.ndarray
    scale: np.ndarray


def default_cleaning(encoding: str) -> dict[str, Any]:
    """The cleaning options :func:`molecule_features` uses for ``encoding``.

    Descriptor encodings get every step (unit scaling, decorrelation above
    0.95); count encodings only drop all-zero columns (MinMax needs the raw
    counts).

    Example:
        >>> default_cleaning("morgan_counts")
        {'nonfinite': True, 'constant': True, 'scale': None, 'max_correlation': None}
    """
    _check_encoding(encoding)
    if encoding in COUNT_ENCODINGS:
        return {
            "nonfinite": True,
            "constant": True,
            "scale": None,
            "max_correlation": None,
        }
    return {
        "nonfinite": True,
        "constant": True,
        "scale": "unit",
        "max_correlation": 0.95,
    }


def clean_features(
    values: np.ndarray | Tensor,
    names: Sequence[str] | None = None,
    nonfinite: bool = True,
    constant: bool = True,
    scale: str | None = "unit",
    max_correlation: float | None = 0.95,
) -> CleanedFeatures:
    r"""Clean a feature table for a GP: the steps of :data:`CLEANING_STEPS`.

    Args:
        values: ``N x d`` table (``N >= 2``, ``d >= 1``), one row per item.
        names: Column names (default ``"x0", "x1", ...``).
        nonfinite: Drop the columns holding a NaN or an infinity. With False, a
            non-finite value is an error.
        constant: Drop the columns with one value over all rows.
        scale: ``"unit"`` (min-max to ``[0, 1]``), ``"standardize"`` (mean 0,
            standard deviation 1), or None (no scaling).
        max_correlation: Drop the later column of each pair whose absolute
            Pearson correlation exceeds this (in ``(0, 1]``), or None (keep all).
            Needs ``constant=True`` (a constant column has no correlation).

    Returns:
        The :class:`CleanedFeatures`.

    Raises:
        ValueError: Not a 2-D table with two rows or more, names of the wrong
            length, a non-finite value with ``nonfinite=False``, an unknown
            ``scale``, ``max_correlation`` outside ``(0, 1]`` or given with
            ``constant=False``, or no column left.

    Example:
        >>> import numpy as np
        >>> X = np.array([[1.0, 5.0, 2.0, np.nan], [3.0, 5.0, 6.0, 1.0]])
        >>> out = clean_features(X, ["a", "b", "c", "d"])
        >>> out.names, out.dropped["decorrelate"]
        (('a',), ('c',))
        >>> out.values.ravel().tolist()
        [0.0, 1.0]
    """
    X = _table(values)
    n, d = X.shape
    if names is None:
        names = [f"x{j}" for j in range(d)]
    elif isinstance(names, str) or not isinstance(names, Sequence):
        raise type_error("names", "a sequence of column names or None", names)
    names = [str(s) for s in names]
    if len(names) != d:
        raise ValueError(
            f"`names` must have {d} entries (one a column), got {len(names)}."
        )
    check_bool("nonfinite", nonfinite)
    check_bool("constant", constant)
    if scale is not None:
        check_choice("scale", scale, _SCALES)
    if max_correlation is not None:
        max_correlation = check_float(
            "max_correlation", max_correlation, (lambda v: 0 < v <= 1, "in (0, 1]")
        )
        if not constant:
            raise ValueError(
                "`max_correlation` needs `constant=True` (a constant column has no "
                "correlation), got constant=False."
            )
    keep = np.arange(d)
    dropped: dict[str, tuple[str, ...]] = {}

    def drop(step: str, mask: np.ndarray) -> None:
        nonlocal keep
        dropped[step] = tuple(names[j] for j in keep[~mask])
        keep = keep[mask]

    finite = np.isfinite(X).all(axis=0)
    if nonfinite:
        drop("nonfinite", finite)
    elif not finite.all():
        j = int(np.flatnonzero(~finite)[0])
        i = int(np.flatnonzero(~np.isfinite(X[:, j]))[0])
        raise ValueError(
            f"`values` must be finite with nonfinite=False, got {X[i, j]} in row {i}, "
            f"column {names[j]!r}."
        )
    if constant:
        cols = X[:, keep]
        drop("constant", (cols != cols[0]).any(axis=0))
    if keep.size == 0:
        raise ValueError(
            f"No column of the {d} is left after cleaning (dropped: {dropped}); "
            "expected at least one finite, non-constant column."
        )
    out = X[:, keep].copy()
    offset = np.zeros(keep.size)
    divisor = np.ones(keep.size)
    if scale == "unit":
        offset = out.min(axis=0)
        divisor = out.max(axis=0) - offset
    elif scale == "standardize":
        offset = out.mean(axis=0)
        divisor = out.std(axis=0)
    if scale is not None:
        divisor = np.where(divisor > 0, divisor, 1.0)
        out -= offset
        out /= divisor
    if max_correlation is not None:
        mask = _decorrelated(out, max_correlation)
        dropped["decorrelate"] = tuple(names[j] for j in keep[~mask])
        keep, out = keep[mask], out[:, mask]
        offset, divisor = offset[mask], divisor[mask]
    return CleanedFeatures(
        values=out,
        names=tuple(names[j] for j in keep),
        dropped=dropped,
        offset=offset,
        scale=divisor,
    )


def _decorrelated(X: np.ndarray, threshold: float) -> np.ndarray:
    r"""Columns the greedy rule keeps: within ``threshold`` of all kept before."""
    centred = X - X.mean(axis=0)
    norms = np.linalg.norm(centred, axis=0)
    corr = np.abs((centred.T @ centred) / np.outer(norms, norms))
    keep = np.zeros(X.shape[1], dtype=bool)
    for j in range(X.shape[1]):
        kept = np.flatnonzero(keep)
        keep[j] = not bool((corr[j, kept] > threshold).any())
    return keep


def _table(values: Any) -> np.ndarray:
    if isinstance(values, Tensor):
        values = values.detach().cpu().numpy()
    if not isinstance(values, np.ndarray):
        raise type_error("values", "a numpy array or torch.Tensor", values)
    if values.ndim != 2 or values.shape[0] < 2 or values.shape[1] < 1:
        raise ValueError(
            f"`values` must be an N x d table with N >= 2 and d >= 1, got shape "
            f"{values.shape}."
        )
    if values.dtype.kind not in "biuf":
        raise ValueError(f"`values` must be numeric, got dtype {values.dtype}.")
    return values.astype(np.float64, copy=False)


def _check_encoding(encoding: Any) -> str:
    return check_choice("encoding", encoding, ENCODINGS)


def _mordred_calculator() -> Any:
    try:
        from mordred import Calculator, descriptors
    except ImportError as e:
        raise ImportError(
            "The `mordred` encoding (molecule_surrogate_spec's default) needs "
            "the optional package mordredcommunity, "
            "which is not installed; install it with "
            "`pip install 'ax-chaining[chem]'` or pick another encoding "
            "(e.g. 'rdkit2d')."
        ) from e
    return Calculator(descriptors, ignore_3D=True)


def encode_molecules(
    smiles: Sequence[str],
    encoding: str = "rdkit2d",
    radius: int = 2,
    n_bits: int = 2048,
    n_jobs: int | None = None,
    executor: Executor | None = None,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """The raw (uncleaned) encoding of each molecule, one row per SMILES.

    Args:
        smiles: SMILES strings (each parsed by rdkit; no duplicate handling here).
        encoding: One of :data:`ENCODINGS`.
        radius: Morgan radius (``morgan_counts`` and ``fragprints``).
        n_bits: Morgan fingerprint width (``morgan_counts`` and ``fragprints``).
        n_jobs: Worker processes (scikit-learn's convention: None is 1, -1
            every core); the result does not depend on it.
        executor: A ``concurrent.futures.Executor`` to encode chunks of
            :data:`EXECUTOR_CHUNK` molecules on (for a Dask cluster,
            ``client.get_executor()``), or None; not with ``n_jobs`` above 1.
            The result does not depend on it.

    Returns:
        ``(values, names)``: an ``N x d`` float64 array (NaN where a descriptor
        fails on a molecule) and the column names.

    Raises:
        ValueError: Empty input, an unknown encoding, a SMILES rdkit cannot
            parse (its index is given), or both ``n_jobs`` above 1 and an
            ``executor``.
        ImportError: rdkit (or, for ``mordred``, mordredcommunity) is missing.

    Example:
        >>> values, names = encode_molecules(["CCO", "CCN"], "fragments")
        >>> values.shape, names[0]
        ((2, 85), 'fr_Al_COO')
    """
    if isinstance(smiles, str) or not isinstance(smiles, Sequence):
        raise type_error("smiles", "a sequence of SMILES strings", smiles)
    if len(smiles) == 0:
        raise ValueError("`smiles` is empty; expected at least one SMILES.")
    _check_encoding(encoding)
    radius = check_int("radius", radius, 0)
    n_bits = check_int("n_bits", n_bits, 1)
    jobs = _num_jobs(n_jobs)
    _check_executor(executor, jobs)
    mols = _molecules(smiles)  # every SMILES checked before a worker starts
    if executor is not None:
        chunked = (list(smiles), encoding, radius, n_bits, executor, EXECUTOR_CHUNK)
        return _encode_chunks(*chunked)
    if jobs > 1 and len(smiles) > 1:
        return _encode_in_processes(list(smiles), encoding, radius, n_bits, jobs)
    parts = []
    if encoding in ("rdkit2d", "fragments", "fragprints"):
        from rdkit.Chem import Descriptors

        rows = [Descriptors.CalcMolDescriptors(m, missingVal=np.nan) for m in mols]
        names = list(rows[0])
        if encoding != "rdkit2d":
            names = [s for s in names if s.startswith("fr_")]
        parts.append((np.array([[r[s] for s in names] for r in rows], float), names))
    if encoding in ("morgan_counts", "fragprints"):
        from rdkit.Chem import rdFingerprintGenerator

        gen = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)
        counts = np.stack([gen.GetCountFingerprintAsNumPy(m) for m in mols])
        parts.append((counts.astype(np.float64), [f"morgan{j}" for j in range(n_bits)]))
    if encoding == "mordred":
        calculator = _mordred_calculator()
        names = [str(s) for s in calculator.descriptors]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # mordred warns per failing descriptor
            rows = [
                np.array(list(calculator(m).fill_missing(np.nan).values()), float)
                for m in mols
            ]
        parts.append((np.stack(rows), names))
    values = np.concatenate([p[0] for p in parts], axis=1)
    return values, tuple(s for p in parts for s in p[1])


def _num_jobs(n_jobs: Any) -> int:
    """``n_jobs`` as a number of processes (None: 1; -1: every core)."""
    if n_jobs is None:
        return 1
    if n_jobs == -1 and not isinstance(n_jobs, bool):
        return os.cpu_count() or 1
    return check_int("n_jobs", n_jobs, 1)


def _encode_in_processes(
    smiles: list[str], encoding: str, radius: int, n_bits: int, jobs: int
) -> tuple[np.ndarray, tuple[str, ...]]:
    """:func:`encode_molecules` of contiguous chunks in ``jobs`` processes,
    stacked in order (a few chunks per process, so that a slow chunk does not
    hold the others up)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    size = max(1, -(-len(smiles) // (4 * jobs)))
    # "spawn": a fresh interpreter per worker, safe beside torch's threads.
    context = multiprocessing.get_context("spawn")
    workers = min(jobs, -(-len(smiles) // size))
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        return _encode_chunks(smiles, encoding, radius, n_bits, pool, size)


def _check_executor(executor: Any, jobs: int) -> None:
    if executor is None:
        return
    if not isinstance(executor, Executor):
        raise type_error(
            "executor",
            "a concurrent.futures.Executor (for Dask: client.get_executor()) or None",
            executor,
        )
    if jobs > 1:
        raise ValueError(
            f"Pass `n_jobs` (got {jobs}) or `executor`, not both: the executor's "
            "workers do the encoding."
        )


def _encode_chunks(
    smiles: list[str],
    encoding: str,
    radius: int,
    n_bits: int,
    executor: Executor,
    size: int,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """:func:`encode_molecules` of contiguous chunks of ``size`` molecules
    mapped on ``executor``, stacked in input order."""
    chunks = [smiles[i : i + size] for i in range(0, len(smiles), size)]
    parts = list(
        executor.map(
            encode_molecules,
            chunks,
            [encoding] * len(chunks),
            [radius] * len(chunks),
            [n_bits] * len(chunks),
        )
    )
    return np.concatenate([p[0] for p in parts]), parts[0][1]


def _molecules(smiles: Sequence[str]) -> list[Any]:
    mols = []
    for i, s in enumerate(smiles):
        mol, reason = parse_smiles(s)
        if mol is None:
            raise ValueError(f"`smiles[{i}]` = {s!r} is not a valid SMILES ({reason}).")
        mols.append(mol)
    return mols


def _first_rows(smiles: Sequence[str]) -> np.ndarray:
    r"""For each item, the first item with the same canonical SMILES."""
    mols = _molecules(smiles)  # a clear ImportError first without rdkit
    from rdkit import Chem

    first: dict[str, int] = {}
    out = np.empty(len(smiles), dtype=np.int64)
    for i, mol in enumerate(mols):
        out[i] = first.setdefault(Chem.MolToSmiles(mol), i)
    return out


#: The cached table's file name in a cache directory.
_FEATURES_FILE = "features.npy"
_FIRST_ROW_FILE = "first_row.npy"


@dataclass(frozen=True)
class MoleculeFeatures:
    r"""A cleaned encoding of a molecule library, one row per item.

    Row ``i`` is the molecule ``smiles[i]`` of the call that made it, so the
    item index ``i`` of :func:`~ax_chaining.ax.candidate_index_parameter` is
    row ``i``.

    Attributes:
        values: ``N x d`` float64 array (a copy-on-write memory map when read
            from a cache: it is never written back).
        names: Column names.
        dropped: Columns dropped by each cleaning step (see
            :class:`CleanedFeatures`).
        first_row: ``int64`` array, for each item the first item with the same
            molecule (``arange(N)`` when there are no duplicates).
        options: The encoding and cleaning options that made it.
        path: The cache directory, or None.
    """

    values: np.ndarray
    names: tuple[str, ...]
    dropped: dict[str, tuple[str, ...]]
    first_row: np.ndarray
    options: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    def __len__(self) -> int:
        return self.values.shape[0]

    def tensor(self) -> Tensor:
        """The values as a float64 tensor sharing their memory (no copy)."""
        return torch.from_numpy(self.values)

    @property
    def file(self) -> Path | None:
        """The cached table's ``.npy`` file (``numpy.save``), or None without a
        cache: what :func:`~ax_chaining.kernels.open_features` maps."""
        return None if self.path is None else self.path / _FEATURES_FILE


def molecule_features(
    smiles: Sequence[str],
    encoding: str = "rdkit2d",
    path: str | os.PathLike | None = None,
    duplicates: str = "refuse",
    radius: int = 2,
    n_bits: int = 2048,
    cleaning: dict[str, Any] | None = None,
    n_jobs: int | None = None,
    executor: Executor | None = None,
) -> MoleculeFeatures:
    r"""A molecule library's cleaned encoding, computed once (cached at ``path``).

    Args:
        smiles: The library, item ``i`` is ``smiles[i]``.
        encoding: One of :data:`ENCODINGS`.
        path: A cache directory (new, empty, or made by this function), or None
            (no cache). A cache made from another SMILES list or with other
            options is refused.
        duplicates: ``"refuse"`` (a ValueError names two items with the same
            canonical SMILES) or ``"map"`` (duplicates share one row's values,
            computed once; every item keeps its index).
        radius: Morgan radius (``morgan_counts``, ``fragprints``).
        n_bits: Morgan width (``morgan_counts``, ``fragprints``).
        cleaning: Keyword arguments of :func:`clean_features` (default
            :func:`default_cleaning` of the encoding); given keys replace the
            default's.
        n_jobs: Worker processes for the encoding (:func:`encode_molecules`;
            None: 1, -1: every core). Not an option of the result: a cache
            made with any ``n_jobs`` is reused.
        executor: A ``concurrent.futures.Executor`` for the encoding instead
            of ``n_jobs`` processes (:func:`encode_molecules`; for a Dask
            cluster, ``client.get_executor()``), or None. Not an option of the
            result either.

    Returns:
        The :class:`MoleculeFeatures`.

    Raises:
        ValueError: Bad arguments, an invalid or (with ``"refuse"``) duplicate
            SMILES, or a cache made from another library or other options.

    Example:
        >>> table = molecule_features(data.smiles, "rdkit2d", path="cache/esol")
        >>> spec = feature_table_surrogate_spec(table.tensor())
    """
    if isinstance(smiles, str) or not isinstance(smiles, Sequence):
        raise type_error("smiles", "a sequence of SMILES strings", smiles)
    smiles = list(smiles)
    if len(smiles) < 2:
        raise ValueError(f"`smiles` must hold at least 2 molecules, got {len(smiles)}.")
    _check_encoding(encoding)
    check_choice("duplicates", duplicates, _DUPLICATES)
    if cleaning is not None and not isinstance(cleaning, dict):
        raise type_error(
            "cleaning", "a dict of clean_features options or None", cleaning
        )
    _check_executor(executor, _num_jobs(n_jobs))
    options_of_clean = {**default_cleaning(encoding), **(cleaning or {})}
    unknown = set(options_of_clean) - {
        "nonfinite",
        "constant",
        "scale",
        "max_correlation",
    }
    if unknown:
        raise ValueError(
            f"`cleaning` has unknown keys {sorted(unknown)}; expected options of "
            "clean_features (nonfinite, constant, scale, max_correlation)."
        )
    options = {
        "encoding": encoding,
        "radius": check_int("radius", radius, 0),
        "n_bits": check_int("n_bits", n_bits, 1),
        "duplicates": duplicates,
        "cleaning": options_of_clean,
    }
    wanted = {
        "num_items": len(smiles),
        "input_sha256": smiles_sha256(smiles),
        **options,
    }
    if path is not None:
        if not isinstance(path, str | os.PathLike):
            raise type_error("path", "a str, os.PathLike or None", path)
        cached = _open_cache(Path(path), wanted)
        if cached is not None:
            return cached
    first_row = _first_rows(smiles)
    repeated = np.flatnonzero(first_row != np.arange(len(smiles)))
    if repeated.size and duplicates == "refuse":
        i = int(repeated[0])
        j = int(first_row[i])
        raise ValueError(
            f"`smiles` holds {repeated.size} duplicate molecule(s): smiles[{i}] = "
            f"{smiles[i]!r} is the molecule of smiles[{j}] = {smiles[j]!r}. Expected "
            "distinct molecules; pass duplicates='map' to give duplicates the same "
            "features."
        )
    unique = np.flatnonzero(first_row == np.arange(len(smiles)))
    raw, names = encode_molecules(
        [smiles[i] for i in unique], encoding, radius, n_bits, n_jobs, executor
    )
    cleaned = clean_features(raw, names, **options_of_clean)
    # Items map to the rows of their first occurrence among the unique ones.
    position = np.empty(len(smiles), dtype=np.int64)
    position[unique] = np.arange(unique.size)
    values = cleaned.values[position[first_row]]
    result = MoleculeFeatures(
        values=values,
        names=cleaned.names,
        dropped=cleaned.dropped,
        first_row=first_row,
        options=options,
        path=None if path is None else Path(path),
    )
    if path is not None:
        _write_cache(Path(path), result, wanted)
    return result


def _read_manifest(path: Path) -> dict[str, Any] | None:
    file = path / _MANIFEST
    if not file.is_file():
        # The cache's own files without a manifest: a write that stopped before
        # its end (or another process's, under way), recomputed, not refused.
        own = (_FEATURES_FILE, _FIRST_ROW_FILE, _MANIFEST)
        if path.is_dir() and all(p.name.startswith(own) for p in path.iterdir()):
            return None
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise ValueError(
                f"`path` {str(path)!r} exists and is not a molecule-features cache "
                f"(no {_MANIFEST}); expected a new or empty directory."
            )
        return None
    manifest = json.loads(file.read_text())
    if manifest.get("format") != _CACHE_FORMAT:
        raise ValueError(
            f"`path` {str(path)!r} holds a {_MANIFEST} that is not a molecule-features "
            f"cache's (format {manifest.get('format')!r})."
        )
    return manifest


def _open_cache(path: Path, wanted: dict[str, Any]) -> MoleculeFeatures | None:
    manifest = _read_manifest(path)
    if manifest is None or not manifest.get("complete"):
        return None
    differ = [k for k in wanted if manifest.get(k) != wanted[k]]
    if differ:
        got = ", ".join(
            "another library (its SMILES differ)"
            if k == "input_sha256"
            else f"{k}={wanted[k]!r} (cache: {manifest.get(k)!r})"
            for k in differ
        )
        raise ValueError(
            f"`path` {str(path)!r} is a molecule-features cache made from another "
            f"library or with other options: {got}. Expected the same; use another "
            "path, or delete this cache to recompute it."
        )
    from rdkit import __version__ as rdkit_version

    if manifest.get("rdkit") != rdkit_version:
        warnings.warn(
            f"The molecule-features cache {str(path)!r} was made with rdkit "
            f"{manifest.get('rdkit')} (this is {rdkit_version}).",
            stacklevel=3,
        )
    return MoleculeFeatures(
        # Copy-on-write: writable for torch.from_numpy, never written back.
        values=np.load(path / _FEATURES_FILE, mmap_mode="c"),
        names=tuple(manifest["names"]),
        dropped={k: tuple(v) for k, v in manifest["dropped"].items()},
        first_row=np.load(path / _FIRST_ROW_FILE),
        options={
            k: manifest[k]
            for k in ("encoding", "radius", "n_bits", "duplicates", "cleaning")
        },
        path=path,
    )


def _write_cache(path: Path, result: MoleculeFeatures, wanted: dict[str, Any]) -> None:
    from rdkit import __version__ as rdkit_version

    _read_manifest(path)  # refuses a non-empty directory that is no cache
    for name, array in (
        (_FEATURES_FILE, result.values),
        (_FIRST_ROW_FILE, result.first_row),
    ):
        write_atomic(path / name, lambda fh, a=array: np.save(fh, a), binary=True)
    manifest = {
        "format": _CACHE_FORMAT,
        "version": 1,
        **wanted,
        "names": list(result.names),
        "dropped": {k: list(v) for k, v in result.dropped.items()},
        "rdkit": rdkit_version,
        "complete": True,
    }
    # The manifest last: a cache without one is recomputed, never trusted.
    write_atomic(path / _MANIFEST, lambda fh: json.dump(manifest, fh), binary=False)
