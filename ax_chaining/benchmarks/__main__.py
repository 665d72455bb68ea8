r"""Command line of the benchmarks: ``python -m ax_chaining.benchmarks ...``.

Subcommands:

``paper``
    The experiments of Section 4 of Contal, Malherbe & Vayatis (2015) (see
    :mod:`ax_chaining.benchmarks.runner`): per-run JSON files, ``summary.md``,
    ``summary.json``, ``simple_regret.png`` (Figure 2) and
    ``cumulative_regret.png`` under ``--out``.
``figure1``
    The paper's Figure 1 on a 1-D toy problem, saved as ``figure1.png``.
``speed``
    Speed and memory of one acquisition step (:mod:`ax_chaining.benchmarks.speed`);
    arguments after ``speed`` are passed to it.
``certificate``
    Soundness and usefulness of the regret certificates on GP samples
    (:mod:`ax_chaining.benchmarks.certificate`); arguments after
    ``certificate`` are passed to it.

Examples::

    python -m ax_chaining.benchmarks paper --small --out results/paper/small
    python -m ax_chaining.benchmarks paper --problem se --n 2000 --runs 32 --iters 100
    python -m ax_chaining.benchmarks figure1 --out results/paper
    python -m ax_chaining.benchmarks speed --help
    python -m ax_chaining.benchmarks certificate --small --out results/certificate_small
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
    from ax_chaining.benchmarks.runner import METHODS, PAPER_CONFIG, SMALL_CONFIG

    parser = argparse.ArgumentParser(
        prog="python -m ax_chaining.benchmarks",
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

    sub.add_parser(
        "speed",
        help="speed benchmark (ax_chaining.benchmarks.speed; see `speed --help`)",
        add_help=False,
    )
    sub.add_parser(
        "certificate",
        help="soundness and usefulness of the regret certificates "
        "(see `certificate --help`)",
        add_help=False,
    )
    return parser


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
        from ax_chaining.benchmarks import speed
    except ModuleNotFoundError as e:
        if e.name != "ax_chaining.benchmarks.speed":
            raise
        print(
            "The speed benchmark (ax_chaining/benchmarks/speed.py) is not available "
            "in this checkout.",
            file=sys.stderr,
        )
        return 2
    return int(speed.main(argv) or 0)


def _paper(args: argparse.Namespace, argv: list[str]) -> int:
    from ax_chaining.benchmarks.runner import (
        METHODS,
        PAPER_CONFIG,
        PROBLEMS,
        SMALL_CONFIG,
        BenchmarkConfig,
        format_summary_markdown,
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
        "command": "python -m ax_chaining.benchmarks " + shlex.join(argv),
        "wall_seconds_this_call": elapsed,
    }
    md_path, json_path = write_summary(summary, out, extra=extra)
    print()
    print(format_summary_markdown(summary))
    for line in summary_json_lines(summary):
        print(line)
    if not args.no_plot and summary["rows"]:
        from ax_chaining.benchmarks.plots import (
            plot_cumulative_regret,
            plot_simple_regret,
        )

        plot_simple_regret(summary, out / "simple_regret.png", logy=args.logy)
        plot_cumulative_regret(summary, out / "cumulative_regret.png")
        print(f"figures: {out / 'simple_regret.png'}, {out / 'cumulative_regret.png'}")
    print(f"summary: {md_path}, {json_path} ({elapsed:.0f} s)")
    return 0


def _figure1(args: argparse.Namespace) -> int:
    from ax_chaining.benchmarks.plots import figure1_data, plot_figure1

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
    r"""Entry point of ``python -m ax_chaining.benchmarks``.

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
        from ax_chaining.benchmarks import certificate

        return int(certificate.main(argv[1:]) or 0)
    args = _build_parser().parse_args(argv)
    if args.command == "paper":
        return _paper(args, argv)
    if args.command == "figure1":
        return _figure1(args)
    raise AssertionError(args.command)  # pragma: no cover - argparse guards this


if __name__ == "__main__":
    sys.exit(main())
