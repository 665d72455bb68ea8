"""The documentation site builds in strict mode, and its API pages document every
public name of ``ax_chaining.__all__``.

The site is built once (``mkdocs build --strict``, tutorials rendered from their
committed outputs, nothing executed) into a temporary folder. mkdocstrings gives
each documented object a heading whose ``id`` is its path, so a name is on the
API pages when ``id="<defining module>.<name>"`` is.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ax_chaining

ROOT = Path(__file__).resolve().parents[1]


def defining_module(name: str) -> str:
    """The module whose page documents ``ax_chaining.<name>``.

    Classes and functions carry their module (names the package exports lazily
    included); a module-level constant such as ``DEFAULT_MEMORY_BUDGET`` does
    not, so it is found where a top-level assignment of it is written.
    """
    value = getattr(ax_chaining, name)
    module = getattr(value, "__module__", None)
    if isinstance(module, str) and module.startswith("ax_chaining."):
        return module
    for path in sorted((ROOT / "ax_chaining").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                parts = path.relative_to(ROOT).with_suffix("").parts
                dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                if getattr(importlib.import_module(dotted), name, None) is value:
                    return dotted
    raise AssertionError(f"no module of ax_chaining defines {name}")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    log = "\n".join(
        line for line in proc.stderr.splitlines() if not line.startswith("INFO")
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{log[-6000:]}"
    return out


def test_defining_module_of_constants_and_lazy_names():
    assert defining_module("DEFAULT_MEMORY_BUDGET") == "ax_chaining.distances"
    assert defining_module("PrecomputedKernel") == "ax_chaining.kernels.precomputed"
    assert defining_module("best_certificate") == "ax_chaining.ax.certificates"


def test_api_pages_document_every_public_name(site: Path):
    anchors: set[str] = set()
    for page in (site / "api").rglob("*.html"):
        anchors.update(re.findall(r'id="(ax_chaining\.[^"]+)"', page.read_text()))
    expected = {f"{defining_module(n)}.{n}" for n in ax_chaining.__all__}
    missing = sorted(expected - anchors)
    assert not missing, f"public names without an API entry: {missing}"


def test_math_is_served_from_the_site_itself(site: Path):
    """No page loads MathJax (or KaTeX) from a CDN: formulas render offline,
    from the copy the build adds, with MathJax's license beside it."""
    local = site / "javascripts" / "mathjax"
    assert (local / "tex-svg.js").stat().st_size > 1_000_000
    assert "Apache License" in (local / "LICENSE").read_text()
    remote = re.compile(r"<script[^>]*src=\"(?:https?:)?//[^\"]*", re.I)
    math = re.compile(r"mathjax|katex|tex-mml|tex-svg|tex-chtml", re.I)
    pages = list(site.rglob("*.html"))
    found = {
        str(p.relative_to(site)): url
        for p in pages
        for url in remote.findall(p.read_text())
        if math.search(url)
    }
    assert not found, f"math from a CDN: {found}"
    index = (site / "index.html").read_text()
    assert 'src="javascripts/mathjax/tex-svg.js"' in index
