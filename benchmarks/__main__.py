r"""Command line of the benchmarks: ``python -m benchmarks ...``.

Subcommands:

``paper``
    The experiments of Section 4 of Contal, Malherbe & Vayatis (2015) (see
    :mod:`benchmarks.runner`): per-run JSON files, ``summary.md``,
    ``summary.json``, ``simple_regret.png`` (Figure 2) and
    ``cumulative_regret.png`` under ``--out``.
``figure1``
    The paper's Figure 1 on a 1-D toy problem, saved as ``figure1.png``.
``harness``
    Chaining-UCB and baselines in Ax's own benchmark harness (``ax.benchmark``)
    on discrete and discretized problems (:mod:`benchmarks.harness`):
    one JSON record per replication (resumable), ``summary.md``,
    ``summary.json`` and ``scores.png`` under ``--out``.
``molecules``
    Ax ``Client`` loops over real molecule libraries (ESOL, FreeSolv) with a
    Tanimoto kernel on Morgan fingerprints (:mod:`benchmarks.molecules`).
``speed``
    Speed and memory of one acquisition step (:mod:`benchmarks.speed`);
    arguments after ``speed`` are passed to it.
``certificate``
    Soundness and usefulness of the regret certificates on GP samples
    (:mod:`benchmarks.certificate`); arguments after
    ``certificate`` are passed to it.

Examples::

    python -m benchmarks paper --small --out results/paper/small
    python -m benchmarks paper --problem se --n 2000 --runs 32 --iters 100
    python -m benchmarks figure1 --out results/paper
    python -m benchmarks harness --small --out results/harness/small
    python -m benchmarks molecules --small --out results/molecules/small
    python -m benchmarks speed --help
    python -m benchmarks certificate --small --out results/certificate_small
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
    from benchmarks.runner import METHODS, PAPER_CONFIG, SMALL_CONFIG

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmarks of Chaining-UCB (Contal et al., 2015).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    paper = sub.add_parser(
        "paper",
        help="the experiments of Section 4 (Figure 2)",
        description=(
            "Run or resume the paper's experiments. Defaults are the paper's "
            f"(N={PAPER_CONFIG.n}, {PAPER_CONFIG.runs} runs, {PAPER_CONFIG.iters} "
            f"iterations); --small uses N={SMALL_CONFIG.n}, {SMALL_CONFIG.runs} "
            f"runs, {SMALL_CONFIG.iters} iterations. Explicit --n/--runs/--iters "
            "override either preset. Finished runs found under --out are reused."
        ),
    )
    paper.add_argument(
        "--problem",
        default="all",
        help="se, himmelblau, graph, a comma-separated list, or all (default)",
    )
    paper.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated subset of {','.join(METHODS)} (default: all)",
    )
    paper.add_argument("--runs", type=int, default=None, help="runs (seeds 0..R-1)")
    paper.add_argument("--iters", type=int, default=None, help="queries per run (T)")
    paper.add_argument("--n", type=int, default=None, help="number of candidates N")
    paper.add_argument(
        "--small", action="store_true", help="small preset (a few minutes)"
    )
    paper.add_argument("--out", default="results/paper", help="output directory")
    paper.add_argument("--jobs", type=int, default=1, help="worker processes")
    paper.add_argument(
        "--threads", type=int, default=None, help="torch threads per process"
    )
    paper.add_argument(
        "--force", action="store_true", help="recompute runs that already exist"
    )
    paper.add_argument("--no-progress", action="store_true", help="no progress bar")
    paper.add_argument("--no-plot", action="store_true", help="skip the figures")
    paper.add_argument(
        "--summary-only",
        action="store_true",
        help="run nothing: tables and figures from the complete runs stored",
    )
    paper.add_argument(
        "--logy", action="store_true", help="symmetric-log y axis in the figure"
    )

    fig1 = sub.add_parser(
        "figure1",
        help="the paper's Figure 1 (1-D illustration of the two UCB targets)",
    )
    fig1.add_argument("--out", default="results/paper", help="output directory")
    fig1.add_argument("--seed", type=int, default=0, help="seed of the toy function")
    fig1.add_argument("--obs-seed", type=int, default=1, help="seed of observations")
    fig1.add_argument("--num-obs", type=int, default=6, help="number of observations")
    fig1.add_argument("--n", type=int, default=500, help="grid size")

    _add_harness_parser(sub)
    _add_molecules_parser(sub)

    sub.add_parser(
        "speed",
        help="speed benchmark (benchmarks.speed; see `speed --help`)",
        add_help=False,
    )
    sub.add_parser(
        "certificate",
        help="soundness and usefulness of the regret certificates "
        "(see `certificate --help`)",
        add_help=False,
    )
    return parser


def _add_harness_parser(sub: Any) -> None:
    from benchmarks.harness import (
        FULL_CONFIG,
        METHODS,
        PROBLEMS,
        SMALL_CONFIG,
        SMALL_PROBLEMS,
    )

    h = sub.add_parser(
        "harness",
        help="Ax's own benchmark harness (ax.benchmark) on discrete problems",
        description=(
            "Run or resume Chaining-UCB, GP-UCB, stock UCB, Ax's default (Sobol + "
            "qLogNEI) and Sobol through ax.benchmark.benchmark_replication. "
            f"Defaults: all problems, {FULL_CONFIG.replications} replications of "
            f"{FULL_CONFIG.num_trials} trials ({FULL_CONFIG.init_trials} initial). "
            f"--small: {','.join(SMALL_PROBLEMS)}, {SMALL_CONFIG.replications} "
            f"replications of {SMALL_CONFIG.num_trials} trials. Explicit options "
            "override either preset; finished replications under --out are reused."
        ),
    )
    h.add_argument(
        "--problem",
        default=None,
        help=f"comma-separated subset of {','.join(PROBLEMS)}, or all",
    )
    h.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated subset of {','.join(METHODS)} (default: all)",
    )
    h.add_argument("--replications", type=int, default=None, help="seeds 0..R-1")
    h.add_argument("--trials", type=int, default=None, help="trials per replication")
    h.add_argument("--init", type=int, default=None, help="initial trials")
    _add_record_options(h, "results/harness")


def _add_record_options(parser: argparse.ArgumentParser, out: str) -> None:
    """The options the resumable record-per-run subcommands share."""
    parser.add_argument("--small", action="store_true", help="small preset (a test)")
    parser.add_argument("--out", default=out, help="output directory")
    parser.add_argument("--force", action="store_true", help="recompute stored runs")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="worker processes (one torch thread each); results do not depend on it",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-plot", action="store_true", help="skip the figure")
    parser.add_argument(
        "--summary-only",
        action="store_true",
        help="summarize the records under --out without running anything",
    )


def _add_molecules_parser(sub: Any) -> None:
    from benchmarks.molecules import (
        DATASET_NAMES,
        FULL_CONFIG,
        METHODS,
        SMALL_CONFIG,
    )

    m = sub.add_parser(
        "molecules",
        help="Ax Client loops over molecule libraries (Tanimoto kernel)",
        description=(
            "Run or resume Chaining-UCB, GP-UCB, stock UCB, LogEI and random search "
            "over a molecule library, through candidate_index_parameter + "
            "precomputed_kernel_surrogate_spec (Tanimoto on Morgan fingerprints). "
            f"Defaults: {','.join(FULL_CONFIG.datasets)}, {FULL_CONFIG.runs} runs, "
            f"{FULL_CONFIG.n_init} initial points, {FULL_CONFIG.queries} queries. "
            f"--small: {','.join(SMALL_CONFIG.datasets)}, {SMALL_CONFIG.runs} runs, "
            f"{SMALL_CONFIG.queries} queries. Explicit options override either "
            "preset; finished runs under --out are reused."
        ),
    )
    m.add_argument(
        "--dataset",
        default=None,
        help=f"comma-separated subset of {','.join(DATASET_NAMES)}, or all",
    )
    m.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated subset of {','.join(METHODS)} (default: all)",
    )
    m.add_argument("--runs", type=int, default=None, help="runs (seeds 0..R-1)")
    m.add_argument("--queries", type=int, default=None, help="queries after init")
    m.add_argument("--init", type=int, default=None, help="initial points")
    _add_record_options(m, "results/molecules")


def _harness(args: argparse.Namespace, argv: list[str]) -> int:
    from benchmarks import harness as h
    from benchmarks._tables import load_records

    preset = h.SMALL_CONFIG if args.small else h.FULL_CONFIG
    try:
        config = h.HarnessConfig(
            num_trials=args.trials if args.trials is not None else preset.num_trials,
            init_trials=args.init if args.init is not None else preset.init_trials,
            replications=(
                args.replications
                if args.replications is not None
                else preset.replications
            ),
        )
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    default = h.SMALL_PROBLEMS if args.small else h.PROBLEMS
    problems = _split(args.problem or ",".join(default), h.PROBLEMS, "problem")
    methods = _split(args.methods, h.METHODS, "method")
    out = Path(args.out)
    _quiet_ax()
    start = time.perf_counter()
    if args.summary_only:
        records = [
            r
            for r in load_records(out)
            if r["problem"] in problems and r["method"] in methods
        ]
    else:
        print(
            f"harness: problems={','.join(problems)} methods={','.join(methods)} "
            f"replications={config.replications} trials={config.num_trials} "
            f"init={config.init_trials} out={out}",
            flush=True,
        )
        records = h.run_harness(
            problems,
            methods,
            config,
            out,
            progress=not args.no_progress,
            force=args.force,
            jobs=args.jobs,
        )
    elapsed = time.perf_counter() - start
    summary = h.summarize(records)
    _write_summary(
        out,
        summary,
        h.format_markdown(summary),
        argv,
        elapsed,
        {"summary_only": True} if args.summary_only else asdict(config),
    )
    if not args.no_plot and summary["rows"]:
        print(f"figure: {h.plot_scores(summary, out / 'scores.png')}")
    return 0


def _molecules(args: argparse.Namespace, argv: list[str]) -> int:
    from benchmarks import molecules as mol
    from benchmarks._tables import load_records

    preset = mol.SMALL_CONFIG if args.small else mol.FULL_CONFIG
    datasets = _split(
        args.dataset or ",".join(preset.datasets), mol.DATASET_NAMES, "dataset"
    )
    try:
        config = mol.MoleculeConfig(
            datasets=tuple(datasets),
            runs=args.runs if args.runs is not None else preset.runs,
            queries=args.queries if args.queries is not None else preset.queries,
            n_init=args.init if args.init is not None else preset.n_init,
        )
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    methods = _split(args.methods, mol.METHODS, "method")
    out = Path(args.out)
    _quiet_ax()
    start = time.perf_counter()
    if args.summary_only:
        records = [
            r
            for r in load_records(out)
            if r["dataset"] in datasets and r["method"] in methods
        ]
    else:
        print(
            f"molecules: datasets={','.join(datasets)} methods={','.join(methods)} "
            f"runs={config.runs} init={config.n_init} queries={config.queries} "
            f"out={out}",
            flush=True,
        )
        records = mol.run_molecules(
            methods,
            config,
            out,
            progress=not args.no_progress,
            force=args.force,
            jobs=args.jobs,
        )
    elapsed = time.perf_counter() - start
    summary = mol.summarize(records)
    _write_summary(
        out,
        summary,
        mol.format_markdown(summary),
        argv,
        elapsed,
        {"summary_only": True} if args.summary_only else asdict(config),
    )
    if not args.no_plot and summary["rows"]:
        print(f"figure: {mol.plot_regret(summary, out / 'simple_regret.png')}")
    return 0


def _quiet_ax() -> None:
    # Ax's Client logs every trial at INFO; the progress bar says enough.
    import logging

    from ax.utils.common.logger import set_stderr_log_level

    set_stderr_log_level(logging.WARNING)


def _write_summary(
    out: Path,
    summary: dict[str, Any],
    markdown: str,
    argv: list[str],
    elapsed: float,
    config: dict[str, Any],
) -> None:
    from benchmarks._tables import write_json

    command = "python -m benchmarks " + shlex.join(argv)
    meta = {"command": command, "config": config, "wall_seconds_this_call": elapsed}
    write_json({**meta, **summary}, out / "summary.json")
    text = f"```bash\n{command}\n```\n\n{markdown}\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(text)
    print()
    print(markdown)
    print(f"summary: {out / 'summary.md'}, {out / 'summary.json'} ({elapsed:.0f} s)")


def _split(value: str, allowed: tuple[str, ...], what: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if names == ["all"]:
        return list(allowed)
    bad = [v for v in names if v not in allowed]
    if bad or not names:
        raise SystemExit(
            f"error: unknown {what} {bad or value!r}; choose from "
            f"{', '.join(allowed)} (or all)."
        )
    return names


def _speed(argv: list[str]) -> int:
    try:
        from benchmarks import speed
    except ModuleNotFoundError as e:
        if e.name != "benchmarks.speed":
            raise
        print(
            "The speed benchmark (ax_chaining/benchmarks/speed.py) is not available "
            "in this checkout.",
            file=sys.stderr,
        )
        return 2
    return int(speed.main(argv) or 0)


def _paper(args: argparse.Namespace, argv: list[str]) -> int:
    from benchmarks.runner import (
        METHODS,
        PAPER_CONFIG,
        PROBLEMS,
        SMALL_CONFIG,
        BenchmarkConfig,
        format_summary_markdown,
        load_results,
        run_benchmark,
        summarize,
        summary_json_lines,
        write_summary,
    )

    preset = SMALL_CONFIG if args.small else PAPER_CONFIG
    config = BenchmarkConfig(
        n=args.n if args.n is not None else preset.n,
        iters=args.iters if args.iters is not None else preset.iters,
        runs=args.runs if args.runs is not None else preset.runs,
    )
    if config.n < config.n_init or config.iters < 1 or config.runs < 1:
        raise SystemExit(
            f"error: need --n >= {config.n_init}, --iters >= 1 and --runs >= 1."
        )
    problems = _split(args.problem, PROBLEMS, "problem")
    methods = _split(args.methods, METHODS, "method")
    out = Path(args.out)
    print(
        f"paper: problems={','.join(problems)} methods={','.join(methods)} "
        f"N={config.n} runs={config.runs} iters={config.iters} out={out}",
        flush=True,
    )
    start = time.perf_counter()
    if args.summary_only:
        # Whatever finished (e.g. a run interrupted to be resumed later): the
        # table's `runs` column says how many runs each row holds.
        records = load_results(out, problems, methods, config)
    else:
        records = run_benchmark(
            problems=problems,
            methods=methods,
            out=out,
            jobs=args.jobs,
            threads=args.threads,
            force=args.force,
            progress=not args.no_progress,
            config=config,
        )
    elapsed = time.perf_counter() - start
    summary = summarize(records)
    extra = {
        "config": {**config.run_key(), "runs": config.runs},
        "problems": problems,
        "methods": methods,
        "command": "python -m benchmarks " + shlex.join(argv),
        "wall_seconds_this_call": elapsed,
    }
    md_path, json_path = write_summary(summary, out, extra=extra)
    print()
    print(format_summary_markdown(summary))
    for line in summary_json_lines(summary):
        print(line)
    if not args.no_plot and summary["rows"]:
        from benchmarks.plots import (
            plot_cumulative_regret,
            plot_simple_regret,
        )

        plot_simple_regret(summary, out / "simple_regret.png", logy=args.logy)
        plot_cumulative_regret(summary, out / "cumulative_regret.png")
        print(f"figures: {out / 'simple_regret.png'}, {out / 'cumulative_regret.png'}")
    print(f"summary: {md_path}, {json_path} ({elapsed:.0f} s)")
    return 0


def _figure1(args: argparse.Namespace) -> int:
    from benchmarks.plots import figure1_data, plot_figure1

    data = figure1_data(
        n=args.n, seed=args.seed, num_obs=args.num_obs, obs_seed=args.obs_seed
    )
    path = Path(args.out) / "figure1.png"
    plot_figure1(path, data=data)
    covers = data["covers"]
    print(covers.summary())
    print(
        json.dumps(
            {
                "figure1": str(path),
                "t": data["t"],
                "beta": data["beta"],
                "cover_sizes": covers.cover_sizes.tolist(),
                "argmax_chaining": float(data["x"][data["chaining"].argmax()]),
                "argmax_gp_ucb": float(data["x"][data["gp_ucb"].argmax()]),
            }
        )
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    r"""Entry point of ``python -m benchmarks``.

    Args:
        argv: Arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The exit status.

    Example:
        >>> main(["paper", "--small", "--problem", "graph", "--runs", "2"])
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # `speed` owns its arguments (including --help): dispatch before parsing.
    if argv and argv[0] == "speed":
        return _speed(argv[1:])
    if argv and argv[0] == "certificate":
        from benchmarks import certificate

        return int(certificate.main(argv[1:]) or 0)
    args = _build_parser().parse_args(argv)
    if args.command == "paper":
        return _paper(args, argv)
    if args.command == "figure1":
        return _figure1(args)
    if args.command == "harness":
        return _harness(args, argv)
    if args.command == "molecules":
        return _molecules(args, argv)
    raise AssertionError(args.command)  # pragma: no cover - argparse guards this


if __name__ == "__main__":
    sys.exit(main())
