r"""Screening a molecule library with Chaining-UCB in an Ax ``Client`` loop.

Each molecule is an item index (methods, protocol and measures:
``docs/results/molecules.md``); the loops, records and summaries here
(:class:`TableBenchmark`) serve the reaction benchmark too.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ax_chaining.checks import check_int
from ax_chaining.test_functions.molecules import library, load_dataset
from benchmarks._tables import COLORS as BASE_COLORS
from benchmarks._tables import (
    band,
    check_names,
    common_seed_groups,
    initial_items,
    md_row,
    mean_se,
    num,
    package_strategy,
    paired,
    pm,
    pyplot,
    random_queries,
    save_figure,
)
from benchmarks.records import run_resumable

FORMAT_VERSION = 1
DATASET_NAMES: tuple[str, ...] = ("esol", "freesolv", "lipo")
DATASET_LABELS = {"esol": "ESOL", "freesolv": "FreeSolv", "lipo": "Lipophilicity"}
#: The methods a run without ``--methods`` runs.
DEFAULT_METHODS: tuple[str, ...] = tuple(
    "chaining chaining-continuous gp-ucb ucb logei qlognei random".split()
)
#: The descriptor models of ``method@variant``: ``molecule_surrogate_spec``
#: keywords in full, so that a record keeps its meaning when defaults change.
_AT_07 = {"max_correlation": 0.7}
MODEL_VARIANTS: dict[str, dict[str, Any]] = {
    "rdkit2d-botorch": {"encoding": "rdkit2d", "prior": "botorch"},
    "rdkit2d-baybe": {"encoding": "rdkit2d", "prior": "baybe"},
    "mordred-baybe": {"encoding": "mordred", "prior": "baybe", "cleaning": _AT_07},
    "mordred-chen": {"encoding": "mordred", "prior": "chen", "cleaning": _AT_07},
    "rdkit2d-chen": {"encoding": "rdkit2d", "prior": "chen"},
}
#: The variants and their colour (in the order of :data:`METHODS`).
_VARIANT_COLORS = {
    "chaining@rdkit2d-botorch": "darkgreen",
    "chaining-continuous@rdkit2d-botorch": "yellowgreen",
    "gp-ucb@rdkit2d-botorch": "navy",
    "qlognei@rdkit2d-botorch": "darkred",
    "chaining@rdkit2d-baybe": "mediumseagreen",
    "qlognei@rdkit2d-baybe": "salmon",
    "chaining@mordred-baybe": "turquoise",
    "qlognei@mordred-baybe": "orchid",
    "chaining@mordred-chen": "teal",
    "chaining-continuous@mordred-chen": "darkkhaki",
    "gp-ucb@mordred-chen": "steelblue",
    "qlognei@mordred-chen": "purple",
    "chaining@rdkit2d-chen": "limegreen",
    "qlognei@rdkit2d-chen": "coral",
}
METHODS: tuple[str, ...] = (*DEFAULT_METHODS, "baybe", *_VARIANT_COLORS)
MODEL_LABELS: dict[str, str] = {
    "rdkit2d-botorch": "RDKit descriptors, BoTorch priors",
    "rdkit2d-baybe": "RDKit descriptors, BayBE's EDBO priors",
    "mordred-baybe": "Mordred at 0.7, BayBE's EDBO priors",
    "mordred-chen": "BayBE's model (Mordred at 0.7, CHEN priors)",
    "rdkit2d-chen": "RDKit descriptors, CHEN priors",
}
BASE_LABELS: dict[str, str] = {
    "chaining": "Chaining-UCB",
    "chaining-continuous": "Chaining-UCB (continuous bonus)",
    "gp-ucb": "GP-UCB",
    "ucb": "UCB (beta=0.2)",
    "logei": "LogEI",
    "qlognei": "qLogNEI over the table",
    "random": "Random",
    "baybe": "BayBE (SubstanceParameter, default encoding)",
}


def method_label(method: str) -> str:
    """A method's name in tables (``method@variant``: both)."""
    base, sep, variant = method.partition("@")
    return f"{BASE_LABELS[base]}, {MODEL_LABELS[variant]}" if sep else BASE_LABELS[base]


LABELS: dict[str, str] = {m: method_label(m) for m in METHODS}


