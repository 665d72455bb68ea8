r"""Screening a reaction table: per-component encodings beside one-hot, and BayBE.

The table is the Buchwald-Hartwig screen of Ahneman et al. (Science, 2018;
:func:`ax_chaining.test_functions.reactions.load_reactions`): 3,955 reactions,
each a ligand, an additive, a base and an aryl halide, with its measured yield
(%, maximized). Each reaction is an item index
(:func:`ax_chaining.ax.candidate_index_parameter`); a GP sees each item's row
of a feature table made of its components' encodings
(:func:`ax_chaining.reactions.component_features`), through
:func:`~ax_chaining.ax.surrogates.feature_table_surrogate_spec` (ARD RBF,
BoTorch's priors: the package's default molecule model, applied per
component). The loop is the molecule benchmark's
(:func:`benchmarks.molecules_bench.run_client`).

Methods (``METHODS``; ``<acquisition>@<encoding>``):

========================  ====================================================
``chaining@onehot``       :func:`~ax_chaining.ax.chaining_generation_strategy`
                          (delta 0.05) on the one-hot rows (one indicator per
                          distinct component of each column)
``qlognei@onehot``        :func:`~ax_chaining.ax.qlognei_generation_strategy`
                          (Ax's qLogNEI over the table) on the same rows
``chaining@descriptors``  Chaining-UCB on each component's RDKit 2D
                          descriptors, cleaned per column as the default
                          molecule model cleans them
                          (:func:`~ax_chaining.descriptors.default_cleaning`:
                          non-finite and constant columns dropped, min-max
                          to [0, 1], one of each pair with correlation > 0.95
                          dropped)
``qlognei@descriptors``   qLogNEI on the same rows
``baybe@onehot``          BayBE's ``Campaign`` and default recommender, one
                          ``CategoricalParameter`` per column (one-hot)
``baybe@substance``       the same, one ``SubstanceParameter`` per column
                          (BayBE's default encoding: Mordred descriptors,
                          decorrelated)
``random``                uniform without replacement over the untested
========================  ====================================================

The BayBE methods (:mod:`benchmarks.baybe_loop`; ``baybe[chem]``) are not in
the default selection (``DEFAULT_METHODS``).

Protocol: run ``r`` draws ``n_init`` initial reactions with
``numpy.random.default_rng(r).choice(n, n_init, replace=False)``, the same for
every method, then ``queries`` queries one at a time; the UCB-family and
qLogNEI strategies use ``exclude_evaluated=True`` (noise-free lookups, as
BayBE's ``allow_recommending_already_measured=False``). Each record holds the
tested items and values, the seconds of each recommendation, the simple regret
``max y - max y(tested)`` after each query, the queries to a top-1% reaction,
the encoding and its number of features. The summaries are the molecule
benchmark's (:func:`benchmarks.molecules_bench.summarize`), paired differences
against Chaining-UCB on the descriptors.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ax_chaining.test_functions.reactions import REACTIONS as TABLES
from ax_chaining.test_functions.reactions import load_reactions
from benchmarks import molecules_bench as mol
from benchmarks._tables import check_names

__all__ = [
    "DATASET_NAMES",
    "DEFAULT_METHODS",
    "FULL_CONFIG",
    "LABELS",
    "METHODS",
    "REACTION_BENCHMARK",
    "SMALL_CONFIG",
    "ReactionConfig",
    "descriptor_encoder",
    "format_markdown",
    "plot_regret",
    "run_one",
    "run_reactions",
    "summarize",
]

DATASET_NAMES: tuple[str, ...] = tuple(TABLES)
#: The methods a run without ``--methods`` runs (BayBE needs its extra).
DEFAULT_METHODS: tuple[str, ...] = (
    "chaining@onehot",
    "qlognei@onehot",
    "chaining@descriptors",
    "qlognei@descriptors",
    "random",
)
METHODS: tuple[str, ...] = (
    *DEFAULT_METHODS[:-1],
    "baybe@onehot",
    "baybe@substance",
    "random",
)
LABELS: dict[str, str] = {
    "chaining@onehot": "Chaining-UCB, one-hot",
    "qlognei@onehot": "qLogNEI, one-hot",
    "chaining@descriptors": "Chaining-UCB, descriptors",
    "qlognei@descriptors": "qLogNEI, descriptors",
    "baybe@onehot": "BayBE, one-hot",
    "baybe@substance": "BayBE, Mordred (its default)",
    "random": "Random",
}
DATASET_LABELS = {"buchwald-hartwig": "Buchwald-Hartwig"}
COLORS = {
    "chaining@onehot": "yellowgreen",
    "qlognei@onehot": "salmon",
    "chaining@descriptors": "darkgreen",
    "qlognei@descriptors": "darkred",
    "baybe@onehot": "burlywood",
    "baybe@substance": "tab:brown",
    "random": "tab:gray",
}
#: What the summaries name and label (the molecule benchmark's tables).
REACTION_BENCHMARK = mol.TableBenchmark(
    DATASET_NAMES,
    METHODS,
    LABELS,
    DATASET_LABELS,
    COLORS,
    kind="reactions",
    item="reaction",
    baseline="chaining@descriptors",
    checkpoints=(10, 30),
    per_run=True,
)


@dataclass(frozen=True)
class ReactionConfig(mol.TableConfig):
    """Size of a reaction benchmark (see
    :class:`benchmarks.molecules_bench.TableConfig`): by default 5 runs of 5
    initial reactions and 30 queries, Chaining-UCB's delta 0.05."""

    names: ClassVar[tuple[str, ...]] = DATASET_NAMES
    datasets: tuple[str, ...] = DATASET_NAMES
    runs: int = 5
    queries: int = 30
    n_init: int = 5
    delta: float = 0.05


