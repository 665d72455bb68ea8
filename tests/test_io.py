"""`ax_chaining.io.write_atomic`: what a reader of the file can rely on."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from ax_chaining.io import write_atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_written_file_has_the_permissions_open_would_give(
    tmp_path: Path, umask: int
) -> None:
    """Caches and records on a shared file system must be readable by the
    group and others where the umask allows it, as a file made by open() is,
    not owner-only as a tempfile.mkstemp file is."""
    previous = os.umask(umask)
    try:
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
        written = tmp_path / "sub" / "written.txt"
        write_atomic(written, lambda fh: fh.write("x"), binary=False)
    finally:
        os.umask(previous)
    assert _mode(written) == _mode(plain) == 0o666 & ~umask


def test_content_lands_and_a_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "records.bin"
    write_atomic(path, lambda fh: fh.write(b"\x00\x01first"), binary=True)
    assert path.read_bytes() == b"\x00\x01first"

    def fails(fh) -> None:
        fh.write(b"half")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        write_atomic(path, fails, binary=True)
    assert path.read_bytes() == b"\x00\x01first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.bin"]
