r"""Screening a real molecule library with Chaining-UCB in an Ax ``Client`` loop.

The search space is a library of molecules with one measured property each
(:func:`ax_chaining.chem.load_dataset`: ESOL solubility, FreeSolv hydration free
energy, Lipophilicity logD). Each molecule is an item index
(:func:`ax_chaining.ax.candidate_index_parameter`); the GP's prior covariance is
the Tanimoto similarity of Morgan fingerprints (radius 2, 2,048 bits), given to
Ax as a precomputed Gram matrix
(:func:`ax_chaining.ax.precomputed_kernel_surrogate_spec`). The loop is the one a
chemist would write: ``Client.get_next_trials`` / ``complete_trial`` with the
measured value of the proposed molecule.

Methods (``METHODS``):

============  ================================================================
``chaining``  :func:`~ax_chaining.ax.chaining_generation_strategy` (delta 0.05)
``gp-ucb``    :func:`~ax_chaining.ax.gp_ucb_generation_strategy` (delta 0.05)
``ucb``       :func:`~ax_chaining.ax.ucb_generation_strategy` (beta 0.2)
``logei``     Ax's modular BoTorch generator with ``LogExpectedImprovement``
              and the same surrogate (Ax enumerates the library and skips
              evaluated molecules)
``qlognei``   :func:`~ax_chaining.ax.qlognei_generation_strategy`: Ax's default
              acquisition (qLogNEI) over the library, same surrogate
``random``    uniform without replacement over the molecules not yet tested
``baybe``     BayBE's ``Campaign`` with its default recommender over one
              ``SubstanceParameter`` of the library's SMILES, BayBE's default
              encoding (:mod:`benchmarks.baybe_loop`; needs ``baybe[chem]``)
============  ================================================================

A method with a model suffix runs on a descriptor model of
:func:`~ax_chaining.ax.molecule_surrogate_spec` (duplicates mapped) instead of
the Tanimoto Gram. With ``@rdkit2d-botorch`` (``chaining@rdkit2d-botorch``,
``chaining-continuous@rdkit2d-botorch``, ``gp-ucb@rdkit2d-botorch``,
``qlognei@rdkit2d-botorch``): RDKit's 2D descriptors under BoTorch's default
priors, the package's default model until BayBE's model replaced it (its
records, made as ``@default``, are read under this name:
:func:`as_current`); with the suffix ``@rdkit2d-baybe`` (``chaining``,
``qlognei``), on the same descriptors under BayBE's EDBO-smoothed priors
(``molecule_surrogate_spec(smiles, prior="baybe")``: ARD Matern-5/2 with an
output scale, Gamma priors), the runner-up of the model comparison; with
``@mordred-baybe``, on BayBE's features of a ``SubstanceParameter`` (Mordred
descriptors decorrelated at 0.7; needs the ``mordred`` extra) under the same
priors; with ``@mordred-chen``, on BayBE 0.15's own model of it (the same
features under its ``CHEN`` preset, ``prior="chen"``: the package's default
model of a molecule library, by the measurements these records hold); with
``@rdkit2d-chen``, on RDKit's descriptors under that preset.
Their records name the encoding, prior, kernel and any cleaning option that
replaces the encoding's default (:data:`MODEL_VARIANTS`). These and
``baybe`` are not in the default selection (``DEFAULT_METHODS``).

Protocol: run ``r`` draws ``n_init`` initial molecules uniformly without
replacement with seed ``r``; every method gets the same initial molecules
(attached to the experiment with ``Client.attach_trial``, so each strategy
leaves its initialization at once), then ``queries`` sequential queries. The
measurements are noise-free lookups, so the UCB-family strategies use
``exclude_evaluated=True``. ``Client(random_seed=r)`` seeds the rest.

Reported per dataset and method: simple regret ``max y - max y(tested)`` after
``n`` queries; the number of queries until a molecule in the top 1% of the
library (the ``ceil(0.01 n)`` best) has been tested (0 if an initial molecule
is; runs that never reach it are counted and shown as censored); and wall time
per query (``get_next_trials``, or BayBE's ``Campaign.recommend``: model fit
and acquisition).

The loops (:func:`run_client`, :func:`random_items`), a run's :func:`outcome`
and the summaries (:func:`summarize`, :func:`format_markdown`,
:func:`plot_regret`, described by a :class:`TableBenchmark`) serve the reaction
benchmark (:mod:`benchmarks.reactions_bench`) too.
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
from benchmarks._tables import check_names, common_seed_groups, mean_se, num, paired, pm
from benchmarks.records import run_resumable

__all__ = [
    "BASE_LABELS",
    "as_current",
    "current_name",
    "DATASET_NAMES",
    "DEFAULT_METHODS",
    "FULL_CONFIG",
    "LABELS",
    "METHODS",
    "MOLECULES",
    "SMALL_CONFIG",
    "MoleculeConfig",
    "TableBenchmark",
    "TableConfig",
    "format_markdown",
    "library",
    "make_strategy",
    "method_label",
    "outcome",
    "plot_regret",
    "random_items",
    "run_client",
    "run_molecules",
    "run_tables",
    "screen_record",
    "run_one",
    "summarize",
]

FORMAT_VERSION = 1
DATASET_NAMES: tuple[str, ...] = ("esol", "freesolv", "lipo")
#: The methods a run without ``--methods`` runs.
DEFAULT_METHODS: tuple[str, ...] = (
    "chaining",
    "chaining-continuous",
    "gp-ucb",
    "ucb",
    "logei",
    "qlognei",
    "random",
)
#: Every method: the defaults, BayBE (it needs its extra) and some on
#: descriptor models (:data:`MODEL_VARIANTS`).
METHODS: tuple[str, ...] = (
    *DEFAULT_METHODS,
    "baybe",
    "chaining@rdkit2d-botorch",
    "chaining-continuous@rdkit2d-botorch",
    "gp-ucb@rdkit2d-botorch",
    "qlognei@rdkit2d-botorch",
    "chaining@rdkit2d-baybe",
    "qlognei@rdkit2d-baybe",
    "chaining@mordred-baybe",
    "qlognei@mordred-baybe",
    "chaining@mordred-chen",
    "chaining-continuous@mordred-chen",
    "gp-ucb@mordred-chen",
    "qlognei@mordred-chen",
    "chaining@rdkit2d-chen",
    "qlognei@rdkit2d-chen",
)
#: The descriptor models a method can run on (``method@variant``): the
#: keywords of :func:`~ax_chaining.ax.molecule_surrogate_spec` beside the
#: library's SMILES, each named in full so that a record keeps its meaning when
#: the package's default changes.
MODEL_VARIANTS: dict[str, dict[str, Any]] = {
    # The package's default until BayBE's model (`mordred-chen`) replaced it.
    "rdkit2d-botorch": {"encoding": "rdkit2d", "prior": "botorch"},
    "rdkit2d-baybe": {"encoding": "rdkit2d", "prior": "baybe"},
    # BayBE's features of a SubstanceParameter: Mordred descriptors with its
    # greedy decorrelation at 0.7 (the same rule as clean_features'); needs
    # the `chem` extra. Under the EDBO-smoothed priors, then under the CHEN
    # preset, which is what BayBE 0.15 fits to a molecule parameter: so
    # `mordred-chen` is BayBE's own model.
    "mordred-baybe": {
        "encoding": "mordred",
        "prior": "baybe",
        "cleaning": {"max_correlation": 0.7},
    },
    "mordred-chen": {
        "encoding": "mordred",
        "prior": "chen",
        "cleaning": {"max_correlation": 0.7},
    },
    "rdkit2d-chen": {"encoding": "rdkit2d", "prior": "chen"},
}
#: What each of :data:`MODEL_VARIANTS` is, in a few words (table labels).
MODEL_LABELS: dict[str, str] = {
    "rdkit2d-botorch": "RDKit descriptors, BoTorch priors",
    "rdkit2d-baybe": "RDKit descriptors, BayBE's EDBO priors",
    "mordred-baybe": "Mordred at 0.7, BayBE's EDBO priors",
    "mordred-chen": "BayBE's model (Mordred at 0.7, CHEN priors)",
    "rdkit2d-chen": "RDKit descriptors, CHEN priors",
}
#: Each method's name in tables and figures; ``method@variant`` is the
#: method's and the variant's (:data:`MODEL_LABELS`).
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
    """``method``'s name in tables and figures (a model variant's after its
    acquisition's)."""
    base, sep, variant = method.partition("@")
    return f"{BASE_LABELS[base]}, {MODEL_LABELS[variant]}" if sep else BASE_LABELS[base]


