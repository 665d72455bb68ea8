"""The README's quick starts run as written, and its relative links resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def _snippet(heading: str) -> str:
    section = README.read_text().split(heading)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_quick_start_snippet_runs(capsys):
    code = _snippet("## Quick start (BoTorch)")
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102
    acqf = namespace["acqf"]
    assert acqf.chaining.num_levels >= 1
    assert namespace["x_next"].shape == (1, 2)
    assert torch.isfinite(acqf.regret_bound(namespace["x_next"])).all()
    assert "|T_i|" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::Warning")
def test_ax_quick_start_snippet_runs(capsys):
    # As written, with 12 trials instead of 20 (10 initial, then 2 model-based
    # steps per strategy) to keep the test short.
    code = _snippet("## Quick start (Ax)")
    assert "num_trials=20" in code
    code = code.replace("num_trials=20", "num_trials=12")
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})  # noqa: S102
    printed = re.findall(r"^\{.*\}$", capsys.readouterr().out, re.M)
    assert len(printed) == 2  # the best point of each strategy
    assert all("'x':" in line and "'y':" in line for line in printed)


def test_relative_links_resolve():
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert local, "the README links into the docs"
    missing = [t for t in local if not (README.parent / t).exists()]
    assert not missing, f"README links to missing files: {missing}"
