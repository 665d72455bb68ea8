r"""BayBE as a benchmark method: its ``Campaign`` and default recommender over a
lookup table of items, one recommendation at a time (needs ``ax-chaining[baybe]``,
``baybe[chem]`` for molecules; set-up: ``docs/results/molecules.md``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ax_chaining.checks import check_choice, check_int

#: Encodings of :func:`component_table`.
ENCODINGS: tuple[str, ...] = ("onehot", "substance")


def _baybe() -> Any:
    try:
        import baybe
    except ImportError as e:  # pragma: no cover - exercised without the extra
        raise ImportError(
            "the BayBE method needs baybe: pip install 'ax-chaining[baybe]' (its "
            "SubstanceParameter also needs baybe[chem], see the docs' molecule "
            "benchmark page)."
        ) from e
    return baybe


def baybe_version() -> str:
    """The installed BayBE's version (recorded with each run)."""
    return str(_baybe().__version__)


@dataclass(frozen=True)
class BaybeTable:
    """The items of a lookup table as BayBE sees them: its ``parameters``, one
    per column of ``rows``, row ``i`` item ``i``'s values (labels as strings)."""

    parameters: tuple[Any, ...]
    rows: pd.DataFrame

    def searchspace(self) -> Any:
        """The discrete search space of the table's distinct rows."""
        from baybe.searchspace import SearchSpace

        distinct = self.rows.drop_duplicates().reset_index(drop=True)
        return SearchSpace.from_dataframe(distinct, list(self.parameters))

    def items_by_row(self) -> dict[tuple[str, ...], list[int]]:
        """Parameter values -> the items that have them, in index order."""
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, row in enumerate(self.rows.itertuples(index=False, name=None)):
            groups.setdefault(tuple(map(str, row)), []).append(i)
        return groups


def _canonical(smiles: Sequence[str]) -> list[str]:
    """RDKit's canonical SMILES (what BayBE compares to refuse duplicates)."""
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    out = []
    for i, s in enumerate(smiles):
        mol = Chem.MolFromSmiles(s)
        if mol is None:
            raise ValueError(f"`smiles[{i}]` = {s!r} is not a valid SMILES.")
        out.append(Chem.MolToSmiles(mol))
    return out


def _labels(smiles: Sequence[str], prefix: str) -> tuple[list[str], dict[str, str]]:
    """Per item its label, and label -> SMILES: one label per canonical SMILES,
    named after its first item (zero-padded, so BayBE's sorted labels keep the
    item order)."""
    canonical = _canonical(smiles)
    width = len(str(len(canonical)))
    first: dict[str, str] = {}
    labels = [
        first.setdefault(c, f"{prefix}{i:0{width}d}") for i, c in enumerate(canonical)
    ]
    data = {first[c]: smiles[canonical.index(c)] for c in first}
    return labels, data


def substance_table(smiles: Sequence[str], name: str = "molecule") -> BaybeTable:
    """A molecule library as one ``SubstanceParameter`` (BayBE's default
    encoding); items with the same canonical SMILES share a label (BayBE
    refuses two), and a recommended label is measured on its first untested
    item."""
    _baybe()
    from baybe.parameters import SubstanceParameter

    smiles = list(smiles)
    labels, data = _labels(smiles, "m")
    if len(data) < 2:
        raise ValueError(
            f"`smiles` must hold at least two distinct molecules; got {len(data)}."
        )
    parameter = SubstanceParameter(name=name, data=data)
    return BaybeTable((parameter,), pd.DataFrame({name: labels}))


