"""The models benchmark: closed-form leave-one-out, the small preset, the table."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms import Standardize
from gpytorch.kernels import MaternKernel, ScaleKernel

from benchmarks.models import format_table, loo_predictions, subset, summarize

DTYPE = torch.float64


def test_closed_form_loo_equals_refitting_without_each_point() -> None:
    """Each LOO prediction equals the posterior of the same GP (same
    hyperparameters, same outcome standardization) conditioned on the others."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(12, 2, generator=g, dtype=DTYPE)
    Y = (torch.sin(4 * X[:, :1]) + X[:, 1:]) * 3.0 + 5.0
    kernel = ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=2)).to(DTYPE)
    kernel.outputscale = 1.7
    kernel.base_kernel.lengthscale = torch.tensor([0.3, 0.6])
    model = SingleTaskGP(X, Y, covar_module=kernel, outcome_transform=Standardize(1))
    model.likelihood.noise = 0.05
    model.mean_module.constant.data.fill_(0.2)
    mean, var = loo_predictions(model)
    transform = model.outcome_transform
    for i in range(12):
        keep = torch.arange(12) != i
        # The same model-space GP on the other 11 standardized targets.
        other = SingleTaskGP(
            X[keep],
            model.train_targets[keep].unsqueeze(-1),
            covar_module=copy.deepcopy(kernel),
            likelihood=copy.deepcopy(model.likelihood),
            mean_module=copy.deepcopy(model.mean_module),
            outcome_transform=None,
        )
        other.eval()
        with torch.no_grad():
            post = other(X[i : i + 1])
            # Leave-one-out predicts the noisy observation: add the noise.
            expected_var = post.variance + model.likelihood.noise
        std = transform.stdvs.reshape(())
        assert float(mean[i]) == pytest.approx(
            float(post.mean) * float(std) + float(transform.means.reshape(())), abs=1e-9
        )
        assert float(var[i]) == pytest.approx(float(expected_var) * float(std) ** 2)


def test_subsets_are_seeded_and_nested() -> None:
    assert subset(100, 10, 3).tolist() == subset(100, 10, 3).tolist()
    assert subset(100, 10, 3).tolist() == subset(100, 40, 3)[:10].tolist()
    assert subset(100, 10, 3).tolist() != subset(100, 10, 4).tolist()


def test_table_by_hand() -> None:
    records = [
        {
            "dataset": "esol",
            "size": 50,
            "seed": s,
            "model": m,
            "dims": 10,
            "loo_ll": ll,
            "loo_rmse": 1.0,
            "loo_z2": 1.0,
            "fit_seconds": 1.0,
        }
        for s, (m, ll) in enumerate(
            [
                ("rdkit2d:botorch", -1.0),
                ("rdkit2d:botorch", -2.0),
                ("morgan_bits:botorch", -3.0),
                ("morgan_bits:botorch", -3.0),
            ]
        )
    ]
    rows = summarize(records)
    best = next(r for r in rows if r["model"] == "rdkit2d:botorch")
    assert best["loo_ll"] == -1.5 and best["seeds"] == 2
    assert best["loo_ll_se"] == pytest.approx(math.sqrt(0.5) / math.sqrt(2))
    text = format_table(rows)
    assert "| rdkit2d:botorch | 10 | -1.500 ± 0.500 |" in text
    assert text.index("| morgan_bits:botorch | 2.00 | 1 |") > text.index("Mean rank")


@pytest.mark.filterwarnings("ignore::Warning")
def test_small_preset_runs_resumes_and_tabulates(tmp_path: Path, capsys: Any) -> None:
    pytest.importorskip("rdkit")
    from benchmarks.models import main

    out = tmp_path / "loo.jsonl"
    argv = ["--small", "--out", str(out), "--cache", str(tmp_path / "cache")]
    assert main(argv) == 0
    lines = [json.loads(s) for s in out.read_text().splitlines()]
    assert [r["model"] for r in lines] == [
        "morgan_bits:botorch",
        "fragprints:baybe",
        "rdkit2d:botorch",
    ]
    for r in lines:
        assert r["size"] == 30 and math.isfinite(r["loo_ll"]) and r["loo_rmse"] > 0
    assert main(argv) == 0  # resumed: nothing left to run
    assert len(out.read_text().splitlines()) == 3
    from benchmarks.__main__ import main as benchmarks_main

    assert benchmarks_main(["models", "--table", str(out)]) == 0
    assert "### freesolv, 30 molecules" in (tmp_path / "summary.md").read_text()


def test_results_page_shows_the_table_of_the_committed_lines() -> None:
    """The results page's tables are what ``--table`` prints from the
    committed lines, not an edited copy."""
    from benchmarks.models import table

    root = Path(__file__).resolve().parents[2]
    made = table([str(root / "docs" / "results" / "models" / "loo.jsonl")])
    assert made.count("### ") == 7  # 3 libraries x 2 sizes, and the ranks
    assert made in (root / "docs" / "results" / "models.md").read_text()
