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
    on discrete and discretized problems (:mod:`benchmarks.harness_bench`):
    one JSON record per replication (resumable), ``summary.md``,
    ``summary.json`` and ``scores.png`` under ``--out``.
``molecules``
    Ax ``Client`` loops over real molecule libraries (ESOL, FreeSolv,
    Lipophilicity) with a Tanimoto kernel on Morgan fingerprints or the
    package's default molecule model, and BayBE beside them
    (:mod:`benchmarks.molecules_bench`, :mod:`benchmarks.baybe_loop`).
``reactions``
    Ax ``Client`` loops over the Buchwald-Hartwig reaction table, one-hot and
    per-component RDKit descriptors, and BayBE beside them
    (:mod:`benchmarks.reactions_bench`).
``speed``
    Speed and memory of one acquisition step (:mod:`benchmarks.speed`);
    arguments after ``speed`` are passed to it.
``validity``
    Certificates under fitted hyperparameters in Ax loops, and stopping
    rules compared (:mod:`benchmarks.validity`); arguments are passed to it.
``limit``
    The certificate beside the Monte Carlo quantile of the regret under the
    same posterior (:mod:`benchmarks.limit`); arguments are passed to it.
``tails``
    Refits of the validity benchmark's loops, the certificate with one
    Student-t tail law at a time: how the cap of the default's degrees of
    freedom was chosen (:mod:`benchmarks.tails_bench`); arguments are passed to it.
``models``
    Leave-one-out fit of every molecule encoding x prior on ESOL, FreeSolv
    and Lipophilicity: how the default molecule model was chosen
    (:mod:`benchmarks.models`); arguments are passed to it.
``bonus``
    Chaining-UCB's bonus against GP-UCB's over a molecule library, step by
    step (:mod:`benchmarks.bonus`); arguments are passed to it.
``screening``
    Ax loops over nested MOSES libraries up to 10^6 molecules, MolPAL's
    top-k metric, seconds and memory (:mod:`benchmarks.screening`);
    arguments are passed to it.
``distributed``
    One step on candidates sharded over a Dask ``LocalCluster`` against the
    single-machine step in the same run, per-shard seconds, bytes per step
    and a time model (:mod:`benchmarks.distributed_bench`); arguments are passed
    to it.
``certificate``
    Soundness and usefulness of the regret certificates on GP samples
    (:mod:`benchmarks.certificate_bench`); arguments after
    ``certificate`` are passed to it.
``pack`` / ``unpack``
    A working directory's per-run JSON files to one packed file
    (``benchmarks/results/<benchmark>.jsonl.gz``, what is committed) and back
    (:mod:`benchmarks.records`). ``--summary-only --records FILE`` makes the
    tables and figures of ``paper``, ``harness``, ``molecules`` and
    ``reactions`` and ``certificate`` from a packed file.

Examples::

    python -m benchmarks paper --small --out results/paper/small
    python -m benchmarks paper --problem se --n 2000 --runs 32 --iters 100
    python -m benchmarks figure1 --out results/paper
    python -m benchmarks harness --small --out results/harness/small
    python -m benchmarks pack harness results/harness/small small.jsonl.gz
    python -m benchmarks harness --small --records small.jsonl.gz --summary-only \
        --out results/harness/small_summary
    python -m benchmarks molecules --small --out results/molecules/small
    python -m benchmarks reactions --small --out results/reactions/small
    python -m benchmarks speed --help
    python -m benchmarks distributed --small
    python -m benchmarks certificate --small --out results/certificate_small
    python -m benchmarks validity --small --out results/validity_small
    python -m benchmarks limit --small
    python -m benchmarks bonus --small
    python -m benchmarks screening --small

