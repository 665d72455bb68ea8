r"""Tables of several components (reactions): row :math:`i` (one reaction)
is the concatenation of its components' encodings, :math:`x_i = [e_1(c_{i,1}),
\dots, e_m(c_{i,m})]`, each computed once per distinct component. Binary
blocks (one-hot, Morgan bits) suit a Tanimoto Gram; descriptor blocks need
cleaning (:func:`~ax_chaining.molecules.clean_features`) before a GP sees them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ax_chaining.checks import check_int, type_error
from ax_chaining.molecules.encodings import morgan_fingerprints

__all__ = ["COMPONENT_ENCODINGS", "ComponentFeatures", "component_features"]

COMPONENT_ENCODINGS: tuple[str, ...] = ("onehot", "morgan")
"""The named encodings of :func:`component_features` (a callable is the other)."""

Encoder = Callable[[list[str]], tuple[Any, Sequence[str]]]


@dataclass(frozen=True)
class ComponentFeatures:
    """``values`` (``n x d`` float64, row ``i`` for table row ``i``), their
    ``names`` (``"<column>:<name>"``), each component column's ``blocks``
    (a slice of columns) and distinct ``components`` (in first-row order)."""

    values: np.ndarray
    names: tuple[str, ...]
    blocks: dict[str, slice]
    components: dict[str, tuple[str, ...]]


def component_features(
    table: pd.DataFrame | Mapping[str, Sequence[str]],
    columns: Sequence[str],
    encoding: str | Encoder | Mapping[str, str | Encoder] = "onehot",
    radius: int = 2,
    n_bits: int = 2048,
) -> ComponentFeatures:
    """Concatenate each component column's encoding into one row per item.

    Args:
        table: One row per item (a DataFrame, or column -> values).
        columns: The component columns, in the order of their blocks.
        encoding: For every column, or a mapping column -> its own:
            ``"onehot"``, ``"morgan"`` (bits of ``radius``, ``n_bits``) or a
            callable ``smiles -> (values, names)``, e.g.
            ``partial(encode_molecules, encoding="rdkit2d")``.
        radius, n_bits: Morgan radius and width.

    Example:
        >>> table = {"ligand": ["CP(C)C", "CCP(CC)CC", "CP(C)C"],
        ...          "base": ["CCN(CC)CC", "CCN(CC)CC", "C1CCNCC1"]}
        >>> features = component_features(table, ["ligand", "base"])
        >>> features.values.tolist()
        [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0]]
    """
    frame = pd.DataFrame(table) if not isinstance(table, pd.DataFrame) else table
    if isinstance(columns, str):
        raise type_error("columns", "a sequence of column names", columns)
    columns = list(columns)
    missing = [c for c in columns if c not in frame.columns]
    if not columns or missing or len(set(columns)) != len(columns):
        raise ValueError(
            "`columns` must name distinct columns of `table` "
            f"({list(frame.columns)}); got {columns}."
        )
    radius = check_int("radius", radius, 0)
    n_bits = check_int("n_bits", n_bits, 1)
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
    blocks: list[np.ndarray] = []
    names: list[str] = []
    slices: dict[str, slice] = {}
    components: dict[str, tuple[str, ...]] = {}
    for column in columns:
        cells = list(frame[column])
        for row, cell in enumerate(cells):
            if not isinstance(cell, str) or not cell:
                raise ValueError(
                    f"`table[{column!r}]` row {row} is {cell!r}; expected a "
                    "non-empty SMILES string."
                )
        distinct = list(dict.fromkeys(cells))
        encode = per_column[column]
        if callable(encode):
            values, value_names = encode(distinct)
        elif encode == "onehot":
            values, value_names = np.eye(len(distinct)), list(distinct)
        elif encode == "morgan":
            values = morgan_fingerprints(distinct, radius, n_bits).numpy()
            value_names = [f"morgan{j}" for j in range(n_bits)]
        else:
            raise ValueError(
                f"an encoding must be one of {', '.join(COMPONENT_ENCODINGS)} or a "
                f"callable smiles -> (values, names); got {encode!r}."
            )
        values = np.asarray(values, dtype=np.float64)
        value_names = list(value_names)
        if values.ndim != 2 or values.shape[0] != len(distinct):
            raise ValueError(
                f"the encoding of column {column!r} must return one row per "
                f"distinct component ({len(distinct)}); got shape {values.shape}."
            )
        if len(value_names) != values.shape[1]:
            raise ValueError(
                f"the encoding of column {column!r} must name its "
                f"{values.shape[1]} columns; got {len(value_names)} names."
            )
        if not np.isfinite(values).all():
            raise ValueError(
                f"the encoding of column {column!r} has non-finite values; clean "
                "the descriptors (drop such columns) before concatenating."
            )
        index = {c: k for k, c in enumerate(distinct)}
        blocks.append(values[[index[c] for c in cells]])
        slices[column] = slice(len(names), len(names) + values.shape[1])
        names += [f"{column}:{n}" for n in value_names]
        components[column] = tuple(distinct)
    return ComponentFeatures(
        values=np.concatenate(blocks, axis=1),
        names=tuple(names),
        blocks=slices,
        components=components,
    )
