r"""Molecules as candidates: Morgan fingerprints and their Tanimoto similarity.

The Tanimoto similarity of binary fingerprints :math:`a, b \in \{0, 1\}^m`,

.. math::

    k(a, b) = \frac{\langle a, b\rangle}{\|a\|^2 + \|b\|^2 - \langle a, b\rangle},

is the number of bits set in both over the number set in either (1 when both
are empty). It is positive semi-definite on binary vectors and
:math:`k(a, a) = 1`, the normalization the paper uses for its graph kernel.

For a large library (millions of molecules), :func:`featurize_library` computes
the fingerprints once, in parallel and resumably, into a memory-mapped
:class:`~ax_chaining.kernels.PackedFingerprints` that the library mode of
:class:`~ax_chaining.kernels.TanimotoKernel` reads without a Gram matrix.

rdkit is needed only for :func:`morgan_fingerprints` and
:func:`featurize_library` (``pip install rdkit``); it is imported on first use.

Example:
    >>> from ax_chaining.test_functions.molecules import load_dataset
    >>> from ax_chaining.chem import morgan_fingerprints, tanimoto_gram
    >>> gram = tanimoto_gram(morgan_fingerprints(load_dataset("esol").smiles))
    >>> gram.shape
    torch.Size([1128, 1128])
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    ProcessPoolExecutor,
    as_completed,
    wait,
)
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ax_chaining.checks import check_bool, check_int, type_error
from ax_chaining.io import write_atomic
from ax_chaining.kernels.fingerprints import PackedFingerprints, pack_bits

__all__ = [
    "FeaturizedLibrary",
    "featurize_library",
    "morgan_fingerprints",
    "parse_smiles",
    "smiles_sha256",
    "tanimoto_gram",
]


def _rdkit_modules():
    try:
        from rdkit import Chem, RDLogger
        from rdkit.Chem import rdFingerprintGenerator
    except ImportError as e:  # pragma: no cover - exercised only without rdkit
        raise ImportError(
            "Morgan fingerprints need rdkit, which is not installed; install it "
            "with `pip install 'ax-chaining[chem]'` (or `pip install rdkit`)."
        ) from e
    return Chem, RDLogger, rdFingerprintGenerator


def morgan_fingerprints(
    smiles: Sequence[str], radius: int = 2, n_bits: int = 2048
) -> Tensor:
    """Binary Morgan (ECFP-like) fingerprints of molecules, computed with rdkit.

    Args:
        smiles: SMILES strings.
        radius: Morgan radius (2 gives ECFP4-like fingerprints).
        n_bits: Fingerprint length (folded).

    Returns:
        A ``len(smiles) x n_bits`` ``torch.uint8`` tensor of 0/1.

    Raises:
        ValueError: Empty input, a negative ``radius``, a non-positive
            ``n_bits``, or a SMILES string rdkit cannot parse (its index is
            given).
        TypeError: ``smiles`` is a str, or ``radius`` / ``n_bits`` not an int.
        ImportError: rdkit is not installed.
    """
    if isinstance(smiles, str):
        raise type_error("smiles", "a sequence of SMILES strings", smiles)
    smiles = list(smiles)
    if not smiles:
        raise ValueError("`smiles` is empty.")
    radius = check_int("radius", radius, 0)
    n_bits = check_int("n_bits", n_bits, 1)
    Chem, RDLogger, rdFingerprintGenerator = _rdkit_modules()
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)
    out = torch.zeros(len(smiles), n_bits, dtype=torch.uint8)
    # rdkit prints parse errors to stderr; the ValueError below says it instead.
    RDLogger.DisableLog("rdApp.*")
    try:
        for i, s in enumerate(smiles):
            mol, reason = _parse(Chem, s)
            if mol is None:
                raise ValueError(
                    f"`smiles[{i}]` = {s!r} is not a valid SMILES ({reason})."
                )
            out[i] = torch.from_numpy(generator.GetFingerprintAsNumPy(mol).copy())
    finally:
        RDLogger.EnableLog("rdApp.*")
    return out


def tanimoto_gram(fingerprints: Tensor, other: Tensor | None = None) -> Tensor:
    r"""Tanimoto similarity of binary fingerprints.

    :math:`k(a, b) = \langle a, b\rangle / (|a| + |b| - \langle a, b\rangle)`,
    with :math:`k(a, b) = 1` when both are all zeros.

    Args:
        fingerprints: ``n x m`` binary tensor (bool or integer 0/1).
        other: Optional ``p x m`` binary tensor; default ``fingerprints``.

    Returns:
        ``n x p`` float64 matrix (symmetric PSD with unit diagonal when
        ``other`` is None).

    Raises:
        ValueError: Not 2-D, mismatched widths, or entries other than 0 and 1.
    """
    a = _binary("fingerprints", fingerprints)
    b = a if other is None else _binary("other", other)
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"`fingerprints` has {a.shape[1]} bits but `other` has {b.shape[1]}."
        )
    inter = a @ b.T
    union = a.sum(-1, keepdim=True) + b.sum(-1) - inter
    # Exact integer counts in float64 (m < 2^53), so equal rows give exactly 1.
    return torch.where(union > 0, inter / union.clamp_min(1), torch.ones_like(inter))


def _binary(arg: str, x: Tensor) -> Tensor:
    if not isinstance(x, Tensor):
        raise type_error(arg, "a torch.Tensor", x)
    if x.dim() != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(
            f"`{arg}` must be a non-empty 2-D tensor, got {tuple(x.shape)}."
        )
    x = x.to(torch.float64)
    if not bool(((x == 0) | (x == 1)).all()):
        raise ValueError(f"`{arg}` must hold only 0 and 1.")
    return x


_MANIFEST = "manifest.json"
# Workers only run rdkit and numpy, so forking is safe where it exists (as
# torch's DataLoader does) and needs no `if __name__ == "__main__":` guard.
_START_METHOD = "fork" if sys.platform == "linux" else "spawn"
_CACHE_FORMAT = "ax_chaining.featurize_library"
# What a cache is made of: another value means another library.
_PARAMETERS = ("fingerprint", "radius", "n_bits", "num_inputs", "input_sha256")


@dataclass(frozen=True)
class FeaturizedLibrary:
    r"""Morgan fingerprints of a SMILES library, as cached by :func:`featurize_library`.

    Library row ``i`` is input row ``rows[i]``; the input rows that are not in
    the library are listed in ``skipped`` with the reason.

    Attributes:
        fingerprints: The packed bits of the valid molecules (memory-mapped).
        rows: ``int64`` array, the input row of each library row (increasing).
        skipped: A table with columns ``input_row``, ``smiles`` and ``reason``
            (one row per invalid input, empty if none).
        path: The cache directory.
        radius: Morgan radius.
        n_bits: Fingerprint width.
        num_inputs: Number of input SMILES.
    """

    fingerprints: PackedFingerprints
    rows: np.ndarray
    skipped: pd.DataFrame
    path: Path
    radius: int
    n_bits: int
    num_inputs: int

    def __len__(self) -> int:
        return len(self.fingerprints)

    @classmethod
    def open(cls, path: str | os.PathLike) -> FeaturizedLibrary:
        r"""Open a finished cache without its input (nothing is recomputed).

        Raises:
            ValueError: ``path`` is not a finished featurization cache.
        """
        path = Path(path)
        manifest = _read_manifest(path)
        if manifest is None or not manifest.get("complete"):
            state = "unfinished" if manifest else "not a featurization cache"
            raise ValueError(
                f"`path` {str(path)!r} is {state}; expected a directory finished by "
                "featurize_library (run it again with the same input to complete it)."
            )
        skipped = pd.read_csv(
            path / "skipped.csv",
            dtype={"input_row": np.int64, "smiles": str, "reason": str},
            keep_default_na=False,
        )
        return cls(
            fingerprints=PackedFingerprints.open(path / "fingerprints.npy"),
            rows=np.load(path / "rows.npy", mmap_mode="r"),
            skipped=skipped,
            path=path,
            radius=manifest["radius"],
            n_bits=manifest["n_bits"],
            num_inputs=manifest["num_inputs"],
        )


def featurize_library(
    smiles: Sequence[str] | str | os.PathLike,
    path: str | os.PathLike,
    radius: int = 2,
    n_bits: int = 2048,
    workers: int | None = None,
    progress: bool = True,
    chunk_size: int = 10_000,
    column: str | None = None,
    callback: Callable[[int, int], None] | None = None,
) -> FeaturizedLibrary:
    r"""Morgan fingerprints of a SMILES library, computed once into a cache.

    The input is cut into chunks of ``chunk_size`` SMILES, featurized in
    ``workers`` processes (rdkit; a ``tqdm`` bar shows progress) and written
    straight into a memory-mapped file of packed bits; each finished chunk is
    recorded, so an interrupted run continues from the chunks it finished (with
    the chunk size it started with). At the end the valid rows are kept, in
    input order, as a :class:`~ax_chaining.kernels.PackedFingerprints` in
    ``path/fingerprints.npy``. A finished cache is reopened without
    recomputation when called again with the same input and parameters; a
    cache made from another input or with other parameters is refused.

    Invalid SMILES (rdkit cannot parse or sanitize them, empty strings,
    non-strings) are skipped, never silently: a warning gives their number and
    the first one, and the result lists them all with rdkit's reason
    (:attr:`FeaturizedLibrary.skipped`) and maps library rows back to input rows
    (:attr:`FeaturizedLibrary.rows`). The bits equal those of
    :func:`morgan_fingerprints` for the valid molecules.

    Args:
        smiles: SMILES strings, or the path of a ``.csv`` / ``.csv.gz`` file.
        path: The cache directory (created; must be new, empty or a cache).
        radius: Morgan radius (2 gives ECFP4-like fingerprints).
        n_bits: Fingerprint length (folded).
        workers: Processes; default the CPUs available. 1 runs in this process.
            Workers are forked on Linux and spawned elsewhere (call it from
            under ``if __name__ == "__main__":`` in a script there).
        progress: Show a ``tqdm`` progress bar (molecules).
        chunk_size: SMILES per chunk (the unit of resumption).
        column: The file's SMILES column; default the one named ``smiles``
            (any case), or the only column.
        callback: Called as ``callback(chunks_done, chunks_total)`` after each
            chunk is recorded, e.g. to report progress elsewhere; an exception
            it raises stops the run (resumable).

    Returns:
        The :class:`FeaturizedLibrary` read from the cache.

    Example:
        >>> library = featurize_library("train.csv.gz", "cache/moses")
        >>> spec = fingerprint_kernel_surrogate_spec(library.fingerprints)
    """
    radius = check_int("radius", radius, 0)
    n_bits = check_int("n_bits", n_bits, 1)
    chunk_size = check_int("chunk_size", chunk_size, 1)
    workers = (
        _default_workers() if workers is None else check_int("workers", workers, 1)
    )
    progress = check_bool("progress", progress)
    if callback is not None and not callable(callback):
        raise type_error("callback", "a callable or None", callback)
    if not isinstance(path, str | os.PathLike):
        raise type_error("path", "a str or os.PathLike", path)
    path = Path(path)
    items = _read_smiles(smiles, column)
    _rdkit_modules()  # a clear ImportError before any work
    from rdkit import __version__ as rdkit_version

    wanted = {
        "fingerprint": "morgan",
        "radius": radius,
        "n_bits": n_bits,
        "num_inputs": len(items),
        "input_sha256": smiles_sha256(items),
    }
    manifest = _read_manifest(path)
    if manifest is None:
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise ValueError(
                f"`path` {str(path)!r} exists and is not a featurization cache (no "
                f"{_MANIFEST}); expected a new or empty directory."
            )
        manifest = {
            "format": _CACHE_FORMAT,
            "version": 1,
            **wanted,
            "chunk_size": chunk_size,
            "rdkit": rdkit_version,
            "complete": False,
        }
        _write_json(path / _MANIFEST, manifest)
    else:
        _check_manifest(path, manifest, wanted, rdkit_version)
    if not manifest["complete"]:
        _run_chunks(path, items, manifest, workers, progress, callback)
        _assemble(path, manifest)
    result = FeaturizedLibrary.open(path)
    if len(result.skipped):
        first = result.skipped.iloc[0]
        warnings.warn(
            f"featurize_library skipped {len(result.skipped)} of {len(items)} SMILES "
            f"as invalid (listed in `.skipped`); the first is input row "
            f"{first.input_row}, {first.smiles!r}: {first.reason}.",
            stacklevel=2,
        )
    return result


def _parse(Chem: Any, s: Any) -> tuple[Any, str]:
    r"""(molecule, "") for a valid SMILES, else (None, why)."""
    if not isinstance(s, str):
        return None, f"not a string but {type(s).__name__}"
    if not s.strip():
        return None, "empty SMILES"
    mol = Chem.MolFromSmiles(s)
    if mol is not None:
        return (mol, "") if mol.GetNumAtoms() else (None, "no atoms")
    # Ask again step by step for the reason rdkit only logs.
    raw = Chem.MolFromSmiles(s, sanitize=False)
    if raw is None:
        return None, "rdkit cannot parse it (SMILES syntax)"
    try:
        Chem.SanitizeMol(raw)
    except Exception as e:  # rdkit's sanitization errors have no common base
        return None, f"rdkit sanitization failed: {e}"
    return None, "rdkit returned no molecule"  # pragma: no cover


def parse_smiles(smiles: Any) -> tuple[Any, str]:
    """``(molecule, "")`` for a SMILES rdkit parses and sanitizes, else
    ``(None, reason)`` (syntax, sanitization, empty, not a string).

    Raises:
        ImportError: rdkit is not installed (with how to install it).

    Example:
        >>> parse_smiles("C1CC")[1]
        'rdkit cannot parse it (SMILES syntax)'
    """
    Chem, RDLogger, _ = _rdkit_modules()
    RDLogger.DisableLog("rdApp.*")  # the reason is returned instead
    try:
        return _parse(Chem, smiles)
    finally:
        RDLogger.EnableLog("rdApp.*")


def _default_workers() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)  # pragma: no cover


def _read_smiles(smiles: Any, column: str | None) -> list[Any]:
    if isinstance(smiles, str | os.PathLike):
        file = Path(smiles)
        if not file.is_file():
            raise ValueError(
                f"`smiles` is the str {str(smiles)[:60]!r}, which is no file; "
                "expected a sequence of SMILES strings or the path of a .csv / "
                ".csv.gz file."
            )
        table = pd.read_csv(file, dtype=str, keep_default_na=False)
        names = list(table.columns)
        if column is None:
            found = [c for c in names if c.lower() == "smiles"]
            if len(found) != 1 and len(names) != 1:
                raise ValueError(
                    f"`column` must name the SMILES column of {file.name} (no single "
                    f"column is called 'smiles'), got None; columns: {names}."
                )
            column = found[0] if len(found) == 1 else names[0]
        elif column not in names:
            raise ValueError(
                f"`column` must be a column of {file.name}, got {column!r}; "
                f"columns: {names}."
            )
        items = table[column].tolist()
    elif isinstance(smiles, bytes) or not isinstance(smiles, Iterable):
        raise type_error("smiles", "a sequence of SMILES or a file path", smiles)
    else:
        items = list(smiles)
    if not items:
        raise ValueError("`smiles` is empty; expected at least one SMILES.")
    return items


def smiles_sha256(items: Sequence[Any]) -> str:
    """SHA-256 (hex) of a SMILES list: its length and its entries, in order.

    What a cache made from the list records, to recognize the same library
    (:func:`featurize_library`, :func:`ax_chaining.descriptors.molecule_features`).

    Example:
        >>> smiles_sha256(["CCO", "CCN"]) == smiles_sha256(["CCN", "CCO"])
        False
    """
    digest = hashlib.sha256(f"{len(items)}\n".encode())
    text = "\n".join(s if isinstance(s, str) else repr(s) for s in items)
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _read_manifest(path: Path) -> dict[str, Any] | None:
    file = path / _MANIFEST
    if not file.is_file():
        return None
    manifest = json.loads(file.read_text())
    if manifest.get("format") != _CACHE_FORMAT:
        raise ValueError(
            f"`path` {str(path)!r} holds a {_MANIFEST} that is not a featurization "
            f"cache's (format {manifest.get('format')!r})."
        )
    return manifest


def _check_manifest(
    path: Path, manifest: dict[str, Any], wanted: dict[str, Any], rdkit: str
) -> None:
    differ = [k for k in _PARAMETERS if manifest.get(k) != wanted[k]]
    if differ:
        got = ", ".join(
            f"{k}={wanted[k]!r} (cache: {manifest.get(k)!r})"
            if k != "input_sha256"
            else "another input (its SMILES differ)"
            for k in differ
        )
        raise ValueError(
            f"`path` {str(path)!r} is a featurization cache made with other "
            f"parameters or input: {got}. Expected the same; use another path, or "
            "delete this cache to recompute it."
        )
    if manifest.get("rdkit") != rdkit:
        if not manifest["complete"]:
            raise ValueError(
                f"`path` {str(path)!r} is an unfinished cache started with rdkit "
                f"{manifest.get('rdkit')}, but this is rdkit {rdkit}: fingerprints "
                "of both would be mixed. Delete it, or finish it with that rdkit."
            )
        warnings.warn(
            f"The featurization cache {str(path)!r} was made with rdkit "
            f"{manifest.get('rdkit')} (this is {rdkit}).",
            stacklevel=3,
        )


def _write_json(file: Path, data: Any) -> None:
    write_atomic(file, lambda fh: json.dump(data, fh), binary=False)


def _chunk_file(path: Path, chunk: int) -> Path:
    return path / "chunks" / f"{chunk:07d}.json"


def _run_chunks(
    path: Path,
    items: list[Any],
    manifest: dict[str, Any],
    workers: int,
    progress: bool,
    callback: Callable[[int, int], None] | None,
) -> None:
    r"""Featurize the chunks not yet recorded, writing into ``path/work.npy``."""
    work = path / "work.npy"
    size = manifest["chunk_size"]
    starts = range(0, len(items), size)
    if not work.exists():
        shutil.rmtree(path / "chunks", ignore_errors=True)  # marks without bits
        PackedFingerprints.allocate(work, len(items), manifest["n_bits"])
    (path / "chunks").mkdir(exist_ok=True)
    todo = [k for k in range(len(starts)) if not _chunk_file(path, k).exists()]
    done = len(starts) - len(todo)
    tasks = (
        (
            str(work),
            str(_chunk_file(path, k)),
            starts[k],
            items[starts[k] : starts[k] + size],
            manifest["radius"],
            manifest["n_bits"],
        )
        for k in todo
    )
    remaining = sum(min(size, len(items) - starts[k]) for k in todo)
    bar = _progress_bar(progress, len(items), len(items) - remaining)

    def finished(rows: int) -> None:
        nonlocal done
        done += 1
        if bar is not None:
            bar.update(rows)
        if callback is not None:
            callback(done, len(starts))

    try:
        if workers == 1 or len(todo) <= 1:
            for task in tasks:
                finished(_featurize_chunk(task))
            return
        context = multiprocessing.get_context(_START_METHOD)
        with ProcessPoolExecutor(min(workers, len(todo)), mp_context=context) as pool:
            running: set[Future[int]] = set()
            try:
                for task in tasks:
                    if len(running) >= 2 * workers:  # bounded queue of chunks
                        ready, running = wait(running, return_when=FIRST_COMPLETED)
                        for future in ready:
                            finished(future.result())
                    running.add(pool.submit(_featurize_chunk, task))
                for future in as_completed(running):
                    finished(future.result())
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    finally:
        if bar is not None:
            bar.close()


def _progress_bar(progress: bool, total: int, initial: int) -> Any:
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        warnings.warn("tqdm is not installed: no progress bar.", stacklevel=4)
        return None
    return tqdm(total=total, initial=initial, unit="mol", desc="featurize")


def _featurize_chunk(task: tuple[str, str, int, list[Any], int, int]) -> int:
    r"""Featurize one chunk into the work file, then record it (in a worker)."""
    work, marker, start, smiles, radius, n_bits = task
    Chem, RDLogger, rdFingerprintGenerator = _rdkit_modules()
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)
    bits = np.zeros((len(smiles), n_bits), dtype=np.uint8)
    skipped = []
    RDLogger.DisableLog("rdApp.*")  # reasons are recorded instead
    try:
        for j, s in enumerate(smiles):
            mol, reason = _parse(Chem, s)
            if mol is None:
                text = s if isinstance(s, str) else repr(s)
                skipped.append([start + j, text, reason])
            else:
                bits[j] = generator.GetFingerprintAsNumPy(mol)
    finally:
        RDLogger.EnableLog("rdApp.*")
    words = np.load(work, mmap_mode="r+")
    words[start : start + len(smiles)] = pack_bits(bits)
    words.flush()
    del words
    # Recorded only once its bits are written: a chunk without a record is redone.
    _write_json(Path(marker), {"start": start, "rows": len(smiles), "skipped": skipped})
    return len(smiles)


def _assemble(path: Path, manifest: dict[str, Any]) -> None:
    r"""Keep the valid rows of the work file as the library; mark it complete."""
    records = sorted((path / "chunks").glob("*.json"))
    skipped = [row for f in records for row in json.loads(f.read_text())["skipped"]]
    num_inputs = manifest["num_inputs"]
    valid = np.ones(num_inputs, dtype=bool)
    valid[np.array([row[0] for row in skipped], dtype=np.int64)] = False
    rows = np.flatnonzero(valid)
    if rows.size == 0:
        raise ValueError(
            f"`smiles` has no valid SMILES: all {num_inputs} were skipped; the first "
            f"is {skipped[0][1]!r}: {skipped[0][2]}."
        )
    work = path / "work.npy"
    final = path / "fingerprints.npy"
    if rows.size == num_inputs:
        os.replace(work.with_suffix(".json"), final.with_suffix(".json"))
        os.replace(work, final)
    else:
        source = np.load(work, mmap_mode="r")
        out = PackedFingerprints.allocate(final, rows.size, manifest["n_bits"])
        at = 0
        for b0 in range(0, num_inputs, 1 << 16):
            block = source[b0 : b0 + (1 << 16)][valid[b0 : b0 + (1 << 16)]]
            out[at : at + block.shape[0]] = block
            at += block.shape[0]
        out.flush()
        del out, source
    write_atomic(path / "rows.npy", lambda fh: np.save(fh, rows), binary=True)
    table = pd.DataFrame(skipped, columns=["input_row", "smiles", "reason"])
    write_atomic(path / "skipped.csv", lambda fh: table.to_csv(fh, index=False), False)
    _write_json(
        path / _MANIFEST, {**manifest, "complete": True, "rows": int(rows.size)}
    )
    for file in (work, work.with_suffix(".json")):
        file.unlink(missing_ok=True)
    shutil.rmtree(path / "chunks", ignore_errors=True)