The ``--small`` presets run in seconds to minutes, and the tests run each of
them.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from benchmarks._tables import parse_names
from benchmarks.records import LAYOUTS, command_line

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
    from benchmarks.runner import METHODS, PAPER_CONFIG, PROBLEMS, SMALL_CONFIG

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
    _add_selection(paper, "--problem", PROBLEMS, METHODS, default="all")
    paper.add_argument("--runs", type=int, default=None, help="runs (seeds 0..R-1)")
    paper.add_argument("--iters", type=int, default=None, help="queries per run (T)")
    paper.add_argument("--n", type=int, default=None, help="number of candidates N")
    paper.add_argument(
        "--threads", type=int, default=None, help="torch threads per process"
    )
    paper.add_argument(
        "--logy", action="store_true", help="symmetric-log y axis in the figure"
    )
    _add_record_options(paper, "results/paper", "small preset (a few minutes)")

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
    _add_reactions_parser(sub)

    sub.add_parser(
        "speed",
        help="speed benchmark (benchmarks.speed; see `speed --help`)",
        add_help=False,
    )
    sub.add_parser(
        "distributed",
        help="one step on sharded candidates (Dask LocalCluster) against one "
        "machine (see `distributed --help`)",
        add_help=False,
    )
    sub.add_parser(
        "certificate",
        help="soundness and usefulness of the regret certificates "
        "(see `certificate --help`)",
        add_help=False,
    )
    kinds = tuple(LAYOUTS)
    pack = sub.add_parser(
        "pack",
        help="pack a working directory's per-run JSON files into one .jsonl.gz",
        description=(
            "Write every per-run JSON file of a working directory (the --out of a "
            "run) into one gzipped JSON-lines file, sorted by run, with the same "
            "bytes for the same records: the file to commit."
        ),
    )
    pack.add_argument("kind", choices=kinds, help="the benchmark that wrote the runs")
    pack.add_argument("workdir", help="the working directory (--out of the run)")
    pack.add_argument("file", help="the packed file to write (.jsonl.gz)")
    unpack = sub.add_parser(
        "unpack",
        help="write a packed file's records as per-run JSON files (to run more)",
        description=(
            "Write the records of a packed file as the per-run JSON files of a "
            "working directory, which the benchmark's command then resumes or "
            "extends. Files holding another record of the same run are refused."
        ),
    )
    unpack.add_argument("kind", choices=kinds, help="the benchmark of the records")
    unpack.add_argument("file", help="the packed file (.jsonl.gz)")
    unpack.add_argument("workdir", help="the working directory to write")
    return parser


