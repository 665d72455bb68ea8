r"""Screening nested MOSES libraries in Ax loops: MolPAL's top-k metric.

Each run screens the first ``N`` molecules of a fixed permutation for an RDKit
MPO objective, in a fresh process; protocol and commands:
``docs/results/screening.md``.
"""

from __future__ import annotations

import argparse
import functools
import resource
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ax_chaining.checks import check_choice, check_int
from benchmarks._tables import (
    COLORS,
    band,
    check_names,
    fill_preset,
    initial_items,
    md_row,
    mean_se,
    num,
    package_strategy,
    parse_names,
    pyplot,
    random_queries,
    save_figure,
)
from benchmarks.records import (
    add_record_options,
    command_line,
    records_of,
    run_resumable,
    write_summary,
)

FORMAT_VERSION = 1
#: Seed of the permutation that picks the library of each size.
LIBRARY_SEED = 0
#: Where the molecules come from: the MOSES training set, or the vendored
#: ESOL molecules (the small preset).
LIBRARIES: tuple[str, ...] = ("moses", "esol")
METHODS: tuple[str, ...] = ("chaining", "gp-ucb", "qlognei", "greedy", "random")
#: The models of a molecule: Tanimoto on Morgan bits, or the package's default
#: (``molecule_surrogate_spec``).
MODELS: tuple[str, ...] = ("tanimoto", "default")
MODEL_LABELS = {"tanimoto": "", "default": ", default model (Mordred, CHEN priors)"}
LABELS = {
    "chaining": "Chaining-UCB",
    "gp-ucb": "GP-UCB",
    "qlognei": "qLogNEI over the library",
    "greedy": "greedy (posterior mean)",
    "random": "random",
}


@dataclass(frozen=True)
class ScreeningConfig:
    """Queries after ``n_init`` uniform initial molecules, ``delta``, the
    Morgan ``radius`` and ``n_bits``, the ``top_k`` fractions reported, the
    ``library`` (:data:`LIBRARIES`), when strategies ``checks`` their
    certificate (``"every"`` step or ``"geometric"``: after 10, 20, 40, ...
    observations) and the ``model`` of a molecule (:data:`MODELS`)."""

    queries: int = 100
    n_init: int = 10
    delta: float = 0.05
    radius: int = 2
    n_bits: int = 2048
    top_k: tuple[int, ...] = (100, 1000)
    library: str = "moses"
    checks: str = "every"
    model: str = "tanimoto"

    def __post_init__(self) -> None:
        for name in ("queries", "n_init", "n_bits"):
            check_int(name, getattr(self, name), 1)
        check_int("radius", self.radius, 0)
        for k in self.top_k:
            check_int("top_k", k, 1)
        check_choice("library", self.library, LIBRARIES)
        check_choice("checks", self.checks, ("every", "geometric"))
        check_choice("model", self.model, MODELS)

    def key(self) -> dict[str, Any]:
        """What a stored record must match to be reused (JSON types); a field
        at the value it had before it existed is left out, so older records
        stay reusable."""
        key = {**asdict(self), "top_k": list(self.top_k), "format": FORMAT_VERSION}
        for name, old in (
            ("library", "moses"),
            ("checks", "every"),
            ("model", "tanimoto"),
        ):
            if key[name] == old:
                del key[name]
        return key


#: The small preset: ESOL molecules, two methods, one seed, three queries.
SMALL_CONFIG = ScreeningConfig(queries=3, n_init=5, top_k=(5, 20), library="esol")
SMALL_SIZE = 200
SMALL_METHODS: tuple[str, ...] = ("chaining", "random")


def _prefix(config: ScreeningConfig) -> str:
    """The prefix of ``config.library``'s cache files (none for MOSES)."""
    return "" if config.library == "moses" else f"{config.library}_"


def source_smiles(cache: str | Path, config: ScreeningConfig) -> list[str]:
    """Every SMILES of ``config.library`` (the MOSES set, fetched once into
    ``cache``, or the vendored ESOL molecules)."""
    if config.library == "moses":
        from benchmarks.testbeds import moses_smiles

        return moses_smiles(cache)
    from ax_chaining.test_functions.molecules import load_dataset

    return list(load_dataset(config.library).smiles)


def feature_cache(cache: str | Path, config: ScreeningConfig, size: int) -> Path:
    """The default model's feature cache of the size-``size`` library."""
    return Path(cache) / f"{_prefix(config)}default_model_{size}"


