r"""A SMILES library of any size as packed Morgan fingerprints, computed once
into a memory-mapped :class:`~ax_chaining.kernels.PackedFingerprints`."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ax_chaining.checks import check_bool, check_int, type_error
from ax_chaining.io import write_atomic
from ax_chaining.kernels.fingerprints import PackedFingerprints, pack_bits
from ax_chaining.molecules.encodings import (
    MANIFEST,
    check_manifest,
    check_n_jobs,
    morgan_bits,
    parse_smiles,
    read_manifest,
    smiles_sha256,
    write_json,
)

__all__ = ["FeaturizedLibrary", "featurize_library"]

_FORMAT = "ax_chaining.featurize_library"
_WHAT = "featurization"


@dataclass(frozen=True)
class FeaturizedLibrary:
    """A :func:`featurize_library` cache: the valid molecules' ``fingerprints``,
    row ``i`` being input row ``rows[i]``; the invalid ones in ``skipped``
    (``input_row``, ``smiles``, ``reason``), and the parameters."""

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
        """Open a finished cache (``ValueError`` if ``path`` is not one)."""
        path = Path(path)
        manifest = read_manifest(path, _FORMAT, _WHAT)
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
    n_jobs: int | None = -1,
    progress: bool = True,
    chunk_size: int = 10_000,
    column: str | None = None,
    callback: Callable[[int, int], None] | None = None,
) -> FeaturizedLibrary:
    r"""Morgan fingerprints of a SMILES library, computed once into ``path``.

    ``n_jobs`` joblib workers featurize chunks of ``chunk_size`` SMILES into a
    memory-mapped file; an interrupted run resumes from the recorded chunks. The
    bits equal :func:`~ax_chaining.molecules.morgan_fingerprints`'. A finished
    cache is reopened; one of other inputs is refused. Invalid SMILES are
    skipped with a warning and listed with rdkit's reason.

    Args:
        smiles: SMILES strings, or a ``.csv`` / ``.csv.gz`` file whose
            ``column`` holds them (default: the one named ``smiles``, any
            case, or the only one).
        path: The cache directory (new, empty, or a cache).
        callback: ``callback(chunks_done, chunks_total)`` after each chunk.

    Example:
        >>> library = featurize_library("train.csv.gz", "cache/moses")
        >>> spec = fingerprint_kernel_surrogate_spec(library.fingerprints)
    """
    radius = check_int("radius", radius, 0)
    n_bits = check_int("n_bits", n_bits, 1)
    chunk_size = check_int("chunk_size", chunk_size, 1)
    n_jobs = check_n_jobs(n_jobs)
    progress = check_bool("progress", progress)
    if callback is not None and not callable(callback):
        raise type_error("callback", "a callable or None", callback)
    if not isinstance(path, str | os.PathLike):
        raise type_error("path", "a str or os.PathLike", path)
    path = Path(path)
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
    parse_smiles(["C"])  # a clear ImportError before any work
    from rdkit import __version__ as rdkit_version

    wanted = {
        "fingerprint": "morgan",
        "radius": radius,
        "n_bits": n_bits,
        "num_inputs": len(items),
        "input_sha256": smiles_sha256(items),
    }
    manifest = read_manifest(path, _FORMAT, _WHAT)
    if manifest is None:
        manifest = {"format": _FORMAT, "version": 1, **wanted}
        manifest.update(chunk_size=chunk_size, rdkit=rdkit_version, complete=False)
        write_json(path / MANIFEST, manifest)
    else:
        check_manifest(path, manifest, wanted, _WHAT)
    if not manifest["complete"]:
        from joblib import Parallel, delayed

        work, size = path / "work.npy", manifest["chunk_size"]
        starts = range(0, len(items), size)
        records = [path / "chunks" / f"{k:07d}.json" for k in range(len(starts))]
        if not work.exists():
            shutil.rmtree(path / "chunks", ignore_errors=True)  # records without bits
            PackedFingerprints.allocate(work, len(items), n_bits)
        (path / "chunks").mkdir(exist_ok=True)
        todo = [k for k in range(len(starts)) if not records[k].exists()]
        done = len(starts) - len(todo)
        tasks = (
            delayed(_featurize_chunk)(
                work,
                records[k],
                starts[k],
                items[starts[k] : starts[k] + size],
                radius,
                n_bits,
            )
            for k in todo
        )
        verbose = 10 if progress else 0
        run = Parallel(n_jobs, return_as="generator_unordered", verbose=verbose)
        for _ in run(tasks):
            done += 1
            if callback is not None:
                callback(done, len(starts))
        skipped = [row for f in records for row in json.loads(f.read_text())["skipped"]]
        valid = np.ones(len(items), dtype=bool)
        valid[np.array([row[0] for row in skipped], dtype=np.int64)] = False
        rows = np.flatnonzero(valid)
        if rows.size == 0:
            raise ValueError(
                f"`smiles` has no valid SMILES: all {len(items)} were skipped; the "
                f"first is {skipped[0][1]!r}: {skipped[0][2]}."
            )
        final = path / "fingerprints.npy"
        if rows.size == len(items):
            os.replace(work.with_suffix(".json"), final.with_suffix(".json"))
            os.replace(work, final)
        else:
            source = np.load(work, mmap_mode="r")
            out = PackedFingerprints.allocate(final, rows.size, n_bits)
            at, step = 0, 1 << 16
            for b0 in range(0, len(items), step):
                block = source[b0 : b0 + step][valid[b0 : b0 + step]]
                out[at : at + block.shape[0]] = block
                at += block.shape[0]
            out.flush()
            del out, source
        write_atomic(path / "rows.npy", lambda fh: np.save(fh, rows), binary=True)
        table = pd.DataFrame(skipped, columns=["input_row", "smiles", "reason"])
        write_atomic(
            path / "skipped.csv", lambda fh: table.to_csv(fh, index=False), False
        )
        manifest.update(complete=True, rows=int(rows.size))
        write_json(path / MANIFEST, manifest)
        for file in (work, work.with_suffix(".json")):
            file.unlink(missing_ok=True)
        shutil.rmtree(path / "chunks", ignore_errors=True)
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


def _featurize_chunk(
    work: Path, record: Path, start: int, smiles: list[Any], radius: int, n_bits: int
) -> int:
    """Featurize a chunk into the work file, then record it (in a worker)."""
    parsed = parse_smiles(smiles)
    bits = morgan_bits([mol for mol, _ in parsed], radius, n_bits)
    skipped = [
        [start + j, s if isinstance(s, str) else repr(s), reason]
        for j, (s, (mol, reason)) in enumerate(zip(smiles, parsed, strict=True))
        if mol is None
    ]
    words = np.load(work, mmap_mode="r+")
    words[start : start + len(smiles)] = pack_bits(bits)
    words.flush()
    del words
    # Recorded once its bits are written: a chunk without a record is redone.
    write_json(record, {"start": start, "rows": len(smiles), "skipped": skipped})
    return len(smiles)
