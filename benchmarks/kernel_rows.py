r"""Speed and memory of rows of the Tanimoto kernel over a fingerprint library.

What Chaining-UCB asks of a kernel over ``N`` candidates is blocks of rows
:math:`k(\text{lib}[idx], \text{lib}[0:N])`. This measures, per route of
:meth:`ax_chaining.kernels.PackedFingerprints.tanimoto` (``inverted``,
``popcount``, ``matmul``) and, as the baseline in the same run, RDKit's
``DataStructs.BulkTanimotoSimilarity`` on the same rows (``rdkit``), the rows
per second (wall clock and per CPU second) and the peak resident memory. Each
(route, N) runs in a fresh subprocess so that its peak memory is its own.

The library is ``N`` random fingerprints of 2048 bits with 40 to 60 bits set
per row, at uniformly drawn positions (``--seed``), written once to a temporary
file, or the first ``N`` rows of a real library (``--library``: a
:func:`ax_chaining.chem.featurize_library` cache directory or a
:meth:`PackedFingerprints.save` file); workers memory-map it. The rows are
drawn with the same seed and computed in blocks of ``--block`` (default 16)
against all ``N`` columns. ``checksum`` is a hash of the float64 values of the
first block: equal checksums across routes mean bit-identical values.

One JSON line per measurement::

    python -m benchmarks.kernel_rows --sizes 10000 100000 1000000
    python -m benchmarks.kernel_rows --sizes 10000 100000 1000000 \
        --library cache/moses  # featurize_library("train.csv.gz", "cache/moses")

with the fields ``route``, ``n``, ``rows``, ``rows_per_s`` (wall clock, best of
``--repeats``), ``rows_per_cpu_s``, ``setup_s`` (building the inverted index,
or RDKit's bit vectors; not in the rates), ``library_rss_mb`` (resident memory
once the library is mapped and its bit counts computed, the interpreter with
torch included), ``peak_rss_mb``, ``route_mb`` (their difference: what the
route added, its index or RDKit's vectors and one ``block x N`` float64 result
included), ``threads`` (torch's, used
by ``matmul``) and ``checksum``. ``--quick`` is a small preset (``N = 2000``,
32 rows, one repeat) that a test runs end to end.
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

ROUTES = ("inverted", "popcount", "matmul", "rdkit")
ROOT = Path(__file__).resolve().parents[1]  # `benchmarks` is not installed


def random_library(
    n: int, seed: int, n_bits: int = 2048, low: int = 40, high: int = 60
):
    r"""``n`` random fingerprints with ``low .. high`` bits set at uniform positions.

    Positions are drawn with replacement, so a row can have a few bits fewer.
    Built in chunks of packed rows (no ``n x n_bits`` array).
    """
    from ax_chaining.kernels.fingerprints import PackedFingerprints, pack_bits

    rng = np.random.default_rng(seed)
    words = np.empty((n, -(-n_bits // 64)), dtype="<u8")
    for start in range(0, n, 1 << 16):
        size = min(1 << 16, n - start)
        bits = np.zeros((size, n_bits), dtype=np.uint8)
        count = rng.integers(low, high + 1, size=size)
        where = rng.integers(0, n_bits, size=(size, high))
        mask = np.arange(high) < count[:, None]
        bits[np.nonzero(mask)[0], where[mask]] = 1
        words[start : start + size] = pack_bits(bits)
    return PackedFingerprints(words, n_bits)


def _load(args: argparse.Namespace):
    from ax_chaining.kernels import PackedFingerprints

    path = Path(args.library)
    if path.is_dir():
        path = path / "fingerprints.npy"
    full = PackedFingerprints.open(path)
    if args.n > len(full):
        raise SystemExit(f"--library has {len(full)} rows, fewer than n={args.n}.")
    return PackedFingerprints(full.words[: args.n], full.n_bits)


def _status_mb(field: str) -> float | None:
    """A memory figure of this process from ``/proc/self/status`` (MB; Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    except OSError:  # pragma: no cover - not Linux
        pass
    return None  # pragma: no cover


def _rss_mb() -> float:
    """Peak resident memory of this process (MB).

    ``VmHWM`` where there is one: ``ru_maxrss`` also counts the parent's memory
    copied at fork, before the worker's exec.
    """
    peak = _status_mb("VmHWM")
    if peak is None:  # pragma: no cover - not Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return peak


def _current_rss_mb() -> float:
    """Resident memory now (MB)."""
    return _status_mb("VmRSS") or _rss_mb()


def _worker(args: argparse.Namespace) -> dict:
    library = _load(args)
    library.popcounts  # noqa: B018 - computed once, as any route needs them
    library_rss = _current_rss_mb()
    rng = np.random.default_rng(args.seed + 1)
    rows = np.sort(rng.choice(args.n, size=min(args.rows, args.n), replace=False))
    blocks = [rows[i : i + args.block] for i in range(0, rows.shape[0], args.block)]
    start = time.perf_counter()
    if args.route == "rdkit":
        from rdkit import DataStructs

        fps = []
        for first in range(0, args.n, 4096):
            for bits in library.unpack(slice(first, first + 4096)).numpy():
                fp = DataStructs.ExplicitBitVect(library.n_bits)
                fp.SetBitsFromList(np.flatnonzero(bits).tolist())
                fps.append(fp)

        def compute(block: np.ndarray) -> np.ndarray:
            return np.array(
                [DataStructs.BulkTanimotoSimilarity(fps[i], fps) for i in block]
            )

    else:
        if args.route == "inverted":
            library.build_index()

        def compute(block: np.ndarray) -> np.ndarray:
            out = library.tanimoto(block, slice(0, args.n), route=args.route)
            return out.numpy()

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
        "block": args.block,
        "rows_per_s": round(rows.shape[0] / best_wall, 2),
        "rows_per_cpu_s": round(rows.shape[0] / best_cpu, 2),
        "setup_s": round(setup, 2),
        "peak_rss_mb": round(_rss_mb(), 1),
        "library_rss_mb": round(library_rss, 1),
        "route_mb": round(_rss_mb() - library_rss, 1),
        "library": args.label or args.library,
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "checksum": checksum,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }


def _default_rows(n: int) -> int:
    return int(min(256, max(8, 10_000_000 // n)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernel_rows")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--routes", nargs="+", choices=ROUTES, default=list(ROUTES))
    parser.add_argument("--rows", type=int, help="rows per measurement (~1e7 / N)")
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--library", help="featurize_library cache or .npy file")
    parser.add_argument("--quick", action="store_true", help="N = 2000, 32 rows")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--route", choices=ROUTES, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--label", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args)), flush=True)
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
                library = str(random_library(n, args.seed).save(Path(tmp) / f"{n}"))
                label = f"random, 40-60 of 2048 bits set, seed {args.seed}"
            for route in args.routes:
                print(_run_worker(args, route, n, library, label), flush=True)


def _run_worker(args: argparse.Namespace, route: str, n: int, library: str, label: str):
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.kernel_rows",
        "--worker",
        f"--route={route}",
        f"--n={n}",
        f"--rows={args.rows or _default_rows(n)}",
        f"--block={args.block}",
        f"--repeats={args.repeats}",
        f"--seed={args.seed}",
        f"--library={library}",
        f"--label={label}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{route} at N={n} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


if __name__ == "__main__":
    main()