@dataclass(frozen=True)
class TableBenchmark:
    """A benchmark over lookup tables of items, as its summaries name, order and
    label it: records of ``kind`` give a table's size as ``num_<item>s``;
    ``baseline``: the reference of the paired differences; ``per_run`` adds
    each run's result, ``speed_reference`` the seconds per step over that
    method's."""

    datasets: tuple[str, ...]
    methods: tuple[str, ...]
    labels: dict[str, str]
    dataset_labels: dict[str, str]
    colors: dict[str, str]
    kind: str = "molecules"
    item: str = "molecule"
    baseline: str = "chaining"
    checkpoints: tuple[int, ...] = (10, 25, 50)
    per_run: bool = False
    speed_reference: str | None = None

    @property
    def size_field(self) -> str:
        """The record field holding the number of items of the table."""
        return f"num_{self.item}s"


COLORS = {**BASE_COLORS, **_VARIANT_COLORS}
BENCHMARK = TableBenchmark(DATASET_NAMES, METHODS, LABELS, DATASET_LABELS, COLORS)


@dataclass(frozen=True)
class TableConfig:
    """Size of a benchmark over lookup tables: ``datasets`` (a subset of the
    subclass's ``names``), ``runs`` (seeds ``0..runs-1``), ``queries`` after
    ``n_init`` initial items, Chaining-UCB's and GP-UCB's ``delta``."""

    names: ClassVar[tuple[str, ...]] = ()
    datasets: tuple[str, ...]
    runs: int
    queries: int
    n_init: int
    delta: float

    def __post_init__(self) -> None:
        for name in ("runs", "queries", "n_init"):
            check_int(name, getattr(self, name), 1)
        if not self.datasets or set(self.datasets) - set(self.names):
            raise ValueError(
                f"`datasets` must be a non-empty subset of {self.names}, "
                f"got {self.datasets!r}."
            )

    def key(self) -> dict[str, Any]:
        """What a stored record must match to be reused."""
        key = {"queries": self.queries, "n_init": self.n_init, "delta": self.delta}
        return {**key, "format": FORMAT_VERSION}


@dataclass(frozen=True)
class MoleculeConfig(TableConfig):
    """:class:`TableConfig`, and UCB's ``beta`` and the Morgan ``radius`` and
    ``n_bits``."""

    names: ClassVar[tuple[str, ...]] = DATASET_NAMES
    datasets: tuple[str, ...] = ("esol", "freesolv")
    runs: int = 10
    queries: int = 50
    n_init: int = 10
    delta: float = 0.05
    beta: float = 0.2
    radius: int = 2
    n_bits: int = 2048

    def key(self) -> dict[str, Any]:
        """What a stored record must match to be reused."""
        extra = {"beta": self.beta, "radius": self.radius, "n_bits": self.n_bits}
        return {**super().key(), **extra}


FULL_CONFIG = MoleculeConfig()
SMALL_CONFIG = MoleculeConfig(datasets=("freesolv",), runs=2, queries=3)


def make_strategy(method: str, spec: Any, n_init: int, config: Any) -> Any:
    """The Ax ``GenerationStrategy`` of a model-based ``method`` (its
    ``@variant`` is ``spec``'s) over the items."""
    from ax_chaining import ax as axc

    method = method.split("@")[0]
    if method == "logei":  # Ax's modular BoTorch generator, Ax's optimizer
        from ax.adapter.registry import Generators
        from ax.generation_strategy.generation_node import GenerationNode
        from ax.generation_strategy.generation_strategy import GenerationStrategy
        from ax.generation_strategy.generator_spec import GeneratorSpec
        from botorch.acquisition.analytic import LogExpectedImprovement

        kwargs = {"surrogate_spec": spec, "botorch_acqf_class": LogExpectedImprovement}
        spec = GeneratorSpec(Generators.BOTORCH_MODULAR, generator_kwargs=kwargs)
        node = GenerationNode(name="LogEI", generator_specs=[spec])
        return GenerationStrategy(name="LogEI", nodes=[node])
    common = {"init_trials": n_init, "surrogate_spec": spec, "exclude_evaluated": True}
    if method == "logei-table":  # analytic LogEI over the table (BayBE's, q = 1)
        from botorch.acquisition.analytic import LogExpectedImprovement

        return axc.candidate_set_strategy(
            LogExpectedImprovement, name="LogEI", **common
        )
    beta = getattr(config, "beta", None)
    strategy = package_strategy(method, config.delta, beta, **common)
    if strategy is not None:
        return strategy
    raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}.")