def component_table(
    table: pd.DataFrame,
    columns: Sequence[str],
    encoding: str = "onehot",
    numeric: Sequence[str] = (),
) -> BaybeTable:
    """A table of several components (SMILES ``columns``), one parameter per
    column: ``CategoricalParameter`` (``encoding="onehot"``) or
    ``SubstanceParameter`` (``"substance"``, BayBE's default descriptors); a
    ``NumericalDiscreteParameter`` per ``numeric`` column."""
    check_choice("encoding", encoding, ENCODINGS)
    _baybe()
    from baybe.parameters import (
        CategoricalParameter,
        NumericalDiscreteParameter,
        SubstanceParameter,
    )

    columns = list(columns)
    missing = [c for c in [*columns, *numeric] if c not in table.columns]
    if missing or not columns:
        raise ValueError(
            f"`columns` must name columns of `table` ({list(table.columns)}); "
            f"got {columns}."
        )
    parameters, rows = [], {}
    for column in columns:
        labels, data = _labels(list(map(str, table[column])), f"{column}_")
        if len(data) < 2:
            raise ValueError(
                f"column {column!r} holds {len(data)} distinct component; a "
                "parameter needs at least two."
            )
        if encoding == "onehot":
            parameters.append(CategoricalParameter(name=column, values=sorted(data)))
        else:
            parameters.append(SubstanceParameter(name=column, data=data))
        rows[column] = labels
    for column in numeric:
        values = sorted(set(map(float, table[column])))
        parameters.append(NumericalDiscreteParameter(name=column, values=values))
        rows[column] = list(map(float, table[column]))
    return BaybeTable(tuple(parameters), pd.DataFrame(rows))


def run_campaign(
    table: BaybeTable,
    y: np.ndarray,
    initial: Sequence[int],
    queries: int,
    seed: int,
    searchspace: Any | None = None,
) -> tuple[list[int], list[float]]:
    """One BayBE run maximizing ``y`` (item ``i``'s value ``y[i]``): the
    ``initial`` items measured, then ``queries`` recommendations, seeded with
    ``Settings(random_seed=seed)``, measured points excluded (noise-free
    lookups); ``searchspace``: ``table.searchspace()`` reused over runs.
    Returns the tested items and the seconds of each ``Campaign.recommend``."""
    _baybe()
    from baybe import Campaign, Settings
    from baybe.targets import NumericalTarget

    y = np.asarray(y, dtype=float)
    n = len(table.rows)
    if y.shape != (n,):
        raise ValueError(f"`y` must hold one value per item ({n}); got {y.shape}.")
    items = [check_int("initial item", int(i), 0) for i in initial]
    if any(i >= n for i in items) or len(set(items)) != len(items):
        raise ValueError(
            f"`initial` must be distinct items in 0 .. {n - 1}; got {items}."
        )
    queries = check_int("queries", queries, 1)
    groups = table.items_by_row()
    initial_points = {tuple(map(str, table.rows.iloc[i])) for i in items}
    if queries > len(groups) - len(initial_points):
        raise ValueError(
            f"`queries` = {queries} exceeds the {len(groups)} distinct points of "
            "the table not yet measured."
        )
    names = list(table.rows.columns)
    space = table.searchspace() if searchspace is None else searchspace
    tested = set(items)
    steps: list[float] = []

    def measured(rows: list[int]) -> pd.DataFrame:
        frame = table.rows.iloc[rows].reset_index(drop=True).copy()
        frame["y"] = y[rows]
        return frame

    with Settings(random_seed=seed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        campaign = Campaign(
            searchspace=space,
            objective=NumericalTarget(name="y"),
            allow_recommending_already_measured=False,
        )
        campaign.add_measurements(measured(items))
        for _ in range(queries):
            start = time.perf_counter()
            recommendation = campaign.recommend(batch_size=1)
            steps.append(time.perf_counter() - start)
            key = tuple(str(recommendation.iloc[0][c]) for c in names)
            untested = [i for i in groups[key] if i not in tested]
            if not untested:
                raise RuntimeError(
                    f"BayBE recommended {dict(zip(names, key, strict=True))}, "
                    "whose items are all measured, although the campaign "
                    "excludes measured points."
                )
            item = untested[0]
            tested.add(item)
            items.append(item)
            campaign.add_measurements(measured([item]))
    return items, steps
