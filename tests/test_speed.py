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
