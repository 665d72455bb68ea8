r"""One Chaining-UCB step on candidates sharded over a Dask ``LocalCluster``,
against the single-machine step in the same run.

The problem is the speed benchmark's fingerprint one (``--kernel tanimoto``,
default): ``N`` random fingerprints (40 to 60 of 2,048 bits set), a GP with a
library-mode Tanimoto kernel (output scale 1, noise sd 0.05) and ``--obs``
observations at random items; or its SE problem (``--kernel se``: ``N``
points in a square of side 20, lengthscale 1). One *step* is building the
acquisition function and selecting one candidate:

* single machine: ``ChainingUCB(model, candidates, path="low_rank")`` (the
  route the shards compute, bit for bit) and the first maximum of
  :math:`\mu_t + b_t(\sigma_t)` from its factor (the shards' selection);
  BoTorch's ``optimize_acqf_discrete`` (``model.posterior`` over every
  candidate) is timed once beside it (``botorch_select_s``);
* sharded: ``ChainingUCB(model, ShardedCandidates(client, ...))`` and
  ``ShardedCandidates.optimize`` (each shard's best, the first maximum).

Per (``N``, backend) one JSON line: the median seconds of ``--repeats``
steps for each, their ratio (same run, same machine), whether the picks
agree, the shards' own seconds per method (``shard_stats``), the round trips
and bytes of one step (``comm_stats``: arguments sent, replies received, the
largest reply) and the bytes placed once. A last line (``"kind": "model"``)
fits the time model of ``docs/distributed.md`` to the largest ``N`` measured
and predicts the step at larger ``N`` and ``W`` (on paper).

Examples::

    python -m benchmarks distributed --small
    nice -n 19 python -m benchmarks distributed --sizes 100000 1000000 \
        --workers 2 --repeats 3 > docs/results/distributed/steps.jsonl
    python -m benchmarks distributed --sizes 10000000 --no-single \
        --library-dir /tmp/libs            # generated fingerprints, by path
    python -m benchmarks distributed --table docs/results/distributed/steps.jsonl

Progress goes to stderr; stdout holds only JSON lines (the first one the
command line and the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

DTYPE = torch.float64

__all__ = ["fit_model", "main", "table"]


def _progress(message: str) -> None:
    print(f"[distributed {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr)
    sys.stderr.flush()


def _fingerprints(n: int, seed: int, path: Path | None = None) -> Any:
    """``n`` random fingerprints (40 to 60 of 2,048 bits a row), in chunks; in
    a library file at ``path`` (filled in place) if given."""
    from ax_chaining.kernels import PackedFingerprints

    rng = np.random.default_rng(seed)
    if path is not None:
        words = PackedFingerprints.allocate(path, n, 2048)
    else:
        words = np.zeros((n, 32), dtype=np.uint64)
    for start in range(0, n, 100_000):  # the speed benchmark's rows, per chunk
        stop = min(n, start + 100_000)
        chunk = np.zeros((stop - start, 32), dtype=np.uint64)
        k = rng.integers(40, 61, stop - start)
        cols = rng.integers(0, 2048, (stop - start, 60))
        keep = np.arange(60) < k[:, None]
        rows = np.repeat(np.arange(stop - start), keep.sum(1))
        bits = cols[keep]
        np.bitwise_or.at(
            chunk, (rows, bits // 64), np.uint64(1) << (bits % 64).astype(np.uint64)
        )
        words[start:stop] = chunk
        if n >= 2_000_000 and (stop // 100_000) % 10 == 0:
            _progress(f"generated {stop:,} of {n:,} fingerprints")
    if path is not None:
        words.flush()
        del words
        return PackedFingerprints.open(path), str(path)
    return PackedFingerprints(words, 2048, validate=False), None


def _problem(args: argparse.Namespace, n: int) -> dict[str, Any]:
    """The model, the candidates as the single machine sees them, and what
    the shards are built from."""
    from botorch.models import SingleTaskGP
    from gpytorch.kernels import RBFKernel, ScaleKernel

    g = torch.Generator().manual_seed(args.seed)
    if args.kernel == "tanimoto":
        from ax_chaining.kernels import TanimotoKernel

        path = None
        if args.library_dir:
            Path(args.library_dir).mkdir(parents=True, exist_ok=True)
            path = Path(args.library_dir) / f"fingerprints_{n}_{args.seed}.npy"
        library, source = _fingerprints(n, args.seed, path)
        C = torch.arange(n, dtype=DTYPE).unsqueeze(-1)
        obs = torch.randperm(n, generator=g)[: args.obs]
        Y = torch.randn(args.obs, 1, generator=g, dtype=DTYPE)
        kernel = ScaleKernel(TanimotoKernel(library=library)).to(DTYPE)
        kernel.outputscale = 1.0
        model = SingleTaskGP(C[obs], Y, covar_module=kernel, outcome_transform=None)
        shards_from: Any = source if source is not None else library
    else:
        C = 20.0 * torch.rand(n, 2, generator=g, dtype=DTYPE)
        obs = torch.randperm(n, generator=g)[: args.obs]
        X = C[obs]
        Y = torch.sin(X[:, :1]) + torch.cos(X[:, 1:])
        Y = Y + 0.05 * torch.randn(args.obs, 1, generator=g, dtype=DTYPE)
        kernel = ScaleKernel(RBFKernel()).to(DTYPE)
        kernel.base_kernel.lengthscale = 1.0
        kernel.outputscale = 1.0
        model = SingleTaskGP(X, Y, covar_module=kernel, outcome_transform=None)
        shards_from = C
    model.likelihood.noise = 0.05**2
    return {"model": model.eval(), "C": C, "shards_from": shards_from}


def _import_on_worker() -> None:
    import ax_chaining.distributed._shard  # noqa: F401


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _single_step(problem: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from botorch.optim import optimize_acqf_discrete

    from ax_chaining import ChainingUCB

    model, C = problem["model"], problem["C"]
    opts = _engine_options(args)
    build, select, total, picks = [], [], [], []
    first = None
    for k in range(args.repeats + 1):  # the first step (warm-up) apart
        t0 = time.perf_counter()
        acqf = ChainingUCB(model, C, path="low_rank", **opts)
        t1 = time.perf_counter()
        # The shards' selection, on one machine: the first maximum of
        # mu + b(sigma) from the step's factor.
        value = acqf.candidate_mean + acqf.chaining.bonus(acqf.candidate_sigma)
        pick = int(torch.argmax(value))
        t2 = time.perf_counter()
        if k == 0:
            first = t2 - t0
            continue
        build.append(t1 - t0)
        select.append(t2 - t1)
        total.append(t2 - t0)
        picks.append(pick)
    # BoTorch's discrete optimizer (model.posterior over every candidate):
    # what a BoTorch loop would call; once, for its seconds and its pick.
    t0 = time.perf_counter()
    x, _ = optimize_acqf_discrete(acqf, q=1, choices=C)
    botorch_s = time.perf_counter() - t0
    botorch_pick = int((C == x[0]).all(dim=-1).nonzero()[0])
    sizes = [int(s) for s in acqf.chaining.cover_sizes.tolist()]
    return {
        "step_s": _median(total),
        "build_s": _median(build),
        "select_s": _median(select),
        "first_step_s": first,
        "botorch_select_s": botorch_s,
        "botorch_pick": botorch_pick,
        "pick": picks[-1],
        "cover_sizes": sizes,
        "torch_threads": torch.get_num_threads(),
    }


def _engine_options(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if args.max_cover_size is not None:
        out["max_cover_size"] = args.max_cover_size
    if args.memory_budget_gib is not None:
        out["memory_budget"] = int(args.memory_budget_gib * 2**30)
    return out


def _sharded_steps(
    problem: dict[str, Any], client: Any, backend: str, args: argparse.Namespace
) -> dict[str, Any]:
    from ax_chaining import ChainingUCB
    from benchmarks.moved_core import ShardedCandidates

    t0 = time.perf_counter()
    sharded = ShardedCandidates(
        client, problem["shards_from"], backend=backend, batch_size=args.batch_size
    )
    setup = time.perf_counter() - t0
    placed = sharded.comm_stats()["bytes_placed"]
    model, opts = problem["model"], _engine_options(args)
    build, select, total, comm, shard_seconds = [], [], [], [], []
    client_cpu = []  # this process's CPU seconds (the client and the scheduler)
    first = None
    try:
        for k in range(args.repeats + 1):  # the first step (warm-up) apart
            sharded.shard_stats()  # reset the shards' clocks
            t0, c0 = time.perf_counter(), time.process_time()
            acqf = ChainingUCB(model, sharded, **opts)  # resets comm_stats
            t1 = time.perf_counter()
            _, _, idx = sharded.optimize(acqf, q=1, return_indices=True)
            t2, c2 = time.perf_counter(), time.process_time()
            if k == 0:
                first = t2 - t0
                continue
            client_cpu.append(c2 - c0)
            build.append(t1 - t0)
            select.append(t2 - t1)
            total.append(t2 - t0)
            stats = sharded.shard_stats()  # one step's seconds on each shard
            comm.append(sharded.comm_stats())
            shard_seconds.append(
                [
                    {k: float(v) for k, v in s["seconds"].items() if k != "stats"}
                    for s in stats
                ]
            )
        pick = int(idx[0])
        sizes = [int(s) for s in acqf.chaining.cover_sizes.tolist()]
        rows = list(sharded.sizes)
    finally:
        sharded.close()
    # The step whose wall time is the median, reported whole (its own shard
    # seconds and messages): one consistent step, not a mix.
    k = sorted(range(len(total)), key=total.__getitem__)[len(total) // 2]
    per_shard = [
        {"rows": rows[s], "seconds": sum(secs.values()), "by_method": secs}
        for s, secs in enumerate(shard_seconds[k])
    ]
    c = comm[k]
    return {
        "step_s": _median(total),
        "build_s": _median(build),
        "select_s": _median(select),
        "step_s_of_reported": total[k],
        "client_cpu_s_of_reported": client_cpu[k],
        "setup_s": setup,
        "first_step_s": first,
        "bytes_placed": int(placed),
        "round_trips": int(c["round_trips"]),
        "bytes_sent": int(c["bytes_sent"]),
        "bytes_received": int(c["bytes_received"]),
        "largest_reply": int(c["largest_reply"]),
        "per_shard": per_shard,
        "pick": pick,
        "cover_sizes": sizes,
    }


def fit_model(rows: list[dict[str, Any]]) -> dict[str, Any]:
    r"""The time model of one step on :math:`W` workers, from measured lines.

    .. math::

        T(N, W) \approx a\, N / W + R\, \ell + c,

    with :math:`a` the shards' seconds per candidate (their summed seconds
    over ``N``, at the largest ``N`` measured, the fastest step there),
    :math:`R` the round trips of a step (the traversal's batches, selection;
    set by the cover sizes and the batch size, so not by ``N`` at a fixed
    batch), :math:`\ell` the seconds per round trip beyond the slowest
    shard's work (the step's wall time less the slowest shard's seconds, over
    :math:`R`: messages, scheduling, the client's share) and :math:`c = 0`
    (the client's ``O(r^3 + \text{cover})`` work, folded into :math:`\ell`).
    Assumes the per-candidate work is the same on every worker (equal shards,
    equal cores) and :math:`\ell` does not grow with :math:`W` (actors send
    to all shards at once; a reply is small). Predictions for ``N`` in
    ``10^7 .. 10^9`` and ``W`` in ``2 .. 512`` are on paper.
    """
    sharded = [r for r in rows if r.get("kind") == "step" and r.get("sharded")]
    if not sharded:
        raise ValueError("no measured sharded step to fit")
    # The largest N measured at the default cover size (the fastest backend).
    default = [r for r in sharded if r.get("max_cover_size") is None] or sharded
    top = min(
        (r for r in default if r["n"] == max(q["n"] for q in default)),
        key=lambda r: r["sharded"]["step_s"],
    )
    s = top["sharded"]
    n, w = top["n"], top["workers"]
    shard_total = sum(p["seconds"] for p in s["per_shard"])
    slowest = max(p["seconds"] for p in s["per_shard"])
    a = shard_total / n
    trips = s["round_trips"]
    ell = max(0.0, s["step_s_of_reported"] - slowest) / max(1, trips)
    bytes_row = top.get("bytes_per_row_on_worker")
    predict = []
    for big_n in (10**7, 10**8, 10**9):
        for big_w in (2, 16, 64, 512):
            row = {
                "n": big_n,
                "workers": big_w,
                "step_s": a * big_n / big_w + trips * ell,
                "shard_s": a * big_n / big_w,
            }
            if bytes_row:
                row["worker_gib"] = bytes_row * big_n / big_w / 2**30
            predict.append(row)
    return {
        "kind": "model",
        "fitted_at": {"n": n, "workers": w, "backend": top["backend"]},
        "a_s_per_candidate": a,
        "round_trips": trips,
        "latency_s_per_round_trip": ell,
        "bytes_per_step": s["bytes_sent"] + s["bytes_received"],
        "bytes_per_row_on_worker": bytes_row,
        "predict": predict,
    }


def _bytes_per_row(args: argparse.Namespace) -> int:
    """A shard's resident bytes per candidate: its rows of the factor
    (``obs`` float64), mean, variance and traversal distances (3 float64),
    and its features (a fingerprint's 256 bytes, or ``d`` float64)."""
    features = 256 if args.kernel == "tanimoto" else 2 * 8
    return (args.obs + 3) * 8 + features


def _machine() -> dict[str, Any]:
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "nice": os.nice(0),
    }
    try:
        info["load_avg_1m"] = os.getloadavg()[0]
    except OSError:  # pragma: no cover - not on every platform
        pass
    try:
        import distributed

        info["distributed"] = distributed.__version__
    except ImportError:  # pragma: no cover - the extra is needed anyway
        pass
    return info


class _Echo:
    """An actor holding one shard's rows: what a round trip of a step asks of
    a shard, at its smallest (a reduction of the rows against a few numbers)."""

    def __init__(self, rows: Any) -> None:
        self.rows = rows

    def reduce(self, v: Any) -> Any:
        return (self.rows @ v).max(axis=0)


def _pinned_reduce(rows: Any, v: Any) -> Any:
    return (rows @ v).max(axis=0)


def round_trips(client: Any, workers: int, rows: int, calls: int) -> list[dict]:
    """Seconds of one round trip (the client asks every shard for a reduction
    of its rows and waits for all) with each way of holding shards: actors,
    futures pinned to workers, and ``dask.array`` (the rows one chunk per
    worker, persisted; a round is ``(x @ v).max(axis=0)`` computed). One JSON
    row per backend: the median over ``calls`` rounds and the rows per shard.
    """
    import dask.array as da

    from ax_chaining.distributed.candidates import cluster_workers

    addresses = cluster_workers(client)[:workers]
    rng = np.random.default_rng(0)
    shards = [rng.standard_normal((rows, 8)) for _ in addresses]
    v = rng.standard_normal((8, 4))

    def timed(fn: Any) -> float:
        fn()  # warm up: the first call places or compiles
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return _median(times)

    actors = [
        client.submit(_Echo, x, workers=[w], actor=True).result()
        for x, w in zip(shards, addresses, strict=True)
    ]
    data = [
        client.scatter(x, workers=[w], direct=True)
        for x, w in zip(shards, addresses, strict=True)
    ]
    array = da.concatenate([da.from_array(x, chunks=x.shape) for x in shards]).persist()
    out = {
        "actors": timed(lambda: [f.result() for f in [a.reduce(v) for a in actors]]),
        "futures": timed(
            lambda: client.gather(
                [
                    client.submit(_pinned_reduce, d, v, workers=[w], pure=False)
                    for d, w in zip(data, addresses, strict=True)
                ]
            )
        ),
        "dask.array": timed(lambda: (array @ v).max(axis=0).compute()),
    }
    return [
        {
            "kind": "round_trip",
            "backend": b,
            "workers": len(addresses),
            "rows_per_shard": rows,
            "calls": calls,
            "round_trip_s": sec,
        }
        for b, sec in out.items()
    ]


def table(paths: list[str]) -> str:
    """The docs' markdown table of the step lines in ``paths``."""
    rows = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                rows.append(json.loads(line))
    steps = [r for r in rows if r.get("kind") == "step"]
    out = (
        [
            "| N | kernel | backend | workers | batch | single step (s) "
            "| sharded step (s) | ratio | per shard (s) | round trips "
            "| bytes sent / received | largest reply | placed once | same pick |",
            "|---:|---|---|---:|---|---:|---:|---:|---|---:|---|---:|---:|---|",
        ]
        if steps
        else []
    )
    for r in steps:
        s, one = r["sharded"], r.get("single")
        shard = " / ".join(f"{p['seconds']:.2f}" for p in s["per_shard"])
        single = "—" if one is None else f"{one['step_s']:.2f}"
        ratio = "—" if one is None else f"{r['ratio']:.2f}"
        batch = r.get("batch_size") or "one machine's"
        out.append(
            f"| {r['n']:,} | {r['kernel']} | {r['backend']} | {r['workers']} "
            f"| {batch} | {single} | {s['step_s']:.2f} | {ratio} | {shard} "
            f"| {s['round_trips']} "
            f"| {_kb(s['bytes_sent'])} / {_kb(s['bytes_received'])} "
            f"| {_kb(s['largest_reply'])} | {_mb(s['bytes_placed'])} "
            f"| {_same(r)} |"
        )
    if steps:
        m = fit_model(steps)
        out.append("")
        out.append(
            f"Fitted at N = {m['fitted_at']['n']:,} on "
            f"{m['fitted_at']['workers']} workers ({m['fitted_at']['backend']}): "
            f"a = {m['a_s_per_candidate'] * 1e6:.2f} µs per candidate, "
            f"R = {m['round_trips']} round trips, "
            f"ℓ = {m['latency_s_per_round_trip'] * 1e3:.1f} ms per round trip."
        )
        out.append("")
        out.append("| N | W | a N / W (s) | R ℓ (s) | step (s) | per worker (GiB) |")
        out.append("|---:|---:|---:|---:|---:|---:|")
        for p in m["predict"]:
            trips = p["step_s"] - p["shard_s"]
            gib = p.get("worker_gib")
            out.append(
                f"| 10^{len(str(p['n'])) - 1} | {p['workers']} "
                f"| {p['shard_s']:.3g} | {trips:.3g} | {p['step_s']:.3g} "
                f"| {'—' if gib is None else f'{gib:.3g}'} |"
            )
    trips = [r for r in rows if r.get("kind") == "round_trip"]
    if trips:
        fitted = fit_model(steps)["round_trips"] if steps else None
        out += [
            *([""] if steps else []),
            "| backend | workers | rows a shard | one round trip (ms) "
            + ("| x the fitted step's round trips (s) |" if fitted else "|"),
            "|---|---:|---:|---:|" + ("---:|" if fitted else ""),
        ]
        for r in trips:
            ms = r["round_trip_s"] * 1e3
            cells = f"| {fitted * r['round_trip_s']:.2f} |" if fitted else "|"
            out.append(
                f"| {r['backend']} | {r['workers']} | {r['rows_per_shard']:,} "
                f"| {ms:.1f} {cells}"
            )
    return "\n".join(out)


def _kb(b: int) -> str:
    return f"{b / 1e3:.0f} kB"


def _mb(b: int) -> str:
    return f"{b / 1e6:.0f} MB" if b else "0 (by path)"


def _same(r: dict[str, Any]) -> str:
    if r.get("single") is None:
        return "—"
    return "yes" if r["same_pick"] and r["same_covers"] else "**no**"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks distributed",
        description=(
            "One Chaining-UCB step on candidates sharded over a Dask LocalCluster "
            "against the single-machine step in the same run; JSON lines on stdout."
        ),
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--workers", type=int, default=2, help="LocalCluster workers")
    parser.add_argument(
        "--backends",
        default="actors,futures",
        help="comma-separated subset of actors,futures",
    )
    parser.add_argument("--kernel", default="tanimoto", choices=["tanimoto", "se"])
    parser.add_argument("--obs", type=int, default=50, help="observations")
    parser.add_argument("--repeats", type=int, default=3, help="steps per measure")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-cover-size", type=int, default=None)
    parser.add_argument(
        "--memory-budget-gib",
        type=float,
        default=None,
        help="ChainingUCB's memory_budget (bounds each worker; default 4 GiB)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="rows per farthest-first batch on the shards (default: one "
        "machine's; larger means fewer round trips, other covers)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads of the single-machine step (default: --workers)",
    )
    parser.add_argument(
        "--no-single",
        action="store_true",
        help="skip the single-machine step (sizes it cannot hold)",
    )
    parser.add_argument(
        "--library-dir",
        default=None,
        help="write the generated fingerprints there and shard them by path "
        "(each worker memory-maps its rows; nothing is sent)",
    )
    parser.add_argument(
        "--round-trips",
        type=int,
        default=None,
        metavar="CALLS",
        help="measure one round trip with actors, pinned futures and dask.array "
        "(median of CALLS rounds, 10,000 rows a shard) instead of steps",
    )
    parser.add_argument("--small", action="store_true", help="seconds: N = 6,000")
    parser.add_argument("--table", nargs="+", help="JSON-lines files to tabulate")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    if args.small:
        args.sizes, args.repeats, args.obs = [6000], 1, 20
        args.max_cover_size = args.max_cover_size or 64
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in ("actors", "futures"):
            parser.error(f"--backends: unknown backend {b!r}")
    try:
        import distributed
    except ImportError:
        print(
            "The distributed benchmark needs pip install 'ax-chaining[distributed]'.",
            file=sys.stderr,
        )
        return 2
    torch.set_num_threads(args.threads or args.workers)
    print(
        json.dumps(
            {
                "kind": "command",
                "command": "python -m benchmarks distributed " + " ".join(argv),
                "machine": _machine(),
            }
        ),
        flush=True,
    )
    _progress(f"starting a LocalCluster of {args.workers} workers (1 thread each)")
    cluster = distributed.LocalCluster(
        n_workers=args.workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        host="127.0.0.1",
    )
    client = distributed.Client(cluster)
    rows: list[dict[str, Any]] = []
    try:
        client.wait_for_workers(args.workers, timeout=120)
        client.run(_import_on_worker)  # imports are not a step's cost
        if args.round_trips is not None:
            for row in round_trips(client, args.workers, 10_000, args.round_trips):
                print(json.dumps(row), flush=True)
            return 0
        for n in args.sizes:
            _progress(f"N = {n:,}: building the problem ({args.kernel})")
            problem = _problem(args, n)
            single = None
            if not args.no_single:
                _progress(f"N = {n:,}: single-machine step x{args.repeats}")
                single = _single_step(problem, args)
                _progress(f"N = {n:,}: single-machine step {single['step_s']:.2f} s")
            for backend in backends:
                _progress(f"N = {n:,}: sharded step ({backend}) x{args.repeats}")
                sharded = _sharded_steps(problem, client, backend, args)
                row: dict[str, Any] = {
                    "kind": "step",
                    "n": n,
                    "kernel": args.kernel,
                    "obs": args.obs,
                    "backend": backend,
                    "workers": args.workers,
                    "repeats": args.repeats,
                    "max_cover_size": args.max_cover_size,
                    "batch_size": args.batch_size,
                    "bytes_per_row_on_worker": _bytes_per_row(args),
                    "single": single,
                    "sharded": sharded,
                }
                if single is not None:
                    row["ratio"] = sharded["step_s"] / single["step_s"]
                    row["same_pick"] = sharded["pick"] == single["pick"]
                    row["same_covers"] = sharded["cover_sizes"] == single["cover_sizes"]
                _progress(
                    f"N = {n:,}: sharded step ({backend}) {sharded['step_s']:.2f} s"
                    + (f", ratio {row['ratio']:.2f}" if single is not None else "")
                )
                rows.append(row)
                print(json.dumps(row), flush=True)
            del problem
        print(json.dumps(fit_model(rows)), flush=True)
    finally:
        client.close()
        cluster.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
