"""The speed benchmark's small preset, end to end (fresh processes per row)."""

from __future__ import annotations

import json

from benchmarks import speed


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
