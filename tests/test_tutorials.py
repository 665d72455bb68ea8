"""Execute every tutorial notebook top to bottom (small sizes) with nbclient.

The kernel is this interpreter (``sys.executable``), through a kernel spec written
to a temporary directory, so the test does not depend on which ``python`` is on
``PATH`` or on an installed ``python3`` kernel spec.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

TUTORIALS = Path(__file__).resolve().parent.parent / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("*.ipynb"))
KERNEL_NAME = "ax-chaining-test-python"
# A guard against a hung cell, not a speed test: a notebook's minutes at the
# small size vary several times between an idle and a busy machine, so only a
# cell that runs this long (far beyond any measured run) fails the test.
CELL_TIMEOUT_SECONDS = 1800

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory) -> Path:
    kernels = tmp_path_factory.mktemp("kernels")
    spec = kernels / KERNEL_NAME
    spec.mkdir()
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f"]
                + ["{connection_file}"],
                "display_name": "Python (ax_chaining tests)",
                "language": "python",
            }
        )
    )
    return kernels


def test_notebooks_are_committed_with_figures():
    """Every tutorial is stored executed, with at least one rendered figure."""
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.get("execution_count") for c in code), (
            f"{path.name} has unexecuted cells; run `make notebooks`."
        )
        images = [
            o
            for c in code
            for o in c.get("outputs", [])
            if "image/png" in o.get("data", {})
        ]
        assert images, f"{path.name} holds no rendered figure; run `make notebooks`."


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, kernel_dir: Path, tmp_path, monkeypatch):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    # The kernel inherits this environment.
    monkeypatch.setenv("AX_CHAINING_TUTORIAL_SMALL", "1")
    monkeypatch.setenv("AX_CHAINING_TUTORIAL_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("AX_CHAINING_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(TUTORIALS.parent))  # the benchmarks/ runners
    nb = nbformat.read(path, as_version=4)
    # Notebooks are committed with their outputs (rendered on the repository
    # page); the test re-executes them from cleared cells at the small size.
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    ksm = KernelSpecManager(kernel_dirs=[str(kernel_dir)], ensure_native_kernel=False)
    km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm)
    client = nbclient.NotebookClient(
        nb,
        km=km,
        kernel_name=KERNEL_NAME,
        timeout=CELL_TIMEOUT_SECONDS,
        allow_errors=False,
        resources={"metadata": {"path": str(TUTORIALS)}},
    )
    client.execute()  # raises CellExecutionError on the first failing cell
