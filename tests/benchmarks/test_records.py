"""Run records: packed files, working directories, shared statistics, and the
committed summaries remade from the committed records."""

from __future__ import annotations

import gzip
import json
import math
import os
import shlex
from pathlib import Path

import numpy as np
import pytest

from benchmarks._tables import check_names, mean_se, num, paired, parse_names
from benchmarks.records import (
    LAYOUTS,
    layout,
    load_records,
    pack,
    packed_bytes,
    read_packed,
    run_resumable,
    unpack,
    write_json,
    write_packed,
)

ROOT = Path(__file__).resolve().parents[2]


def _records() -> list[dict]:
    return [
        {"problem": p, "method": m, "seed": s, "trace": [s + 0.5, 1 / 3], "z": None}
        for p in ("b", "a")
        for m in ("y", "x")
        for s in (10, 2)
    ]


def _by_run(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: (r["problem"], r["method"], r["seed"]))


# ------------------------------------------------------------- statistics


def test_mean_se_by_hand():
    mean, se = mean_se([1.0, 2.0, 3.0, 4.0])
    # Sample variance 5/3, so se = sqrt(5/3 / 4).
    assert (mean, se) == (2.5, pytest.approx(math.sqrt(5 / 12)))
    assert isinstance(mean, float) and isinstance(se, float)
    assert mean_se([7.0]) == (7.0, 0.0)
    assert all(math.isnan(v) for v in mean_se([]))
    means, ses = mean_se([[1.0, 10.0], [3.0, 10.0]])  # per column
    np.testing.assert_allclose(means, [2.0, 10.0])
    np.testing.assert_allclose(ses, [1.0, 0.0])


def test_num_by_hand():
    """Fixed point; scientific where fixed point would print 0 or more than six
    integer digits; '-' for nothing."""
    assert num(1.23456) == "1.235" and num(0.0) == "0.000"
    assert num(0.0004) == "4.0e-04" and num(1.5e-62) == "1.5e-62"
    assert num(999_999.0) == "999999.000" and num(1.24e61) == "1.2e+61"
    assert num(-2.0, sign=True) == "-2.000" and num(math.inf) == "inf"
    assert num(None) == "-" and num(float("nan")) == "-"


def test_paired_by_hand():
    p = paired([1.0, 2.0, 3.0], [2.0, 2.0, 1.0], higher_is_better=True)
    # Differences -1, 0, 2: one win (2), one tie, one loss.
    assert p["mean"] == pytest.approx(1 / 3)
    assert p["se"] == pytest.approx(math.sqrt(7 / 3 / 3))
    assert (p["wins"], p["ties"], p["losses"], p["n"]) == (1, 1, 1, 3)
    q = paired([1.0, 2.0, 3.0], [2.0, 2.0, 1.0], higher_is_better=False)
    assert (q["wins"], q["ties"], q["losses"]) == (1, 1, 1)
    assert paired([0.0], [1e-13], higher_is_better=False)["ties"] == 1
    with pytest.raises(ValueError, match="differ in length: 2 vs 1"):
        paired([1.0, 2.0], [1.0], higher_is_better=True)


def test_name_checks():
    assert check_names(["b", "a", "b"], ("a", "b"), "problem") == ["b", "a"]
    with pytest.raises(ValueError, match=r"unknown problem\(s\) \['c'\]; choose"):
        check_names(["a", "c"], ("a", "b"), "problem")
    with pytest.raises(ValueError, match=r"unknown method\(s\) \[\]"):
        check_names([], ("a",), "method")
    assert parse_names("all", ("a", "b"), "x") == ["a", "b"]
    assert parse_names(" b, a ", ("a", "b"), "x") == ["b", "a"]
    with pytest.raises(SystemExit, match="error: unknown x"):
        parse_names("a,zz", ("a", "b"), "x")


# ------------------------------------------------------------- packed files


