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

Encoding is the slow part of a large library (Mordred: 30 to 60 s per 1,000
molecules on one core, ESOL's small molecules to MOSES's drug-like ones;
RDKit's descriptors about a tenth of that), and each
molecule's row depends on that molecule alone: ``n_jobs`` splits the library
into contiguous chunks encoded by that many worker processes, in order, so
the result is the same array as with one process. ``executor`` maps the same
chunks on an executor the caller holds instead: ``client.get_executor()`` of a
Dask ``distributed.Client`` spreads them over a cluster (its workers need this
package and the ``chem`` extra). Cleaning needs every row (constant columns
and correlations are properties of the whole library) and runs in this
process. Without ``path`` the raw table is gathered here, so it must fit in
memory: Mordred's 1,613 columns take about 13 GB per million molecules in
float64. With ``path``, a raw table larger than :data:`CLEAN_BLOCK_BYTES` is
written to the cache directory chunk by chunk (``features.npy.raw``), cleaned
from there a block of rows at a time (:func:`clean_features` on a memory map)
and deleted: memory then holds one chunk and the cleaned table, and the disk
the raw table while it is cleaned.

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
from collections.abc import Iterator, Sequence
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
    "CLEAN_BLOCK_BYTES",
    "COUNT_ENCODINGS",
    "ENCODINGS",
    "EXECUTOR_CHUNK",
    "CleanedFeatures",
    "MoleculeFeatures",
    "checked_first_rows",
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

CLEAN_BLOCK_BYTES = 2**30
"""Bytes of raw rows :func:`clean_features` reads at a time. A table that fits
in one such block is cleaned in memory; a larger one (a memory map, say) is
read in blocks of rows, so that no copy of the whole raw table is made."""

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
        values: ``N x d`` table (``N >= 2``, ``d >= 1``), one row per item;
            it may be a memory map. A table larger than
            :data:`CLEAN_BLOCK_BYTES` is read a block of rows at a time: the
            same steps from sums over blocks, unit scaling bit for bit,
            standardizing and the correlations to round-off (a correlation
            within round-off of ``max_correlation`` could fall on the other
            side of it), and no copy of the whole raw table.
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
    rows = max(1, CLEAN_BLOCK_BYTES // (8 * d))
    if n > rows:
        return _clean_in_blocks(
            X, names, nonfinite, constant, scale, max_correlation, rows
        )
    finite = np.isfinite(X).all(axis=0)
    varies = (X != X[0]).any(axis=0)
    keep, dropped = _kept_columns(X, finite, varies, names, nonfinite, constant)
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


def _kept_columns(
    X: np.ndarray,
    finite: np.ndarray,
    varies: np.ndarray,
    names: list[str],
    nonfinite: bool,
    constant: bool,
) -> tuple[np.ndarray, dict[str, tuple[str, ...]]]:
    """The columns the ``nonfinite`` and ``constant`` steps keep, from each
    column's flags (all values finite; some value unlike the first row's), and
    the names each step dropped."""
    d = X.shape[1]
    keep = np.arange(d)
    dropped: dict[str, tuple[str, ...]] = {}

    def drop(step: str, mask: np.ndarray) -> None:
        nonlocal keep
        dropped[step] = tuple(names[j] for j in keep[~mask])
        keep = keep[mask]

    if nonfinite:
        drop("nonfinite", finite)
    elif not finite.all():
        j = int(np.flatnonzero(~finite)[0])
        i = int(np.flatnonzero(~np.isfinite(X[:, j]))[0])
        raise ValueError(
            f"`values` must be finite with nonfinite=False, got {X[i, j]} in row "
            f"{i}, column {names[j]!r}."
        )
    if constant:
        drop("constant", varies[keep])
    if keep.size == 0:
        raise ValueError(
            f"No column of the {d} is left after cleaning (dropped: {dropped}); "
            "expected at least one finite, non-constant column."
        )
    return keep, dropped


def _decorrelated(X: np.ndarray, threshold: float) -> np.ndarray:
    r"""Columns the greedy rule keeps: within ``threshold`` of all kept before."""
    centred = X - X.mean(axis=0)
    norms = np.linalg.norm(centred, axis=0)
    return _greedy_keep(centred.T @ centred, norms, threshold)


def _greedy_keep(gram: np.ndarray, norms: np.ndarray, threshold: float) -> np.ndarray:
    r"""The greedy rule on the centred columns' Gram matrix and norms."""
    corr = np.abs(gram / np.outer(norms, norms))
    keep = np.zeros(gram.shape[0], dtype=bool)
    for j in range(gram.shape[0]):
        kept = np.flatnonzero(keep)
        keep[j] = not bool((corr[j, kept] > threshold).any())
    return keep


def _blocks(n: int, rows: int) -> list[slice]:
    return [slice(a, min(n, a + rows)) for a in range(0, n, rows)]


def _clean_in_blocks(
    X: np.ndarray,
    names: list[str],
    nonfinite: bool,
    constant: bool,
    scale: str | None,
    max_correlation: float | None,
    rows: int,
) -> CleanedFeatures:
    r""":func:`clean_features` reading ``rows`` raw rows at a time.

    The same steps from sums over blocks: the finite and constant columns,
    the minimum and maximum (exact in any order, so unit scaling gives the
    in-memory values bit for bit), the mean and standard deviation (sums of
    blocks: equal to round-off), and the decorrelation's centred Gram matrix
    and norms (sums of blocks' products: a correlation within round-off of
    the threshold could fall on the other side of it). Only the kept columns
    of the result are ever held whole.
    """
    n, d = X.shape
    blocks = _blocks(n, rows)
    row0 = np.array(X[0])
    finite = np.ones(d, dtype=bool)
    varies = np.zeros(d, dtype=bool)
    low, high, total = np.full(d, np.inf), np.full(d, -np.inf), np.zeros(d)
    for b in blocks:
        part = np.asarray(X[b])
        finite &= np.isfinite(part).all(axis=0)
        varies |= (part != row0).any(axis=0)
        with np.errstate(invalid="ignore"):
            low = np.fmin(low, part.min(axis=0))
            high = np.fmax(high, part.max(axis=0))
        total += part.sum(axis=0)
    keep, dropped = _kept_columns(X, finite, varies, names, nonfinite, constant)
    offset = np.zeros(keep.size)
    divisor = np.ones(keep.size)
    if scale == "unit":
        offset = low[keep]
        divisor = high[keep] - offset
    elif scale == "standardize":
        offset = total[keep] / n
        squares = np.zeros(keep.size)
        for b in blocks:
            squares += np.square(np.asarray(X[b])[:, keep] - offset).sum(axis=0)
        divisor = np.sqrt(squares / n)
    if scale is not None:
        divisor = np.where(divisor > 0, divisor, 1.0)

    def scaled(b: slice) -> np.ndarray:
        part = np.asarray(X[b])[:, keep]
        return (part - offset) / divisor if scale is not None else part.copy()

    if max_correlation is not None:
        mean = sum(scaled(b).sum(axis=0) for b in blocks) / n
        gram = np.zeros((keep.size, keep.size))
        squares = np.zeros(keep.size)
        for b in blocks:
            centred = scaled(b) - mean
            gram += centred.T @ centred
            squares += np.square(centred).sum(axis=0)
        mask = _greedy_keep(gram, np.sqrt(squares), max_correlation)
        dropped["decorrelate"] = tuple(names[j] for j in keep[~mask])
        keep, offset, divisor = keep[mask], offset[mask], divisor[mask]
    out = np.empty((n, keep.size))
    for b in blocks:
        out[b] = scaled(b)
    return CleanedFeatures(
        values=out,
        names=tuple(names[j] for j in keep),
        dropped=dropped,
        offset=offset,
        scale=divisor,
    )


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
            every core); the result does not depend on it. They are started
            with ``"spawn"``, which imports the calling script again: a
            script calls this under ``if __name__ == "__main__":``.
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
        RuntimeError: A worker process ended before returning its molecules
            (the message names the usual cause, a script without a main
            guard).

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
    if executor is not None or (jobs > 1 and len(smiles) > 1):
        # Chunks of EXECUTOR_CHUNK on an executor; over processes a few chunks
        # each, so that a slow chunk does not hold the others up.
        size = (
            EXECUTOR_CHUNK
            if executor is not None
            else max(1, -(-len(smiles) // (4 * jobs)))
        )
        parts = list(
            _chunk_results(list(smiles), encoding, radius, n_bits, jobs, executor, size)
        )
        return np.concatenate([p[0] for p in parts]), parts[0][1]
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


def _chunk_results(
    smiles: list[str],
    encoding: str,
    radius: int,
    n_bits: int,
    jobs: int,
    executor: Executor | None,
    size: int,
) -> Iterator[tuple[np.ndarray, tuple[str, ...]]]:
    """:func:`encode_molecules` of contiguous chunks of ``size`` molecules, in
    input order, on ``executor``, in ``jobs`` processes, or here."""
    chunks = [smiles[i : i + size] for i in range(0, len(smiles), size)]
    args = ([encoding] * len(chunks), [radius] * len(chunks), [n_bits] * len(chunks))
    if executor is not None:
        yield from executor.map(encode_molecules, chunks, *args)
    elif jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        # "spawn": a fresh interpreter per worker, safe beside torch's threads.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(jobs, len(chunks)), mp_context=context) as pool:
            try:
                yield from pool.map(encode_molecules, chunks, *args)
            except BrokenProcessPool as e:
                # The usual cause: a script without a main guard, which every
                # spawned worker runs again, and which starts workers again.
                raise RuntimeError(
                    f"A worker process of the encoding (n_jobs={jobs}) ended "
                    "before returning its molecules. Workers are started with "
                    "'spawn', which imports the calling script again: in a "
                    "script, call this under `if __name__ == '__main__':`. "
                    "Otherwise the worker ran out of memory or was killed; "
                    "n_jobs=None encodes in this process."
                ) from e
    else:
        for chunk in chunks:
            yield encode_molecules(chunk, encoding, radius, n_bits)


def _encode_to_file(
    file: Path,
    smiles: list[str],
    encoding: str,
    radius: int,
    n_bits: int,
    jobs: int,
    executor: Executor | None,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """:func:`encode_molecules` written chunk by chunk into a ``.npy`` file
    (``numpy.lib.format.open_memmap``); the file's memory map, read-only."""
    names: tuple[str, ...] = ()
    table = None
    start = 0
    results = _chunk_results(
        smiles, encoding, radius, n_bits, jobs, executor, EXECUTOR_CHUNK
    )
    for values, chunk_names in results:
        names = chunk_names
        if table is None:
            shape = (len(smiles), values.shape[1])
            table = np.lib.format.open_memmap(file, "w+", np.float64, shape)
        table[start : start + len(values)] = values
        start += len(values)
    assert table is not None  # smiles is not empty
    table.flush()
    del table
    return np.load(file, mmap_mode="r"), names


def _raw_bytes(library: list[str], options: dict[str, Any]) -> int:
    """Bytes of the raw table of ``library`` (its width from the first
    molecule's encoding)."""
    first, _ = encode_molecules(
        library[:1], options["encoding"], options["radius"], options["n_bits"]
    )
    return 8 * len(library) * first.shape[1]


def _molecules(smiles: Sequence[str]) -> list[Any]:
    mols = []
    for i, s in enumerate(smiles):
        mol, reason = parse_smiles(s)
        if mol is None:
            raise ValueError(f"`smiles[{i}]` = {s!r} is not a valid SMILES ({reason}).")
        mols.append(mol)
    return mols


def checked_first_rows(smiles: Sequence[str], duplicates: str) -> np.ndarray:
    """For each item the first item with the same molecule (canonical SMILES),
    after refusing duplicates if ``duplicates="refuse"``.

    Raises:
        ValueError: An invalid SMILES, or with ``"refuse"`` two items with the
            same molecule (both named).

    Example:
        >>> checked_first_rows(["CCO", "OCC", "CCN"], "map").tolist()
        [0, 0, 2]
    """
    check_choice("duplicates", duplicates, _DUPLICATES)
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
    return first_row


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
# The raw table of a library too large to clean in memory, while it is cleaned
# (named after the table, so that a leftover one marks the cache as its own).
_RAW_FILE = "features.npy.raw"
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
    first_row = checked_first_rows(smiles, duplicates)
    unique = np.flatnonzero(first_row == np.arange(len(smiles)))
    library = [smiles[i] for i in unique]
    raw_file = None if path is None else Path(path) / _RAW_FILE
    raw = None
    try:
        if raw_file is not None and _raw_bytes(library, options) > CLEAN_BLOCK_BYTES:
            # Too large to hold raw beside its cleaned copy: the raw table goes
            # to the cache directory and is cleaned from there, block by block.
            # (every SMILES was parsed and checked by checked_first_rows above)
            raw_file.parent.mkdir(parents=True, exist_ok=True)
            jobs = _num_jobs(n_jobs)
            raw, names = _encode_to_file(
                raw_file, library, encoding, radius, n_bits, jobs, executor
            )
        else:
            raw, names = encode_molecules(
                library, encoding, radius, n_bits, n_jobs, executor
            )
        cleaned = clean_features(raw, names, **options_of_clean)
    finally:
        raw = None  # the raw file's map is closed before the file goes
        if raw_file is not None:
            raw_file.unlink(missing_ok=True)
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
