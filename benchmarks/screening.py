r"""Screening a large real library in Ax loops: MolPAL's top-k metric.

**Library.** The MOSES training set (1,584,663 ZINC molecules,
:func:`ax_chaining.test_functions.moses.moses_smiles`, fetched once from the
``molsets`` wheel), Morgan bits of radius 2 and 2,048 bits
(:func:`ax_chaining.chem.featurize_library`, once, cached). The library of size
``N`` is the first ``N`` molecules of one fixed permutation (seed
:data:`LIBRARY_SEED`), in file order, so the libraries are nested.

**Objective.** :func:`ax_chaining.test_functions.moses.mpo`: the geometric mean of
three desirabilities (Crippen logP near 2.5, TPSA near 65, the square root of
Fsp3), computed with RDKit, noise-free. No method sees it before it queries.

**Methods** (all but ``random`` in an ``ax.api.Client`` loop, over item
indices, with ``exclude_evaluated=True``, on the model ``--model`` names:
``tanimoto``, the Tanimoto kernel in library mode,
:func:`ax_chaining.ax.fingerprint_kernel_surrogate_spec`; or ``default``, the
package's default molecule model, :func:`ax_chaining.ax.molecule_surrogate_spec`
(Mordred descriptors under BayBE's ``CHEN`` priors), its features computed
once per library size and cached beside the fingerprints). Mordred computes
the Crippen logP, TPSA and Fsp3 that the objective is made of, but on MOSES
libraries the cleaning drops all three (correlated above 0.7 with columns it
keeps); the default model's runs measure first what a step costs at scale:

============  ===============================================================
``chaining``  :func:`~ax_chaining.ax.chaining_generation_strategy` (delta 0.05)
``gp-ucb``    :func:`~ax_chaining.ax.gp_ucb_generation_strategy` (delta 0.05)
``qlognei``   :func:`~ax_chaining.ax.qlognei_generation_strategy`
``greedy``    the posterior mean (BoTorch's ``PosteriorMean``) through
              :func:`~ax_chaining.ax.candidate_set_strategy`
``random``    uniform without replacement among the untested molecules
============  ===============================================================

Every method of run ``r`` starts from the same ``n_init`` molecules, uniform
with seed ``r`` (attached with ``Client.attach_trial``); ``Client(random_seed=r)``
seeds the rest.

**Reported** (MolPAL's metric, Graff et al., 2021): the fraction of the
library's top-100 and top-1000 molecules (by MPO) among those tested after
each number of queries (initial molecules included); seconds per step, split
into the model fit, the acquisition and the certificate (the step records'
``seconds``; ``total`` is the ``get_next_trials`` call); the peak resident
memory of the run's own process (each run in a fresh process).

**Small preset** (``--small``, seconds, what the tests run): the same code on
the vendored ESOL molecules instead of MOSES (nothing downloaded; a library of
:data:`SMALL_SIZE` of them, nested as above, the same MPO objective), two
methods (``chaining`` and ``random``), one seed, :data:`SMALL_CONFIG`'s
queries and top-k, cached under ``.cache/esol``, summary under
``results/screening_small``. Explicit ``--sizes``, ``--methods``, ``--seeds``,
``--queries``, ``--n-init``, ``--cache`` and ``--out`` override it.

Example::

    python -m benchmarks screening --sizes 10000 100000 --seeds 0 1 2 \
        --queries 100 --out results/screening --jobs 2
    python -m benchmarks screening --summary-only --out results/screening
    python -m benchmarks screening --small
"""

from __future__ import annotations

