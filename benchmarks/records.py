"""Run records: per-run JSON files while a benchmark runs, one packed file after.

A runner writes one JSON file per run into a working directory (``--out``,
e.g. ``results/harness``; git ignores ``results/``), atomically and as soon as
the run is complete, so that an interrupted command resumes where it stopped.
What is committed is the packed file of a finished working directory,
``benchmarks/results/<benchmark>.jsonl.gz``: one JSON record per line, the same
content as the per-run files, sorted by the fields that name a run, with sorted
keys and a gzip header without name or time, so that packing the same records
twice gives the same bytes (with the same zlib). Summaries are made from either.

* :func:`pack` / :func:`unpack`: working directory to packed file and back (to
  extend a committed run, unpack it, run more, pack again).
* :func:`read_packed`, :func:`load_records`: the records of either form.
* :func:`run_resumable`: reuse the stored records of a task list, run the rest.
* :func:`write_summary`: ``summary.md`` and ``summary.json`` of a command.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ax_chaining.io import write_atomic

__all__ = [
    "LAYOUTS",
    "Layout",
    "command_line",
    "layout",
    "load_json",
    "load_records",
    "pack",
    "packed_bytes",
    "read_packed",
    "run_resumable",
    "stored_records",
    "unpack",
    "write_json",
    "write_packed",
    "write_summary",
]


@dataclass(frozen=True)
class Layout:
    """Where the runs of one benchmark live in a working directory.

    Attributes:
        key: The record fields that name a run, in the order of the packed file.
        template: The run's file under the working directory, formatted with
            those fields.
    """

    key: tuple[str, ...]
    template: str

    def path(self, out: str | Path, *values: Any) -> Path:
        """The file of the run named by ``values`` (in :attr:`key` order)."""
        if len(values) != len(self.key):
            raise ValueError(
                f"a run is named by {self.key}; got {len(values)} values {values!r}."
            )
        return Path(out) / self.template.format(
            **dict(zip(self.key, values, strict=True))
        )

    @property
    def pattern(self) -> str:
        """Glob of every run's file under a working directory."""
        return re.sub(r"\{[^}]*\}", "*", self.template)

    def name(self, record: dict[str, Any]) -> tuple[Any, ...]:
        """The fields of ``record`` that name its run."""
        missing = [k for k in self.key if k not in record]
        if missing:
            raise ValueError(
                f"a record lacks the fields {missing} that name a run "
                f"(expected {self.key}); it has {sorted(record)}."
            )
        return tuple(record[k] for k in self.key)


#: Benchmark kind -> layout of its working directory.
LAYOUTS: dict[str, Layout] = {
    "paper": Layout(
        ("problem", "method", "seed"), "{problem}/{method}/run{seed:03d}.json"
    ),
    "harness": Layout(
        ("problem", "method", "seed"), "runs/{problem}/{method}/seed_{seed}.json"
    ),
    "molecules": Layout(
        ("dataset", "method", "seed"), "runs/{dataset}/{method}/seed_{seed}.json"
    ),
    "reactions": Layout(
        ("dataset", "method", "seed"), "runs/{dataset}/{method}/seed_{seed}.json"
    ),
    "certificate": Layout(("problem", "seed"), "{problem}/run{seed:03d}.json"),
    "validity": Layout(
        ("problem", "method", "seed"), "{problem}/{method}/seed_{seed}.json"
    ),
    "screening": Layout(("size", "method", "seed"), "{size}/{method}/seed_{seed}.json"),
}


def layout(kind: str) -> Layout:
    """The :class:`Layout` of benchmark ``kind`` (a key of :data:`LAYOUTS`)."""
    try:
        return LAYOUTS[kind]
    except KeyError:
        raise ValueError(
            f"kind must be one of {', '.join(LAYOUTS)}; got {kind!r}."
        ) from None


# ---------------------------------------------------------------------------
# JSON files.
# ---------------------------------------------------------------------------


def write_json(obj: Any, path: Path) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    write_atomic(path, lambda fh: json.dump(obj, fh, indent=1), binary=False)


