r"""BayBE as a benchmark method: its ``Campaign`` and default recommender over a
lookup table of items.

BayBE (``pip install 'ax-chaining[baybe]'``; its chemistry encodings need
``baybe[chem]``) is a Bayesian design-of-experiments package that chemists use.
It runs here as its documentation shows: parameters, a search space made from
the table's rows (``SearchSpace.from_dataframe``), one maximized
``NumericalTarget``, and a ``Campaign`` with BayBE's default recommender
(``TwoPhaseMetaRecommender``: random until the campaign holds a measurement,
then ``BotorchRecommender``, a GP with BayBE's kernel factory and priors and the
acquisition ``qLogEI``), asked for one recommendation at a time.

Every item of the table is one row of parameter values (:class:`BaybeTable`):

* :func:`substance_table`: one ``SubstanceParameter`` over a library of
  molecules with BayBE's default encoding (Mordred descriptors, constant
  columns dropped, decorrelated). BayBE refuses two labels with the same
  canonical SMILES, so molecules that share one (ESOL has 11 such pairs) share
  a label; a recommended label is measured on its first untested molecule.
* :func:`component_table`: one parameter per column of a table with several
  components (a reaction's ligand, base, additive, ...): a
  ``CategoricalParameter`` (one-hot, ``encoding="onehot"``) or a
  ``SubstanceParameter`` per column (``encoding="substance"``).

The loop (:func:`run_campaign`) is seeded with ``Settings(random_seed=seed)``,
starts from the same initial items as the package's methods (added with
``Campaign.add_measurements``) and sets ``allow_recommending_already_measured=
False``: the measurements are noise-free lookups, the choice the package's
strategies make with ``exclude_evaluated=True``. The seconds of each
``Campaign.recommend`` call (model fit and acquisition) are recorded.
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

__all__ = [
    "ENCODINGS",
    "BaybeTable",
    "baybe_version",
    "component_table",
    "run_campaign",
    "substance_table",
]

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
    """The items of a lookup table as BayBE sees them.

    Attributes:
        parameters: BayBE parameters, one per column of ``rows``.
        rows: Row ``i``: item ``i``'s parameter values (BayBE's experimental
            representation, labels as strings).
    """

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
    labels = []
    for i, c in enumerate(canonical):
        label = first.setdefault(c, f"{prefix}{i:0{width}d}")
        labels.append(label)
    data = {first[c]: smiles[canonical.index(c)] for c in first}
    return labels, data


def substance_table(smiles: Sequence[str], name: str = "molecule") -> BaybeTable:
    """A molecule library as one ``SubstanceParameter`` (BayBE's default encoding).

    Args:
        smiles: The library, item ``i`` = ``smiles[i]``.
        name: The parameter's name.

    Returns:
        The table; items with the same canonical SMILES share a label.

    Raises:
        ValueError: Fewer than two distinct molecules, or an invalid SMILES.
        ImportError: baybe or its chemistry extra is not installed.
    """
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
    table: pd.DataFrame, columns: Sequence[str], encoding: str = "onehot"
) -> BaybeTable:
    """A table of several components (SMILES columns), one parameter per column.

    Args:
        table: One row per item.
        columns: The component columns, each holding SMILES strings.
        encoding: ``"onehot"`` (``CategoricalParameter``, BayBE's one-hot) or
            ``"substance"`` (``SubstanceParameter``, BayBE's default descriptors).

    Returns:
        The table; rows with the same components are one point of BayBE's
        search space.

    Raises:
        ValueError: ``encoding`` unknown, a column missing, or a column with
            fewer than two distinct components.
    """
    check_choice("encoding", encoding, ENCODINGS)
    _baybe()
    from baybe.parameters import CategoricalParameter, SubstanceParameter

    columns = list(columns)
    missing = [c for c in columns if c not in table.columns]
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
    return BaybeTable(tuple(parameters), pd.DataFrame(rows))


def run_campaign(
    table: BaybeTable,
    y: np.ndarray,
    initial: Sequence[int],
    queries: int,
    seed: int,
    searchspace: Any | None = None,
) -> tuple[list[int], list[float]]:
    """One BayBE run over a lookup table, maximizing ``y``.

    Args:
        table: The items (:func:`substance_table`, :func:`component_table`).
        y: The items' values, ``y[i]`` for item ``i``.
        initial: The initial items, measured before the first recommendation.
        queries: Recommendations after them, one at a time.
        seed: BayBE's random seed for the run.
        searchspace: ``table.searchspace()``, when the caller reuses one over
            runs (its encodings are computed once).

    Returns:
        ``(items, seconds)``: the tested items in order (the initial ones
        first) and the seconds of each ``Campaign.recommend`` call.

    Raises:
        ValueError: ``y`` not one value per item, an initial item out of range
            or repeated, or more queries than untested items.
    """
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
