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