def load_json(path: Path) -> Any | None:
    """The JSON in ``path``, or None if it is missing or unreadable (rerun it)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def load_records(out: str | Path, kind: str) -> list[dict[str, Any]]:
    """Every readable record under the working directory ``out`` (any
    configuration), in file-name order."""
    paths = sorted(Path(out).glob(layout(kind).pattern))
    return [r for r in (load_json(p) for p in paths) if r is not None]


# ---------------------------------------------------------------------------
# Packed files.
# ---------------------------------------------------------------------------


def packed_bytes(records: Iterable[dict[str, Any]], kind: str) -> bytes:
    """The packed file of ``records``: gzipped JSON lines in run order.

    Sorted keys, run order and a header without file name or time (``mtime=0``)
    make the bytes a function of the records alone.

    Raises:
        ValueError: A record lacks the fields that name a run, or two records
            name the same run.
    """
    lay = layout(kind)
    named = sorted(((lay.name(r), r) for r in records), key=lambda x: x[0])
    for (a, _), (b, _) in zip(named, named[1:], strict=False):
        if a == b:
            raise ValueError(f"two records name the same {kind} run {a}.")
    text = "".join(
        json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for _, r in named
    )
    buffer = io.BytesIO()
    with gzip.GzipFile(
        filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0
    ) as fh:
        fh.write(text.encode())
    return buffer.getvalue()


def write_packed(records: Iterable[dict[str, Any]], path: str | Path, kind: str) -> int:
    """Write the packed file of ``records`` (atomically); returns their number."""
    data = packed_bytes(records, kind)
    write_atomic(Path(path), lambda fh: fh.write(data), binary=True)
    return len(read_packed(path))


def read_packed(path: str | Path) -> list[dict[str, Any]]:
    """The records of a packed file, in its order.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: A line is not a JSON object.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"records file {str(path)!r} not found; expected a packed file such "
            "as benchmarks/results/harness.jsonl.gz."
        )
    records = []
    with gzip.open(path, "rt") as fh:
        for number, line in enumerate(fh, 1):
            try:
                record = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}, line {number}: not JSON ({e}).") from None
            if not isinstance(record, dict):
                raise ValueError(
                    f"{path}, line {number}: expected a JSON object, got "
                    f"{type(record).__name__}."
                )
            records.append(record)
    return records


def pack(kind: str, out: str | Path, path: str | Path) -> int:
    """Pack every per-run file of the working directory ``out`` into ``path``.

    Returns:
        The number of records packed.

    Raises:
        ValueError: ``out`` holds no run of ``kind``, or a file that is not a
            readable record (an interrupted write: rerun the command first).
    """
    lay = layout(kind)
    files = sorted(Path(out).glob(lay.pattern))
    if not files:
        raise ValueError(
            f"no {kind} run found under {str(out)!r} (expected files {lay.pattern})."
        )
    records = []
    for file in files:
        record = load_json(file)
        if not isinstance(record, dict):
            raise ValueError(
                f"{file} is not a readable record; rerun the command that writes "
                "it (it resumes) before packing."
            )
        records.append(record)
    return write_packed(records, path, kind)


def unpack(kind: str, path: str | Path, out: str | Path) -> int:
    """Write the records of a packed file as the per-run files of ``out``.

    A file that exists with the same record is left alone; one with another
    record is refused, so no run is lost.

    Returns:
        The number of files written.

    Raises:
        ValueError: A file of ``out`` holds another record for the same run.
    """
    lay = layout(kind)
    written = 0
    for record in read_packed(path):
        file = lay.path(out, *lay.name(record))
        stored = load_json(file)
        if stored == record:
            continue
        if stored is not None:
            raise ValueError(
                f"{file} holds another record of the run {lay.name(record)}; "
                "unpack into an empty directory, or move that file away."
            )
        write_json(record, file)
        written += 1
    return written


def stored_records(records: str | None, out: str | Path, kind: str) -> list[Any]:
    """What a summary-only command summarizes: the packed file ``records`` if
    given, else the per-run files of the working directory ``out``.

    Raises:
        SystemExit: ``records`` is missing or not a packed file (the command's
            error message).
    """
    if records is None:
        return load_records(out, kind)
    try:
        return read_packed(records)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: --records: {e}") from None


