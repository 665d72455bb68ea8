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


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` names, absolute (a relative one is
    resolved against the importing package)."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    parts = parts[: len(parts) - node.level + 1]
    return ".".join(p for p in [*parts, node.module or ""] if p)


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> set[str]:
    """The modules an ``import`` or ``from ... import`` node names (and, for a
    ``from``, the submodules it may import), absolute."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    base = _absolute(node, package)
    return {base} | {f"{base}.{a.name}" for a in node.names}


def _walk_imports(tree: ast.AST, package: str):
    """Every import statement under ``tree``, wherever it stands: module level,
    in functions and classes, in ``try`` blocks, under ``if TYPE_CHECKING:``
    (never run, but a type checker and a reader follow it as a dependency)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield from _imported(node, package)


def _modules(root: Path | None = None) -> dict[str, Path]:
    """Module name -> file, for every module of the package under ``root``
    (the files themselves: pkgutil would import the subpackages it walks)."""
    root = Path(ax_chaining.__path__[0] if root is None else root)
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = ["ax_chaining", *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def _module_imports(root: Path | None = None) -> dict[str, set[str]]:
    """Module -> the ax_chaining modules it imports: at module level, inside a
    function (run later, but a circle through it is still a circle: each side
    then needs the other, and which loads first decides what breaks) or under
    ``if TYPE_CHECKING:``."""
    found_modules = _modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in found_modules.items():
        tree = ast.parse(path.read_text())
        found = set(_walk_imports(tree, _package_of(name, path)))
        graph[name] = {m for m in found if m in found_modules and m != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of
    more than one module (Tarjan), each sorted, the list sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses(root: Path | None = None) -> list[str]:
    """Every use of another module's private name, as ``"importer: name"``.

    Private: a name starting with one underscore, imported with ``from
    ax_chaining.x import _name`` or read as an attribute ``x._name`` of an
    imported ax_chaining module, from any module but the one defining it (a
    sibling in the same package counts: a private helper has one user, its
    module). A private *module* (``distributed/_shard.py``) is its package's
    own: its package's modules import its public names; no module outside that
    package does.
    """
    found_modules = _modules(root)
    uses = []
    for name, path in found_modules.items():
        package = _package_of(name, path)
        tree = ast.parse(path.read_text())

        def outside(module: str, importer: str = name) -> bool:
            # `module` lies under a private module or package of which the
            # importer is not a part.
            parts = module.split(".")
            for i, part in enumerate(parts):
                owner = ".".join(parts[:i])
                if _private(part) and not (importer + ".").startswith(owner + "."):
                    return True
            return False

        aliases: dict[str, str] = {}  # local name -> ax_chaining module
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] != "ax_chaining":
                        continue
                    if outside(a.name):
                        uses.append(f"{name}: {a.name}")
                    local = a.asname or a.name.split(".")[0]
                    aliases[local] = a.name if a.asname else "ax_chaining"
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, package)
                if base.split(".")[0] != "ax_chaining":
                    continue
                for a in node.names:
                    full = f"{base}.{a.name}"
                    if full in found_modules:  # a submodule
                        aliases[a.asname or a.name] = full
                        if outside(full):
                            uses.append(f"{name}: {full}")
                    elif outside(base) or (_private(a.name) and base != name):
                        uses.append(f"{name}: {full}")
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            dotted = ast.unparse(node.value).split(".")
            if dotted[0] not in aliases:
                continue
            module = ".".join([aliases[dotted[0]], *dotted[1:]])
            full = f"{module}.{node.attr}"
            if (
                module in found_modules
                and module != name
                and (full not in found_modules or outside(full))
            ):
                uses.append(f"{name}: {full}")
    return sorted(set(uses))


def test_import_walk_covers_the_package():
    graph = _module_imports()
    assert len(graph) > 15  # every module was found


def test_no_import_circle():
    graph = _module_imports()
    circles = _circles(graph)
    assert not circles, "import circles:\n" + "\n".join(map(" <-> ".join, circles))


def test_no_private_name_across_modules():
    uses = _private_uses()
    assert not uses, "private names used across modules:\n" + "\n".join(uses)


def test_import_walk_finds_a_circle_through_a_function(tmp_path):
    # A package where a imports b at module level and b imports a inside a
    # function, and c and d import each other under TYPE_CHECKING and in a
    # relative import: the walk reports both circles.
    pkg = tmp_path / "ax_chaining"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from ax_chaining.b import g\n")
    (pkg / "b.py").write_text(
        "def g():\n    from ax_chaining.a import g as f\n    return f\n"
    )
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from ax_chaining import d\n"
    )
    (pkg / "d.py").write_text("from . import c\n")
    (pkg / "e.py").write_text("import ax_chaining.a\n")
    graph = _module_imports(pkg)
    assert graph["ax_chaining.c"] == {"ax_chaining", "ax_chaining.d"}
    assert graph["ax_chaining.e"] == {"ax_chaining.a"}
    assert _circles(graph) == [
        ["ax_chaining.a", "ax_chaining.b"],
        ["ax_chaining.c", "ax_chaining.d"],
    ]


def test_private_walk_finds_each_kind_of_use(tmp_path):
    pkg = tmp_path / "ax_chaining"
    (pkg / "sub").mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "sub" / "__init__.py"):
        init.write_text("")
    (pkg / "a.py").write_text("def _h():\n    return _h\n")
    (pkg / "sub" / "_impl.py").write_text("X = 1\n_Y = 2\n")
    # The sub-package's own modules may use its private module's public names.
    (pkg / "sub" / "ok.py").write_text(
        "from ax_chaining.sub._impl import X\nfrom . import _impl\nZ = _impl.X\n"
    )
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import ax_chaining.a as mod\n"
        "from ax_chaining import a\n"
        "if TYPE_CHECKING:\n"
        "    from ax_chaining.sub._impl import X\n"
        "def f():\n"
        "    from ax_chaining.a import _h\n"
        "    return _h, a._h, mod._h\n"
    )
    (pkg / "sub" / "sib.py").write_text("from ._impl import _Y\n")
    assert _private_uses(pkg) == [
        "ax_chaining.b: ax_chaining.a._h",
        "ax_chaining.b: ax_chaining.sub._impl.X",
        "ax_chaining.sub.sib: ax_chaining.sub._impl._Y",
    ]


def test_benchmark_scripts_shadow_no_library_module():
    # benchmarks/ (scripts, not installed) names no module as the library
    # does, so that `harness` or `certificate` means one thing.
    root = Path(__file__).resolve().parents[1] / "benchmarks"
    scripts = {p.stem for p in root.glob("*.py")} - {"__init__", "__main__"}
    library = {name.rsplit(".", 1)[-1] for name in _modules()}
    assert not scripts & library, scripts & library


def test_engine_floors_import_no_botorch_layer():
    graph = _module_imports()
    engine = {"ax_chaining.checks", "ax_chaining.covers", "ax_chaining.distances"}
    engine |= {"ax_chaining.chaining", "ax_chaining.certificate"}
    # The certificate's bounds and record; its BoTorch part (calibration) is
    # loaded by the package on first use of one of its names.
    torch_only = ("tails", "schedule", "bounds", "certify", "rank", "residuals")
    engine |= {f"ax_chaining.certificate.{m}" for m in torch_only}
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
    data = Path(ax_chaining.__path__[0]) / "test_functions" / "data"
    csvs = {
        f"ax_chaining/test_functions/data/{p.name}"
        for p in [*data.glob("*.csv"), *data.glob("*.csv.gz")]
    }
    assert len(csvs) == 5 and csvs <= set(names)
    assert not [n for n in names if n.endswith((".jsonl", ".jsonl.gz", ".png"))]
    archive = zipfile.ZipFile(wheel)
    for name in (n for n in names if n.endswith(".py")):
        tree = ast.parse(archive.read(name))
        roots = {m.split(".")[0] for m in _walk_imports(tree, "ax_chaining")}
        assert not roots & {"argparse", "matplotlib", "benchmarks"}, name
