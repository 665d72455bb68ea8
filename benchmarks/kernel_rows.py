r"""Speed and memory of Tanimoto kernel rows per route of
:meth:`ax_chaining.kernels.PackedFingerprints.tanimoto` against RDKit's
``BulkTanimotoSimilarity``, each (route, N) in a fresh subprocess; one JSON
line per measurement (``--quick``: a test); ``--columns K``: rows against
``K`` scattered columns instead of the whole library::

    python -m benchmarks.kernel_rows --sizes 10000 100000 1000000
    python -m benchmarks.kernel_rows --sizes 100000 --columns 64 4096
    python -m benchmarks.kernel_rows --table rows.jsonl   # its markdown table
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks._tables import json_lines, md_row
from benchmarks.speed import random_fingerprints

ROUTES = ("inverted", "popcount", "matmul", "rdkit")
ROOT = Path(__file__).resolve().parents[1]  # `benchmarks` is not installed


def _load(args: argparse.Namespace):
    from ax_chaining.kernels import PackedFingerprints

    path = Path(args.library)
    if path.is_dir():
        path = path / "fingerprints.npy"
    full = PackedFingerprints.open(path)
    if args.n > len(full):
        raise SystemExit(f"--library has {len(full)} rows, fewer than n={args.n}.")
    return PackedFingerprints(full.words[: args.n], full.n_bits)


def _mb(field: str) -> float:
    """This process's ``VmHWM`` (peak: ``ru_maxrss`` would count the parent's
    memory copied at fork) or ``VmRSS`` (now), in MB; ``ru_maxrss`` off Linux."""
    status = Path("/proc/self/status")
    for line in status.read_text().splitlines() if status.exists() else []:
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _worker(args: argparse.Namespace) -> dict:
    library = _load(args)
    library.popcounts  # noqa: B018 - computed once, as any route needs them
    library_rss = _mb("VmRSS")
    rng = np.random.default_rng(args.seed + 1)
    rows = np.sort(rng.choice(args.n, size=min(args.rows, args.n), replace=False))
    blocks = [rows[i : i + args.block] for i in range(0, rows.shape[0], args.block)]
    # All columns (one run), or K scattered ones drawn from another stream.
    cols: slice | np.ndarray = slice(0, args.n)
    if args.column:
        draw = np.random.default_rng(args.seed + 2)
        k = min(args.column, args.n)
        cols = np.sort(draw.choice(args.n, size=k, replace=False))
    start = time.perf_counter()
    if args.route == "rdkit":
        from rdkit import DataStructs

        fps = []
        for first in range(0, args.n, 4096):
            for bits in library.unpack(slice(first, first + 4096)).numpy():
                fp = DataStructs.ExplicitBitVect(library.n_bits)
                fp.SetBitsFromList(np.flatnonzero(bits).tolist())
                fps.append(fp)

        targets = fps if isinstance(cols, slice) else [fps[j] for j in cols]

        def compute(block: np.ndarray) -> np.ndarray:
            return np.array(
                [DataStructs.BulkTanimotoSimilarity(fps[i], targets) for i in block]
            )

    else:
        if args.route == "inverted":
            library.build_index()

        def compute(block: np.ndarray) -> np.ndarray:
            return library.tanimoto(block, cols, route=args.route).numpy()

    setup = time.perf_counter() - start
    first = np.ascontiguousarray(compute(blocks[0]))
    checksum = hashlib.sha256(first.data).hexdigest()[:16]  # no copy
    del first
    best_wall, best_cpu = float("inf"), float("inf")
    for _ in range(args.repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        for block in blocks:
            compute(block)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return {
        "route": args.route,
        "n": args.n,
        "rows": int(rows.shape[0]),
        "columns": args.n if isinstance(cols, slice) else int(cols.shape[0]),
        "block": args.block,
        "rows_per_s": round(rows.shape[0] / best_wall, 2),
        "rows_per_cpu_s": round(rows.shape[0] / best_cpu, 2),
        "setup_s": round(setup, 2),
        "peak_rss_mb": round(_mb("VmHWM"), 1),
        "library_rss_mb": round(library_rss, 1),
        "route_mb": round(_mb("VmHWM") - library_rss, 1),
        "library": args.label or args.library,
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "checksum": checksum,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernel_rows")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--routes", nargs="+", choices=ROUTES, default=list(ROUTES))
    parser.add_argument("--rows", type=int, help="rows per measurement (~1e7 / N)")
    parser.add_argument("--columns", type=int, nargs="+", help="scattered columns")
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--library", help="featurize_library cache or .npy file")
    parser.add_argument("--quick", action="store_true", help="N = 2000, 32 rows")
    parser.add_argument("--table", nargs="+", help="markdown table of JSON lines")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--route", choices=ROUTES, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--column", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--label", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args)), flush=True)
        return
    if args.table:
        print(table(args.table))
        return
    if args.quick:
        args.sizes, args.repeats, args.rows = [2000], 1, 32
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            # Random libraries are written once and memory-mapped by each
            # worker, so that a worker's memory is the library and its route.
            if args.library:
                library, label = args.library, f"{args.library} (first N rows)"
            else:
                library = str(Path(tmp) / f"{n}.npy")
                random_fingerprints(n, args.seed, Path(library))
                label = f"random, 40-60 of 2048 bits set, seed {args.seed}"
            for columns in args.columns or [None]:
                for route in args.routes:
                    line = _run_worker(args, route, n, library, label, columns)
                    print(line, flush=True)


def table(paths: list[str]) -> str:
    """The markdown table of the JSON lines in ``paths``: rows per second of
    each route, per library size and column count, and the fastest of this
    package's routes (RDKit's ``BulkTanimotoSimilarity`` shown beside)."""
    groups: dict[tuple[int, int], dict[str, float]] = {}
    for line in json_lines(paths):
        key = (line["n"], line["columns"])
        groups.setdefault(key, {})[line["route"]] = line["rows_per_s"]
    header = md_row("N", "columns", *ROUTES, "fastest of ours")
    out = [header, md_row(*["---:"] * (2 + len(ROUTES)), "---")]
    for (n, columns), speed in groups.items():
        ours = {r: v for r, v in speed.items() if r != "rdkit"}
        best = max(ours, key=lambda r: ours[r]) if ours else "-"
        cells = [f"{speed[r]:,.0f}" if r in speed else "-" for r in ROUTES]
        shown = "all" if columns == n else f"{columns:,}"
        out.append(md_row(f"{n:,}", shown, *cells, best))
    return "\n".join(out)


def _run_worker(
    args: argparse.Namespace,
    route: str,
    n: int,
    library: str,
    label: str,
    columns: int | None,
):
    options = {"route": route, "n": n, "library": library, "label": label}
    options["rows"] = args.rows or int(min(256, max(8, 10_000_000 // n)))
    options |= {k: getattr(args, k) for k in ("block", "repeats", "seed")}
    if columns is not None:
        options["column"] = columns
    cmd = [sys.executable, "-m", "benchmarks.kernel_rows", "--worker"]
    cmd += [f"--{k}={v}" for k, v in options.items()]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{route} at N={n} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


if __name__ == "__main__":
    main()
