r"""Screening reaction tables: each encoding of ``reaction_surrogate_spec`` under
Chaining-UCB and qLogNEI, beside BayBE, in the molecule benchmark's loop
(protocol: ``docs/results/reactions.md``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from ax_chaining.test_functions.reactions import REACTIONS as TABLES
from ax_chaining.test_functions.reactions import load_reactions
from benchmarks import molecules_bench as mol
from benchmarks._tables import check_names

DATASET_NAMES: tuple[str, ...] = tuple(TABLES)
LABELS: dict[str, str] = {
    "chaining@onehot": "Chaining-UCB, one-hot",
    "qlognei@onehot": "qLogNEI, one-hot",
    "chaining@rdkit2d": "Chaining-UCB, RDKit 2D",
    "qlognei@rdkit2d": "qLogNEI, RDKit 2D",
    "chaining@mordred": "Chaining-UCB, Mordred (default model)",
    "qlognei@mordred": "qLogNEI, Mordred (default model)",
    "logei-table@mordred": "LogEI, Mordred (default model)",
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
    "chaining@rdkit2d": "olivedrab",
    "qlognei@rdkit2d": "indianred",
    "chaining@mordred": "darkgreen",
    "qlognei@mordred": "darkred",
    "logei-table@mordred": "darkorange",
    "baybe@onehot": "burlywood",
    "baybe@substance": "tab:brown",
    "random": "tab:gray",
}
BENCHMARK = mol.TableBenchmark(
    DATASET_NAMES,
    METHODS,
    LABELS,
    {"buchwald-hartwig": "Buchwald-Hartwig", "direct-arylation": "Direct arylation"},
    COLORS,
    kind="reactions",
    item="reaction",
    baseline="qlognei@mordred",
    checkpoints=(10, 30),
    per_run=True,
    speed_reference="baybe@substance",
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


@functools.cache
def _surrogate(dataset: str, encoding: str) -> tuple[Any, dict[str, Any]]:
    """The default reaction model's spec of a table with ``encoding`` (once
    per process), and what it is."""
    from ax_chaining.molecules import component_features, reaction_surrogate_spec

    data = load_reactions(dataset)
    args = (data.table, data.components, data.numeric, encoding)
    features = component_features(*args[:2], encoding, numeric=data.numeric)
    spec = reaction_surrogate_spec(*args)
    options = spec.model_configs[0].covar_module_options
    per = {c: s.stop - s.start for c, s in features.blocks.items()}
    return spec, {
        "num_features": len(features.names),
        "features_per_component": per,
        "model": {"kernel": options["base"], "prior": options["prior"]},
    }


@functools.cache
def _baybe_table(dataset: str, encoding: str) -> tuple[Any, Any, dict[str, Any]]:
    """BayBE's table and search space of a reaction table (once per process),
    and the number of BayBE's features."""
    from benchmarks.baybe_loop import component_table

    data = load_reactions(dataset)
    table = component_table(data.table, data.components, encoding, data.numeric)
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
