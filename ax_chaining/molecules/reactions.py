r"""Reaction tables: row :math:`i` is :math:`x_i = [e_1(c_{i,1}), \dots,
e_m(c_{i,m}), u_i]`, its components' encodings and scaled numeric conditions;
and the default model of such a table (:func:`reaction_surrogate_spec`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from ax_chaining.checks import check_choice, check_int, type_error
from ax_chaining.kernels.priors import PRIORS
from ax_chaining.molecules.default_model import (
    DEFAULT_MOLECULE_PRIOR,
    MOLECULE_CLEANING,
)
from ax_chaining.molecules.encodings import (
    COUNT_ENCODINGS,
    ENCODINGS,
    check_n_jobs,
    molecule_features,
    morgan_fingerprints,
    parse_smiles,
)

if TYPE_CHECKING:
    from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec

__all__ = [
    "COMPONENT_ENCODINGS",
    "DEFAULT_REACTION_ENCODING",
    "ComponentFeatures",
    "component_features",
    "reaction_surrogate_spec",
]

COMPONENT_ENCODINGS: tuple[str, ...] = ("onehot", "morgan", *ENCODINGS)
"""The named encodings of :func:`component_features`: one-hot, Morgan bits, or
a cleaned encoding of :func:`~ax_chaining.molecules.encode_molecules`."""

DEFAULT_REACTION_ENCODING = "mordred"
"""Mordred's 2D descriptors per component, as BayBE's ``SubstanceParameter``."""

Encoder = Callable[[list[str]], tuple[Any, Sequence[str]]]


@dataclass(frozen=True)
class ComponentFeatures:
    """``values`` (row ``i`` for table row ``i``), their ``names``
    (``"<column>:<name>"``; a numeric column its own), each column's ``blocks``
    (a slice) and each component column's distinct ``components``."""

    values: np.ndarray
    names: tuple[str, ...]
    blocks: dict[str, slice]
    components: dict[str, tuple[str, ...]]


def _absent(cell: Any) -> bool:
    """An empty cell: None, NaN or a blank string (the component is absent)."""
    if cell is None or (isinstance(cell, float) and np.isnan(cell)):
        return True
    return isinstance(cell, str) and not cell.strip()


def _distinct(column: str, cells: list[Any]) -> tuple[list[str], np.ndarray]:
    """A column's distinct molecules (canonical SMILES; first spelling) and each
    row's position among them (-1: absent)."""
    from rdkit import Chem

    present = [i for i, c in enumerate(cells) if not _absent(c)]
    spellings = list(dict.fromkeys(cells[i] for i in present))
    key: dict[str, int] = {}  # canonical SMILES -> distinct position
    position: dict[Any, int] = {}
    distinct: list[str] = []
    for spelling, (mol, reason) in zip(spellings, parse_smiles(spellings), strict=True):
        if mol is None:
            row = cells.index(spelling)
            raise ValueError(
                f"`table[{column!r}]` row {row} is {spelling!r}, not a valid SMILES "
                f"({reason}); an absent component is an empty cell."
            )
        canonical = Chem.MolToSmiles(mol)
        if canonical not in key:
            key[canonical] = len(distinct)
            distinct.append(spelling)
        position[spelling] = key[canonical]
    rows = np.full(len(cells), -1, dtype=np.int64)
    rows[present] = [position[cells[i]] for i in present]
    return distinct, rows


@functools.lru_cache(maxsize=64)
def _descriptors(
    distinct: tuple[str, ...],
    encoding: str,
    radius: int,
    n_bits: int,
    n_jobs: int | None,
) -> tuple[np.ndarray, list[str]]:
    """A column's descriptors cleaned as a library's, once per process."""
    table = molecule_features(
        list(distinct),
        encoding,
        radius=radius,
        n_bits=n_bits,
        cleaning=MOLECULE_CLEANING.get(encoding),
        n_jobs=n_jobs,
    )
    table.values.setflags(write=False)
    return table.values, list(table.names)


