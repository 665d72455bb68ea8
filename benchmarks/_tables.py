"""Small statistics and formatting shared by the harness and molecule benchmarks."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ax_chaining.benchmark.io import write_atomic


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for a single value)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def paired(
    a: Sequence[float], b: Sequence[float], higher_is_better: bool, tol: float = 1e-12
) -> dict[str, Any]:
    """Mean ± SE of the run-by-run difference ``a - b``, and wins/ties/losses of a."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}.")
    diff = [x - y for x, y in zip(a, b, strict=True)]
    mean, se = mean_se(diff)
    sign = 1.0 if higher_is_better else -1.0
    wins = sum(1 for d in diff if sign * d > tol)
    losses = sum(1 for d in diff if sign * d < -tol)
    return {
        "mean": mean,
        "se": se,
        "wins": wins,
        "ties": len(diff) - wins - losses,
        "losses": losses,
        "n": len(diff),
    }


def num(x: float | None, digits: int = 3, sign: bool = False) -> str:
    """Fixed-point, or scientific when a non-zero value would print as 0."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    spec = "+" if sign else ""
    if x != 0 and abs(x) < 0.5 * 10.0**-digits:
        return f"{x:{spec}.1e}"
    return f"{x:{spec}.{digits}f}"


def pm(mean: float, se: float, digits: int = 3, sign: bool = False) -> str:
    return f"{num(mean, digits, sign)} ± {num(se, digits)}"


def write_json(obj: Any, path: Path) -> None:
    write_atomic(path, lambda fh: json.dump(obj, fh, indent=1), binary=False)


def load_json(path: Path) -> Any | None:
    """The JSON in ``path``, or None if it is missing or unreadable (rerun it)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def record_path(out: str | Path, name: str, method: str, seed: int) -> Path:
    """Where the record of ``(name, method, seed)`` is stored under ``out``."""
    return Path(out) / "runs" / name / method / f"seed_{seed}.json"


def load_records(out: str | Path) -> list[dict[str, Any]]:
    """Every record stored under ``out`` (any configuration)."""
    paths = sorted((Path(out) / "runs").glob("*/*/seed_*.json"))
    return [r for r in (load_json(p) for p in paths) if r is not None]


def common_seed_groups(
    records: Sequence[dict[str, Any]],
    field: str,
    names: Sequence[str],
    methods: Sequence[str],
) -> Iterator[tuple[str, list[str], list[int], dict[str, list[dict[str, Any]]]]]:
    """Per name (in ``names`` order, ``record[field]``): the methods present, the
    seeds present for every one of them, and each method's records for those
    seeds, so that table rows and paired differences use the same runs."""
    by: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for r in records:
        by.setdefault(r[field], {}).setdefault(r["method"], {})[r["seed"]] = r
    for name in [n for n in names if n in by]:
        present = [m for m in methods if m in by[name]]
        seeds = sorted(set.intersection(*(set(by[name][m]) for m in present)))
        if seeds:
            recs = {m: [by[name][m][s] for s in seeds] for m in present}
            yield name, present, seeds, recs


def check_names(names: Sequence[str], allowed: Sequence[str], what: str) -> None:
    """Refuse an empty selection or names outside ``allowed``."""
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise ValueError(
            f"unknown {what}(s) {bad or list(names)}; choose from {', '.join(allowed)}."
        )


def run_resumable(
    tasks: Sequence[tuple[str, str, int]],
    out: str | Path,
    key: Any,
    run: Callable[..., dict[str, Any]],
    *,
    force: bool,
    progress: bool,
    desc: str,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    jobs: int = 1,
) -> list[dict[str, Any]]:
    """Reuse every stored record of ``tasks`` made with ``key``; run the rest.

    Each new record is written (atomically) as soon as it is made, so an
    interrupted call loses at most the tasks in progress and the next call
    resumes there. With ``jobs > 1`` the tasks run in that many worker
    processes (one torch thread each); every task seeds itself, so the
    records do not depend on ``jobs``.

    Args:
        tasks: ``(name, method, seed)`` triples, in the order to run them.
        out: Output folder; records go to :func:`record_path`.
        key: The configuration a stored record must hold (``record["config"]``).
        run: Maps a task's three fields to its new record.
        force: Recompute records that exist.
        progress: Show a tqdm bar over the tasks to run.
        desc: Label of the bar.
        on_record: Called with each new record.
        jobs: Worker processes; ``run`` must then be picklable (a module-level
            function or a ``functools.partial`` of one).

    Returns:
        The records of every task, stored or new.
    """
    records: list[dict[str, Any]] = []
    todo = []
    for task in tasks:
        rec = None if force else load_json(record_path(out, *task))
        if rec is not None and rec.get("config") == key:
            records.append(rec)
        else:
            todo.append(task)
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=desc, unit="run")
    for task, rec in _run_tasks(run, todo, jobs, bar):
        write_json(rec, record_path(out, *task))
        records.append(rec)
        if on_record is not None:
            on_record(rec)
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    return records


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _run_tasks(
    run: Callable[..., dict[str, Any]],
    todo: Sequence[tuple[str, str, int]],
    jobs: int,
    bar: Any,
) -> Iterator[tuple[tuple[str, str, int], dict[str, Any]]]:
    """``(task, run(*task))`` in order (``jobs == 1``) or as they finish."""
    if jobs <= 1 or len(todo) <= 1:
        for task in todo:
            if bar is not None:
                bar.set_postfix_str("{} {} seed {}".format(*task))
            yield task, run(*task)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn: a fork of a process holding torch's thread pools can deadlock.
    with ProcessPoolExecutor(
        max_workers=min(jobs, len(todo)),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_one_thread,
    ) as pool:
        futures = {pool.submit(run, *task): task for task in todo}
        for future in as_completed(futures):
            yield futures[future], future.result()
