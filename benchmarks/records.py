"""Run records: one JSON file per finished run in the working directory
(``--out``, so an interrupted command resumes), one packed, sorted
``.jsonl.gz`` file per benchmark once finished; and the shared command-line
plumbing of the benchmarks.
"""

from __future__ import annotations

import argparse
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


@dataclass(frozen=True)
class Layout:
    """Where the runs of a benchmark live: the record fields that name a run
    (``key``, the packed file's order) and the run's file (``template``)."""

    key: tuple[str, ...]
    template: str

    def path(self, out: str | Path, *values: Any) -> Path:
        """The file of the run named by ``values`` (in :attr:`key` order)."""
        if len(values) != len(self.key):
            raise ValueError(
                f"a run is named by {self.key}; got {len(values)} values {values!r}."
            )
        names = dict(zip(self.key, values, strict=True))
        return Path(out) / self.template.format(**names)

    @property
    def pattern(self) -> str:
        """Glob of every run's file under a working directory."""
        return re.sub(r"\{[^}]*\}", "*", self.template)

    def name(self, record: dict[str, Any]) -> tuple[Any, ...]:
        """The fields of ``record`` that name its run."""
        if missing := [k for k in self.key if k not in record]:
            raise ValueError(
                f"a record lacks the fields {missing} that name a run "
                f"(expected {self.key}); it has {sorted(record)}."
            )
        return tuple(record[k] for k in self.key)


_RUNS = "runs/{%s}/{method}/seed_{seed}.json"
#: Benchmark kind -> layout of its working directory.
LAYOUTS: dict[str, Layout] = {
    "paper": Layout(
        ("problem", "method", "seed"), "{problem}/{method}/run{seed:03d}.json"
    ),
    "harness": Layout(("problem", "method", "seed"), _RUNS % "problem"),
    "molecules": Layout(("dataset", "method", "seed"), _RUNS % "dataset"),
    "reactions": Layout(("dataset", "method", "seed"), _RUNS % "dataset"),
    "certificate": Layout(("problem", "seed"), "{problem}/run{seed:03d}.json"),
    "validity": Layout(
        ("problem", "method", "seed"), "{problem}/{method}/seed_{seed}.json"
    ),
    "screening": Layout(("size", "method", "seed"), "{size}/{method}/seed_{seed}.json"),
    "stopping": Layout(
        ("dataset", "acquisition", "n_init", "seed"),
        "{dataset}/{acquisition}/init{n_init}/seed_{seed}.json",
    ),
}


def layout(kind: str) -> Layout:
    """The :class:`Layout` of benchmark ``kind``."""
    if kind not in LAYOUTS:
        raise ValueError(f"kind must be one of {', '.join(LAYOUTS)}; got {kind!r}.")
    return LAYOUTS[kind]


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
    """Every readable record under the working directory ``out``, by file name."""
    paths = sorted(Path(out).glob(layout(kind).pattern))
    return [r for r in map(load_json, paths) if r is not None]


def packed_bytes(records: Iterable[dict[str, Any]], kind: str) -> bytes:
    """Gzipped JSON lines in run order, sorted keys and no file name or time in
    the header: bytes that depend on the records alone."""
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
    """The records of a packed file, in its order."""
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
    """Pack every run file of the working directory ``out`` into ``path``."""
    files = sorted(Path(out).glob(layout(kind).pattern))
    if not files:
        raise ValueError(
            f"no {kind} run found under {str(out)!r} (expected files "
            f"{layout(kind).pattern})."
        )
    records = []
    for file in files:
        if not isinstance(record := load_json(file), dict):
            raise ValueError(
                f"{file} is not a readable record; rerun the command that writes "
                "it (it resumes) before packing."
            )
        records.append(record)
    return write_packed(records, path, kind)


def unpack(kind: str, path: str | Path, out: str | Path) -> int:
    """Write a packed file's records as the run files of ``out``; a file with
    another record of the same run is refused. Returns the files written."""
    lay, written = layout(kind), 0
    for record in read_packed(path):
        file = lay.path(out, *lay.name(record))
        if (stored := load_json(file)) == record:
            continue
        if stored is not None:
            raise ValueError(
                f"{file} holds another record of the run {lay.name(record)}; "
                "unpack into an empty directory, or move that file away."
            )
        write_json(record, file)
        written += 1
    return written


# Command lines, running and resuming.