LABELS: dict[str, str] = {m: method_label(m) for m in METHODS}
DATASET_LABELS = {
    "esol": "ESOL",
    "freesolv": "FreeSolv",
    "lipo": "Lipophilicity",
}
CHECKPOINTS = (10, 25, 50)
#: Each method's colour in the figures.
COLORS: dict[str, str] = {
    "chaining": "tab:green",
    "chaining-continuous": "tab:olive",
    "gp-ucb": "tab:blue",
    "ucb": "tab:orange",
    "logei": "tab:purple",
    "qlognei": "tab:red",
    "random": "tab:gray",
    "baybe": "tab:brown",
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


@dataclass(frozen=True)
class TableBenchmark:
    """What the summaries of a benchmark over lookup tables of items (molecule
    libraries, reaction tables) name, order and label.

    Attributes:
        datasets: The tables, in the order of the summary.
        methods: The methods, in the order of each table's rows.
        labels: Method -> its name in tables and figures.
        dataset_labels: Table -> its name.
        colors: Method -> its colour in the figures.
        kind: The records' kind (a key of :data:`benchmarks.records.LAYOUTS`).
        item: What an item is, in the singular (``"molecule"``); records give
            their table's size as ``num_<item>s``.
        baseline: The method the paired differences subtract the others from.
        checkpoints: The queries at which the summary gives the regret (and at
            the last query of the runs).
        per_run: Also give each run's final regret and queries to the top 1%.
    """

    datasets: tuple[str, ...]
    methods: tuple[str, ...]
    labels: dict[str, str]
    dataset_labels: dict[str, str]
    colors: dict[str, str]
    kind: str = "molecules"
    item: str = "molecule"
    baseline: str = "chaining"
    checkpoints: tuple[int, ...] = CHECKPOINTS
    per_run: bool = False

    @property
    def size_field(self) -> str:
        """The record field holding the number of items of the table."""
        return f"num_{self.item}s"


#: The molecule benchmark's summaries.
MOLECULES = TableBenchmark(DATASET_NAMES, METHODS, LABELS, DATASET_LABELS, COLORS)


@dataclass(frozen=True)
class TableConfig:
    """Size of a benchmark over lookup tables (what the molecule and reaction
    benchmarks share); a subclass names its tables in :attr:`names`.

    Attributes:
        datasets: Table names (a non-empty subset of :attr:`names`).
        runs: Seeds ``0 .. runs - 1``.
        queries: Sequential queries after the initial points.
        n_init: Initial items, uniform without replacement.
        delta: Chaining-UCB's and GP-UCB's confidence parameter.
    """

    names: ClassVar[tuple[str, ...]] = ()
    datasets: tuple[str, ...]
    runs: int
    queries: int
    n_init: int
    delta: float

    def __post_init__(self) -> None:
        for name in ("runs", "queries", "n_init"):
            check_int(name, getattr(self, name), 1)
        bad = [d for d in self.datasets if d not in self.names]
        if bad or not self.datasets:
            raise ValueError(
                f"`datasets` must be a non-empty subset of {self.names}, "
                f"got {self.datasets!r}."
            )

    def key(self) -> dict[str, Any]:
        """What a stored record must match to be reused."""
        return {
            "queries": self.queries,
            "n_init": self.n_init,
            "delta": self.delta,
            "format": FORMAT_VERSION,
        }


@dataclass(frozen=True)
class MoleculeConfig(TableConfig):
    """Size of a molecule benchmark (the fields of :class:`TableConfig`, and
    the methods' other settings).

    Attributes:
        beta: BoTorch UCB's beta.
        radius: Morgan radius.
        n_bits: Fingerprint length.
    """

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
        return {
            **super().key(),
            "beta": self.beta,
            "radius": self.radius,
            "n_bits": self.n_bits,
        }


FULL_CONFIG = MoleculeConfig()
SMALL_CONFIG = MoleculeConfig(datasets=("freesolv",), runs=2, queries=3)


def make_strategy(method: str, spec: Any, n_init: int, config: MoleculeConfig) -> Any:
    """The Ax ``GenerationStrategy`` of a model-based ``method`` over the library,
    with the surrogate spec ``spec`` (a ``@variant`` suffix is the spec's)."""
    from ax_chaining import ax as axc

    method = method.split("@")[0]
    if method == "logei":
        from ax.adapter.registry import Generators
        from ax.generation_strategy.generation_node import GenerationNode
        from ax.generation_strategy.generation_strategy import GenerationStrategy
        from ax.generation_strategy.generator_spec import GeneratorSpec
        from botorch.acquisition.analytic import LogExpectedImprovement

        node = GenerationNode(
            name="LogEI",
            generator_specs=[
                GeneratorSpec(
                    generator_enum=Generators.BOTORCH_MODULAR,
                    generator_kwargs={
                        "surrogate_spec": spec,
                        "botorch_acqf_class": LogExpectedImprovement,
                    },
                )
            ],
        )
        return GenerationStrategy(name="LogEI", nodes=[node])
    common = {
        "init_trials": n_init,
        "surrogate_spec": spec,
        "exclude_evaluated": True,
    }
    if method == "chaining":
        return axc.chaining_generation_strategy(delta=config.delta, **common)
    if method == "chaining-continuous":
        return axc.chaining_generation_strategy(
            delta=config.delta, bonus="continuous", **common
        )
    if method == "gp-ucb":
        return axc.gp_ucb_generation_strategy(delta=config.delta, **common)
    if method == "ucb":
        return axc.ucb_generation_strategy(beta=config.beta, **common)
    if method == "qlognei":
        return axc.qlognei_generation_strategy(**common)
    raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}.")