FULL_CONFIG = ReactionConfig()
SMALL_CONFIG = ReactionConfig(runs=1, queries=2)


def descriptor_encoder(smiles: list[str]) -> tuple[np.ndarray, tuple[str, ...]]:
    """RDKit's 2D descriptors of one column's components, cleaned as the
    default molecule model cleans a library's
    (:func:`~ax_chaining.descriptors.default_cleaning` of ``"rdkit2d"``): an
    encoder for :func:`~ax_chaining.reactions.component_features`."""
    from ax_chaining.molecules import (
        clean_features,
        default_cleaning,
        encode_molecules,
    )

    values, names = encode_molecules(smiles, "rdkit2d")
    cleaned = clean_features(values, names, **default_cleaning("rdkit2d"))
    return cleaned.values, cleaned.names


@functools.cache
def _surrogate(dataset: str, encoding: str) -> tuple[Any, dict[str, Any]]:
    """The feature-table surrogate spec of a table under ``encoding`` (built
    once per process), and what it is."""
    import torch

    from ax_chaining.ax import feature_table_surrogate_spec
    from ax_chaining.molecules import component_features

    data = load_reactions(dataset)
    encoder = descriptor_encoder if encoding == "descriptors" else "onehot"
    features = component_features(data.table, data.components, encoder)
    spec = feature_table_surrogate_spec(
        torch.as_tensor(features.values), kernel="rbf", prior="botorch"
    )
    blocks = {c: s.stop - s.start for c, s in features.blocks.items()}
    return spec, {
        "num_features": len(features.names),
        "features_per_component": blocks,
        "model": {"kernel": "rbf", "prior": "botorch"},
    }


@functools.cache
def _baybe_table(dataset: str, encoding: str) -> tuple[Any, Any, dict[str, Any]]:
    """BayBE's table and search space of a reaction table (its encodings
    computed once per process), and the number of BayBE's features."""
    from benchmarks.baybe_loop import component_table

    data = load_reactions(dataset)
    table = component_table(data.table, data.components, encoding)
    space = table.searchspace()
    return table, space, {"num_features": int(space.discrete.comp_rep.shape[1])}


def run_one(
    dataset: str, method: str, seed: int, config: ReactionConfig
) -> dict[str, Any]:
    """One run: initial reactions, then ``config.queries`` queries.

    Returns:
        A JSON-ready record: the molecule benchmark's fields
        (:func:`benchmarks.molecules_bench.outcome`, ``step_seconds``), with
        ``num_reactions``, and for a model-based method its ``encoding`` and
        ``num_features``.
    """
    check_names([method], METHODS, "method")
    data = load_reactions(dataset)
    family, _, encoding = method.partition("@")
    extra: dict[str, Any] = {"encoding": encoding} if encoding else {}
    how: dict[str, Any] = {"family": family}
    if family == "baybe":
        table, space, size = _baybe_table(dataset, encoding)
        how["baybe"] = (table, space)
        extra.update(size)
    elif family != "random":
        how["spec"], model = _surrogate(dataset, encoding)
        extra.update(model)
    run = (dataset, method, seed)
    y = data.y.numpy()
    return mol.screen_record(REACTION_BENCHMARK, run, config, y, extra=extra, **how)


def run_reactions(
    methods: Sequence[str], config: ReactionConfig, out: str | Path, **options: Any
) -> list[dict[str, Any]]:
    """Run (or resume) every run, seed by seed; returns all records.

    ``options``: ``progress``, ``force`` and ``jobs`` (worker processes), as
    :func:`benchmarks.molecules_bench.run_tables` takes them."""
    return mol.run_tables(REACTION_BENCHMARK, run_one, methods, config, out, **options)


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The molecule benchmark's summary (:func:`benchmarks.molecules_bench.
    summarize`) of reaction records."""
    return mol.summarize(records, REACTION_BENCHMARK)


def format_markdown(summary: dict[str, Any]) -> str:
    """Markdown tables of a :func:`summarize` result."""
    return mol.format_markdown(summary, REACTION_BENCHMARK)


def plot_regret(summary: dict[str, Any], path: str | Path) -> Path:
    """Mean simple regret ± SE against queries."""
    return mol.plot_regret(summary, path, REACTION_BENCHMARK)