def test_packed_bytes_depend_on_the_records_alone(tmp_path):
    records = _records()
    data = packed_bytes(records, "harness")
    assert packed_bytes(list(reversed(records)), "harness") == data
    # No file name or time in the gzip header: a later write, same bytes.
    assert data[4:8] == b"\0\0\0\0"
    lines = gzip.decompress(data).decode().splitlines()
    names = [(r["problem"], r["method"], r["seed"]) for r in map(json.loads, lines)]
    assert names == sorted(names) and names[0] == ("a", "x", 2)
    assert lines[0] == (
        '{"method":"x","problem":"a","seed":2,"trace":[2.5,0.3333333333333333],'
        '"z":null}'
    )
    path = tmp_path / "r.jsonl.gz"
    assert write_packed(records, path, "harness") == len(records)
    assert path.read_bytes() == data
    assert _by_run(read_packed(path)) == _by_run(records)


def test_packed_file_errors(tmp_path):
    records = _records()
    with pytest.raises(ValueError, match="two records name the same harness run"):
        packed_bytes([*records, records[0]], "harness")
    with pytest.raises(ValueError, match=r"lacks the fields \['dataset'\]"):
        packed_bytes(records, "molecules")
    with pytest.raises(ValueError, match="kind must be one of paper, harness"):
        layout("speed")
    with pytest.raises(FileNotFoundError, match="records file '.*nope.jsonl.gz'"):
        read_packed(tmp_path / "nope.jsonl.gz")
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(gzip.compress(b'{"a": 1}\n[1, 2]\n'))
    with pytest.raises(ValueError, match="line 2: expected a JSON object, got list"):
        read_packed(bad)


def _pid_record(problem: str, method: str, seed: int) -> dict:
    return {"problem": problem, "method": method, "seed": seed, "pid": os.getpid()}


def test_fresh_process_runs_each_task_in_its_own_process(tmp_path):
    # Two tasks are enough: each fresh process imports torch, BoTorch and Ax.
    tasks = [("p", "m", s) for s in range(2)]
    kwargs = {"force": False, "progress": False, "desc": "x"}
    records = run_resumable(
        tasks, tmp_path, "validity", {}, _pid_record, fresh_process=True, **kwargs
    )
    pids = {r["pid"] for r in records}
    assert len(pids) == 2 and os.getpid() not in pids
    # Without it, one process (this one) runs them all.
    again = run_resumable(tasks, tmp_path / "b", "validity", {}, _pid_record, **kwargs)
    assert {r["pid"] for r in again} == {os.getpid()}


def test_layouts_name_their_files():
    assert LAYOUTS["paper"].path("w", "se", "gp-ucb", 7) == Path(
        "w/se/gp-ucb/run007.json"
    )
    assert LAYOUTS["harness"].pattern == "runs/*/*/seed_*.json"
    assert LAYOUTS["certificate"].pattern == "*/run*.json"
    with pytest.raises(ValueError, match="named by .'problem', 'seed'.; got 3"):
        LAYOUTS["certificate"].path("w", "se", "x", 1)


def test_pack_unpack_round_trip(tmp_path):
    work = tmp_path / "work"
    records = _records()
    lay = LAYOUTS["harness"]
    for r in records:
        write_json(r, lay.path(work, r["problem"], r["method"], r["seed"]))
    write_json({"rows": []}, work / "summary.json")  # not a run: not packed
    packed = tmp_path / "h.jsonl.gz"
    assert pack("harness", work, packed) == len(records)
    assert packed.read_bytes() == packed_bytes(records, "harness")

    again = tmp_path / "again"
    assert unpack("harness", packed, again) == len(records)
    assert _by_run(load_records(again, "harness")) == _by_run(records)
    assert unpack("harness", packed, again) == 0  # the same records: left alone
    # A file holding another record of the same run is not overwritten.
    path = lay.path(again, "a", "x", 2)
    write_json({"problem": "a", "method": "x", "seed": 2, "other": 1}, path)
    with pytest.raises(ValueError, match="holds another record of the run"):
        unpack("harness", packed, again)

    with pytest.raises(ValueError, match="no harness run found"):
        pack("harness", tmp_path / "empty", packed)
    lay.path(work, "a", "x", 3).write_text('{"truncated": ')
    with pytest.raises(ValueError, match="seed_3.json is not a readable record"):
        pack("harness", work, packed)


