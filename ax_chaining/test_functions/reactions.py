"""Reaction tables with one measured yield per reaction, vendored with the package:
the Buchwald-Hartwig screen of Ahneman et al. (Science, 2018), whose component
columns hold SMILES for :func:`ax_chaining.molecules.component_features`
(provenance, licence and checksum in ``data/PROVENANCE.md``)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from ax_chaining.test_functions.molecules import vendored_rows

__all__ = ["REACTIONS", "ReactionDataset", "load_reactions"]


@dataclass(frozen=True)
class _ReactionInfo:
    file: str
    sha256: str  # of the decompressed file
    components: tuple[str, ...]
    target_column: str
    objective: str


REACTIONS: dict[str, _ReactionInfo] = {
    "buchwald-hartwig": _ReactionInfo(
        file="DreherDoyle.csv.gz",
        sha256="a41de4a1d2f31048ebf37e5dd9a8b11afa30dd86598c44d1fd66752066e4a75a",
        components=("ligand", "additive", "base", "aryl halide"),
        target_column="yield",
        objective="yield of the C-N coupling (%), maximized",
    ),
}


@dataclass(frozen=True)
class ReactionDataset:
    """A table of reactions (one row per reaction, one SMILES column per
    component, in file order) with ``y``, one measured yield per reaction to
    maximize, described in words by ``objective``."""

    name: str
    table: pd.DataFrame
    components: tuple[str, ...]
    y: Tensor
    objective: str

    def __len__(self) -> int:
        return len(self.table)


def load_reactions(name: str = "buchwald-hartwig") -> ReactionDataset:
    """Load the vendored reaction table ``"buchwald-hartwig"``, checking its
    SHA-256 (``ValueError`` for another name or a modified file).

    Example:
        >>> data = load_reactions("buchwald-hartwig")
        >>> len(data), data.components
        (3955, ('ligand', 'additive', 'base', 'aryl halide'))
    """
    key, info, rows = vendored_rows(name, REACTIONS)
    table = pd.DataFrame({c: [row[c] for row in rows] for c in info.components})
    y = torch.tensor(
        [float(row[info.target_column]) for row in rows], dtype=torch.float64
    )
    return ReactionDataset(
        name=key,
        table=table,
        components=info.components,
        y=y,
        objective=info.objective,
    )