# ---------------------------------------------------------------------------
# Running, resuming and summaries.
# ---------------------------------------------------------------------------


def run_resumable(
    tasks: Sequence[tuple[Any, ...]],
    out: str | Path,
    kind: str,
    key: Any,
    run: Callable[..., dict[str, Any]],
    *,
    force: bool,
    progress: bool,
    desc: str,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    jobs: int = 1,
    fresh_process: bool = False,
) -> list[dict[str, Any]]:
    """Reuse every stored record of ``tasks`` made with ``key``; run the rest.

    Each new record is written (atomically) as soon as it is made, so an
    interrupted call loses at most the tasks in progress and the next call
    resumes there. With ``jobs > 1`` the tasks run in that many worker
    processes (the cores shared out between them: one torch thread each
    when ``jobs`` equals the cores); every task seeds itself, so the records
    do not depend on ``jobs``.

    Args:
        tasks: The fields that name each run (``LAYOUTS[kind].key``), in the
            order to run them.
        out: Working directory; records go to ``LAYOUTS[kind].path``.
        kind: The benchmark (a key of :data:`LAYOUTS`).
        key: The configuration a stored record must hold (``record["config"]``).
        run: Maps a task's fields to its new record.
        force: Recompute records that exist.
        progress: Show a tqdm bar over the tasks to run.
        desc: Label of the bar.
        on_record: Called with each new record.
        jobs: Worker processes; ``run`` must then be picklable (a module-level
            function or a ``functools.partial`` of one).
        fresh_process: Run every task in a new worker process (even with
            ``jobs == 1``), so that a task's peak memory is its own.

    Returns:
        The records of every task, stored or new.
    """
    lay = layout(kind)
    records: list[dict[str, Any]] = []
    todo = []
    for task in tasks:
        rec = None if force else load_json(lay.path(out, *task))
        if rec is not None and rec.get("config") == key:
            records.append(rec)
        else:
            todo.append(task)
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=desc, unit="run")
    for task, rec in _run_tasks(run, todo, jobs, bar, fresh_process):
        write_json(rec, lay.path(out, *task))
        records.append(rec)
        if on_record is not None:
            on_record(rec)
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    return records


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _run_tasks(
    run: Callable[..., dict[str, Any]],
    todo: Sequence[tuple[Any, ...]],
    jobs: int,
    bar: Any,
    fresh_process: bool = False,
) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """``(task, run(*task))`` in order (``jobs == 1``) or as they finish."""
    if not fresh_process and (jobs <= 1 or len(todo) <= 1):
        for task in todo:
            if bar is not None:
                bar.set_postfix_str(" ".join(map(str, task)))
            yield task, run(*task)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn: a fork of a process holding torch's thread pools can deadlock.
    workers = max(1, min(jobs, len(todo)))
    # The cores shared out between the workers (one thread each at jobs = cores).
    threads = max(1, (os.cpu_count() or 1) // workers)
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_set_threads,
        initargs=(threads,),
        max_tasks_per_child=1 if fresh_process else None,
    ) as pool:
        futures = {pool.submit(run, *task): task for task in todo}
        for future in as_completed(futures):
            yield futures[future], future.result()


def command_line(argv: Sequence[str]) -> str:
    """The shell command that ran ``python -m benchmarks`` with ``argv``."""
    return "python -m benchmarks " + shlex.join(argv)


def write_summary(
    out: str | Path, command: str, markdown: str, summary: dict[str, Any]
) -> tuple[Path, Path]:
    """Write ``summary.md`` (the command, then ``markdown``) and ``summary.json``
    (``summary``, after ``command``) under ``out``, atomically.

    Both are functions of their arguments alone, so a summary remade from the
    same records by the same command has the same bytes.

    Returns:
        The paths of the markdown and JSON files.
    """
    out = Path(out)
    md_path, json_path = out / "summary.md", out / "summary.json"
    text = f"```bash\n{command}\n```\n\n{markdown.rstrip()}\n"
    write_atomic(md_path, lambda fh: fh.write(text), binary=False)
    write_json({"command": command, **summary}, json_path)
    return md_path, json_path