def test_cli_pack_errors(tmp_path):
    from benchmarks.__main__ import main

    with pytest.raises(SystemExit, match="error: no molecules run found"):
        main(["pack", "molecules", str(tmp_path), str(tmp_path / "m.jsonl.gz")])
    with pytest.raises(SystemExit, match="error: records file"):
        main(["unpack", "molecules", str(tmp_path / "none.gz"), str(tmp_path)])
    with pytest.raises(SystemExit, match="error: --records: records file"):
        main(["harness", "--summary-only", "--records", str(tmp_path / "x.gz")])
    with pytest.raises(SystemExit, match="read by --summary-only, which was not"):
        main(["harness", "--records", str(tmp_path / "x.gz"), "--out", str(tmp_path)])


# ------------------------------------------- the committed summaries and records


@pytest.mark.slow
@pytest.mark.parametrize(
    "benchmark",
    [
        "harness",
        "harness_bonus",
        "molecules",
        "reactions",
        "paper_n2000",
        "paper_n10000",
        "validity",
        "validity_init5",
        "validity_baybe_priors",
        "validity_baybe_model",
        "validity_rdkit2d_chen",
        "validity_protocol",
        "validity_protocol_init5",
        "validity_audit",
        "screening",
        "screening_default",
        "stopping",
        "stopping/prb-t",
        "stopping/prb-widened",
    ],
)
def test_committed_summary_is_remade_from_the_committed_records(
    benchmark, tmp_path, monkeypatch
):
    """The command stored in each committed summary remakes it, byte for byte,
    from the committed packed records alone."""
    from benchmarks.__main__ import main

    committed = ROOT / "docs" / "results" / benchmark
    command = json.loads((committed / "summary.json").read_text())["command"]
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "benchmarks"]
    argv = argv[3:]
    records = argv[argv.index("--records") + 1]
    name = benchmark.split("/")[0]
    assert records == f"benchmarks/results/{name}.jsonl.gz"
    assert argv[argv.index("--out") + 1] == f"docs/results/{benchmark}"
    # Same relative paths in an empty directory: only the records are there.
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    for path in argv:
        if path.startswith("benchmarks/results/"):
            (tmp_path / path).symlink_to(ROOT / path)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    for name in ("summary.md", "summary.json"):
        made = (tmp_path / "docs" / "results" / benchmark / name).read_bytes()
        assert made == (committed / name).read_bytes(), name
    for png in committed.glob("*.png"):
        assert (tmp_path / "docs" / "results" / benchmark / png.name).stat().st_size


