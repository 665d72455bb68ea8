"""Reaction tables with one measured yield per reaction, vendored with the package:
the Buchwald-Hartwig screen of Ahneman et al. (2018) and the direct arylation
screen of Shields et al. (2021) (provenance in ``data/PROVENANCE.md``)."""

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
    columns: dict[str, str]  # table column -> the file's
    numeric: tuple[str, ...]
    target_column: str
    objective: str


REACTIONS: dict[str, _ReactionInfo] = {
    "buchwald-hartwig": _ReactionInfo(
        file="DreherDoyle.csv.gz",
        sha256="a41de4a1d2f31048ebf37e5dd9a8b11afa30dd86598c44d1fd66752066e4a75a",
        columns={c: c for c in ("ligand", "additive", "base", "aryl halide")},
        numeric=(),
        target_column="yield",
        objective="yield of the C-N coupling (%), maximized",
    ),
    "direct-arylation": _ReactionInfo(
        file="DirectArylation.csv.gz",
        sha256="0aac33253d799c2e5f978b2962c34f9b57ba4863dae408721cabe8fa815d74ea",
        columns={
            "base": "Base_SMILES",
            "ligand": "Ligand_SMILES",
            "solvent": "Solvent_SMILES",
            "concentration": "Concentration",
            "temperature": "Temp_C",
        },
        numeric=("concentration", "temperature"),
        target_column="yield",
        objective="yield of the Pd-catalysed direct arylation (%), maximized",
    ),
}


@dataclass(frozen=True)
class ReactionDataset:
    """A table of reactions (a SMILES column per component, then the ``numeric``
    ones) with ``y``, one yield per reaction to maximize, described by ``objective``."""

    name: str
    table: pd.DataFrame
    components: tuple[str, ...]
    y: Tensor
    objective: str
    numeric: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.table)


def load_reactions(name: str = "buchwald-hartwig") -> ReactionDataset:
    """Load ``"buchwald-hartwig"`` or ``"direct-arylation"``, checking its SHA-256
    (``ValueError`` for another name or a modified file).

    Example:
        >>> data = load_reactions("buchwald-hartwig")
        >>> len(data), data.components
        (3955, ('ligand', 'additive', 'base', 'aryl halide'))
    """
    key, info, rows = vendored_rows(name, REACTIONS)
    table = pd.DataFrame({c: [row[f] for row in rows] for c, f in info.columns.items()})
    table = table.astype(dict.fromkeys(info.numeric, "float64"))
    y = torch.tensor(
        [float(row[info.target_column]) for row in rows], dtype=torch.float64
    )
    return ReactionDataset(
        name=key,
        table=table,
        components=tuple(c for c in info.columns if c not in info.numeric),
        y=y,
        objective=info.objective,
        numeric=info.numeric,
    )
