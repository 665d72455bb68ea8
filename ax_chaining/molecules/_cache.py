"""The manifest of a cache directory, shared by the molecule caches
(:func:`~ax_chaining.molecules.molecule_features`,
:func:`~ax_chaining.molecules.featurize_library`)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from ax_chaining.io import write_atomic

MANIFEST = "manifest.json"


def read_manifest(
    path: Path, fmt: str, what: str, own: tuple[str, ...] = ()
) -> dict[str, Any] | None:
    """The manifest of the ``fmt`` cache at ``path``, or None for a new
    directory, or one holding only files named ``own*`` (an unfinished write,
    to redo). Anything else is refused, naming ``what`` the cache is."""
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
    """Refuse a cache made from another library or with other options; warn
    of a finished one made with another rdkit (an unfinished one is refused:
    its parts would mix two versions)."""
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