@pytest.mark.parametrize(
    ("module", "lines", "page"),
    [
        (
            "limit",
            "docs/results/certificate/limit.jsonl",
            "docs/results/certificate.md",
        ),
        ("bonus", "docs/results/molecules/bonus.jsonl", "docs/results/molecules.md"),
        (
            "bonus",
            "docs/results/molecules/bonus_esol_default.jsonl",
            "docs/results/molecules.md",
        ),
        (
            "distributed_bench",
            "docs/results/distributed/steps.jsonl",
            "docs/results/distributed.md",
        ),
        (
            "speed",
            "docs/results/speed/step_tanimoto_moses.jsonl",
            "docs/results/speed.md",
        ),
        (
            "speed",
            "docs/results/speed/step_tanimoto_moses_r3.jsonl",
            "docs/results/speed.md",
        ),
        ("speed", "docs/results/speed/step_se_1e4.jsonl", "docs/results/speed.md"),
        ("speed", "docs/results/speed/rewrite.jsonl", "docs/results/speed.md"),
        ("speed", "docs/results/speed/floor_se_1e4.jsonl", "docs/results/speed.md"),
        (
            "speed",
            "docs/results/speed/step_low_rank_pool.jsonl",
            "docs/results/speed.md",
        ),
        (
            "tails_bench",
            "docs/results/certificate/tails.jsonl",
            "docs/results/certificate.md",
        ),
        ("ax_storage", "docs/results/ax_storage.jsonl", "docs/results/speed.md"),
        ("speed", "docs/results/speed/gpu_h200_se.jsonl", "docs/results/speed.md"),
        (
            "speed",
            "docs/results/speed/gpu_h200_tanimoto.jsonl",
            "docs/results/speed.md",
        ),
        (
            "speed",
            "docs/results/speed/gpu_h200_features.jsonl",
            "docs/results/speed.md",
        ),
        (
            "speed",
            "docs/results/speed/gpu_h200_features_before.jsonl",
            "docs/results/speed.md",
        ),
        (
            "speed",
            "docs/results/speed/cpu_time_features.jsonl",
            "docs/results/speed.md",
        ),
        (
            "speed",
            "docs/results/speed/gpu_h200_certificate.jsonl",
            "docs/results/speed.md",
        ),
        ("speed", "docs/results/speed/cpu_certificate.jsonl", "docs/results/speed.md"),
        ("speed", "docs/results/speed/cpu_union_solver.jsonl", "docs/results/speed.md"),
        (
            "kernel_rows",
            "docs/results/speed/tanimoto_routes.jsonl",
            "docs/results/speed.md",
        ),
    ],
)
def test_tables_in_the_docs_are_remade_from_their_committed_lines(
    module: str, lines: str, page: str
) -> None:
    """A table shown in a docs page is what its ``--table`` command prints from
    the committed JSON lines, not an edited copy."""
    import importlib

    table = importlib.import_module(f"benchmarks.{module}").table([str(ROOT / lines)])
    assert table.count("\n") >= 3
    assert table in (ROOT / page).read_text()


def test_certificate_scaling_table_is_remade_from_its_committed_lines() -> None:
    """The certificate results page's union-against-chaining table (two files of
    ``--scaling`` lines, sparse and dense domains) is what ``table`` prints."""
    from benchmarks.certificate_bench import table

    lines = ROOT / "docs" / "results" / "certificate"
    made = table([str(lines / "scaling.jsonl"), str(lines / "scaling_dense.jsonl")])
    assert made.count("\n") == 7  # header, rule, 3 sizes x 2 domains
    assert made in (ROOT / "docs" / "results" / "certificate.md").read_text()


@pytest.mark.parametrize(
    ("benchmark", "page"),
    [
        ("harness", "harness"),
        ("harness_bonus", "harness"),
        ("molecules", "molecules"),
        ("reactions", "reactions"),
        ("paper_n2000", "paper-n2000"),
        ("paper_n10000", "paper-n10000"),
        ("validity", "validity"),
        ("validity_init5", "validity"),
        ("validity_baybe_priors", "validity"),
        ("validity_baybe_model", "validity"),
        ("validity_rdkit2d_chen", "validity"),
        ("validity_protocol", "validity"),
        ("validity_protocol_init5", "validity"),
        ("validity_audit", "validity"),
        ("screening", "screening"),
        ("screening_default", "screening"),
    ],
)
def test_results_pages_show_the_committed_summary_tables(benchmark, page) -> None:
    """Every table of a committed summary is in its results page verbatim, so
    a page cannot drift from the records it cites."""
    summary = (ROOT / "docs" / "results" / benchmark / "summary.md").read_text()
    tables = [b for b in summary.split("\n\n") if b.startswith("|")]
    assert tables
    text = (ROOT / "docs" / "results" / f"{page}.md").read_text()
    for t in tables:
        assert t in text, t.splitlines()[0]
