r"""Molecule encodings: SMILES to rows of numbers (RDKit, mordredcommunity),
cleaned for a GP and cached by content. joblib runs the chunks (``n_jobs``; a
Dask cluster under ``joblib.parallel_config(backend="dask")``).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Sequence
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
from ax_chaining.io import write_atomic
from ax_chaining.kernels.fingerprints import PackedFingerprints

__all__ = [
    "CLEANING_STEPS",
    "CLEAN_BLOCK_BYTES",
    "COUNT_ENCODINGS",
    "ENCODINGS",
    "CleanedFeatures",
    "MoleculeFeatures",
    "checked_first_rows",
    "clean_features",
    "default_cleaning",
    "encode_molecules",
    "molecule_features",
    "morgan_fingerprints",
    "parse_smiles",
    "smiles_sha256",
    "tanimoto_gram",
]

CLEANING_STEPS = ("nonfinite", "constant", "scale", "decorrelate")
"""The steps of :func:`clean_features`, in the order they run."""

CLEAN_BLOCK_BYTES = 2**30
"""Bytes of rows :func:`clean_features` reads at a time, and the raw size
above which :func:`molecule_features` cleans from its cache directory."""

_CHUNK = 1000  # molecules per parallel task at most
_FORMAT, _WHAT = "ax_chaining.molecule_features", "molecule-features"
_FEATURES, _FIRST_ROW, _RAW = "features.npy", "first_row.npy", "features.npy.raw"
MANIFEST = "manifest.json"
_OWN = (_FEATURES, _FIRST_ROW, MANIFEST)


def read_manifest(
    path: Path, fmt: str, what: str, own: tuple[str, ...] = ()
) -> dict[str, Any] | None:
    """The manifest of the ``fmt`` cache at ``path``; None for a new directory
    or one holding only files named ``own*`` (an unfinished write); else refused."""
    file = path / MANIFEST
    if file.is_file():
        manifest = json.loads(file.read_text())
        if manifest.get("format") != fmt:
            raise ValueError(
                f"`path` {str(path)!r} holds a {MANIFEST} that is not a {what} "
                f"cache's (format {manifest.get('format')!r})."
            )
        return manifest
    if path.exists() and (
        not path.is_dir() or any(not p.name.startswith(own) for p in path.iterdir())
    ):
        raise ValueError(
            f"`path` {str(path)!r} exists and is not a {what} cache (no "
            f"{MANIFEST}); expected a new or empty directory."
        )
    return None


def check_manifest(
    path: Path, manifest: dict[str, Any], wanted: dict[str, Any], what: str
) -> None:
    """Refuse a cache of other inputs, or an unfinished one of another rdkit;
    warn of a finished one of another rdkit."""
    from rdkit import __version__ as rdkit

    differ = [k for k in wanted if manifest.get(k) != wanted[k]]
    if differ:
        got = ", ".join(
            "another library (its SMILES differ)"
            if k == "input_sha256"
            else f"{k}={wanted[k]!r} (cache: {manifest.get(k)!r})"
            for k in differ
        )
        raise ValueError(
            f"`path` {str(path)!r} is a {what} cache made from another library or "
            f"with other options: {got}. Expected the same; use another path, or "
            "delete this cache to recompute it."
        )
    if manifest.get("rdkit") == rdkit:
        return
    if not manifest.get("complete"):
        raise ValueError(
            f"`path` {str(path)!r} is an unfinished cache started with rdkit "
            f"{manifest.get('rdkit')}, but this is rdkit {rdkit}: results of both "
            "would be mixed. Delete it, or finish it with that rdkit."
        )
    warnings.warn(
        f"The {what} cache {str(path)!r} was made with rdkit "
        f"{manifest.get('rdkit')} (this is {rdkit}).",
        stacklevel=3,
    )


def check_n_jobs(n_jobs: Any) -> int | None:
    """``n_jobs`` as joblib takes it: None or a non-zero int."""
    if n_jobs is not None and (
        isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0
    ):
        raise ValueError(
            "`n_jobs` must be None or a non-zero int (joblib's: -1 every core), "
            f"got {n_jobs!r}."
        )
    return n_jobs


def write_json(file: Path, data: Any) -> None:
    """Write ``data`` as JSON, atomically."""
    write_atomic(file, lambda fh: json.dump(data, fh), binary=False)


def _parse(Chem: Any, s: Any) -> tuple[Any, str]:
    if not isinstance(s, str):
        return None, f"not a string but {type(s).__name__}"
    if not s.strip():
        return None, "empty SMILES"
    mol = Chem.MolFromSmiles(s)
    if mol is not None:
        return (mol, "") if mol.GetNumAtoms() else (None, "no atoms")
    raw = Chem.MolFromSmiles(s, sanitize=False)  # ask again for the reason
    if raw is None:
        return None, "rdkit cannot parse it (SMILES syntax)"
    try:
        Chem.SanitizeMol(raw)
    except Exception as e:  # rdkit's sanitization errors have no common base
        return None, f"rdkit sanitization failed: {e}"
    return None, "rdkit returned no molecule"  # pragma: no cover


def parse_smiles(items: Sequence[Any]) -> list[tuple[Any, str]]:
    """For each item, ``(molecule, "")`` if rdkit parses and sanitizes it, else
    ``(None, reason)`` (rdkit's log silenced).

    Example:
        >>> parse_smiles(["CCO", "C1CC"])[1]
        (None, 'rdkit cannot parse it (SMILES syntax)')
    """
    try:
        from rdkit import Chem, rdBase
    except ImportError as e:  # pragma: no cover - exercised only without rdkit
        raise ImportError("rdkit is missing: pip install 'ax-chaining[chem]'") from e
    with rdBase.BlockLogs():
        return [_parse(Chem, s) for s in items]


def _molecules(smiles: Sequence[Any]) -> list[Any]:
    parsed = parse_smiles(smiles)
    for i, (mol, reason) in enumerate(parsed):
        if mol is None:
            raise ValueError(
                f"`smiles[{i}]` = {smiles[i]!r} is not a valid SMILES ({reason})."
            )
    return [mol for mol, _ in parsed]


def smiles_sha256(items: Sequence[Any]) -> str:
    """SHA-256 (hex) of a SMILES list (its length and entries, in order)."""
    digest = hashlib.sha256(f"{len(items)}\n".encode())
    text = "\n".join(s if isinstance(s, str) else repr(s) for s in items)
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _smiles_list(smiles: Any, least: int) -> list[Any]:
    if isinstance(smiles, str) or not isinstance(smiles, Sequence):
        raise type_error("smiles", "a sequence of SMILES strings", smiles)
    if len(smiles) < least:
        raise ValueError(
            f"`smiles` must hold at least {least} molecule(s), got {len(smiles)}."
        )
    return list(smiles)


def morgan_bits(
    mols: Sequence[Any], radius: int, n_bits: int, counts: bool = False
) -> np.ndarray:
    """``len(mols) x n_bits`` Morgan bits as uint8, or ``counts`` as float64 (a
    row of 0 for a None)."""
    from rdkit.Chem import rdFingerprintGenerator

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)
    encode = gen.GetCountFingerprintAsNumPy if counts else gen.GetFingerprintAsNumPy
    out = np.zeros((len(mols), n_bits), dtype=np.float64 if counts else np.uint8)
    for i, mol in enumerate(mols):
        if mol is not None:
            out[i] = encode(mol)
    return out


def morgan_fingerprints(
    smiles: Sequence[str], radius: int = 2, n_bits: int = 2048
) -> Tensor:
    """Binary Morgan fingerprints (radius 2: ECFP4) folded to ``n_bits``, a
    ``len(smiles) x n_bits`` ``torch.uint8`` tensor; ``ValueError`` for a bad SMILES.

    Example:
        >>> morgan_fingerprints(["C", "CCO"], n_bits=64).sum(1).tolist()
        [1, 6]
    """
    smiles = _smiles_list(smiles, 1)
    radius = check_int("radius", radius, 0)
    n_bits = check_int("n_bits", n_bits, 1)
    return torch.from_numpy(morgan_bits(_molecules(smiles), radius, n_bits))


def tanimoto_gram(fingerprints: Tensor, other: Tensor | None = None) -> Tensor:
    r"""Tanimoto similarity :math:`\langle a, b\rangle / (|a| + |b| - \langle a,
    b\rangle)` (1 for two empty rows) of ``n x m`` and ``p x m`` 0/1 tensors
    (``other`` default ``fingerprints``): ``n x p`` float64, exact.

    Example:
        >>> tanimoto_gram(torch.tensor([[1, 1, 0], [1, 0, 1]]))[0, 1].item()
        0.3333333333333333
    """
    a = _packed("fingerprints", fingerprints)
    b = a if other is None else _packed("other", other)
    if a.n_bits != b.n_bits:
        raise ValueError(
            f"`fingerprints` has {a.n_bits} bits but `other` has {b.n_bits}."
        )
    return b.tanimoto(a)


def _packed(arg: str, x: Any) -> PackedFingerprints:
    if not isinstance(x, Tensor):
        raise type_error(arg, "a torch.Tensor", x)
    if x.dim() != 2 or 0 in x.shape:
        raise ValueError(
            f"`{arg}` must be a non-empty 2-D tensor, got {tuple(x.shape)}."
        )
    if not bool(((x == 0) | (x == 1)).all()):
        raise ValueError(f"`{arg}` must hold only 0 and 1.")
    return PackedFingerprints.from_bits(x)


def _descriptors(mols: list[Any], prefix: str) -> tuple[np.ndarray, list[str]]:
    from rdkit.Chem import Descriptors

    rows = [Descriptors.CalcMolDescriptors(m, missingVal=np.nan) for m in mols]
    names = [s for s in rows[0] if s.startswith(prefix)]
    return np.array([[r[s] for s in names] for r in rows], float), names


def _morgan_counts(mols: list[Any], radius: int, n_bits: int) -> Any:
    names = [f"morgan{j}" for j in range(n_bits)]
    return morgan_bits(mols, radius, n_bits, counts=True), names


def _mordred(mols: list[Any], radius: int, n_bits: int) -> Any:
    try:
        from mordred import Calculator, descriptors
    except ImportError as e:
        raise ImportError(
            "encoding='mordred' needs mordredcommunity: pip install "
            "'ax-chaining[chem]', or take encoding='rdkit2d'."
        ) from e
    calculator = Calculator(descriptors, ignore_3D=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mordred warns per failing descriptor
        rows = [
            np.array(list(calculator(m).fill_missing(np.nan).values()), float)
            for m in mols
        ]
    return np.stack(rows), [str(s) for s in calculator.descriptors]


Encoder = Callable[[list[Any], int, int], tuple[np.ndarray, list[str]]]
_ENCODERS: dict[str, tuple[Encoder, ...]] = {
    "rdkit2d": (lambda mols, r, b: _descriptors(mols, ""),),
    "mordred": (_mordred,),
    "fragments": (lambda mols, r, b: _descriptors(mols, "fr_"),),
    "morgan_counts": (_morgan_counts,),
    "fragprints": (lambda mols, r, b: _descriptors(mols, "fr_"), _morgan_counts),
}

ENCODINGS = tuple(_ENCODERS)
"""RDKit's 2D descriptors, Mordred's, RDKit's ``fr_*`` counts, count Morgan
fingerprints, and ``fragprints`` (fragments, then Morgan counts)."""

COUNT_ENCODINGS = ("fragments", "morgan_counts", "fragprints")
"""The encodings of counts (for the MinMax kernel, uncleaned)."""


def _encode_chunk(
    smiles: list[str], encoding: str, radius: int, n_bits: int
) -> tuple[np.ndarray, tuple[str, ...]]:
    mols = _molecules(smiles)
    parts = [encode(mols, radius, n_bits) for encode in _ENCODERS[encoding]]
    values = np.concatenate([p[0] for p in parts], axis=1)
    return values, tuple(s for p in parts for s in p[1])


def _encode(
    smiles: list[str], args: tuple[str, int, int], n_jobs: int | None, spill: Any
) -> tuple[np.ndarray, tuple[str, ...]]:
    """The raw table, chunks run by joblib, into memory or (above
    :data:`CLEAN_BLOCK_BYTES`) into the file ``spill`` if not None."""
    from joblib import Parallel, delayed, effective_n_jobs

    jobs = max(1, effective_n_jobs(n_jobs))
    size = max(1, min(_CHUNK, -(-len(smiles) // (4 * jobs))))
    parts = [smiles[i : i + size] for i in range(0, len(smiles), size)]
    chunks = Parallel(n_jobs=n_jobs, return_as="generator")(
        delayed(_encode_chunk)(c, *args) for c in parts
    )
    values, names = next(chunks)
    shape = (len(smiles), values.shape[1])
    if spill is not None and 8 * shape[0] * shape[1] > CLEAN_BLOCK_BYTES:
        spill.parent.mkdir(parents=True, exist_ok=True)
        raw = np.lib.format.open_memmap(spill, "w+", np.float64, shape)
    else:
        raw = np.empty(shape)
    raw[: len(values)] = values
    start = len(values)
    for values, _ in chunks:
        raw[start : start + len(values)] = values
        start += len(values)
    return raw, names


def encode_molecules(
    smiles: Sequence[str],
    encoding: str = "rdkit2d",
    radius: int = 2,
    n_bits: int = 2048,
    n_jobs: int | None = None,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """The raw encoding ``(values, names)``: ``N x d`` float64 (NaN where a
    descriptor fails).

    Args:
        encoding: One of :data:`ENCODINGS`.
        radius, n_bits: Morgan radius and width (``morgan_counts``, ``fragprints``).
        n_jobs: joblib workers (None: 1, or ``joblib.parallel_config``'s; -1:
            every core); the result is the same.

    Example:
        >>> values, names = encode_molecules(["CCO", "CCN"], "fragments")
        >>> values.shape, names[0]
        ((2, 85), 'fr_Al_COO')
    """
    smiles = _smiles_list(smiles, 1)
    check_choice("encoding", encoding, ENCODINGS)
    radius = check_int("radius", radius, 0)
    n_bits = check_int("n_bits", n_bits, 1)
    n_jobs = check_n_jobs(n_jobs)
    _molecules(smiles)  # every SMILES checked before a worker starts
    return _encode(smiles, (encoding, radius, n_bits), n_jobs, None)


def checked_first_rows(smiles: Sequence[str], duplicates: str) -> np.ndarray:
    """For each item the first item with its molecule (canonical SMILES); a
    repeat is refused (``duplicates="refuse"``) or kept (``"map"``).

    Example:
        >>> checked_first_rows(["CCO", "OCC", "CCN"], "map").tolist()
        [0, 0, 2]
    """
    check_choice("duplicates", duplicates, ("refuse", "map"))
    mols = _molecules(smiles)  # a clear error first: rdkit missing, bad SMILES
    from rdkit import Chem

    first: dict[str, int] = {}
    out = np.array(
        [first.setdefault(Chem.MolToSmiles(m), i) for i, m in enumerate(mols)],
        dtype=np.int64,
    )
    repeated = np.flatnonzero(out != np.arange(len(smiles)))
    if repeated.size and duplicates == "refuse":
        i, j = int(repeated[0]), int(out[repeated[0]])
        raise ValueError(
            f"`smiles` holds {repeated.size} duplicate molecule(s): smiles[{i}] = "
            f"{smiles[i]!r} is the molecule of smiles[{j}] = {smiles[j]!r}. Expected "
            "distinct molecules; pass duplicates='map' to give duplicates the same "
            "features."
        )
    return out


@dataclass(frozen=True)
class CleanedFeatures:
    """What :func:`clean_features` kept: ``values`` (``(x - offset) / scale``
    of the kept columns), their ``names``, and the names each step ``dropped``."""

    values: np.ndarray
    names: tuple[str, ...]
    dropped: dict[str, tuple[str, ...]]
    offset: np.ndarray
    scale: np.ndarray


def default_cleaning(encoding: str) -> dict[str, Any]:
    """The :func:`clean_features` options for ``encoding`` (counts: only
    constant columns go).

    Example:
        >>> default_cleaning("morgan_counts")
        {'nonfinite': True, 'constant': True, 'scale': None, 'max_correlation': None}
    """
    check_choice("encoding", encoding, ENCODINGS)
    counts = encoding in COUNT_ENCODINGS
    return {
        "nonfinite": True,
        "constant": True,
        "scale": None if counts else "unit",
        "max_correlation": None if counts else 0.95,
    }


def clean_features(
    values: np.ndarray | Tensor,
    names: Sequence[str] | None = None,
    nonfinite: bool = True,
    constant: bool = True,
    scale: str | None = "unit",
    max_correlation: float | None = 0.95,
) -> CleanedFeatures:
    r"""Clean a feature table for a GP, in the order of :data:`CLEANING_STEPS`.

    1. ``nonfinite``: drop the columns holding a NaN or an infinity (False: such
       a value is an error naming its row and column);
    2. ``constant``: drop the columns with a single value;
    3. ``scale``: ``"unit"`` (min-max to :math:`[0, 1]`, the cube Ax's and
       BayBE's priors assume), ``"standardize"`` (mean 0, standard deviation 1)
       or None;
    4. ``decorrelate``: visiting columns in order, drop each one whose absolute
       Pearson correlation with a column kept before it exceeds
       ``max_correlation`` (None: no step; it needs ``constant``).

    ``values`` (``N x d``, ``N >= 2``; default ``names`` ``x0, x1, ...``) is
    read :data:`CLEAN_BLOCK_BYTES` at a time (a memory map is never copied whole).

    Example:
        >>> X = np.array([[1.0, 5.0, 2.0, np.nan], [3.0, 5.0, 6.0, 1.0]])
        >>> out = clean_features(X, ["a", "b", "c", "d"])
        >>> out.names, out.dropped["decorrelate"], out.values.ravel().tolist()
        (('a',), ('c',), [0.0, 1.0])
    """
    if isinstance(values, Tensor):
        values = values.detach().cpu().numpy()
    if not isinstance(values, np.ndarray):
        raise type_error("values", "a numpy array or torch.Tensor", values)
    if values.ndim != 2 or values.shape[0] < 2 or values.shape[1] < 1:
        raise ValueError(
            "`values` must be an N x d table with N >= 2 and d >= 1, got shape "
            f"{values.shape}."
        )
    if values.dtype.kind not in "biuf":
        raise ValueError(f"`values` must be numeric, got dtype {values.dtype}.")
    X = values.astype(np.float64, copy=False)
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
        check_choice("scale", scale, ("unit", "standardize"))
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
    blocks = [slice(a, min(n, a + rows)) for a in range(0, n, rows)]
    row0 = np.array(X[0])
    finite, varies = np.ones(d, dtype=bool), np.zeros(d, dtype=bool)
    low, high, total = np.full(d, np.inf), np.full(d, -np.inf), np.zeros(d)
    for b in blocks:
        part = np.asarray(X[b])
        finite &= np.isfinite(part).all(axis=0)
        varies |= (part != row0).any(axis=0)
        with np.errstate(invalid="ignore"):
            low = np.fmin(low, part.min(axis=0))
            high = np.fmax(high, part.max(axis=0))
        total += part.sum(axis=0)
    keep = np.arange(d)
    dropped: dict[str, tuple[str, ...]] = {}
    if nonfinite:
        dropped["nonfinite"] = tuple(names[j] for j in keep[~finite])
        keep = keep[finite]
    elif not finite.all():
        j = int(np.flatnonzero(~finite)[0])
        i = int(np.flatnonzero(~np.isfinite(np.asarray(X[:, j])))[0])
        raise ValueError(
            f"`values` must be finite with nonfinite=False, got {X[i, j]} in "
            f"row {i}, column {names[j]!r}."
        )
    if constant:
        dropped["constant"] = tuple(names[j] for j in keep[~varies[keep]])
        keep = keep[varies[keep]]
    if keep.size == 0:
        raise ValueError(
            f"No column of the {d} is left after cleaning (dropped: {dropped}); "
            "expected at least one finite, non-constant column."
        )

    def columns(b: slice) -> np.ndarray:
        # C order: sums over rows then run in the same order at any block size.
        return np.ascontiguousarray(np.asarray(X[b])[:, keep])

    offset, divisor = np.zeros(keep.size), np.ones(keep.size)
    if scale == "unit":
        offset = low[keep]
        divisor = high[keep] - offset
    elif scale == "standardize":
        offset = total[keep] / n
        squares = np.zeros(keep.size)
        for b in blocks:
            squares += np.square(columns(b) - offset).sum(axis=0)
        divisor = np.sqrt(squares / n)
    if scale is not None:
        divisor = np.where(divisor > 0, divisor, 1.0)

    def scaled(b: slice) -> np.ndarray:
        part = columns(b)
        return (part - offset) / divisor if scale is not None else part

    if max_correlation is not None:
        mean = sum(scaled(b).sum(axis=0) for b in blocks) / n
        gram, squares = np.zeros((keep.size, keep.size)), np.zeros(keep.size)
        for b in blocks:
            centred = scaled(b) - mean
            gram += centred.T @ centred
            squares += np.square(centred).sum(axis=0)
        norms = np.sqrt(squares)
        corr = np.abs(gram / np.outer(norms, norms))
        mask = np.zeros(keep.size, dtype=bool)
        for j in range(keep.size):
            mask[j] = not bool((corr[j, mask] > max_correlation).any())
        dropped["decorrelate"] = tuple(names[j] for j in keep[~mask])
        keep, offset, divisor = keep[mask], offset[mask], divisor[mask]
    out = np.empty((n, keep.size))
    for b in blocks:
        out[b] = scaled(b)
    return CleanedFeatures(out, tuple(names[j] for j in keep), dropped, offset, divisor)


@dataclass(frozen=True)
class MoleculeFeatures:
    """A library's cleaned encoding: row ``i`` of ``values`` (a copy-on-write
    memory map from a cache) is ``smiles[i]``; ``first_row[i]`` the first item
    with its molecule; ``options`` made it, ``path`` caches it (or None)."""

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
        """The cached table's ``.npy`` file, or None."""
        return None if self.path is None else self.path / _FEATURES


def molecule_features(
    smiles: Sequence[str],
    encoding: str = "rdkit2d",
    path: str | os.PathLike | None = None,
    duplicates: str = "refuse",
    radius: int = 2,
    n_bits: int = 2048,
    cleaning: dict[str, Any] | None = None,
    n_jobs: int | None = None,
) -> MoleculeFeatures:
    r"""A molecule library's cleaned encoding, computed once (cached at ``path``).

    With ``path`` (a new or empty directory, or this function's cache) the
    table is stored there with its library's :func:`smiles_sha256` and options:
    called again alike it is mapped; otherwise refused, naming what differs. A
    raw table above :data:`CLEAN_BLOCK_BYTES` is then spilled there.

    Args:
        smiles: The library (at least 2); item ``i`` is ``smiles[i]``.
        encoding, radius, n_bits, n_jobs: As in :func:`encode_molecules`
            (``n_jobs`` is no option of the cache).
        duplicates: ``"refuse"`` a repeated molecule, or ``"map"`` it to one row.
        cleaning: :func:`clean_features` options replacing :func:`default_cleaning`'s.

    Example:
        >>> table = molecule_features(data.smiles, "rdkit2d", path="cache/esol")
        >>> spec = feature_table_surrogate_spec(table.file)
    """
    smiles = _smiles_list(smiles, 2)
    check_choice("encoding", encoding, ENCODINGS)
    check_choice("duplicates", duplicates, ("refuse", "map"))
    if cleaning is not None and not isinstance(cleaning, dict):
        raise type_error(
            "cleaning", "a dict of clean_features options or None", cleaning
        )
    n_jobs = check_n_jobs(n_jobs)
    clean = {**default_cleaning(encoding), **(cleaning or {})}
    unknown = set(clean) - {"nonfinite", "constant", "scale", "max_correlation"}
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
        "cleaning": clean,
    }
    wanted = {"num_items": len(smiles), "input_sha256": smiles_sha256(smiles)}
    wanted |= options
    if path is not None:
        if not isinstance(path, str | os.PathLike):
            raise type_error("path", "a str, os.PathLike or None", path)
        path = Path(path)
        manifest = read_manifest(path, _FORMAT, _WHAT, _OWN)
        if manifest is not None:
            check_manifest(path, manifest, wanted, _WHAT)
            return MoleculeFeatures(
                values=np.load(path / _FEATURES, mmap_mode="c"),
                names=tuple(manifest["names"]),
                dropped={k: tuple(v) for k, v in manifest["dropped"].items()},
                first_row=np.load(path / _FIRST_ROW),
                options={k: manifest[k] for k in options},
                path=path,
            )
    first_row = checked_first_rows(smiles, duplicates)
    unique = np.flatnonzero(first_row == np.arange(len(smiles)))
    args = (encoding, options["radius"], options["n_bits"])
    spill = None if path is None else path / _RAW  # too large for memory: on disk
    try:
        raw, names = _encode([smiles[i] for i in unique], args, n_jobs, spill)
        cleaned = clean_features(raw, names, **clean)
    finally:
        raw = None  # the raw file's map is closed before the file goes
        if spill is not None:
            spill.unlink(missing_ok=True)
    position = np.empty(len(smiles), dtype=np.int64)
    position[unique] = np.arange(unique.size)
    values = cleaned.values[position[first_row]]
    result = MoleculeFeatures(
        values, cleaned.names, cleaned.dropped, first_row, options, path
    )
    if path is not None:
        from rdkit import __version__ as rdkit_version

        read_manifest(path, _FORMAT, _WHAT, _OWN)  # no cache of another kind
        for name, array in ((_FEATURES, values), (_FIRST_ROW, first_row)):
            write_atomic(path / name, lambda fh, a=array: np.save(fh, a), binary=True)
        manifest = {"format": _FORMAT, "version": 1, **wanted, "rdkit": rdkit_version}
        manifest.update(names=result.names, dropped=result.dropped, complete=True)
        write_json(path / MANIFEST, manifest)  # last: no manifest, no cache
    return result
