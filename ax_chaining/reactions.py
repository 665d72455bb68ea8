r"""Tables of several components (reactions): one item feature table from each
component's own encoding.

A reaction table lists, per row, the SMILES of each component (ligand, base,
additive, aryl halide, solvent, ...) beside a measured yield. Row :math:`i` is
one item, encoded as the concatenation of its components' encodings,

.. math::

    x_i = \big[e_1(c_{i,1}),\ e_2(c_{i,2}),\ \dots,\ e_m(c_{i,m})\big],

where :math:`c_{i,j}` is row :math:`i`'s component in column :math:`j` and
:math:`e_j` column :math:`j`'s encoding, computed once per distinct component:

=============  ==============================================================
``"onehot"``   one indicator per distinct component of the column
``"morgan"``   binary Morgan fingerprints (:func:`ax_chaining.chem.morgan_fingerprints`)
callable       ``encode(smiles) -> (values, names)``: ``len(smiles) x d``
               values and ``d`` column names, e.g. a descriptor encoding
               (``partial(encode_molecules, encoding="rdkit2d")``)
=============  ==============================================================

The table then takes the route of a molecule library behind an item index:
``candidate_index_parameter(len(table))`` and a surrogate over the rows, e.g.
for binary rows (one-hot, Morgan bits) the Tanimoto Gram of the concatenation,

>>> features = component_features(table, ["ligand", "base", "additive"], "morgan")
>>> gram = tanimoto_gram(torch.as_tensor(features.values))
>>> spec = precomputed_kernel_surrogate_spec(gram)

Real-valued descriptor blocks need the cleaning such descriptors need
(:func:`~ax_chaining.descriptors.clean_features`: constant and non-finite
columns dropped, scaling) before a GP with fitted lengthscales sees them
(:func:`~ax_chaining.ax.surrogates.feature_table_surrogate_spec`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ax_chaining.checks import check_int, type_error

__all__ = ["COMPONENT_ENCODINGS", "ComponentFeatures", "component_features"]

#: The named encodings of :func:`component_features` (a callable is the other).
COMPONENT_ENCODINGS: tuple[str, ...] = ("onehot", "morgan")

Encoder = Callable[[list[str]], tuple[Any, Sequence[str]]]


@dataclass(frozen=True)
class ComponentFeatures:
    """The item feature table of a table of components.

    Attributes:
        values: ``n x d`` float64 array, row ``i`` for table row ``i``.
        names: The ``d`` column names, ``"<column>:<name>"``.
        blocks: Component column -> its slice of ``values``' columns.
        components: Component column -> its distinct components, in the order
            of their first row (the rows of its encoding).
    """

    values: np.ndarray
    names: tuple[str, ...]
    blocks: dict[str, slice]
    components: dict[str, tuple[str, ...]]


def _onehot(components: list[str]) -> tuple[np.ndarray, list[str]]:
    return np.eye(len(components)), list(components)


def _encoder(encoding: Any, radius: int, n_bits: int) -> Encoder:
    if callable(encoding):
        return encoding
    if encoding == "onehot":
        return _onehot
    if encoding == "morgan":
        from ax_chaining.chem import morgan_fingerprints

        def morgan(smiles: list[str]) -> tuple[np.ndarray, list[str]]:
            bits = morgan_fingerprints(smiles, radius, n_bits).numpy()
            return bits, [f"morgan{j}" for j in range(n_bits)]

        return morgan
    raise ValueError(
        f"an encoding must be one of {', '.join(COMPONENT_ENCODINGS)} or a "
        f"callable smiles -> (values, names); got {encoding!r}."
    )


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
        encoding: ``"onehot"``, ``"morgan"`` or a callable ``smiles -> (values,
            names)`` for every column, or a mapping column -> one of those.
        radius: Morgan radius (``"morgan"``).
        n_bits: Morgan fingerprint length (``"morgan"``).

    Returns:
        The :class:`ComponentFeatures` of the table.

    Raises:
        ValueError: No column, a column missing or repeated, a missing or
            non-string cell (its row and column are named), an unknown
            encoding, or an encoder whose output is not one finite row per
            component with one name per column.
        TypeError: ``columns`` is a string.

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
        encode = _encoder(per_column[column], radius, n_bits)
        values, value_names = encode(distinct)
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
