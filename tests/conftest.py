"""Shared fixtures and helpers for the test suite."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# Hypothesis draws the same examples on every run by default ("fixed",
# derandomized, no example database), so `make test` and CI agree and a first
# run cannot fail on a new draw. Developers hunting for failures pick "random"
# (as many examples, new ones each run, failures kept in .hypothesis/):
# HYPOTHESIS_PROFILE=random make test, or pytest --hypothesis-profile=random
# (add --hypothesis-seed=N to replay a draw).
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("fixed", max_examples=40, derandomize=True, **_COMMON)
settings.register_profile("random", max_examples=40, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


# Many small GP fits and solves: one thread each is faster than two fighting
# over two cores (pytest-xdist already runs one worker per core).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed_torch():
    torch.manual_seed(0)
    yield


@pytest.fixture
def summary_from_packed(tmp_path):
    """Check the packed-record path of a benchmark command end to end.

    The returned function packs the finished working directory ``work`` of
    ``kind`` (twice: the same bytes), remakes its summary from the packed file
    with ``argv + --records FILE --summary-only`` (twice: the same bytes), and
    checks that the tables and the JSON fields ``keys`` equal those of the
    summary written in ``work``. It returns the packed file.
    """
    import json

    from benchmarks.__main__ import main

    def check(kind, work, argv, keys):
        packed = tmp_path / f"{kind}.jsonl.gz"
        assert main(["pack", kind, str(work), str(packed)]) == 0
        first = packed.read_bytes()
        assert main(["pack", kind, str(work), str(packed)]) == 0
        assert packed.read_bytes() == first
        remade = tmp_path / f"{kind}_from_packed"
        args = [*argv, "--records", str(packed), "--summary-only", "--out", str(remade)]
        made = []
        for _ in range(2):
            assert main(args) == 0
            made.append(
                [(remade / n).read_bytes() for n in ("summary.md", "summary.json")]
            )
        assert made[0] == made[1]

        def table(path):  # summary.md without its command line
            return path.read_text().split("```\n\n", 1)[1]

        assert table(remade / "summary.md") == table(work / "summary.md")
        again = json.loads((remade / "summary.json").read_text())
        before = json.loads((work / "summary.json").read_text())
        for key in keys:
            assert again[key] == before[key], key
        assert "wall_seconds_this_call" not in again
        return packed

    return check
