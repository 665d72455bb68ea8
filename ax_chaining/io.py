"""Atomic file writes: the caches of :mod:`ax_chaining.chem` and
:mod:`ax_chaining.test_functions`, and the benchmarks' run records.

A floor of its own (the standard library only), so that the modules that write
files import it and nothing else of each other.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["write_atomic"]


def write_atomic(path: Path, write: Callable[[IO[Any]], None], binary: bool) -> None:
    """Write ``path`` through ``write(file)`` into a temporary file, then rename.

    An interrupted write never leaves a truncated file that a later run (cache
    load, resume) would trust: the rename is atomic within one directory.

    Args:
        path: Destination file; its folder is created if needed.
        write: Writes the content to the open file it is given.
        binary: Open the temporary file in binary mode.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