def _encode(
    column: str,
    distinct: list[str],
    encode: str | Encoder,
    radius: int,
    n_bits: int,
    n_jobs: int | None,
) -> tuple[np.ndarray, list[str]]:
    """One row per distinct molecule of ``column`` and the columns' names."""
    if callable(encode):
        values, names = encode(distinct)
    elif encode == "onehot":
        values, names = np.eye(len(distinct)), list(distinct)
    elif encode == "morgan":
        values = morgan_fingerprints(distinct, radius, n_bits).numpy()
        names = [f"morgan{j}" for j in range(n_bits)]
    elif len(distinct) < 2:  # a constant column says nothing: every one goes
        return np.zeros((len(distinct), 0)), []
    else:
        values, names = _descriptors(tuple(distinct), encode, radius, n_bits, n_jobs)
    values = np.asarray(values, dtype=np.float64)
    names = list(names)
    if values.ndim != 2 or values.shape[0] != len(distinct):
        raise ValueError(
            f"the encoding of column {column!r} must return one row per "
            f"distinct component ({len(distinct)}); got shape {values.shape}."
        )
    if len(names) != values.shape[1]:
        raise ValueError(
            f"the encoding of column {column!r} must name its "
            f"{values.shape[1]} columns; got {len(names)} names."
        )
    if not np.isfinite(values).all():
        raise ValueError(
            f"the encoding of column {column!r} has non-finite values; clean "
            "the descriptors (drop such columns) before concatenating."
        )
    return values, names


