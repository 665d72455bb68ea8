r"""Screening a reaction table: per-component encodings beside one-hot, and BayBE.

The Buchwald-Hartwig table (3,955 reactions, yield maximized) in the molecule
benchmark's loop (:func:`benchmarks.molecules_bench.screen_record`): a GP on
each reaction's row of its components' encodings
(:func:`~ax_chaining.molecules.component_features`) through
:func:`~ax_chaining.ax.feature_table_surrogate_spec` (ARD RBF, BoTorch's
priors), or BayBE (:mod:`benchmarks.baybe_loop`). Methods and protocol: the
docs' page ``docs/results/reactions.md``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ax_chaining.test_functions.reactions import REACTIONS as TABLES
from ax_chaining.test_functions.reactions import load_reactions
from benchmarks import molecules_bench as mol
from benchmarks._tables import check_names

DATASET_NAMES: tuple[str, ...] = tuple(TABLES)
LABELS: dict[str, str] = {
    "chaining@onehot": "Chaining-UCB, one-hot",
    "qlognei@onehot": "qLogNEI, one-hot",
    "chaining@descriptors": "Chaining-UCB, descriptors",
    "qlognei@descriptors": "qLogNEI, descriptors",
    "baybe@onehot": "BayBE, one-hot",
    "baybe@substance": "BayBE, Mordred (its default)",
    "random": "Random",
}
METHODS: tuple[str, ...] = tuple(LABELS)
#: The methods a run without ``--methods`` runs (BayBE needs its extra).
DEFAULT_METHODS: tuple[str, ...] = tuple(m for m in METHODS if "baybe" not in m)
COLORS = {
    "chaining@onehot": "yellowgreen",
    "qlognei@onehot": "salmon",
    "chaining@descriptors": "darkgreen",
    "qlognei@descriptors": "darkred",
    "baybe@onehot": "burlywood",
    "baybe@substance": "tab:brown",
    "random": "tab:gray",
}
BENCHMARK = mol.TableBenchmark(
    DATASET_NAMES,
    METHODS,
    LABELS,
    {"buchwald-hartwig": "Buchwald-Hartwig"},
    COLORS,
    kind="reactions",
    item="reaction",
    baseline="chaining@descriptors",
    checkpoints=(10, 30),
    per_run=True,
)


@dataclass(frozen=True)
class ReactionConfig(mol.TableConfig):
    """Size of a reaction benchmark (:class:`~benchmarks.molecules_bench.
    TableConfig`): by default 5 runs of 5 initial reactions and 30 queries."""

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
    default molecule model cleans a library's (``default_cleaning("rdkit2d")``)."""
    from ax_chaining.molecules import clean_features, default_cleaning, encode_molecules

    values, names = encode_molecules(smiles, "rdkit2d")
    cleaned = clean_features(values, names, **default_cleaning("rdkit2d"))
    return cleaned.values, cleaned.names


@functools.cache
def _surrogate(dataset: str, encoding: str) -> tuple[Any, dict[str, Any]]:
    """The feature-table surrogate spec of a table (once per process), and
    what it is."""
    import torch

    from ax_chaining.ax import feature_table_surrogate_spec
    from ax_chaining.molecules import component_features

    data = load_reactions(dataset)
    encoder = descriptor_encoder if encoding == "descriptors" else "onehot"
    features = component_features(data.table, data.components, encoder)
    spec = feature_table_surrogate_spec(
        torch.as_tensor(features.values), kernel="rbf", prior="botorch"
    )
    return spec, {
        "num_features": len(features.names),
        "features_per_component": {
            c: s.stop - s.start for c, s in features.blocks.items()
        },
        "model": {"kernel": "rbf", "prior": "botorch"},
    }


@functools.cache
def _baybe_table(dataset: str, encoding: str) -> tuple[Any, Any, dict[str, Any]]:
    """BayBE's table and search space of a reaction table (once per process),
    and the number of BayBE's features."""
    from benchmarks.baybe_loop import component_table

    data = load_reactions(dataset)
    table = component_table(data.table, data.components, encoding)
    space = table.searchspace()
    return table, space, {"num_features": int(space.discrete.comp_rep.shape[1])}


def run_one(
    dataset: str, method: str, seed: int, config: ReactionConfig
) -> dict[str, Any]:
    """One run: initial reactions, then ``config.queries`` queries; the molecule
    benchmark's record with ``num_reactions``, and a model-based method's
    ``encoding`` and features."""
    check_names([method], METHODS, "method")
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
    y = load_reactions(dataset).y.numpy()
    return mol.screen_record(
        BENCHMARK, (dataset, method, seed), config, y, extra=extra, **how
    )


run = functools.partial(mol.run_tables, BENCHMARK, run_one)
summarize = functools.partial(mol.summarize, bench=BENCHMARK)
format_markdown = functools.partial(mol.format_markdown, bench=BENCHMARK)
plot_regret = functools.partial(mol.plot_regret, bench=BENCHMARK)
