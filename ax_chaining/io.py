"""Atomic file writes (the molecule caches, the benchmarks' run records)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["write_atomic"]


def write_atomic(path: Path, write: Callable[[IO[Any]], None], binary: bool) -> None:
    """Write ``path`` (its folder created if needed) through ``write(file)`` into
    a temporary file, then rename it: an interrupted write leaves no truncated file.

    Example:
        >>> write_atomic(Path("out.txt"), lambda fh: fh.write("done"), binary=False)
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f"{path.name}.{secrets.token_hex(8)}.tmp"
    # O_EXCL: never another writer's file; the umask applies as for open().
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