def _numeric(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A numeric condition min-max scaled to [0, 1] (a constant one to 0)."""
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        row = int(bad[0])
        raise ValueError(
            f"`table[{column!r}]` row {row} is {frame[column].iloc[row]!r}; a "
            "numeric column needs a finite number in every row."
        )
    span = values.max() - values.min()
    return (values - values.min()) / span if span > 0 else np.zeros_like(values)


def component_features(
    table: pd.DataFrame | Mapping[str, Sequence[Any]],
    columns: Sequence[str],
    encoding: str | Encoder | Mapping[str, str | Encoder] = "onehot",
    radius: int = 2,
    n_bits: int = 2048,
    numeric: Sequence[str] = (),
    n_jobs: int | None = None,
) -> ComponentFeatures:
    """One row per reaction: each component column's encoding, then the
    numeric columns scaled to [0, 1].

    Each molecule (canonical SMILES) is encoded once. An empty cell (None, NaN,
    blank) is an absent component: a zero block and an indicator column
    ``"<column>:absent"`` (only in a column with such a cell).

    Args:
        table: One row per reaction (a DataFrame, or column -> values).
        columns: The component columns (SMILES), in the order of their blocks.
        encoding: For every column, or a mapping column -> its own: one of
            :data:`COMPONENT_ENCODINGS` (descriptors cleaned per column as
            :func:`~ax_chaining.molecules.molecule_surrogate_spec` cleans a
            library) or a callable ``smiles -> (values, names)``.
        radius, n_bits: Morgan radius and width.
        numeric: Numeric condition columns, a finite number in every row.
        n_jobs: joblib workers of the descriptor encodings.

    Example:
        >>> table = {"ligand": ["CP(C)C", "CCP(CC)CC", "CP(C)C"],
        ...          "base": ["CCN(CC)CC", None, "C1CCNCC1"]}
        >>> features = component_features(table, ["ligand", "base"])
        >>> features.names[2:]
        ('base:CCN(CC)CC', 'base:C1CCNCC1', 'base:absent')
        >>> features.values[1].tolist()
        [0.0, 1.0, 0.0, 0.0, 1.0]
    """
    frame = pd.DataFrame(table) if not isinstance(table, pd.DataFrame) else table
    for arg, value in (("columns", columns), ("numeric", numeric)):
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise type_error(arg, "a sequence of column names", value)
    columns, numeric = list(columns), list(numeric)
    every = columns + numeric
    missing = [c for c in every if c not in frame.columns]
    if not columns or missing or len(set(every)) != len(every):
        raise ValueError(
            "`columns` and `numeric` must name distinct columns of `table` "
            f"({list(frame.columns)}); got {columns} and {numeric}."
        )
    if len(frame) < 1:
        raise ValueError("`table` must hold at least one reaction; got none.")
    radius = check_int("radius", radius, 0)
    n_bits = check_int("n_bits", n_bits, 1)
    n_jobs = check_n_jobs(n_jobs)
    per_column = (
        dict(encoding)
        if isinstance(encoding, Mapping)
        else dict.fromkeys(columns, encoding)
    )
    unknown = [c for c in per_column if c not in columns]
    unset = [c for c in columns if c not in per_column]
    if unknown or unset:
        raise ValueError(
            f"`encoding` must give one encoding per column of {columns}; "
            f"got extra {unknown} and none for {unset}."
        )
    for encode in per_column.values():
        if not callable(encode) and encode not in COMPONENT_ENCODINGS:
            raise ValueError(
                f"an encoding must be one of {', '.join(COMPONENT_ENCODINGS)} or a "
                f"callable smiles -> (values, names); got {encode!r}."
            )
    blocks: list[np.ndarray] = []
    names: list[str] = []
    slices: dict[str, slice] = {}
    components: dict[str, tuple[str, ...]] = {}
    for column in columns:
        cells = list(frame[column])
        for row, cell in enumerate(cells):
            if not isinstance(cell, str) and not _absent(cell):
                raise ValueError(
                    f"`table[{column!r}]` row {row} is {cell!r}; expected a SMILES "
                    "string, or an empty cell for an absent component."
                )
        distinct, rows = _distinct(column, cells)
        values, value_names = (
            _encode(column, distinct, per_column[column], radius, n_bits, n_jobs)
            if distinct
            else (np.zeros((0, 0)), [])
        )
        value_names = [f"{column}:{n}" for n in value_names]
        block = np.zeros((len(cells), values.shape[1]))
        block[rows >= 0] = values[rows[rows >= 0]]
        if (rows < 0).any():  # absent: a zero block and its own indicator
            block = np.column_stack([block, (rows < 0).astype(np.float64)])
            value_names.append(f"{column}:absent")
        blocks.append(block)
        slices[column] = slice(len(names), len(names) + block.shape[1])
        names += value_names
        components[column] = tuple(distinct)
    for column in numeric:
        blocks.append(_numeric(frame, column)[:, None])
        slices[column] = slice(len(names), len(names) + 1)
        names.append(column)
    return ComponentFeatures(
        values=np.concatenate(blocks, axis=1),
        names=tuple(names),
        blocks=slices,
        components=components,
    )


def reaction_surrogate_spec(
    table: pd.DataFrame | Mapping[str, Sequence[Any]],
    components: Sequence[str],
    numeric: Sequence[str] = (),
    encoding: str = DEFAULT_REACTION_ENCODING,
    prior: str | None = None,
    kernel: str | None = None,
    n_jobs: int | None = None,
) -> SurrogateSpec:
    r"""The Ax surrogate spec of a reaction table behind an item index.

    Item ``i`` of :func:`~ax_chaining.ax.candidate_index_parameter`
    ``(len(table))`` is row ``i`` (:func:`component_features`). By default,
    BayBE 0.15's model: Mordred descriptors per component cleaned to the unit
    cube and decorrelated at 0.7, under an ARD Matern-5/2 kernel with an
    output scale and the ``CHEN`` priors.

    Args:
        table: One row per reaction.
        components: Its SMILES columns.
        numeric: Its numeric condition columns.
        encoding: ``"onehot"`` or a descriptor encoding of
            :data:`~ax_chaining.molecules.ENCODINGS` (counts excepted), for
            every component.
        prior: One of :data:`~ax_chaining.kernels.priors.PRIORS`, or None:
            ``"chen"`` for descriptors, ``"botorch"`` for one-hot.
        kernel: ``"rbf"`` or ``"matern52"``; None: RBF under ``"botorch"``,
            else Matern-5/2.
        n_jobs: joblib workers of the descriptor encodings.

    Example:
        >>> table = pd.read_csv("plate.csv")
        >>> client.configure_experiment([candidate_index_parameter(len(table))])
        >>> gs = qlognei_generation_strategy(surrogate_spec=reaction_surrogate_spec(
        ...     table, ["ligand", "base", "solvent"], numeric=["temperature"]))
    """
    from ax_chaining.ax.surrogates import feature_table_surrogate_spec

    choices = [e for e in COMPONENT_ENCODINGS if e not in ("morgan", *COUNT_ENCODINGS)]
    check_choice("encoding", encoding, choices)
    if prior is None:
        prior = "botorch" if encoding == "onehot" else DEFAULT_MOLECULE_PRIOR
    check_choice("prior", prior, PRIORS)
    if kernel is None:
        kernel = "rbf" if prior == "botorch" else "matern52"
    check_choice("kernel", kernel, ("rbf", "matern52"))
    features = component_features(
        table, components, encoding, numeric=numeric, n_jobs=n_jobs
    )
    if features.values.shape[1] == 0:
        raise ValueError(
            f"the columns {list(components) + list(numeric)} of `table` do not vary: "
            "no feature is left to model."
        )
    values = torch.as_tensor(features.values)
    return feature_table_surrogate_spec(values, kernel=kernel, prior=prior)
