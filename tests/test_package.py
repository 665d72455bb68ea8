"""Package-level promises: public names, and an engine that needs torch alone."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import ax_chaining


def test_public_names_resolve():
    for name in ax_chaining.__all__:
        assert getattr(ax_chaining, name) is not None, name
    assert sorted(dir(ax_chaining)) == sorted(ax_chaining.__all__)


def test_engine_imports_torch_alone():
    # Block BoTorch, GPyTorch and Ax: the engine must import and run without them.
    code = """
import sys
for blocked in ("botorch", "gpytorch", "ax", "linear_operator"):
    sys.modules[blocked] = None
import torch
from ax_chaining import DenseDistance, chaining_covers, greedy_cover
cov = torch.eye(3, dtype=torch.float64)
print(chaining_covers(DenseDistance(cov), t=2).cover_sizes.tolist())
print(greedy_cover(torch.zeros(2, 2), 1.0).tolist())
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[3]", "[0]"]


def test_core_and_ax_layer_import_without_dask():
    # The distributed extra is optional: with Dask blocked, the package, the
    # engine, the BoTorch and Ax layers import and run; only
    # ax_chaining.distributed refuses, naming the extra.
    code = """
import sys
for blocked in ("dask", "distributed"):
    sys.modules[blocked] = None
import torch
import ax_chaining
import ax_chaining.ax
from ax_chaining import ChainingUCB, DenseDistance, chaining_covers
print(chaining_covers(DenseDistance(torch.eye(2, dtype=torch.float64)), t=2).n)
print(any(m.split(".")[0] in ("dask", "distributed") for m in sys.modules
          if sys.modules[m] is not None))
try:
    import ax_chaining.distributed
except ImportError as e:
    print("ax-chaining[distributed]" in str(e))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "False", "True"]


def _imported(node, package: str):
    """The modules an ``import`` or ``from ... import`` node names (and, for a
    ``from``, the submodules it may import), absolute."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    base = node.module or ""
    if node.level:  # relative: resolved against the importing package
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(p for p in [*parts, base] if p)
    return {base} | {f"{base}.{a.name}" for a in node.names}


def _walk_imports(node, package: str):
    """Every import under ``node``: module level, in functions and classes,
    in ``try`` blocks; not under ``if TYPE_CHECKING:`` (never run)."""
    for child in ast.iter_child_nodes(node):
        run = [child]
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            run = child.orelse  # only the else branch runs
        for statement in run:
            if isinstance(statement, ast.Import | ast.ImportFrom):
                yield from _imported(statement, package)
            yield from _walk_imports(statement, package)


def _module_imports(root: Path | None = None) -> dict[str, set[str]]:
    """Module -> the ax_chaining modules it imports, at module level or inside
    a function (run later, but a circle through it is still a circle: each
    side then needs the other, and which loads first decides what breaks)."""
    root = Path(ax_chaining.__path__[0] if root is None else root)
    # The files themselves (pkgutil would import the subpackages it walks).
    found_modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = ["ax_chaining", *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found_modules[".".join(parts)] = path
    modules = set(found_modules)
    graph: dict[str, set[str]] = {}
    for name, path in found_modules.items():
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found = set(_walk_imports(tree, package))
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports in ``graph`` (its modules in order), or None."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path, node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, node])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])):
            return found
    return None


def test_no_import_circle():
    graph = _module_imports()
    assert len(graph) > 15  # every module was found
    # Function-level imports are followed: the Ax strategy of the sharded
    # candidates is imported inside a method.
    assert "ax_chaining.distributed.ax" in graph["ax_chaining.distributed.candidates"]
    circle = _circle(graph)
    assert circle is None, " -> ".join(circle)


def test_import_walk_finds_a_circle_through_a_function(tmp_path):
    # A package where a imports b at module level and b imports a inside a
    # function: the walk reports the circle.
    pkg = tmp_path / "ax_chaining"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from ax_chaining.b import g\n")
    (pkg / "b.py").write_text(
        "def g():\n    from ax_chaining.a import g as f\n    return f\n"
    )
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from ax_chaining import a\nelse:\n    import ax_chaining.b\n"
    )
    graph = _module_imports(pkg)
    assert graph["ax_chaining.c"] == {"ax_chaining.b"}  # TYPE_CHECKING never runs
    assert _circle(graph) == ["ax_chaining.a", "ax_chaining.b", "ax_chaining.a"]


def test_engine_floors_import_no_botorch_layer():
    graph = _module_imports()
    engine = {"ax_chaining.checks", "ax_chaining.covers", "ax_chaining.distances"}
    engine |= {"ax_chaining.chaining", "ax_chaining.certificate"}
    engine |= {"ax_chaining.level_graph"}  # the level-graph builders
    for module in engine:
        assert graph[module] <= engine, (module, graph[module] - engine)


def _source_copy(dest: Path) -> Path:
    """The checkout's files (what a release is built from), without the
    virtual environment, caches and build outputs."""
    import shutil

    root = Path(__file__).resolve().parents[1]
    skip = shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "build", "dist", "site", "results", "logs"
    )

    def ignore(folder: str, names: list[str]) -> set[str]:
        hidden = (
            {n for n in names if n.startswith(".")} if folder == str(root) else set()
        )
        return hidden | set(skip(folder, names))

    shutil.copytree(root, dest, ignore=ignore)
    return dest


def test_wheel_holds_the_package_and_its_data_only(tmp_path):
    """The wheel a release ships: the package with py.typed and the vendored
    data, no benchmark code or command line (argparse, matplotlib), no result
    records. Built offline from a copy of the checkout with this environment's
    setuptools (pip wheel --no-build-isolation)."""
    import zipfile

    source = _source_copy(tmp_path / "src")
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps"]
        + ["--no-build-isolation", "--no-index", "-q", "-w", str(tmp_path / "w")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "w").glob("ax_chaining-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"ax_chaining", wheel.name.split("-py")[0] + ".dist-info"}
    assert "ax_chaining/py.typed" in names
    data = Path(ax_chaining.__path__[0]) / "benchmark" / "data"
    csvs = {f"ax_chaining/benchmark/data/{p.name}" for p in data.glob("*.csv")}
    assert len(csvs) == 3 and csvs <= set(names)
    assert not [n for n in names if n.endswith((".jsonl", ".jsonl.gz", ".png"))]
    archive = zipfile.ZipFile(wheel)
    for name in (n for n in names if n.endswith(".py")):
        tree = ast.parse(archive.read(name))
        roots = {m.split(".")[0] for m in _walk_imports(tree, "ax_chaining")}
        assert not roots & {"argparse", "matplotlib", "benchmarks"}, name