def add_record_options(
    parser: argparse.ArgumentParser, out: str | None, small: str, plot: bool = True
) -> None:
    """The options of every resumable benchmark that writes one record per run."""
    add = parser.add_argument
    add("--small", action="store_true", help=small)
    add("--out", default=out, help="working directory and summary")
    add("--force", action="store_true", help="recompute stored runs")
    add("--jobs", type=int, default=1, help="worker processes (results do not change)")
    add("--no-progress", action="store_true", help="no progress bar")
    if plot:
        add("--no-plot", action="store_true", help="skip the figures")
    text = "run nothing: summarize the records under --out (or in --records)"
    add("--summary-only", action="store_true", help=text)
    add("--records", metavar="FILE", help="with --summary-only: a packed file to read")


def records_of(
    args: argparse.Namespace, kind: str, run: Callable[[], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The stored records (``--summary-only``: the packed file ``--records`` if
    given, else the run files under ``--out``), or those of ``run()``."""
    if args.summary_only and args.records is None:
        return load_records(args.out, kind)
    if args.summary_only:
        try:
            return read_packed(args.records)
        except (OSError, ValueError) as e:
            raise SystemExit(f"error: --records: {e}") from None
    if args.records is not None:
        raise SystemExit(
            f"error: --records {args.records} is read by --summary-only, which "
            "was not given; to run more, first `python -m benchmarks unpack` "
            "the file into --out."
        )
    return run()


def resume(
    args: argparse.Namespace,
    kind: str,
    tasks: Sequence[tuple[Any, ...]],
    key: Any,
    run: Callable[..., dict[str, Any]],
    **options: Any,
) -> list[dict[str, Any]]:
    """:func:`records_of` a command line whose runs are ``tasks``, run (or
    resumed) by :func:`run_resumable` with its ``--force``, ``--jobs`` and
    ``--no-progress`` (and ``options``)."""
    options |= {"force": args.force, "jobs": args.jobs}
    options["progress"] = not args.no_progress
    return records_of(
        args, kind, lambda: run_resumable(tasks, args.out, kind, key, run, **options)
    )


def run_resumable(
    tasks: Sequence[tuple[Any, ...]],
    out: str | Path,
    kind: str,
    key: Any,
    run: Callable[..., dict[str, Any]],
    *,
    force: bool = False,
    progress: bool = True,
    desc: str | None = None,
    jobs: int = 1,
    fresh_process: bool = False,
    threads: int | None = None,
    refuse_other: bool = False,
    complete: Callable[[Any], bool] | None = None,
) -> list[dict[str, Any]]:
    """Reuse every stored record of ``tasks`` made with ``key``
    (``record["config"]``; and ``complete(record)`` if given), run the rest
    with ``run(*task)``, each record written as soon as it is made.

    ``jobs > 1``: in spawned worker processes (``run`` picklable), ``threads``
    torch threads each (default: the cores shared out); ``fresh_process``: each
    task in a new process; ``refuse_other``: a stored run of another
    configuration refused instead of recomputed.
    """
    lay = layout(kind)
    records, todo = [], []
    for task in tasks:
        path = lay.path(out, *task)
        rec = None if force else load_json(path)
        stored = isinstance(rec, dict) and "config" in rec
        if stored and rec["config"] == key and (complete is None or complete(rec)):
            records.append(rec)
            continue
        if refuse_other and stored and rec["config"] != key:
            raise ValueError(
                f"{path} holds a run of another configuration ({rec['config']}); "
                "use another --out directory or --force."
            )
        todo.append(task)
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=desc or kind, unit="run")
    for task, rec in _run_tasks(run, todo, jobs, bar, fresh_process, threads):
        write_json(rec, lay.path(out, *task))
        records.append(rec)
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
    fresh_process: bool,
    threads: int | None,
) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """``(task, run(*task))`` in order (one process) or as they finish."""
    if not fresh_process and (jobs <= 1 or len(todo) <= 1):
        if threads and todo:
            _set_threads(threads)
        for task in todo:
            if bar is not None:
                bar.set_postfix_str(" ".join(map(str, task)))
            yield task, run(*task)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    workers = max(1, min(jobs, len(todo)))
    # spawn: a fork of a process holding torch's thread pools can deadlock.
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_set_threads,
        initargs=(threads or max(1, (os.cpu_count() or 1) // workers),),
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
    (``command``, then ``summary``) under ``out``: the same arguments, the same
    bytes."""
    out = Path(out)
    md_path, json_path = out / "summary.md", out / "summary.json"
    text = f"```bash\n{command}\n```\n\n{markdown.rstrip()}\n"
    write_atomic(md_path, lambda fh: fh.write(text), binary=False)
    write_json({"command": command, **summary}, json_path)
    return md_path, json_path