def default_model_spec(
    smiles: Sequence[str],
    cache: str | Path,
    config: ScreeningConfig,
    size: int,
    n_jobs: int | None = None,
) -> Any:
    """The default molecule model of the size-``size`` library (its features
    computed once, ``n_jobs`` processes, and cached)."""
    from ax_chaining.molecules import molecule_surrogate_spec

    rows = library_rows(len(smiles), size)
    return molecule_surrogate_spec(
        [smiles[i] for i in rows],
        path=feature_cache(cache, config, size),
        n_jobs=n_jobs,
    )


def prepare(
    cache: str | Path,
    sizes: int | Sequence[int],
    config: ScreeningConfig,
    progress: bool = True,
    jobs: int = 1,
) -> tuple[Path, Path]:
    """Featurize the molecules and score the largest library (both cached;
    fingerprints resumable); returns what :func:`run_one` reads as
    ``library`` (the fingerprint file, or with the default model ``cache``,
    every size's features computed there with ``jobs`` processes) and the
    scores of the first ``max(sizes)`` molecules of the permutation."""
    from benchmarks.testbeds import mpo_scores

    cache = Path(cache)
    sizes = [sizes] if isinstance(sizes, int) else list(sizes)
    max_size = max(sizes)
    smiles, prefix = source_smiles(cache, config), _prefix(config)
    # The fingerprint library's molecules are the input rows it kept.
    if config.model == "default":
        library, inputs, suffix = cache, np.arange(len(smiles)), "_smiles"
    else:
        from ax_chaining.molecules import featurize_library

        bits = {"radius": config.radius, "n_bits": config.n_bits}
        folder = cache / f"{prefix}morgan{config.radius}_{config.n_bits}"
        lib = featurize_library(smiles, folder, **bits, progress=progress)
        library, inputs, suffix = lib.path / "fingerprints.npy", lib.rows, ""
    if max_size > len(inputs):
        raise ValueError(
            f"`sizes` go up to {max_size}; the library has {len(inputs)} molecules."
        )
    if config.model == "default":
        for size in sorted(sizes):
            default_model_spec(smiles, cache, config, size, jobs if jobs > 1 else None)
    scores_path = cache / f"{prefix}mpo_{max_size}{suffix}.npy"
    rows = np.asarray(inputs)[library_rows(len(inputs), max_size)]
    mpo_scores([smiles[i] for i in rows], scores_path, progress=progress)
    return library, scores_path


def library_rows(total: int, size: int) -> np.ndarray:
    """Rows (increasing) of the library of ``size`` molecules among ``total``."""
    perm = np.random.default_rng(LIBRARY_SEED).permutation(total)
    return np.sort(perm[:size])


def _strategy(method: str, spec: Any, config: ScreeningConfig, size: int) -> Any:
    from botorch.acquisition.analytic import PosteriorMean

    from ax_chaining import ax as axc
    from ax_chaining.certificate import CertificateOptions, CheckSchedule

    common = {"init_trials": config.n_init, "surrogate_spec": spec}
    common["exclude_evaluated"] = True
    # The strategies' guard on N (100,000 by default) is raised to the library.
    common["max_candidates"] = max(size, 100_000)
    if config.checks == "geometric":
        schedule = CheckSchedule("geometric", start=10)
        common["certificate"] = CertificateOptions(schedule=schedule)
    if method == "greedy":
        return axc.candidate_set_strategy(PosteriorMean, None, name="greedy", **common)
    return package_strategy(method, config.delta, **common)


