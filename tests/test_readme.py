"""The README's BoTorch quick start runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_snippet_runs(capsys):
    text = README.read_text()
    section = text.split("## Quick start (BoTorch)")[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102
    acqf = namespace["acqf"]
    assert acqf.chaining.num_levels >= 1
    assert namespace["x_next"].shape == (1, 2)
    assert torch.isfinite(acqf.regret_bound(namespace["x_next"])).all()
    assert "|T_i|" in capsys.readouterr().out
