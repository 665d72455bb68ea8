"""Atomic file writes: the caches of :mod:`ax_chaining.molecules` and
:mod:`ax_chaining.test_functions`, and the benchmarks' run records.

A floor of its own (the standard library only), so that the modules that write
files import it and nothing else of each other.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["write_atomic"]


def write_atomic(path: Path, write: Callable[[IO[Any]], None], binary: bool) -> None:
    """Write ``path`` through ``write(file)`` into a temporary file, then rename.

    An interrupted write never leaves a truncated file that a later run (cache
    load, resume) would trust: the rename is atomic within one directory. The
    file gets the permissions a plain ``open(path, "w")`` would give it (``0o666``
    less the process's umask), not ``tempfile.mkstemp``'s owner-only ``0o600``,
    so that caches and records shared on a cluster's file system stay readable.

    Args:
        path: Destination file; its folder is created if needed.
        write: Writes the content to the open file it is given.
        binary: Open the temporary file in binary mode.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f"{path.name}.{secrets.token_hex(8)}.tmp"
    # O_EXCL: a fresh name, never another writer's file; the kernel applies the
    # umask to 0o666 as it does for open().
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(tmp, flags, 0o666)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