def run_one(
    size: int,
    method: str,
    seed: int,
    config: ScreeningConfig,
    library: str,
    scores: str,
    max_size: int,
) -> dict[str, Any]:
    """One run: ``n_init`` molecules, then ``config.queries`` queries;
    ``library`` and ``scores``: what :func:`prepare` returned."""
    from ax.utils.common.logger import set_stderr_log_level

    from ax_chaining.ax import GEN_METADATA_KEY, fingerprint_kernel_surrogate_spec
    from ax_chaining.kernels import PackedFingerprints
    from benchmarks.molecules_bench import run_client

    if config.model == "default":
        smiles = source_smiles(library, config)
        total = len(smiles)
        make_spec = functools.partial(default_model_spec, smiles, library, config, size)
    else:
        full = PackedFingerprints.open(library)
        total = len(full)
        rows = library_rows(total, size)
        bits = PackedFingerprints(np.asarray(full.words[rows]), full.n_bits)
        make_spec = functools.partial(fingerprint_kernel_surrogate_spec, bits)
    # The scores of the size-`max_size` library at this library's rows.
    at = np.searchsorted(library_rows(total, max_size), library_rows(total, size))
    y = np.load(scores)[at]
    y = np.where(np.isnan(y), -np.inf, y)  # an unscorable molecule is never top
    items = initial_items(size, config.n_init, seed)
    steps: list[dict[str, float]] = []
    if method == "random":
        items += random_queries(size, items, config.queries, seed)
    else:
        set_stderr_log_level(30)  # Ax logs every trial at INFO
        gs = _strategy(method, make_spec(), config, size)
        metas: list[dict[str, Any]] = []

        def after_step(tested: list[int]) -> None:
            gr = gs.experiment.trials[len(tested) - 1].generator_runs[0]
            metas.append((gr.gen_metadata or {}).get(GEN_METADATA_KEY, {}))

        name = f"screening_{size}_{method}_{seed}"
        items, totals, _ = run_client(
            y, items, gs, config.queries, seed, name, after_step
        )
        steps = [
            {"total": t, **m.get("seconds", {}), "checked": "certificate" in m}
            for t, m in zip(totals, metas, strict=True)
        ]
    order = np.argsort(-y, kind="stable")
    found = {}
    for k in config.top_k:
        top = np.zeros(size, dtype=bool)
        top[order[: min(k, size)]] = True
        found[str(k)] = np.cumsum(top[items]).tolist()
    return {
        "size": size,
        "method": method,
        "seed": seed,
        "config": config.key(),
        "items": items,
        "found": found,
        "steps": steps,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_screening(
    sizes: Sequence[int],
    methods: Sequence[str],
    seeds: Sequence[int],
    config: ScreeningConfig,
    out: str | Path,
    cache: str | Path,
    jobs: int = 1,
    **options: Any,
) -> list[dict[str, Any]]:
    """Run (or resume) every (size, method, seed), each in a fresh process;
    ``options`` of :func:`~benchmarks.records.run_resumable`."""
    check_names(methods, METHODS, "method")
    library, scores = prepare(cache, sizes, config, options.get("progress", True), jobs)
    tasks = [(n, m, s) for n in sizes for s in seeds for m in methods]
    paths = {"library": str(library), "scores": str(scores)}
    run = functools.partial(run_one, config=config, max_size=max(sizes), **paths)
    key = config.key()
    return run_resumable(
        tasks, out, "screening", key, run, jobs=jobs, fresh_process=True, **options
    )


# Summary.

CHECKPOINTS = (0, 10, 25, 50, 100, 200)


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per size, model and method: top-k fractions at checkpoints, seconds,
    memory."""
    rows = []
    groups: dict[tuple[int, str, str], list[dict]] = {}
    for r in records:
        model = r["config"].get("model", "tanimoto")
        groups.setdefault((r["size"], model, r["method"]), []).append(r)
    for (size, model, method), runs in sorted(
        groups.items(),
        key=lambda kv: (kv[0][0], MODELS.index(kv[0][1]), METHODS.index(kv[0][2])),
    ):
        n_init = runs[0]["config"]["n_init"]
        T = min(len(r["items"]) for r in runs) - n_init
        found = {}
        for k in runs[0]["config"]["top_k"]:
            denom = min(k, size)
            curves = np.array([r["found"][str(k)][: n_init + T] for r in runs]) / denom
            mean, se = mean_se(curves[:, n_init - 1 :])
            found[str(k)] = {"mean": mean.tolist(), "se": se.tolist()}
        seconds: dict[str, float | None] = {}
        for part in ("total", "fit", "acquisition", "certificate"):
            # A certificate's seconds at the steps that checked one (every
            # step unless the runs declared a schedule; older records did).
            v = [
                s[part]
                for r in runs
                for s in r["steps"][:T]
                if part in s and (part != "certificate" or s.get("checked", True))
            ]
            seconds[part] = float(np.median(v)) if v else None
        rows.append(
            {
                "size": size,
                "method": method,
                "model": model,
                "runs": len(runs),
                "queries": T,
                "n_init": n_init,
                "top_k": list(runs[0]["config"]["top_k"]),
                "found": found,
                "median_seconds": seconds,
                "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            }
        )
    return {"rows": rows}


def _label(row: dict[str, Any]) -> str:
    """A row's method, and its model where it is not the Tanimoto one (random
    search has none)."""
    model = row.get("model", "tanimoto")
    return LABELS[row["method"]] + (
        "" if row["method"] == "random" else MODEL_LABELS[model]
    )


def format_markdown(summary: dict[str, Any]) -> str:
    """One table per library size."""
    lines: list[str] = []
    for size in dict.fromkeys(r["size"] for r in summary["rows"]):
        rows = [r for r in summary["rows"] if r["size"] == size]
        T = min(r["queries"] for r in rows)
        ks = list(dict.fromkeys([*(k for k in CHECKPOINTS if k <= T), T]))
        top_k = rows[0]["top_k"]
        head = " | ".join(f"top-{k} @{q}" for k in top_k for q in ks)
        lines += [
            f"**N = {size:,}** (after {rows[0]['n_init']} initial molecules)",
            "",
            f"| method | {head} | s/step (fit / acq. / cert.) | peak MB | runs |",
            "|---|" + "---:|" * (len(top_k) * len(ks) + 3),
        ]
        for r in rows:
            found = [r["found"][str(k)]["mean"] for k in top_k]
            cells = [num(100 * mean[q], 1) + "%" for mean in found for q in ks]
            s = r["median_seconds"]
            sec = "-"
            if s["total"] is not None:
                parts = [num(s[p], 2) for p in ("fit", "acquisition", "certificate")]
                sec = f"{num(s['total'], 3)} ({' / '.join(parts)})"
            lines.append(
                md_row(_label(r), *cells, sec, f"{r['peak_rss_mb']:,.0f}", r["runs"])
            )
        lines.append("")
    lines.append(
        "top-k @q: mean over runs of the fraction of the library's k best molecules "
        "(by MPO) among those tested after q queries (the initial molecules "
        "included). s/step: median wall time of one `get_next_trials` call, and of "
        "its model fit, acquisition and certificate (the step records' `seconds`; "
        "the certificate's at the steps that checked one: every step, unless the "
        "runs were made with `--checks geometric`, after 10, 20, 40, ... "
        "observations). peak MB: the largest peak resident memory of a run's "
        "process."
    )
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], path: str | Path) -> Path:
    """Top-k fractions against queries, one column per size, one row per k."""
    sizes = list(dict.fromkeys(r["size"] for r in summary["rows"]))
    top_k = summary["rows"][0]["top_k"]
    figsize = (4.4 * len(sizes), 3.2 * len(top_k))
    fig, axes = pyplot().subplots(
        len(top_k), len(sizes), figsize=figsize, squeeze=False
    )
    for col, size in enumerate(sizes):
        rows = [r for r in summary["rows"] if r["size"] == size]
        for row, k in enumerate(top_k):
            ax = axes[row, col]
            for r in rows:
                f = r["found"][str(k)]
                mean, se = 100 * np.array(f["mean"]), 100 * np.array(f["se"])
                color = {**COLORS, "greedy": "tab:orange"}[r["method"]]
                band(ax, np.arange(len(mean)), mean, se, color, _label(r))
            runs = max(r["runs"] for r in rows)
            ax.set_title(f"N = {size:,}, top {k} ({runs} runs)", fontsize=9)
            ax.set_xlabel("queries after the initial molecules")
            ax.set_ylabel(f"% of top {k} found")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks screening",
        description="Ax loops over nested MOSES libraries; MolPAL's top-k metric.",
    )
    small = (
        f"{SMALL_SIZE} vendored ESOL molecules, {', '.join(SMALL_METHODS)}, "
        f"one seed, {SMALL_CONFIG.queries} queries (seconds)"
    )
    add_record_options(parser, None, small)
    add = parser.add_argument
    add("--sizes", type=int, nargs="+")
    add("--methods")
    add("--seeds", type=int, nargs="+")
    add("--queries", type=int)
    add("--n-init", type=int)
    add("--checks", choices=["every", "geometric"], help="when to certify (every step)")
    add("--model", choices=list(MODELS), help="Tanimoto (default), or the default")
    add("--cache", help="cache (default .cache/moses, .cache/esol)")
    args = parser.parse_args(argv)
    preset = SMALL_CONFIG if args.small else ScreeningConfig()
    presets = {
        "sizes": [SMALL_SIZE] if args.small else [10_000],
        "methods": ",".join(SMALL_METHODS if args.small else METHODS),
        "seeds": [0] if args.small else [0, 1, 2],
        "cache": ".cache/esol" if args.small else ".cache/moses",
        "out": "results/screening_small" if args.small else "results/screening",
        **{k: getattr(preset, k) for k in ("queries", "n_init", "checks", "model")},
    }
    fill_preset(args, presets)
    methods = parse_names(args.methods, METHODS, "method")
    for size in args.sizes:
        check_int("--sizes", size, 1)
    changes = {k: getattr(args, k) for k in ("queries", "n_init", "checks", "model")}
    config = ScreeningConfig(**{**asdict(preset), **changes})
    options = {"progress": not args.no_progress, "force": args.force, "jobs": args.jobs}
    tasks = (args.sizes, methods, args.seeds, config, args.out, args.cache)
    records = records_of(args, "screening", lambda: run_screening(*tasks, **options))
    summary = summarize(records)
    text = format_markdown(summary)
    write_summary(args.out, command_line(["screening", *argv]), text, summary)
    if not args.no_plot:
        plot(summary, Path(args.out) / "screening.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