def initial_items(n: int, n_init: int, seed: int) -> list[int]:
    """The run's initial molecules (the same for every method)."""
    rng = np.random.default_rng(seed)
    return [int(i) for i in rng.choice(n, size=n_init, replace=False)]


def run_one(
    dataset: str, method: str, seed: int, config: MoleculeConfig
) -> dict[str, Any]:
    """One run: initial molecules, then ``config.queries`` queries.

    Returns:
        A JSON-ready record: tested ``items`` in order, their ``values``,
        ``step_seconds`` per query, ``regret`` (simple regret after each query,
        index 0 = after the initial points), ``queries_to_top1`` (None if never).
    """
    if method == "baybe" or "@" in method:
        data, gram = load_dataset(dataset), None  # no Tanimoto Gram needed
    else:
        data, gram = library(dataset, config.radius, config.n_bits)
    extra: dict[str, Any] = {}
    spec = baybe = None
    if method == "baybe":
        baybe = _baybe_library(dataset)
    elif "@" in method:
        spec, extra["model"] = model_variant(dataset, method.split("@")[1])
    elif method != "random":
        from ax_chaining.ax import precomputed_kernel_surrogate_spec

        spec = precomputed_kernel_surrogate_spec(gram)
    return screen_record(
        MOLECULES,
        (dataset, method, seed),
        config,
        data.y.numpy(),
        family=method,
        spec=spec,
        baybe=baybe,
        extra=extra,
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
    """One run over the items ``0 .. len(y) - 1`` and its record.

    The run's initial items (:func:`initial_items`), then ``config.queries``
    queries of ``family``: ``"baybe"`` (BayBE's campaign over ``baybe``, a
    table and its search space: :func:`benchmarks.baybe_loop.run_campaign`),
    ``"random"`` (:func:`random_items`), or a method of :func:`make_strategy`
    on the surrogate spec ``spec`` (:func:`run_client`).

    Args:
        bench: The benchmark (what an item is called).
        run: ``(dataset, method, seed)``, the names of the run.
        config: Its size.
        y: The items' values, maximized.

    Returns:
        A JSON-ready record: the run's names and ``config.key()``, the table's
        size (``bench.size_field``), the :func:`outcome` of the tested items,
        ``step_seconds`` per query, then ``extra``.
    """
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

        table, space = baybe
        items, steps = run_campaign(
            table, y, items, config.queries, seed, searchspace=space
        )
        extra["baybe_version"] = baybe_version()
    elif family == "random":
        items, steps = random_items(n, items, config.queries, seed)
    else:
        strategy = make_strategy(family, spec, config.n_init, config)
        items, steps = run_client(
            y, items, strategy, config.queries, seed, f"{dataset}_{method}_{seed}"
        )
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


def random_items(
    n: int, initial: Sequence[int], queries: int, seed: int
) -> tuple[list[int], list[float]]:
    """Random search: ``queries`` items drawn uniformly without replacement
    from those of ``0 .. n - 1`` not in ``initial`` (seed ``1_000_000 + seed``),
    after them; 0 seconds a step."""
    rng = np.random.default_rng(1_000_000 + seed)
    rest = np.setdiff1d(np.arange(n), np.array(initial))
    drawn = [int(i) for i in rng.permutation(rest)[:queries]]
    return [*initial, *drawn], [0.0] * len(drawn)


def run_client(
    y: np.ndarray,
    initial: Sequence[int],
    strategy: Any,
    queries: int,
    seed: int,
    name: str,
) -> tuple[list[int], list[float]]:
    """One Ax ``Client`` loop over the items ``0 .. len(y) - 1``, maximizing ``y``.

    The initial items are attached (``Client.attach_trial``) and completed
    first, then ``queries`` trials are asked for one at a time and completed
    with their ``y``; ``Client(random_seed=seed)`` seeds the rest.

    Returns:
        ``(items, seconds)``: the tested items in order (the initial ones
        first) and the seconds of each ``get_next_trials`` call.
    """
    from ax.api.client import Client

    from ax_chaining.ax import candidate_index_parameter

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
                item = int(params["item"])
                items.append(item)
                client.complete_trial(index, raw_data={"y": float(y[item])})
    return items, steps


def outcome(y: np.ndarray, items: Sequence[int], n_init: int) -> dict[str, Any]:
    """What a run found: the tested ``values``, the simple ``regret`` after
    each query (index 0: after the ``n_init`` initial items), the top-1%
    threshold (the ``ceil(0.01 n)``-th best value) and ``queries_to_top1``
    (the first index of ``regret`` whose best reaches it; None if never)."""
    values = [float(y[i]) for i in items]
    best = np.maximum.accumulate(values)[n_init - 1 :]
    k = math.ceil(0.01 * len(y))
    threshold = float(np.sort(y)[::-1][k - 1])
    hits = [q for q, b in enumerate(best) if b >= threshold]
    return {
        "items": list(items),
        "values": values,
        "regret": [float(y.max() - b) for b in best],
        "top1_threshold": threshold,
        "queries_to_top1": hits[0] if hits else None,
    }


#: Model variants renamed after their records were made: old name -> new.
#: ``default`` named the package's default model while it was RDKit's 2D
#: descriptors under BoTorch's priors (ARD RBF), which every such record ran on.
RENAMED_VARIANTS: dict[str, str] = {"default": "rdkit2d-botorch"}


def current_name(name: str) -> str:
    """A method (``chaining@default``) or problem (``esol@default``) name with
    a renamed model variant (:data:`RENAMED_VARIANTS`) under its new name."""
    base, sep, variant = name.partition("@")
    return f"{base}@{RENAMED_VARIANTS.get(variant, variant)}" if sep else name


def as_current(record: dict[str, Any]) -> dict[str, Any]:
    """A record with its method named as the current code names it
    (:func:`current_name`); otherwise unchanged."""
    return {**record, "method": current_name(record["method"])}


@functools.cache
def model_variant(dataset: str, variant: str) -> tuple[Any, dict[str, Any]]:
    """The surrogate spec of a library on a model of :data:`MODEL_VARIANTS`,
    and what it is. Its features are computed once and cached under
    :func:`~ax_chaining.test_functions.problems.default_cache_dir`
    (``features/<dataset>-<variant>``), so that a run in a fresh process does
    not compute them again (Mordred on Lipophilicity's 4,200 molecules takes
    minutes); the cache refuses a changed library or other options."""
    from ax_chaining.molecules import molecule_surrogate_spec
    from benchmarks.moved_kernels import default_cache_dir

    options = MODEL_VARIANTS[variant]
    smiles = load_dataset(dataset).smiles
    path = default_cache_dir() / "features" / f"{dataset}-{variant}"
    spec = molecule_surrogate_spec(smiles, duplicates="map", path=path, **options)
    return spec, {
        "encoding": options["encoding"],
        "prior": options["prior"],
        # The spec's own base kernel, so a record says which default it ran on
        # (the default was ARD Matern-5/2 before it became RBF).
        "kernel": spec.model_configs[0].covar_module_options["base"],
        # Only where a variant replaces the encoding's default cleaning, so
        # the records of the other variants keep their keys.
        **({"cleaning": options["cleaning"]} if "cleaning" in options else {}),
    }


@functools.cache
def _baybe_library(dataset: str) -> tuple[Any, Any]:
    """BayBE's table and search space of a library, built once per process (its
    descriptors are the costly part)."""
    from benchmarks.baybe_loop import substance_table

    table = substance_table(load_dataset(dataset).smiles)
    return table, table.searchspace()


def run_molecules(
    methods: Sequence[str], config: MoleculeConfig, out: str | Path, **options: Any
) -> list[dict[str, Any]]:
    """Run (or resume) every run, seed by seed; returns all records.

    ``options``: ``progress``, ``force`` and ``jobs`` (worker processes), as
    :func:`run_tables` takes them."""
    return run_tables(MOLECULES, run_one, methods, config, out, **options)


def run_tables(
    bench: TableBenchmark,
    run: Callable[..., dict[str, Any]],
    methods: Sequence[str],
    config: TableConfig,
    out: str | Path,
    *,
    progress: bool = True,
    force: bool = False,
    jobs: int = 1,
) -> list[dict[str, Any]]:
    """Run (or resume) ``run(dataset, method, seed, config=config)`` for every
    seed of ``config.runs``, dataset of ``config.datasets`` and method of
    ``methods`` (checked against ``bench.methods``), seed by seed, as the
    records of ``bench.kind``; returns all records.

    ``jobs`` worker processes share the runs (see :func:`run_resumable`)."""
    check_names(methods, bench.methods, "method")
    tasks = [
        (d, m, s) for s in range(config.runs) for d in config.datasets for m in methods
    ]
    return run_resumable(
        tasks,
        out,
        bench.kind,
        config.key(),
        functools.partial(run, config=config),
        force=force,
        progress=progress,
        desc=bench.kind,
        jobs=jobs,
    )


def summarize(
    records: Sequence[dict[str, Any]], bench: TableBenchmark = MOLECULES
) -> dict[str, Any]:
    """Per dataset and method: regret at checkpoints, top-1% hits, time per step.

    Only seeds present for every method of a dataset enter, so rows and paired
    differences use the same runs; the paired differences subtract each method
    from ``bench.baseline``.
    """
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
            curve_mean, curve_se = mean_se(curves)
            rows.append(
                {
                    "dataset": dataset,
                    "method": m,
                    "runs": len(seeds),
                    "queries": T,
                    bench.size_field: recs[0][bench.size_field],
                    "n_init": recs[0].get("config", {}).get("n_init"),
                    "regret": {
                        str(k): mean_se([c[k] for c in curves])
                        for k in (*bench.checkpoints, T)
                        if k <= T
                    },
                    "auc": mean_se(aucs[m]),
                    "top1_reached": len(reached),
                    "top1_median": _censored_median(hits, T),
                    "s_per_step": (sum(steps) / len(steps)) if steps else 0.0,
                    "curve_mean": curve_mean.tolist(),
                    "curve_se": curve_se.tolist(),
                }
            )
            if bench.per_run:
                rows[-1]["per_run"] = {
                    "seeds": seeds,
                    "final": finals[m],
                    "queries_to_top1": [h if h in reached else None for h in hits],
                }
        base = bench.baseline
        if base in finals:
            for m in methods:
                if m == base:
                    continue
                pairs.append(
                    {
                        "dataset": dataset,
                        "method": m,
                        "final": paired(finals[base], finals[m], False),
                        "auc": paired(aucs[base], aucs[m], False),
                    }
                )
    return {"rows": rows, "paired": pairs}


def _censored_median(hits: Sequence[int | None], T: int) -> float | None:
    """Median of the queries to the top 1%, with "never" ranked last.

    None when more than half of the runs never reached it.
    """
    ranked = sorted(math.inf if h is None or h > T else h for h in hits)
    med = float(np.median(ranked)) if ranked else math.inf
    return None if math.isinf(med) or math.isnan(med) else med


def format_markdown(summary: dict[str, Any], bench: TableBenchmark = MOLECULES) -> str:
    """Markdown tables of a :func:`summarize` result."""
    labels, item = bench.labels, bench.item
    lines: list[str] = []
    for dataset in dict.fromkeys(r["dataset"] for r in summary["rows"]):
        rows = [r for r in summary["rows"] if r["dataset"] == dataset]
        T = rows[0]["queries"]
        ks = [k for k in (*bench.checkpoints, T) if k <= T]
        ks = list(dict.fromkeys(ks))
        best = {k: min(r["regret"][str(k)][0] for r in rows) for k in ks}
        lines += [
            f"**{bench.dataset_labels[dataset]}** ({rows[0][bench.size_field]} "
            f"{item}s, T = {T} queries after the initial points)",
            "",
            "| method | "
            + " | ".join(f"S_{k}" for k in ks)
            + " | AUC (sum S_n) | top 1% reached | median queries to top 1% "
            "| s/step | runs |",
            "|---|" + "---:|" * (len(ks) + 5),
        ]
        for r in rows:
            cells = []
            for k in ks:
                c = pm(*r["regret"][str(k)])
                cells.append(f"**{c}**" if r["regret"][str(k)][0] == best[k] else c)
            med = r["top1_median"]
            lines.append(
                f"| {labels[r['method']]} | "
                + " | ".join(cells)
                + f" | {pm(*r['auc'], digits=2)} | {r['top1_reached']} / {r['runs']}"
                f" | {'> T' if med is None else num(med, 1)}"
                f" | {num(r['s_per_step'], 3)} | {r['runs']} |"
            )
        lines.append("")
        if "per_run" in rows[0]:
            lines += _per_run_lines(rows, labels)
    if summary["paired"]:
        lines += [
            f"**Paired differences, {labels[bench.baseline]} minus each method** "
            f"(same initial {item}s in each run; negative: "
            f"{labels[bench.baseline]} better)",
            "",
            "| dataset | method | Δ S_T | Δ AUC | wins / ties / losses (S_T) | runs |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for p in summary["paired"]:
            f, a = p["final"], p["auc"]
            lines.append(
                f"| {bench.dataset_labels[p['dataset']]} | {labels[p['method']]} | "
                f"{pm(f['mean'], f['se'], sign=True)} | "
                f"{pm(a['mean'], a['se'], digits=2, sign=True)} | "
                f"{f['wins']} / {f['ties']} / {f['losses']} | {f['n']} |"
            )
        lines.append("")
    lines.append(
        f"S_n: simple regret max y - max y(tested) after the initial {item}s and "
        "n queries, in the property's units, mean ± standard error over runs "
        "(bold: lowest mean). AUC: sum of S_n over n = 1..T. Top 1%: runs in "
        f"which a {item} among the ceil(N/100) best was tested; median queries "
        f'to it, 0 if an initial {item} was ("> T": more than half never). '
        "s/step: mean wall time of one `get_next_trials` call (fit + acquisition)."
        + (
            " BayBE's: one `Campaign.recommend` call (fit + acquisition)."
            if any(r["method"].startswith("baybe") for r in summary["rows"])
            else ""
        )
    )
    return "\n".join(lines)


def _per_run_lines(rows: Sequence[dict[str, Any]], labels: dict[str, str]) -> list[str]:
    """A table of each run's final regret and queries to the top 1%."""
    seeds = ", ".join(map(str, rows[0]["per_run"]["seeds"]))
    lines = [
        f"**Per run** (seeds {seeds}, in that order; S_T as above, queries to "
        'the top 1% "-" where never)',
        "",
        "| method | S_T | queries to top 1% |",
        "|---|---|---|",
    ]
    for r in rows:
        runs = r["per_run"]
        hits = ["-" if h is None else str(h) for h in runs["queries_to_top1"]]
        lines.append(
            f"| {labels[r['method']]} | "
            + ", ".join(num(v, 2) for v in runs["final"])
            + f" | {', '.join(hits)} |"
        )
    return [*lines, ""]


def plot_regret(
    summary: dict[str, Any], path: str | Path, bench: TableBenchmark = MOLECULES
) -> Path:
    """Mean simple regret ± SE against queries, one panel per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in summary["rows"]))
    fig, axes = plt.subplots(
        1, len(datasets), figsize=(4.5 * len(datasets), 3.4), squeeze=False
    )
    for ax, dataset in zip(axes.flat, datasets, strict=True):
        for r in (r for r in summary["rows"] if r["dataset"] == dataset):
            x = np.arange(len(r["curve_mean"]))
            mean, se = np.array(r["curve_mean"]), np.array(r["curve_se"])
            color = bench.colors[r["method"]]
            ax.plot(x, mean, color=color, label=bench.labels[r["method"]])
            ax.fill_between(x, mean - se, mean + se, color=color, alpha=0.15)
            ax.set_title(
                f"{bench.dataset_labels[dataset]} ({r[bench.size_field]} "
                f"{bench.item}s, {r['runs']} runs)",
                fontsize=9,
            )
        n_init = next(r["n_init"] for r in summary["rows"] if r["dataset"] == dataset)
        ax.set_xlabel(f"queries after {n_init} initial {bench.item}s")
        ax.set_ylabel("simple regret")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