import argparse
import functools
import math
import resource
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ax_chaining.checks import check_choice, check_int
from benchmarks._tables import check_names, num, parse_names
from benchmarks.records import (
    command_line,
    load_records,
    read_packed,
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
COLORS = {
    "chaining": "tab:green",
    "gp-ucb": "tab:blue",
    "qlognei": "tab:red",
    "greedy": "tab:orange",
    "random": "tab:gray",
}


@dataclass(frozen=True)
class ScreeningConfig:
    """Size of a run.

    Attributes:
        queries: Sequential queries after the initial molecules.
        n_init: Initial molecules, uniform without replacement.
        delta: Confidence parameter of Chaining-UCB and GP-UCB.
        radius, n_bits: Morgan fingerprints.
        top_k: The ``k`` of the top-k fractions.
        library: The molecules (:data:`LIBRARIES`): ``"moses"``, or
            ``"esol"`` for the small preset.
        checks: When each strategy checks and records its certificate:
            ``"every"`` step (the strategies' default), or ``"geometric"``
            (after 10, 20, 40, ... observations: a step between checks costs
            the acquisition alone, which matters at ``N = 10^6``).
        model: The model of a molecule (:data:`MODELS`): ``"tanimoto"`` on
            the Morgan bits, or ``"default"``, the package's default
            (:func:`ax_chaining.ax.molecule_surrogate_spec`).
    """

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
        """What a stored record must match to be reused (JSON types)."""
        key = {**asdict(self), "top_k": list(self.top_k), "format": FORMAT_VERSION}
        # MOSES records were stored before the field existed: they name none,
        # and they stay reusable.
        if self.library == "moses":
            del key["library"]
        if self.checks == "every":  # likewise
            del key["checks"]
        if self.model == "tanimoto":  # likewise
            del key["model"]
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
        from benchmarks.moved_kernels import moses_smiles

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
    """Featurize the library's molecules and score the largest library (both
    cached; fingerprints resumable); returns what :func:`run_one` reads as
    ``library`` and the scores of the first ``max(sizes)`` molecules of the
    permutation.

    With the Tanimoto model, ``library`` is the fingerprint file of every
    molecule of ``config.library`` (invalid SMILES left out). With the default
    model it is ``cache``, and every library size's features are computed
    (``jobs`` processes) into :func:`feature_cache`; its libraries are drawn
    from the SMILES themselves (MOSES and ESOL have no invalid one, so they
    are the Tanimoto model's libraries).
    """
    from benchmarks.moved_kernels import mpo_scores

    cache = Path(cache)
    sizes = [sizes] if isinstance(sizes, int) else list(sizes)
    max_size = max(sizes)
    smiles, prefix = source_smiles(cache, config), _prefix(config)
    if config.model == "default":
        if max_size > len(smiles):
            raise ValueError(
                f"`sizes` go up to {max_size}; the library has {len(smiles)} molecules."
            )
        for size in sorted(sizes):
            default_model_spec(smiles, cache, config, size, jobs if jobs > 1 else None)
        scores_path = cache / f"{prefix}mpo_{max_size}_smiles.npy"
        rows = library_rows(len(smiles), max_size)
        mpo_scores([smiles[i] for i in rows], scores_path, progress=progress)
        return cache, scores_path
    from ax_chaining.molecules import featurize_library

    lib = featurize_library(
        smiles,
        cache / f"{prefix}morgan{config.radius}_{config.n_bits}",
        radius=config.radius,
        n_bits=config.n_bits,
        progress=progress,
    )
    if max_size > len(lib):
        raise ValueError(
            f"`sizes` go up to {max_size}; the library has {len(lib)} molecules."
        )
    rows = library_rows(len(lib), max_size)
    scores_path = cache / f"{prefix}mpo_{max_size}.npy"
    inputs = np.asarray(lib.rows)[rows]
    mpo_scores([smiles[i] for i in inputs], scores_path, progress=progress)
    return lib.path / "fingerprints.npy", scores_path


def library_rows(total: int, size: int) -> np.ndarray:
    """Rows (increasing) of the library of ``size`` molecules among ``total``."""
    perm = np.random.default_rng(LIBRARY_SEED).permutation(total)
    return np.sort(perm[:size])


def _in_first(total: int, size: int, big: int) -> np.ndarray:
    """Positions of the size-``size`` library's rows within the size-``big`` one."""
    small, large = library_rows(total, size), library_rows(total, big)
    return np.searchsorted(large, small)


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
    if method == "chaining":
        return axc.chaining_generation_strategy(delta=config.delta, **common)
    if method == "gp-ucb":
        return axc.gp_ucb_generation_strategy(delta=config.delta, **common)
    if method == "qlognei":
        return axc.qlognei_generation_strategy(**common)
    return axc.candidate_set_strategy(PosteriorMean, None, name="greedy", **common)


def run_one(
    size: int,
    method: str,
    seed: int,
    config: ScreeningConfig,
    library: str,
    scores: str,
    max_size: int,
) -> dict[str, Any]:
    """One run: ``n_init`` molecules, then ``config.queries`` queries.
    ``library``: what :func:`prepare` returned (the fingerprint file, or the
    cache of the default model's features)."""
    from ax.api.client import Client
    from ax.utils.common.logger import set_stderr_log_level

    from ax_chaining.ax import (
        GEN_METADATA_KEY,
        candidate_index_parameter,
        fingerprint_kernel_surrogate_spec,
    )
    from ax_chaining.kernels import PackedFingerprints

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
    y = np.load(scores)[_in_first(total, size, max_size)]
    y = np.where(np.isnan(y), -np.inf, y)  # an unscorable molecule is never top
    rng = np.random.default_rng(seed)
    items = [int(i) for i in rng.choice(size, size=config.n_init, replace=False)]
    steps: list[dict[str, float]] = []
    if method == "random":
        rest = np.setdiff1d(np.arange(size), np.array(items))
        order = np.random.default_rng(1_000_000 + seed).permutation(rest)
        items += [int(i) for i in order[: config.queries]]
    else:
        set_stderr_log_level(30)  # Ax logs every trial at INFO
        client = Client(random_seed=seed)
        client.configure_experiment(
            parameters=[candidate_index_parameter(size, name="item")],
            name=f"screening_{size}_{method}_{seed}",
        )
        client.configure_optimization(objective="mpo")
        gs = _strategy(method, make_spec(), config, size)
        client.set_generation_strategy(gs)
        for i in items:
            index = client.attach_trial(parameters={"item": i})
            client.complete_trial(index, raw_data={"mpo": float(y[i])})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(config.queries):
                start = time.perf_counter()
                ((index, params),) = client.get_next_trials(max_trials=1).items()
                total = time.perf_counter() - start
                gr = gs.experiment.trials[index].generator_runs[0]
                meta = (gr.gen_metadata or {}).get(GEN_METADATA_KEY, {})
                step = {"total": total, **meta.get("seconds", {})}
                step["checked"] = "certificate" in meta
                steps.append(step)
                item = int(params["item"])
                items.append(item)
                client.complete_trial(index, raw_data={"mpo": float(y[item])})
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
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Run (or resume) every (size, method, seed), each in a fresh process."""
    check_names(methods, METHODS, "method")
    max_size = max(sizes)
    library, scores = prepare(cache, sizes, config, progress, jobs)
    tasks = [(n, m, s) for n in sizes for s in seeds for m in methods]
    run = functools.partial(
        run_one,
        config=config,
        library=str(library),
        scores=str(scores),
        max_size=max_size,
    )
    return run_resumable(
        tasks,
        out,
        "screening",
        config.key(),
        run,
        force=False,
        progress=progress,
        desc="screening",
        jobs=jobs,
        fresh_process=True,
    )


# ---------------------------------------------------------------------------
# Summary.
# ---------------------------------------------------------------------------

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
            found[str(k)] = {
                "mean": curves.mean(0)[n_init - 1 :].tolist(),
                "se": (
                    curves.std(0, ddof=1)[n_init - 1 :] / math.sqrt(len(runs))
                    if len(runs) > 1
                    else np.zeros(T + 1)
                ).tolist(),
            }
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
            cells = []
            for k in top_k:
                mean = r["found"][str(k)]["mean"]
                cells += [num(100 * mean[q], 1) + "%" for q in ks]
            s = r["median_seconds"]
            if s["total"] is None:
                sec = "-"
            else:
                parts = [num(s[p], 2) for p in ("fit", "acquisition", "certificate")]
                sec = f"{num(s['total'], 3)} ({' / '.join(parts)})"
            lines.append(
                f"| {_label(r)} | {' | '.join(cells)} | {sec} | "
                f"{r['peak_rss_mb']:,.0f} | {r['runs']} |"
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
    """Top-100 and top-1000 fractions against queries, one column per size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(dict.fromkeys(r["size"] for r in summary["rows"]))
    top_k = summary["rows"][0]["top_k"]
    fig, axes = plt.subplots(
        len(top_k),
        len(sizes),
        figsize=(4.4 * len(sizes), 3.2 * len(top_k)),
        squeeze=False,
    )
    for col, size in enumerate(sizes):
        for row, k in enumerate(top_k):
            ax = axes[row, col]
            for r in (r for r in summary["rows"] if r["size"] == size):
                mean = 100 * np.array(r["found"][str(k)]["mean"])
                se = 100 * np.array(r["found"][str(k)]["se"])
                x = np.arange(len(mean))
                color = COLORS[r["method"]]
                ax.plot(x, mean, color=color, label=_label(r))
                ax.fill_between(x, mean - se, mean + se, color=color, alpha=0.15)
            runs = max(r["runs"] for r in summary["rows"] if r["size"] == size)
            ax.set_title(f"N = {size:,}, top {k} ({runs} runs)", fontsize=9)
            ax.set_xlabel("queries after the initial molecules")
            ax.set_ylabel(f"% of top {k} found")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks screening",
        description="Ax loops over nested MOSES libraries; MolPAL's top-k metric.",
    )
    parser.add_argument(
        "--small",
        action="store_true",
        help=f"{SMALL_SIZE} vendored ESOL molecules, {', '.join(SMALL_METHODS)}, "
        f"one seed, {SMALL_CONFIG.queries} queries (seconds)",
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--methods", default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--n-init", type=int, default=None)
    parser.add_argument(
        "--checks",
        choices=["every", "geometric"],
        default=None,
        help="when the strategies check their certificate (default every step)",
    )
    parser.add_argument(
        "--model",
        choices=list(MODELS),
        default=None,
        help="the model of a molecule: Tanimoto on Morgan bits (default), or "
        "the package's default molecule model",
    )
    parser.add_argument(
        "--cache", default=None, help="cache (default .cache/moses, .cache/esol)"
    )
    parser.add_argument("--out", default=None)
    parser.add_argument("--records", help="a packed file to summarize")
    parser.add_argument("--summary-only", action="store_true")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    preset = SMALL_CONFIG if args.small else ScreeningConfig()
    small = {
        "sizes": [SMALL_SIZE],
        "methods": ",".join(SMALL_METHODS),
        "seeds": [0],
        "cache": ".cache/esol",
        "out": "results/screening_small",
    }
    full = {
        "sizes": [10_000],
        "methods": ",".join(METHODS),
        "seeds": [0, 1, 2],
        "cache": ".cache/moses",
        "out": "results/screening",
    }
    for name, value in (small if args.small else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    methods = parse_names(args.methods, METHODS, "method")
    for size in args.sizes:
        check_int("--sizes", size, 1)
    config = ScreeningConfig(
        **{
            **asdict(preset),
            "queries": preset.queries if args.queries is None else args.queries,
            "n_init": preset.n_init if args.n_init is None else args.n_init,
            "checks": preset.checks if args.checks is None else args.checks,
            "model": preset.model if args.model is None else args.model,
        }
    )
    if args.records:
        records = read_packed(args.records)
    elif args.summary_only:
        records = load_records(args.out, "screening")
    else:
        records = run_screening(
            args.sizes,
            methods,
            args.seeds,
            config,
            args.out,
            args.cache,
            jobs=args.jobs,
            progress=not args.no_progress,
        )
    summary = summarize(records)
    text = format_markdown(summary)
    write_summary(args.out, command_line(["screening", *argv]), text, summary)
    plot(summary, Path(args.out) / "screening.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
