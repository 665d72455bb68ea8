"""Command line of the benchmarks: ``python -m benchmarks SUBCOMMAND ...``;
the subcommands of :data:`DELEGATED` parse their own arguments.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks._tables import fill_preset, parse_names
from benchmarks.records import LAYOUTS, add_record_options, command_line, records_of

#: Subcommands that parse their own arguments: name -> module of this package.
DELEGATED = {
    "speed": "speed",
    "validity": "validity",
    "limit": "limit",
    "tails": "tails_bench",
    "models": "models",
    "bonus": "bonus",
    "screening": "screening",
    "distributed": "distributed_bench",
    "certificate": "certificate_bench",
    "stopping": "stopping_bench",
}


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmarks of Chaining-UCB (Contal et al., 2015).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    paper = sub.add_parser("paper", help="the experiments of Section 4 (Figure 2)")
    _selection(paper, "--problem", "runner", "PROBLEMS", default="all")
    paper.add_argument("--runs", type=int, help="runs (seeds 0..R-1)")
    paper.add_argument("--iters", type=int, help="queries per run (T)")
    paper.add_argument("--n", type=int, help="number of candidates N")
    paper.add_argument("--threads", type=int, help="torch threads per process")
    paper.add_argument("--logy", action="store_true", help="symmetric-log y axis")
    add_record_options(paper, "results/paper", "small preset (a few minutes)")
    fig1 = sub.add_parser("figure1", help="the paper's Figure 1 (1-D illustration)")
    fig1.add_argument("--out", default="results/paper", help="output directory")
    fig1.add_argument("--seed", type=int, default=0, help="seed of the toy function")
    fig1.add_argument("--obs-seed", type=int, default=1, help="seed of observations")
    fig1.add_argument("--num-obs", type=int, default=6, help="number of observations")
    fig1.add_argument("--n", type=int, default=500, help="grid size")
    harness = sub.add_parser("harness", help="Ax's benchmark harness (ax.benchmark)")
    _selection(harness, "--problem", "harness_bench", "PROBLEMS")
    harness.add_argument("--replications", type=int, help="seeds 0..R-1")
    harness.add_argument("--trials", type=int, help="trials per replication")
    harness.add_argument("--init", type=int, help="initial trials")
    add_record_options(harness, "results/harness", "small preset (a test)")
    for name, module, what in (
        ("molecules", "molecules_bench", "molecule libraries (Tanimoto kernel)"),
        ("reactions", "reactions_bench", "a reaction table (per-component encodings)"),
    ):
        p = sub.add_parser(name, help=f"Ax Client loops over {what}")
        _selection(p, "--dataset", module, "DATASET_NAMES")
        p.add_argument("--runs", type=int, help="runs (seeds 0..R-1)")
        p.add_argument("--queries", type=int, help="queries after init")
        p.add_argument("--init", type=int, help="initial points")
        add_record_options(p, f"results/{name}", "small preset (a test)")
        if name == "molecules":
            p.add_argument(
                "--baseline", help="the method the paired differences subtract"
            )
    for name in DELEGATED:
        sub.add_parser(name, help=f"see `{name} --help`", add_help=False)
    kinds = tuple(LAYOUTS)
    pack = sub.add_parser("pack", help="pack a working directory's runs (.jsonl.gz)")
    pack.add_argument("kind", choices=kinds, help="the benchmark of the runs")
    pack.add_argument("workdir", help="the working directory (--out of the run)")
    pack.add_argument("file", help="the packed file to write (.jsonl.gz)")
    unpack = sub.add_parser("unpack", help="a packed file's runs as run files")
    unpack.add_argument("kind", choices=kinds, help="the benchmark of the records")
    unpack.add_argument("file", help="the packed file (.jsonl.gz)")
    unpack.add_argument("workdir", help="the working directory to write")
    return parser


def _selection(
    parser: argparse.ArgumentParser,
    flag: str,
    module: str,
    names: str,
    default: str | None = None,
) -> None:
    """``flag`` (problems or datasets) and ``--methods`` of a benchmark module
    (its ``names`` and ``METHODS``; ``DEFAULT_METHODS`` if it has them)."""
    mod = importlib.import_module(f"benchmarks.{module}")
    methods = getattr(mod, "DEFAULT_METHODS", mod.METHODS)
    subset = f"comma-separated subset of {','.join(getattr(mod, names))}, or all"
    parser.add_argument(flag, default=default, help=subset)
    subset = f"comma-separated subset of {','.join(mod.METHODS)}"
    parser.add_argument("--methods", default=",".join(methods), help=subset)


def _summary_outputs(
    args: argparse.Namespace,
    argv: list[str],
    summary: dict[str, Any],
    markdown: str,
    config: dict[str, Any],
    start: float,
    figures: Callable[[dict[str, Any], Path], list[Path]],
) -> None:
    """``summary.md``, ``summary.json`` and the figures under ``--out``; a
    summary-only call records no wall time (same records, same bytes)."""
    from benchmarks.records import write_summary

    out, elapsed = Path(args.out), time.perf_counter() - start
    meta: dict[str, Any] = {"config": config}
    if not args.summary_only:
        meta["wall_seconds_this_call"] = elapsed
    paths = write_summary(out, command_line(argv), markdown, {**meta, **summary})
    print()
    print(markdown)
    if not args.no_plot and summary["rows"]:
        print("figures: " + ", ".join(map(str, figures(summary, out))))
    print(f"summary: {paths[0]}, {paths[1]} ({elapsed:.0f} s)")


def _check(make: Callable[[], Any]) -> Any:
    try:
        return make()
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None


def _ax_benchmark(
    args: argparse.Namespace,
    argv: list[str],
    module: Any,
    field: str,
    names: list[str],
    config: Any,
    run: Callable[..., list[dict[str, Any]]],
    plot: Callable[..., Path],
    png: str,
    **bench: Any,
) -> int:
    """Run (or read) the records of ``harness``, ``molecules`` or ``reactions``,
    then write its summary and its figure ``png`` (drawn by ``plot``)."""
    import logging

    from ax.utils.common.logger import set_stderr_log_level

    set_stderr_log_level(logging.WARNING)  # Ax logs every trial at INFO
    start = time.perf_counter()
    methods = parse_names(args.methods, module.METHODS, "method")

    def fresh() -> list[dict[str, Any]]:
        sizes = " ".join(
            f"{k}={v}" for k, v in asdict(config).items() if k != "datasets"
        )
        print(
            f"{args.command}: {field}s={','.join(names)} methods={','.join(methods)} "
            f"{sizes} out={args.out}",
            flush=True,
        )
        options = {"force": args.force, "jobs": args.jobs}
        return run(methods, config, args.out, progress=not args.no_progress, **options)

    records = [
        r
        for r in records_of(args, args.command, fresh)
        if r[field] in names and r["method"] in methods
    ]
    summary = module.summarize(records, **bench)
    markdown = module.format_markdown(summary, **bench)
    meta = {"summary_only": True} if args.summary_only else asdict(config)
    figures = lambda s, out: [plot(s, out / png, **bench)]  # noqa: E731
    _summary_outputs(args, argv, summary, markdown, meta, start, figures)
    return 0


def _harness(args: argparse.Namespace, argv: list[str]) -> int:
    from benchmarks import harness_bench as h

    p = h.SMALL_CONFIG if args.small else h.FULL_CONFIG
    fill_preset(args, {"trials": p.num_trials, "init": p.init_trials})
    fill_preset(args, {"replications": p.replications})
    config = _check(lambda: h.HarnessConfig(args.trials, args.init, args.replications))
    default = h.SMALL_PROBLEMS if args.small else h.PROBLEMS
    problems = parse_names(args.problem or ",".join(default), h.PROBLEMS, "problem")
    run = functools.partial(h.run_harness, problems)
    return _ax_benchmark(
        args, argv, h, "problem", problems, config, run, h.plot_scores, "scores.png"
    )


def _lookup_tables(args: argparse.Namespace, argv: list[str], module: Any) -> int:
    """``molecules`` or ``reactions``."""
    p = module.SMALL_CONFIG if args.small else module.FULL_CONFIG
    fill_preset(args, {"dataset": ",".join(p.datasets), "runs": p.runs})
    fill_preset(args, {"queries": p.queries, "init": p.n_init})
    datasets = parse_names(args.dataset, module.DATASET_NAMES, "dataset")
    sizes = {"runs": args.runs, "queries": args.queries, "n_init": args.init}
    config = _check(lambda: replace(p, datasets=tuple(datasets), **sizes))
    bench: dict[str, Any] = {}
    if (baseline := getattr(args, "baseline", None)) is not None:
        methods = parse_names(args.methods, module.METHODS, "method")
        if baseline not in methods:
            raise SystemExit(
                f"error: --baseline must be one of --methods ({','.join(methods)}), "
                f"got {baseline!r}"
            )
        bench["bench"] = replace(module.BENCHMARK, baseline=baseline)
    plot, png = module.plot_regret, "simple_regret.png"
    return _ax_benchmark(
        args, argv, module, "dataset", datasets, config, module.run, plot, png, **bench
    )


def _paper(args: argparse.Namespace, argv: list[str]) -> int:
    from benchmarks import runner

    p = runner.SMALL_CONFIG if args.small else runner.PAPER_CONFIG
    fill_preset(args, {"n": p.n, "iters": p.iters, "runs": p.runs})
    config = runner.BenchmarkConfig(n=args.n, iters=args.iters, runs=args.runs)
    if config.n < config.n_init or config.iters < 1 or config.runs < 1:
        raise SystemExit(
            f"error: need --n >= {config.n_init}, --iters >= 1 and --runs >= 1; "
            f"got --n {config.n}, --iters {config.iters}, --runs {config.runs}."
        )
    problems = parse_names(args.problem, runner.PROBLEMS, "problem")
    methods = parse_names(args.methods, runner.METHODS, "method")
    print(
        f"paper: problems={','.join(problems)} methods={','.join(methods)} "
        f"N={config.n} runs={config.runs} iters={config.iters} out={args.out}",
        flush=True,
    )
    start = time.perf_counter()

    def run() -> list[dict[str, Any]]:
        options = {"jobs": args.jobs, "threads": args.threads, "force": args.force}
        options |= {"out": args.out, "progress": not args.no_progress}
        return runner.run_benchmark(problems, methods, config=config, **options)

    # Summary-only: whatever finished; the `runs` column says how many.
    records = runner.select_results(
        records_of(args, "paper", run), problems, methods, config
    )
    summary = runner.summarize(records)

    def figures(summary: dict[str, Any], out: Path) -> list[Path]:
        from benchmarks.plots import plot_cumulative_regret, plot_simple_regret

        paths = [out / "simple_regret.png", out / "cumulative_regret.png"]
        plot_simple_regret(summary, paths[0], logy=args.logy)
        plot_cumulative_regret(summary, paths[1])
        return paths

    # The methods asked for that have records (older records may lack one).
    ran = [m for m in methods if any(r["method"] == m for r in records)]
    markdown = runner.format_summary_markdown(summary)
    meta = {**config.run_key(), "runs": config.runs}
    full = {"problems": problems, "methods": ran, **summary}
    _summary_outputs(args, argv, full, markdown, meta, start, figures)
    for row in summary["rows"]:
        print(json.dumps({"summary_row": row}, sort_keys=True))
    return 0


def _pack(args: argparse.Namespace) -> int:
    from benchmarks.records import pack, unpack

    try:
        if args.command == "pack":
            count = pack(args.kind, args.workdir, args.file)
            print(f"packed {count} {args.kind} records into {args.file}")
        else:
            count = unpack(args.kind, args.file, args.workdir)
            print(f"wrote {count} {args.kind} run files under {args.workdir}")
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    return 0


def _figure1(args: argparse.Namespace) -> int:
    from benchmarks.plots import figure1_data, plot_figure1

    data = figure1_data(args.n, args.seed, args.num_obs, obs_seed=args.obs_seed)
    path = Path(args.out) / "figure1.png"
    plot_figure1(path, data=data)
    covers = data["covers"]
    print(covers.summary())
    info = {"figure1": str(path), "t": data["t"], "beta": data["beta"]}
    info["cover_sizes"] = covers.cover_sizes.tolist()
    for key in ("chaining", "gp_ucb"):
        info[f"argmax_{key}"] = float(data["x"][data[key].argmax()])
    print(json.dumps(info))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m benchmarks``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:  # it parses its own arguments (and --help)
        name = f"benchmarks.{DELEGATED[argv[0]]}"
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            print(f"{name} is not available in this checkout.", file=sys.stderr)
            return 2
        return int(module.main(argv[1:]) or 0)
    args = _build_parser().parse_args(argv)
    if args.command == "paper":
        return _paper(args, argv)
    if args.command == "figure1":
        return _figure1(args)
    if args.command == "harness":
        return _harness(args, argv)
    if args.command in ("molecules", "reactions"):
        module = importlib.import_module(f"benchmarks.{args.command}_bench")
        return _lookup_tables(args, argv, module)
    return _pack(args)


if __name__ == "__main__":
    sys.exit(main())
