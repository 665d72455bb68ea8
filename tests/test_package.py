"""Package-level promises: public names, and an engine that needs torch alone."""

from __future__ import annotations

import subprocess
import sys

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


def _module_imports() -> dict[str, set[str]]:
    """Module -> the ax_chaining modules it imports at module level."""
    import ast
    import pkgutil

    graph: dict[str, set[str]] = {}
    root = ax_chaining.__path__
    names = ["ax_chaining"] + [
        m.name for m in pkgutil.walk_packages(root, prefix="ax_chaining.")
    ]
    modules = set(names)
    for name in names:
        spec = __import__("importlib").util.find_spec(name)
        tree = ast.parse(open(spec.origin).read())
        found: set[str] = set()
        for node in tree.body:  # module level only: function-level imports are lazy
            if isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                found.add(base)
                found |= {f"{base}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def test_no_import_circle():
    graph = _module_imports()
    assert len(graph) > 15  # every module was found
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError(" -> ".join([*path, node, nxt]))
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def test_engine_floors_import_no_botorch_layer():
    graph = _module_imports()
    engine = {"ax_chaining.checks", "ax_chaining.covers", "ax_chaining.distances"}
    engine |= {"ax_chaining.chaining", "ax_chaining.certificate"}
    for module in engine:
        assert graph[module] <= engine, (module, graph[module] - engine)
