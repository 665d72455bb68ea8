"""The speed benchmark's small preset, end to end (fresh processes per row)."""

from __future__ import annotations

import json

import pytest

from benchmarks import speed


@pytest.mark.slow
def test_speed_small_preset_end_to_end(capsys, tmp_path):
    assert speed.main(["--small"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["method"], r["q"]) for r in lines] == [
        ("ucb", 1),
        ("chaining", 1),
        ("chaining", 5),
        ("chaining", 5),
    ]
    assert [r.get("pending_covers") for r in lines] == [None, None, "rebuild", "reuse"]
    for row in lines:
        assert row["n"] == 500 and row["bench"] == "step"
        assert row["median_s"] > 0 and row["peak_rss_mb"] >= row["baseline_rss_mb"]
        assert row["ratio_to_ucb"] == row["median_s"] / lines[0]["median_s"]
    assert lines[1]["path"] == "dense" and lines[1]["cover"] == "greedy"
    path = tmp_path / "step.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in lines))
    table = speed.table([str(path)])
    assert table.count("\n") == 2 + len(lines) - 1
    assert "| 500 | 5 | ChainingUCB | dense / greedy, pending: reuse |" in table


def test_floor_pass_keeps_only_self_pairs_and_reports_ratios(capsys, tmp_path):
    """``--floor``: the every-pair-once pass at a radius below every distance
    keeps each candidate's own pair only (float64), and each ratio is its
    seconds over the UCB step's from the same line; the table shows them."""
    assert speed.main(["--floor", "--sizes", "200", "--repeats", "1"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["bench"] == "floor" and row["n"] == 200
    assert row["floor_edges"] == 200
    # float32 may put a few distinct pairs at d^2 <= 0, never fewer than N.
    assert row["floor32_edges"] >= 200
    for key in ("step", "floor", "floor32"):
        assert row[f"{key}_ratio"] == row[f"{key}_s"] / row["ucb_s"]
    path = tmp_path / "floor.jsonl"
    path.write_text(json.dumps(row))
    table = speed.table([str(path)])
    assert table.count("\n") == 2
    assert f"| 200 | {row['ucb_s']:.3g} | {row['step_s']:.3g} |" in table


def test_feature_table_problem_is_the_default_molecule_models_gp(capsys, tmp_path):
    """``--kernel features``: one step over items with a 12-column table, the
    row labelled as a feature table with its dimension, and the GP the default
    molecule model's (ARD Matern-5/2 under CHEN's output scale)."""
    from gpytorch.kernels import MaternKernel, ScaleKernel

    from ax_chaining.kernels import FeatureTableKernel

    model, C = speed._problem(300, 20, 0, kernel="features", dims=12)
    kernel = model.covar_module
    assert type(kernel) is FeatureTableKernel and kernel.features.shape == (300, 12)
    assert type(kernel.base_kernel) is ScaleKernel
    assert type(kernel.base_kernel.base_kernel) is MaternKernel
    assert kernel.base_kernel.base_kernel.lengthscale.shape == (1, 12)
    assert C.shape == (300, 1) and model.train_inputs[0].shape == (20, 1)
    features = kernel.features
    assert float(features.min()) > 0 and float(features.max()) < 1
    argv = ["--sizes", "300", "--q", "1", "--repeats", "1", "--kernel", "features"]
    assert speed.main([*argv, "--dims", "12"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["method"], r["kernel"], r["dims"]) for r in lines] == [
        ("ucb", "features", 12),
        ("chaining", "features", 12),
    ]
    path = tmp_path / "features.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in lines))
    table = speed.table([str(path)])
    assert "| 300 | 1 | ChainingUCB, feature table | dense / greedy |" in table


def test_certificate_timings_report_the_certificate_they_timed(capsys, tmp_path):
    """``--certificate``: one line per size whose bounds are the plain
    certificates of that problem, computed here again (the combined bound is
    at most ``certify_model``'s union bound), its ratio from its own seconds,
    and the table shows it."""
    from ax_chaining import ChainingUCB
    from ax_chaining.certificate import CertificateOptions, certify_model

    argv = ["--certificate", "--sizes", "400", "--repeats", "1", "--label", "here"]
    assert speed.main(argv) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["bench"] == "certificate" and row["engine"] == "here"
    model, C = speed._problem(400, 50, 0)
    none = CertificateOptions(calibration="none")
    cert = ChainingUCB(model, C).certificate(options=none)
    union = certify_model(model, C, options=none)
    assert row["bound"] == float(cert.bound) and row["rank_bound"] == cert.rank_bound
    assert row["model_bound"] == float(union.bound)
    assert row["bound"] <= row["model_bound"] + 1e-12
    assert row["certificate_ratio_to_step"] == row["certificate_s"] / row["step_s"]
    path = tmp_path / "certificate.jsonl"
    path.write_text(json.dumps(row))
    table = speed.table([str(path)])
    assert table.count("\n") == 2
    assert f"| 400 | here | CPU | {row['ucb_s']:.3g} | {row['step_s']:.3g} |" in table