def _add_harness_parser(sub: Any) -> None:
    from benchmarks.harness_bench import (
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
    _add_selection(h, "--problem", PROBLEMS, METHODS)
    h.add_argument("--replications", type=int, default=None, help="seeds 0..R-1")
    h.add_argument("--trials", type=int, default=None, help="trials per replication")
    h.add_argument("--init", type=int, default=None, help="initial trials")
    _add_record_options(h, "results/harness", "small preset (a test)")


def _add_selection(
    parser: argparse.ArgumentParser,
    flag: str,
    names: tuple[str, ...],
    methods: tuple[str, ...],
    default: str | None = None,
    default_methods: tuple[str, ...] | None = None,
) -> None:
    """``flag`` (problems or datasets) and ``--methods``: comma-separated names
    (``default_methods`` when not given, all of ``methods`` by default)."""
    parser.add_argument(
        flag,
        default=default,
        help=f"comma-separated subset of {','.join(names)}, or all"
        + (" (default)" if default == "all" else " (default: the preset's)"),
    )
    chosen = methods if default_methods is None else default_methods
    parser.add_argument(
        "--methods",
        default=",".join(chosen),
        help=f"comma-separated subset of {','.join(methods)} (default: "
        + ("all" if chosen == methods else ",".join(chosen))
        + ")",
    )


def _add_record_options(
    parser: argparse.ArgumentParser, out: str, small_help: str
) -> None:
    """The options the resumable record-per-run subcommands share."""
    parser.add_argument("--small", action="store_true", help=small_help)
    parser.add_argument(
        "--out",
        default=out,
        help="working directory of the runs, and where summaries and figures go",
    )
    parser.add_argument("--force", action="store_true", help="recompute stored runs")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="worker processes (one torch thread each); results do not depend on it",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-plot", action="store_true", help="skip the figures")
    parser.add_argument(
        "--summary-only",
        action="store_true",
        help="run nothing: the tables and figures of the records under --out "
        "(or in --records), written to --out",
    )
    parser.add_argument(
        "--records",
        default=None,
        metavar="FILE",
        help="with --summary-only: read the records from this packed file "
        "(benchmarks/results/<benchmark>.jsonl.gz) instead of --out",
    )


def _add_molecules_parser(sub: Any) -> None:
    from benchmarks.molecules_bench import (
        DATASET_NAMES,
        DEFAULT_METHODS,
        FULL_CONFIG,
        METHODS,
        SMALL_CONFIG,
    )

    m = sub.add_parser(
        "molecules",
        help="Ax Client loops over molecule libraries (Tanimoto kernel)",
        description=(
            "Run or resume Chaining-UCB, GP-UCB, stock UCB, LogEI, qLogNEI and "
            "random search over a molecule library, through "
            "candidate_index_parameter + precomputed_kernel_surrogate_spec "
            "(Tanimoto on Morgan fingerprints); with --methods, also BayBE "
            "(baybe: its Campaign and default recommender, SubstanceParameter) "
            "and the model-based methods on molecule_surrogate_spec's "
            "descriptor models (method@variant: chaining@mordred-chen, "
            "qlognei@rdkit2d-botorch, ...). "
            f"Defaults: {','.join(FULL_CONFIG.datasets)}, {FULL_CONFIG.runs} runs, "
            f"{FULL_CONFIG.n_init} initial points, {FULL_CONFIG.queries} queries. "
            f"--small: {','.join(SMALL_CONFIG.datasets)}, {SMALL_CONFIG.runs} runs, "
            f"{SMALL_CONFIG.queries} queries. Explicit options override either "
            "preset; finished runs under --out are reused."
        ),
    )
    _add_table_options(m, DATASET_NAMES, METHODS, DEFAULT_METHODS, "molecules")
    m.add_argument(
        "--baseline",
        default=None,
        help="the method the paired differences subtract the others from (one of "
        "--methods; default chaining)",
    )


def _add_reactions_parser(sub: Any) -> None:
    from benchmarks.reactions_bench import (
        DATASET_NAMES,
        DEFAULT_METHODS,
        FULL_CONFIG,
        METHODS,
        SMALL_CONFIG,
    )

    r = sub.add_parser(
        "reactions",
        help="Ax Client loops over a reaction table (per-component encodings)",
        description=(
            "Run or resume Chaining-UCB, qLogNEI and random search over the "
            "Buchwald-Hartwig reaction table through candidate_index_parameter + "
            "feature_table_surrogate_spec (ARD RBF, BoTorch's priors), on one-hot "
            "rows (@onehot) or each component's RDKit descriptors "
            "(@descriptors); with --methods, also BayBE (baybe@onehot, "
            "baybe@substance: its Campaign and default recommender). "
            f"Defaults: {FULL_CONFIG.runs} runs, {FULL_CONFIG.n_init} initial "
            f"reactions, {FULL_CONFIG.queries} queries. --small: "
            f"{SMALL_CONFIG.runs} run, {SMALL_CONFIG.queries} queries. Explicit "
            "options override either preset; finished runs under --out are reused."
        ),
    )
    _add_table_options(r, DATASET_NAMES, METHODS, DEFAULT_METHODS, "reactions")


def _add_table_options(
    parser: argparse.ArgumentParser,
    names: tuple[str, ...],
    methods: tuple[str, ...],
    default_methods: tuple[str, ...],
    kind: str,
) -> None:
    """The options of a benchmark over lookup tables (``molecules``,
    ``reactions``)."""
    _add_selection(parser, "--dataset", names, methods, default_methods=default_methods)
    parser.add_argument("--runs", type=int, default=None, help="runs (seeds 0..R-1)")
    parser.add_argument("--queries", type=int, default=None, help="queries after init")
    parser.add_argument("--init", type=int, default=None, help="initial points")
    _add_record_options(parser, f"results/{kind}", "small preset (a test)")


def _records(
    args: argparse.Namespace, kind: str, run: Callable[[], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The stored records (``--summary-only``), or those of ``run()``."""
    if args.summary_only:
        from benchmarks.records import stored_records

        return stored_records(args.records, args.out, kind)
    if args.records is not None:
        raise SystemExit(
            f"error: --records {args.records} is read by --summary-only, which "
            "was not given; to run more, first `python -m benchmarks unpack` "
            "the file into --out."
        )
    return run()


def _summary_outputs(
    args: argparse.Namespace,
    argv: list[str],
    summary: dict[str, Any],
    markdown: str,
    config: dict[str, Any],
    elapsed: float,
    figures: Callable[[dict[str, Any], Path], list[Path]],
) -> None:
    """Write ``summary.md``, ``summary.json`` and the figures under ``--out``.

    A summary-only call records no wall time, so that the same records and
    command give the same bytes.
    """
    from benchmarks.records import write_summary

    out = Path(args.out)
    meta: dict[str, Any] = {"config": config}
    if not args.summary_only:
        meta["wall_seconds_this_call"] = elapsed
    md_path, json_path = write_summary(
        out, command_line(argv), markdown, {**meta, **summary}
    )
    print()
    print(markdown)
    if not args.no_plot and summary["rows"]:
        print("figures: " + ", ".join(map(str, figures(summary, out))))
    print(f"summary: {md_path}, {json_path} ({elapsed:.0f} s)")


def _harness(args: argparse.Namespace, argv: list[str]) -> int:
    from benchmarks import harness_bench as h

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
    problems = parse_names(args.problem or ",".join(default), h.PROBLEMS, "problem")
    methods = parse_names(args.methods, h.METHODS, "method")
    return _ax_benchmark(
        args,
        argv,
        h,
        "problem",
        problems,
        methods,
        config,
        f"replications={config.replications} trials={config.num_trials} "
        f"init={config.init_trials}",
        lambda out: h.run_harness(
            problems,
            methods,
            config,
            out,
            progress=not args.no_progress,
            force=args.force,
            jobs=args.jobs,
        ),
        lambda s, out: [h.plot_scores(s, out / "scores.png")],
    )


def _lookup_tables(
    args: argparse.Namespace, argv: list[str], module: Any, run: Callable[..., Any]
) -> int:
    """``molecules`` or ``reactions``: the benchmark ``module`` (its presets,
    names and summaries), whose ``run(methods, config, out, ...)`` makes the
    records."""
    preset = module.SMALL_CONFIG if args.small else module.FULL_CONFIG
    datasets = parse_names(
        args.dataset or ",".join(preset.datasets), module.DATASET_NAMES, "dataset"
    )
    try:
        config = replace(
            preset,
            datasets=tuple(datasets),
            runs=args.runs if args.runs is not None else preset.runs,
            queries=args.queries if args.queries is not None else preset.queries,
            n_init=args.init if args.init is not None else preset.n_init,
        )
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    methods = parse_names(args.methods, module.METHODS, "method")
    if (baseline := getattr(args, "baseline", None)) is not None:
        if baseline not in methods:
            raise SystemExit(
                f"error: --baseline must be one of --methods ({','.join(methods)}), "
                f"got {baseline!r}"
            )
        bench = replace(module.MOLECULES, baseline=baseline)
        module = SimpleNamespace(
            summarize=functools.partial(module.summarize, bench=bench),
            format_markdown=functools.partial(module.format_markdown, bench=bench),
            plot_regret=functools.partial(module.plot_regret, bench=bench),
        )
    return _ax_benchmark(
        args,
        argv,
        module,
        "dataset",
        datasets,
        methods,
        config,
        f"runs={config.runs} init={config.n_init} queries={config.queries}",
        lambda out: run(
            methods,
            config,
            out,
            progress=not args.no_progress,
            force=args.force,
            jobs=args.jobs,
        ),
        lambda s, out: [module.plot_regret(s, out / "simple_regret.png")],
    )


def _ax_benchmark(
    args: argparse.Namespace,
    argv: list[str],
    module: Any,
    field: str,
    names: list[str],
    methods: list[str],
    config: Any,
    sizes: str,
    run: Callable[[Path], list[dict[str, Any]]],
    figures: Callable[[dict[str, Any], Path], list[Path]],
) -> int:
    """Run (or read) the records of an Ax benchmark (``harness``,
    ``molecules``, ``reactions``), then write its summary and figures.

    Args:
        module: The benchmark's module (``summarize``, ``format_markdown``).
        field: The record field that names the problem or dataset.
        names: The problems or datasets to summarize.
        methods: The methods to summarize.
        config: The run's configuration (a dataclass).
        sizes: How large the run is, for the line printed before it.
        run: Runs (or resumes) the records under the working directory.
        figures: Draws the figures of a summary into a folder.
    """
    out = Path(args.out)
    kind = args.command  # "harness", "molecules"...: also the records layout
    _quiet_ax()
    start = time.perf_counter()

    def fresh() -> list[dict[str, Any]]:
        print(
            f"{kind}: {field}s={','.join(names)} methods={','.join(methods)} "
            f"{sizes} out={out}",
            flush=True,
        )
        return run(out)

    records = [
        r
        for r in _records(args, kind, fresh)
        if r[field] in names and r["method"] in methods
    ]
    summary = module.summarize(records)
    _summary_outputs(
        args,
        argv,
        summary,
        module.format_markdown(summary),
        {"summary_only": True} if args.summary_only else asdict(config),
        time.perf_counter() - start,
        figures,
    )
    return 0


def _quiet_ax() -> None:
    # Ax's Client logs every trial at INFO; the progress bar says enough.
    import logging

    from ax.utils.common.logger import set_stderr_log_level

    set_stderr_log_level(logging.WARNING)


def _speed(argv: list[str]) -> int:
    try:
        from benchmarks import speed
    except ModuleNotFoundError as e:
        if e.name != "benchmarks.speed":
            raise
        print(
            "The speed benchmark (benchmarks/speed.py) is not available "
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
        run_benchmark,
        select_results,
        summarize,
        summary_json_lines,
    )

    preset = SMALL_CONFIG if args.small else PAPER_CONFIG
    config = BenchmarkConfig(
        n=args.n if args.n is not None else preset.n,
        iters=args.iters if args.iters is not None else preset.iters,
        runs=args.runs if args.runs is not None else preset.runs,
    )
    if config.n < config.n_init or config.iters < 1 or config.runs < 1:
        raise SystemExit(
            f"error: need --n >= {config.n_init}, --iters >= 1 and --runs >= 1; "
            f"got --n {config.n}, --iters {config.iters}, --runs {config.runs}."
        )
    problems = parse_names(args.problem, PROBLEMS, "problem")
    methods = parse_names(args.methods, METHODS, "method")
    out = Path(args.out)
    print(
        f"paper: problems={','.join(problems)} methods={','.join(methods)} "
        f"N={config.n} runs={config.runs} iters={config.iters} out={out}",
        flush=True,
    )
    start = time.perf_counter()

    def run() -> list[dict[str, Any]]:
        return run_benchmark(
            problems=problems,
            methods=methods,
            out=out,
            jobs=args.jobs,
            threads=args.threads,
            force=args.force,
            progress=not args.no_progress,
            config=config,
        )

    # Summary-only: whatever finished (e.g. a run interrupted to be resumed
    # later); the table's `runs` column says how many runs each row holds.
    records = select_results(_records(args, "paper", run), problems, methods, config)
    summary = summarize(records)

    def figures(summary: dict[str, Any], out: Path) -> list[Path]:
        from benchmarks.plots import plot_cumulative_regret, plot_simple_regret

        paths = [out / "simple_regret.png", out / "cumulative_regret.png"]
        plot_simple_regret(summary, paths[0], logy=args.logy)
        plot_cumulative_regret(summary, paths[1])
        return paths

    _summary_outputs(
        args,
        argv,
        # The methods asked for that have records (a summary of older records
        # does not name a method added since).
        {
            "problems": problems,
            "methods": [m for m in methods if any(r["method"] == m for r in records)],
            **summary,
        },
        format_summary_markdown(summary),
        {**config.run_key(), "runs": config.runs},
        time.perf_counter() - start,
        figures,
    )
    for line in summary_json_lines(summary):
        print(line)
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
    if argv and argv[0] == "validity":  # likewise
        from benchmarks import validity

        return validity.main(argv[1:])
    if argv and argv[0] == "limit":  # likewise
        from benchmarks import limit

        return limit.main(argv[1:])
    if argv and argv[0] == "tails":  # likewise
        from benchmarks import tails_bench as tails

        return tails.main(argv[1:])
    if argv and argv[0] == "models":  # likewise
        from benchmarks import models

        return models.main(argv[1:])
    if argv and argv[0] == "bonus":  # likewise
        from benchmarks import bonus

        return bonus.main(argv[1:])
    if argv and argv[0] == "screening":  # likewise
        from benchmarks import screening

        return screening.main(argv[1:])
    if argv and argv[0] == "distributed":  # likewise
        from benchmarks import distributed_bench

        return distributed_bench.main(argv[1:])
    if argv and argv[0] == "certificate":
        from benchmarks import certificate_bench

        return int(certificate_bench.main(argv[1:]) or 0)
    args = _build_parser().parse_args(argv)
    if args.command == "paper":
        return _paper(args, argv)
    if args.command == "figure1":
        return _figure1(args)
    if args.command == "harness":
        return _harness(args, argv)
    if args.command == "molecules":
        from benchmarks import molecules_bench as mol

        return _lookup_tables(args, argv, mol, mol.run_molecules)
    if args.command == "reactions":
        from benchmarks import reactions_bench as rxn

        return _lookup_tables(args, argv, rxn, rxn.run_reactions)
    if args.command in ("pack", "unpack"):
        return _pack(args)
    raise AssertionError(args.command)  # pragma: no cover - argparse guards this


if __name__ == "__main__":
    sys.exit(main())