def run_one(
    dataset: str, method: str, seed: int, config: MoleculeConfig
) -> dict[str, Any]:
    """One run: initial molecules, then ``config.queries`` queries; its record
    (:func:`screen_record`)."""
    spec = baybe = None
    extra: dict[str, Any] = {}
    if method == "baybe":
        data, baybe = load_dataset(dataset), _baybe_library(dataset)
    elif "@" in method:
        data = load_dataset(dataset)
        spec, extra["model"] = model_variant(dataset, method.split("@")[1])
    else:
        data, gram = library(dataset, config.radius, config.n_bits)
        if method != "random":
            from ax_chaining.ax import precomputed_kernel_surrogate_spec

            spec = precomputed_kernel_surrogate_spec(gram)
    run = (dataset, method, seed)
    y = data.y.numpy()
    return screen_record(
        BENCHMARK, run, config, y, family=method, spec=spec, baybe=baybe, extra=extra
    )


def screen_record(
    bench: TableBenchmark,
    run: tuple[str, str, int],
    config: TableConfig,
    y: np.ndarray,
    *,
    family: str,
    spec: Any = None,
    baybe: tuple[Any, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The record of one run ``(dataset, method, seed)`` maximizing ``y`` over
    the items: ``config.queries`` queries of ``family`` (``"baybe"`` on
    ``baybe``, a table and its search space; ``"random"``; or a
    :func:`make_strategy` method on ``spec``), then ``extra``."""
    dataset, method, seed = run
    n = len(y)
    if config.n_init + config.queries > n:
        raise ValueError(
            f"n_init + queries = {config.n_init + config.queries} exceeds the "
            f"{n} {bench.item}s of {dataset}."
        )
    items = initial_items(n, config.n_init, seed)
    extra = dict(extra or {})
    if family == "baybe":
        from benchmarks.baybe_loop import baybe_version, run_campaign

        table, space = baybe  # type: ignore[misc]
        items, steps = run_campaign(table, y, items, config.queries, seed, space)
        extra["baybe_version"] = baybe_version()
    elif family == "random":
        drawn = random_queries(n, items, config.queries, seed)
        items, steps = [*items, *drawn], [0.0] * len(drawn)
    else:
        strategy = make_strategy(family, spec, config.n_init, config)
        name = f"{dataset}_{method}_{seed}"
        items, steps, certs = run_client(y, items, strategy, config.queries, seed, name)
        extra["certificate_seconds"] = certs
    return {
        "dataset": dataset,
        "method": method,
        "seed": seed,
        "config": config.key(),
        bench.size_field: n,
        **outcome(y, items, config.n_init),
        "step_seconds": steps,
        **extra,
    }


def run_client(
    y: np.ndarray,
    initial: Sequence[int],
    strategy: Any,
    queries: int,
    seed: int,
    name: str,
    after_step: Callable[[list[int]], None] | None = None,
) -> tuple[list[int], list[float], list[float]]:
    """One Ax ``Client`` loop over the items maximizing ``y``: the ``initial``
    items completed, then ``queries`` trials one at a time,
    ``after_step(tested items)`` after each. Returns the tested items and the
    seconds of each ``get_next_trials`` and of its certificate."""
    from ax.api.client import Client

    from ax_chaining.ax import candidate_index_parameter
    from ax_chaining.ax.certificates import experiment_of, recorded

    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[candidate_index_parameter(len(y), name="item")], name=name
    )
    client.configure_optimization(objective="y")
    client.set_generation_strategy(strategy)
    items = [int(i) for i in initial]
    for i in items:
        index = client.attach_trial(parameters={"item": i})
        client.complete_trial(index, raw_data={"y": float(y[i])})
    steps: list[float] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(queries):
            start = time.perf_counter()
            trials = client.get_next_trials(max_trials=1)
            steps.append(time.perf_counter() - start)
            for index, params in trials.items():
                items.append(item := int(params["item"]))
                client.complete_trial(index, raw_data={"y": float(y[item])})
            if after_step is not None:
                after_step(items)
    experiment, _ = experiment_of(strategy)
    certs = [m["seconds"]["certificate"] for _, m in recorded(experiment)]
    return items, steps, certs


def outcome(y: np.ndarray, items: Sequence[int], n_init: int) -> dict[str, Any]:
    """What a run found: the tested ``values``, the simple ``regret`` after each
    query (index 0: after the initial items), the top-1% threshold (the
    ``ceil(0.01 n)``-th best value) and the first index of ``regret`` that
    reaches it (``queries_to_top1``, None if never)."""
    values = [float(y[i]) for i in items]
    best = np.maximum.accumulate(values)[n_init - 1 :]
    threshold = float(np.sort(y)[::-1][math.ceil(0.01 * len(y)) - 1])
    hits = [q for q, b in enumerate(best) if b >= threshold]
    return {
        "items": list(items),
        "values": values,
        "regret": [float(y.max() - b) for b in best],
        "top1_threshold": threshold,
        "queries_to_top1": hits[0] if hits else None,
    }


#: Model variants renamed after their records were made: old name -> new
#: (``default`` was RDKit's descriptors under BoTorch's priors).
RENAMED_VARIANTS: dict[str, str] = {"default": "rdkit2d-botorch"}


def current_name(name: str) -> str:
    """A method or problem name with a renamed variant under its new name."""
    base, sep, variant = name.partition("@")
    return f"{base}@{RENAMED_VARIANTS.get(variant, variant)}" if sep else name


def as_current(record: dict[str, Any]) -> dict[str, Any]:
    """A record with its method named as the current code names it."""
    return {**record, "method": current_name(record["method"])}


@functools.cache
def model_variant(dataset: str, variant: str) -> tuple[Any, dict[str, Any]]:
    """The surrogate spec of a library on a :data:`MODEL_VARIANTS` model (its
    features cached under the package's cache directory, ``features/<dataset>-
    <variant>``), and what it is."""
    from ax_chaining.molecules import molecule_surrogate_spec
    from benchmarks.testbeds import default_cache_dir

    options = MODEL_VARIANTS[variant]
    smiles = load_dataset(dataset).smiles
    path = default_cache_dir() / "features" / f"{dataset}-{variant}"
    spec = molecule_surrogate_spec(smiles, duplicates="map", path=path, **options)
    return spec, {
        "encoding": options["encoding"],
        "prior": options["prior"],
        # The spec's base kernel: which default the record ran on.
        "kernel": spec.model_configs[0].covar_module_options["base"],
        # Only where a variant replaces the encoding's default cleaning.
        **({"cleaning": options["cleaning"]} if "cleaning" in options else {}),
    }


@functools.cache
def _baybe_library(dataset: str) -> tuple[Any, Any]:
    """BayBE's table and search space of a library, once per process."""
    from benchmarks.baybe_loop import substance_table

    table = substance_table(load_dataset(dataset).smiles)
    return table, table.searchspace()


def run_tables(
    bench: TableBenchmark,
    run: Callable[..., dict[str, Any]],
    methods: Sequence[str],
    config: TableConfig,
    out: str | Path,
    **options: Any,
) -> list[dict[str, Any]]:
    """Run (or resume) ``run(dataset, method, seed, config=config)`` seed by
    seed; ``options`` of :func:`~benchmarks.records.run_resumable`."""
    check_names(methods, bench.methods, "method")
    tasks = [
        (d, m, s) for s in range(config.runs) for d in config.datasets for m in methods
    ]
    run = functools.partial(run, config=config)
    return run_resumable(tasks, out, bench.kind, config.key(), run, **options)


def summarize(
    records: Sequence[dict[str, Any]], bench: TableBenchmark = BENCHMARK
) -> dict[str, Any]:
    """Per dataset and method, over the seeds every method ran: regret at the
    checkpoints, its area, top-1% hits, time per step; paired differences
    against ``bench.baseline``."""
    rows, pairs = [], []
    records = [as_current(r) for r in records]
    groups = common_seed_groups(records, "dataset", bench.datasets, bench.methods)
    for dataset, methods, seeds, by_method in groups:
        finals: dict[str, list[float]] = {}
        aucs: dict[str, list[float]] = {}
        for m in methods:
            recs = by_method[m]
            T = min(len(r["regret"]) for r in recs) - 1
            curves = [r["regret"][: T + 1] for r in recs]
            finals[m] = [c[T] for c in curves]
            aucs[m] = [sum(c[1:]) for c in curves]
            hits = [r["queries_to_top1"] for r in recs]
            reached = [h for h in hits if h is not None and h <= T]
            steps = [s for r in recs for s in r["step_seconds"][:T]]
            certs = [s for r in recs for s in r.get("certificate_seconds", [])[:T]]
            curve_mean, curve_se = mean_se(curves)
            checkpoints = [k for k in (*bench.checkpoints, T) if k <= T]
            rows.append(
                {
                    "dataset": dataset,
                    "method": m,
                    "runs": len(seeds),
                    "queries": T,
                    bench.size_field: recs[0][bench.size_field],
                    "n_init": recs[0].get("config", {}).get("n_init"),
                    "regret": {
                        str(k): mean_se([c[k] for c in curves]) for k in checkpoints
                    },
                    "auc": mean_se(aucs[m]),
                    "top1_reached": len(reached),
                    "top1_median": _censored_median(hits, T),
                    "s_per_step": (sum(steps) / len(steps)) if steps else 0.0,
                    "curve_mean": curve_mean.tolist(),
                    "curve_se": curve_se.tolist(),
                }
            )
            if certs:  # records from 2026-11-28 on
                rows[-1]["certificate_s_per_step"] = sum(certs) / len(certs)
            if bench.per_run:
                rows[-1]["per_run"] = {
                    "seeds": seeds,
                    "final": finals[m],
                    "queries_to_top1": [h if h in reached else None for h in hits],
                }
        if (base := bench.baseline) in finals:
            pairs += [
                {
                    "dataset": dataset,
                    "method": m,
                    "final": paired(finals[base], finals[m], False),
                    "auc": paired(aucs[base], aucs[m], False),
                }
                for m in methods
                if m != base
            ]
    return {"rows": rows, "paired": pairs}


def _censored_median(hits: Sequence[int | None], T: int) -> float | None:
    """Median of the queries to the top 1%, "never" ranked last; None when
    more than half of the runs never reached it."""
    ranked = sorted(math.inf if h is None or h > T else h for h in hits)
    med = float(np.median(ranked)) if ranked else math.inf
    return None if math.isinf(med) or math.isnan(med) else med


def _without_certificate(row: dict[str, Any], per_ref: float) -> list[str]:
    """A row's certificate seconds per step, and its step without them over
    the reference's step (``-`` where not recorded)."""
    c = row.get("certificate_s_per_step")
    if c is None or not row["s_per_step"]:
        return ["-", "-"]
    return [num(c, 3), num((row["s_per_step"] - c) / per_ref, 2)]


def format_markdown(summary: dict[str, Any], bench: TableBenchmark = BENCHMARK) -> str:
    """Markdown tables of a :func:`summarize` result."""
    labels, item = bench.labels, bench.item
    lines: list[str] = []
    for dataset in dict.fromkeys(r["dataset"] for r in summary["rows"]):
        rows = [r for r in summary["rows"] if r["dataset"] == dataset]
        T = rows[0]["queries"]
        ks = list(dict.fromkeys(k for k in (*bench.checkpoints, T) if k <= T))
        best = {k: min(r["regret"][str(k)][0] for r in rows) for k in ks}
        ref = [r for r in rows if r["method"] == bench.speed_reference]
        per_ref = ref[0]["s_per_step"] if ref and ref[0]["s_per_step"] > 0 else None
        # The certificate's share of a step, where the records hold it.
        cert = per_ref and any(r.get("certificate_s_per_step") for r in rows)
        lines += [
            f"**{bench.dataset_labels[dataset]}** ({rows[0][bench.size_field]} "
            f"{item}s, T = {T} queries after the initial points)",
            "",
            "| method | "
            + " | ".join(f"S_{k}" for k in ks)
            + " | AUC (sum S_n) | top 1% reached | median queries to top 1% "
            "| s/step |"
            + (" ÷ ref |" if per_ref else "")
            + (" certificate s/step | ÷ ref without it |" if cert else "")
            + " runs |",
            "|---|" + "---:|" * (len(ks) + 5 + bool(per_ref) + 2 * bool(cert)),
        ]
        for r in rows:
            cells = []
            for k in ks:
                c = pm(*r["regret"][str(k)])
                cells.append(f"**{c}**" if r["regret"][str(k)][0] == best[k] else c)
            med, step = r["top1_median"], r["s_per_step"]
            speed = [num(step / per_ref, 2) if step else "-"] if per_ref else []
            lines.append(
                md_row(
                    labels[r["method"]],
                    *cells,
                    pm(*r["auc"], digits=2),
                    f"{r['top1_reached']} / {r['runs']}",
                    "> T" if med is None else num(med, 1),
                    num(step, 3),
                    *speed,
                    *(_without_certificate(r, per_ref) if cert else []),
                    r["runs"],
                )
            )
        lines.append("")
        if "per_run" in rows[0]:
            seeds = ", ".join(map(str, rows[0]["per_run"]["seeds"]))
            lines += [
                f"**Per run** (seeds {seeds}, in that order; S_T as above, queries "
                'to the top 1% "-" where never)',
                "",
                "| method | S_T | queries to top 1% |",
                "|---|---|---|",
            ]
            for r in rows:
                runs = r["per_run"]
                hits = ["-" if h is None else str(h) for h in runs["queries_to_top1"]]
                final = ", ".join(num(v, 2) for v in runs["final"])
                lines.append(md_row(labels[r["method"]], final, ", ".join(hits)))
            lines.append("")
    if summary["paired"]:
        base = labels[bench.baseline]
        lines += [
            f"**Paired differences, {base} minus each method** (same initial "
            f"{item}s in each run; negative: {base} better)",
            "",
            "| dataset | method | Δ S_T | Δ AUC | wins / ties / losses (S_T) | runs |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for p in summary["paired"]:
            f, a = p["final"], p["auc"]
            lines.append(
                md_row(
                    bench.dataset_labels[p["dataset"]],
                    labels[p["method"]],
                    pm(f["mean"], f["se"], sign=True),
                    pm(a["mean"], a["se"], digits=2, sign=True),
                    f"{f['wins']} / {f['ties']} / {f['losses']}",
                    f["n"],
                )
            )
        lines.append("")
    note = (
        f"S_n: simple regret max y - max y(tested) after the initial {item}s and "
        "n queries, in the property's units, mean ± standard error over runs "
        "(bold: lowest mean). AUC: sum of S_n over n = 1..T. Top 1%: runs in "
        f"which a {item} among the ceil(N/100) best was tested; median queries "
        f'to it, 0 if an initial {item} was ("> T": more than half never). '
        "s/step: mean wall time of one `get_next_trials` call (fit + acquisition)."
    )
    if any(r["method"].startswith("baybe") for r in summary["rows"]):
        note += " BayBE's: one `Campaign.recommend` call (fit + acquisition)."
    if bench.speed_reference:
        ref_label = bench.labels[bench.speed_reference]
        note += f" ÷ ref: s/step over {ref_label}'s in the same runs."
    if any(r.get("certificate_s_per_step") for r in summary["rows"]):
        note += (
            " Certificate s/step: the part of a step that records the certificate"
            " (every step of the package's strategies does); ÷ ref without it:"
            " the step less that part, over the reference's step."
        )
    return "\n".join([*lines, note])


def plot_regret(
    summary: dict[str, Any], path: str | Path, bench: TableBenchmark = BENCHMARK
) -> Path:
    """Mean simple regret ± SE against queries, one panel per dataset."""
    datasets = list(dict.fromkeys(r["dataset"] for r in summary["rows"]))
    fig, axes = pyplot().subplots(
        1, len(datasets), figsize=(4.5 * len(datasets), 3.4), squeeze=False
    )
    for ax, dataset in zip(axes.flat, datasets, strict=True):
        rows = [r for r in summary["rows"] if r["dataset"] == dataset]
        for r in rows:
            x = np.arange(len(r["curve_mean"]))
            color, label = bench.colors[r["method"]], bench.labels[r["method"]]
            band(ax, x, r["curve_mean"], r["curve_se"], color, label)
            size = f"{r[bench.size_field]} {bench.item}s"
            title = f"{bench.dataset_labels[dataset]} ({size}, {r['runs']} runs)"
            ax.set_title(title, fontsize=9)
        ax.set_xlabel(f"queries after {rows[0]['n_init']} initial {bench.item}s")
        ax.set_ylabel("simple regret")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


run = functools.partial(run_tables, BENCHMARK, run_one)
