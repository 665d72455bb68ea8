r"""One Chaining-UCB step on candidates sharded over a Dask ``LocalCluster``
against the single-machine step, one JSON line per ``N`` (the first line the
command and machine, the last the time model of ``docs/distributed.md``);
progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from statistics import median as _median
from typing import Any

import numpy as np
import torch

from benchmarks.speed import _median_s, random_fingerprints
from benchmarks.speed import _problem as speed_problem

#: The one backend of ``ShardedCandidates`` (the package had "futures" and
#: "local" too, whose records stay in the docs).
BACKENDS = ("actors",)


def _progress(message: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"[distributed {stamp}] {message}", file=sys.stderr, flush=True)


def _problem(args: argparse.Namespace, n: int) -> dict[str, Any]:
    """The model, the candidates as one machine sees them, and what the shards
    are built from (the library's path with ``--library-dir``)."""
    library = None
    if args.kernel == "tanimoto" and args.library_dir:
        Path(args.library_dir).mkdir(parents=True, exist_ok=True)
        library = str(Path(args.library_dir) / f"fingerprints_{n}_{args.seed}.npy")
        random_fingerprints(n, args.seed, Path(library))
    model, C = speed_problem(
        n, args.obs, args.seed, kernel=args.kernel, library=library
    )
    shards_from: Any = C
    if args.kernel == "tanimoto":
        shards_from = library or model.covar_module.base_kernel.library
    return {"model": model, "C": C, "shards_from": shards_from}


def _import_on_worker() -> None:
    import ax_chaining.distributed._shard  # noqa: F401


def _engine_options(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if args.max_cover_size is not None:
        out["max_cover_size"] = args.max_cover_size
    if args.memory_budget_gib is not None:
        out["memory_budget"] = int(args.memory_budget_gib * 2**30)
    return out


def _single_step(problem: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The step on one machine (and the shards' selection from its factor:
    the first maximum of mu + b(sigma)); BoTorch's ``optimize_acqf_discrete``
    timed once beside it."""
    from botorch.optim import optimize_acqf_discrete

    from ax_chaining import ChainingUCB

    model, C = problem["model"], problem["C"]
    build, select, total, picks = [], [], [], []
    first = None
    for k in range(args.repeats + 1):  # the first step (warm-up) apart
        t0 = time.perf_counter()
        acqf = ChainingUCB(model, C, path="low_rank", **_engine_options(args))
        t1 = time.perf_counter()
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
    t0 = time.perf_counter()
    x, _ = optimize_acqf_discrete(acqf, q=1, choices=C)
    botorch_s = time.perf_counter() - t0
    return {
        "step_s": _median(total),
        "build_s": _median(build),
        "select_s": _median(select),
        "first_step_s": first,
        "botorch_select_s": botorch_s,
        "botorch_pick": int((C == x[0]).all(dim=-1).nonzero()[0]),
        "pick": picks[-1],
        "cover_sizes": [int(s) for s in acqf.chaining.cover_sizes.tolist()],
        "torch_threads": torch.get_num_threads(),
    }


def _sharded_steps(
    problem: dict[str, Any], client: Any, args: argparse.Namespace
) -> dict[str, Any]:
    from ax_chaining import ChainingUCB
    from benchmarks.shard_timing import ShardedCandidates

    t0 = time.perf_counter()
    sharded = ShardedCandidates(
        client, problem["shards_from"], batch_size=args.batch_size
    )
    setup = time.perf_counter() - t0
    placed = sharded.comm_stats()["bytes_placed"]
    build, select, total, comm, shard_seconds = [], [], [], [], []
    client_cpu = []  # this process's CPU seconds (the client and the scheduler)
    first = None
    try:
        for k in range(args.repeats + 1):  # the first step (warm-up) apart
            sharded.shard_stats()  # reset the shards' clocks
            t0, c0 = time.perf_counter(), time.process_time()
            acqf = ChainingUCB(problem["model"], sharded, **_engine_options(args))
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
                    {m: float(v) for m, v in s["seconds"].items() if m != "stats"}
                    for s in stats
                ]
            )
        pick, rows = int(idx[0]), list(sharded.sizes)
        sizes = [int(s) for s in acqf.chaining.cover_sizes.tolist()]
    finally:
        sharded.close()
    # The step whose wall time is the median, whole: one step, not a mix.
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
        **{
            key: int(c[key])
            for key in ("round_trips", "bytes_sent", "bytes_received", "largest_reply")
        },
        "per_shard": per_shard,
        "pick": pick,
        "cover_sizes": sizes,
    }


def fit_model(rows: list[dict[str, Any]]) -> dict[str, Any]:
    r"""The time model of one step on :math:`W` workers,
    :math:`T(N, W) \approx a N / W + R \ell`, fitted to the largest ``N``
    measured (its fastest step at the default cover size): :math:`a` the
    shards' summed seconds per candidate, :math:`R` the step's round trips,
    :math:`\ell` the step's wall time beyond the slowest shard's work per round
    trip; predictions for ``N`` in ``10^7 .. 10^9`` and ``W`` in ``2 .. 512``
    (the assumptions are on the docs' page)."""
    sharded = [r for r in rows if r.get("kind") == "step" and r.get("sharded")]
    if not sharded:
        raise ValueError("no measured sharded step to fit")
    default = [r for r in sharded if r.get("max_cover_size") is None] or sharded
    top = min(
        (r for r in default if r["n"] == max(q["n"] for q in default)),
        key=lambda r: r["sharded"]["step_s"],
    )
    s = top["sharded"]
    n, w = top["n"], top["workers"]
    a = sum(p["seconds"] for p in s["per_shard"]) / n
    slowest = max(p["seconds"] for p in s["per_shard"])
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


def round_trips(client: Any, workers: int, rows: int, calls: int) -> list[dict]:
    """Seconds of one round trip (every shard asked for a reduction of its
    rows, all awaited), shards held by actors or as a persisted ``dask.array``
    (the baseline); the median over ``calls`` rounds, one row each."""
    import dask.array as da

    from ax_chaining.distributed.candidates import cluster_workers

    addresses = cluster_workers(client)[:workers]
    rng = np.random.default_rng(0)
    shards = [rng.standard_normal((rows, 8)) for _ in addresses]
    v = rng.standard_normal((8, 4))

    def timed(fn: Any) -> float:
        fn()  # warm up: the first call places or compiles
        return _median_s(fn, calls)

    actors = [
        client.submit(_Echo, x, workers=[w], actor=True).result()
        for x, w in zip(shards, addresses, strict=True)
    ]
    array = da.concatenate([da.from_array(x, chunks=x.shape) for x in shards]).persist()
    out = {
        "actors": timed(lambda: [f.result() for f in [a.reduce(v) for a in actors]]),
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
    """The docs' markdown tables of the lines in ``paths``."""
    from benchmarks._tables import json_lines, md_row

    rows = json_lines(paths)
    steps = [r for r in rows if r.get("kind") == "step"]
    out = []
    if steps:
        out = [
            "| N | kernel | backend | workers | batch | single step (s) "
            "| sharded step (s) | ratio | per shard (s) | round trips "
            "| bytes sent / received | largest reply | placed once | same pick |",
            "|---:|---|---|---:|---|---:|---:|---:|---|---:|---|---:|---:|---|",
        ]
    for r in steps:
        s, one = r["sharded"], r.get("single")
        same = "yes" if r.get("same_pick") and r.get("same_covers") else "**no**"
        placed = s["bytes_placed"]
        out.append(
            md_row(
                f"{r['n']:,}",
                r["kernel"],
                r["backend"],
                r["workers"],
                r.get("batch_size") or "one machine's",
                "—" if one is None else f"{one['step_s']:.2f}",
                f"{s['step_s']:.2f}",
                "—" if one is None else f"{r['ratio']:.2f}",
                " / ".join(f"{p['seconds']:.2f}" for p in s["per_shard"]),
                s["round_trips"],
                f"{_kb(s['bytes_sent'])} / {_kb(s['bytes_received'])}",
                _kb(s["largest_reply"]),
                f"{placed / 1e6:.0f} MB" if placed else "0 (by path)",
                "—" if one is None else same,
            )
        )
    if steps:
        m = fit_model(steps)
        at = m["fitted_at"]
        out += [
            "",
            f"Fitted at N = {at['n']:,} on {at['workers']} workers ({at['backend']}): "
            f"a = {m['a_s_per_candidate'] * 1e6:.2f} µs per candidate, "
            f"R = {m['round_trips']} round trips, "
            f"ℓ = {m['latency_s_per_round_trip'] * 1e3:.1f} ms per round trip.",
            "",
            "| N | W | a N / W (s) | R ℓ (s) | step (s) | per worker (GiB) |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for p in m["predict"]:
            gib = p.get("worker_gib")
            out.append(
                md_row(
                    f"10^{len(str(p['n'])) - 1}",
                    p["workers"],
                    f"{p['shard_s']:.3g}",
                    f"{p['step_s'] - p['shard_s']:.3g}",
                    f"{p['step_s']:.3g}",
                    "—" if gib is None else f"{gib:.3g}",
                )
            )
    if trips := [r for r in rows if r.get("kind") == "round_trip"]:
        fitted = fit_model(steps)["round_trips"] if steps else None
        out += [
            *([""] if steps else []),
            "| backend | workers | rows a shard | one round trip (ms) "
            + ("| x the fitted step's round trips (s) |" if fitted else "|"),
            "|---|---:|---:|---:|" + ("---:|" if fitted else ""),
        ]
        for r in trips:
            cells = f"| {fitted * r['round_trip_s']:.2f} |" if fitted else "|"
            out.append(
                f"| {r['backend']} | {r['workers']} | {r['rows_per_shard']:,} "
                f"| {r['round_trip_s'] * 1e3:.1f} {cells}"
            )
    return "\n".join(out)


def _kb(b: int) -> str:
    return f"{b / 1e3:.0f} kB"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks distributed",
        description="One Chaining-UCB step on candidates sharded over a Dask "
        "LocalCluster against the single-machine step; JSON lines on stdout.",
    )
    add = parser.add_argument
    add("--sizes", type=int, nargs="+", default=[100_000])
    add("--workers", type=int, default=2, help="LocalCluster workers")
    backends = "the shards' backend: actors (the only one)"
    add("--backends", default="actors", help=backends)
    add("--kernel", default="tanimoto", choices=["tanimoto", "se"])
    add("--obs", type=int, default=50, help="observations")
    add("--repeats", type=int, default=3, help="steps per measure")
    add("--seed", type=int, default=0)
    add("--max-cover-size", type=int)
    add("--memory-budget-gib", type=float, help="ChainingUCB's memory_budget")
    add("--batch-size", type=int, help="rows per farthest-first batch on the shards")
    add("--threads", type=int, help="torch threads of one machine (default --workers)")
    add("--no-single", action="store_true", help="no one-machine step")
    add("--library-dir", help="write the fingerprints there and shard them by path")
    trips = "time one round trip (median of CALLS rounds, 10,000 rows a shard)"
    add("--round-trips", type=int, metavar="CALLS", help=trips)
    add("--small", action="store_true", help="seconds: N = 6,000")
    add("--table", nargs="+", help="JSON-lines files to tabulate")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    for b in (b for b in args.backends.split(",") if b and b not in BACKENDS):
        parser.error(
            f"--backends: {b!r} is not a backend: ShardedCandidates has one, "
            "Dask actors (--backends actors); the 'futures' and 'local' "
            "backends were removed."
        )
    if args.small:
        args.sizes, args.repeats, args.obs = [6000], 1, 20
        args.max_cover_size = args.max_cover_size or 64
    try:
        import distributed
    except ImportError:
        need = "The distributed benchmark needs pip install 'ax-chaining[distributed]'."
        print(need, file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads or args.workers)
    command = "python -m benchmarks distributed " + " ".join(argv)
    info = {"kind": "command", "command": command, "machine": _machine()}
    print(json.dumps(info), flush=True)
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
            _progress(f"N = {n:,}: sharded step x{args.repeats}")
            sharded = _sharded_steps(problem, client, args)
            # A shard's resident bytes per candidate: its rows of the factor,
            # mean, variance and distances, and its features.
            features = 256 if args.kernel == "tanimoto" else 2 * 8
            row: dict[str, Any] = {
                "kind": "step",
                "n": n,
                "kernel": args.kernel,
                "obs": args.obs,
                "backend": "actors",
                "workers": args.workers,
                "repeats": args.repeats,
                "max_cover_size": args.max_cover_size,
                "batch_size": args.batch_size,
                "bytes_per_row_on_worker": (args.obs + 3) * 8 + features,
                "single": single,
                "sharded": sharded,
            }
            message = f"N = {n:,}: sharded step {sharded['step_s']:.2f} s"
            if single is not None:
                row["ratio"] = sharded["step_s"] / single["step_s"]
                row["same_pick"] = sharded["pick"] == single["pick"]
                row["same_covers"] = sharded["cover_sizes"] == single["cover_sizes"]
                message += f", ratio {row['ratio']:.2f}"
            _progress(message)
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
