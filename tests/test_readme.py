"""The README's quick starts run as written, it renders on the package index
with no relative link, and the documentation paths it names exist."""

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


def test_documentation_paths_named_in_the_readme_exist():
    # The README names the documentation by its paths (it is the package's
    # long description, where relative links would break).
    paths = re.findall(r"`((?:docs|tutorials)/[^`\s]*)`", README.read_text())
    assert len(paths) >= 10, "the README points into the docs"
    missing = [p for p in paths if not (README.parent / p).exists()]
    assert not missing, f"README names missing files: {missing}"


def test_readme_renders_as_the_package_index_shows_it_with_no_relative_link():
    from readme_renderer.markdown import render

    html = render(README.read_text(), variant="GFM")
    assert html is not None and ">Quick start (Ax)<" in html
    urls = re.findall(r"""(?:href|src)=["']([^"']*)["']""", html)
    assert urls, "the rendered README has links"
    relative = [u for u in urls if not re.match(r"https?://|#|mailto:", u)]
    assert not relative, f"relative links and images break on the index: {relative}"


def test_readme_stays_short():
    assert len(README.read_text().encode()) <= 6_000  # 6 KB: read in minutes
