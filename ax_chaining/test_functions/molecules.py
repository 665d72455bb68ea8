"""Molecule libraries with one measured property each, vendored with the package
(ESOL, FreeSolv negated, Lipophilicity; provenance, licences and checksums in
``data/PROVENANCE.md``)."""

from __future__ import annotations

import csv
import gzip
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import torch
from torch import Tensor

__all__ = ["DATASETS", "MoleculeDataset", "library", "load_dataset", "vendored_rows"]


@dataclass(frozen=True)
class _DatasetInfo:
    file: str
    sha256: str
    target_column: str
    objective: str
    sign: float = 1.0  # +1: maximize the column; -1: minimize it
    smiles_column: str = "smiles"


DATASETS: dict[str, _DatasetInfo] = {
    "esol": _DatasetInfo(
        "ESOL.csv",
        "7af5d09ba78f194df727c346ac777565f53d3581aa997af0e2152894ac507387",
        "measured log solubility in mols per litre",
        "log aqueous solubility (mol/L), maximized",
    ),
    "freesolv": _DatasetInfo(
        "FreeSolv.csv",
        "a4fbf3b28fe2e604d6bd7ea0e20b4494ff732400a80f58d1b393677cfbc1b06c",
        "expt",
        "minus the hydration free energy (kcal/mol), maximized",
        sign=-1.0,
    ),
    "lipo": _DatasetInfo(
        "Lipophilicity.csv",
        "3d2a409dc8bdf620876bb7257faf4996df29a19dd0244d0b4a6a8064c306cded",
        "exp",
        "logD at pH 7.4, maximized",
    ),
}


@dataclass(frozen=True)
class MoleculeDataset:
    """A molecule library (``smiles``, in file order) with ``y``, one measured
    property per molecule to maximize, described by ``objective``."""

    name: str
    smiles: tuple[str, ...]
    y: Tensor
    objective: str

    def __len__(self) -> int:
        return len(self.smiles)


def load_dataset(name: str) -> MoleculeDataset:
    """Load the vendored dataset ``"esol"``, ``"freesolv"`` or ``"lipo"``,
    checking its SHA-256 (``ValueError`` for another name or a modified file).

    Example:
        >>> data = load_dataset("freesolv")
        >>> len(data), float(data.y.max())
        (642, 25.47)
    """
    key, info, rows = vendored_rows(name, DATASETS)
    smiles = tuple(row[info.smiles_column] for row in rows)
    y = torch.tensor(
        [info.sign * float(row[info.target_column]) for row in rows],
        dtype=torch.float64,
    )
    return MoleculeDataset(name=key, smiles=smiles, y=y, objective=info.objective)


def vendored_rows(
    name: str, registry: Mapping[str, Any]
) -> tuple[str, Any, list[dict[str, str]]]:
    """``(key, entry, rows)`` of the vendored CSV ``name`` (any case) of
    ``registry`` (entries with a ``file`` in ``data/`` and its ``sha256``), the
    rows as dicts; ``ValueError`` for an unknown name or a wrong checksum."""
    key = str(name).lower()
    if key not in registry:
        raise ValueError(
            f"`name` must be one of {', '.join(sorted(registry))}, got {name!r}."
        )
    info = registry[key]
    file = info.file
    data = resources.files(__package__).joinpath("data", file).read_bytes()
    if file.endswith(".gz"):
        data = gzip.decompress(data)
    digest = hashlib.sha256(data).hexdigest()
    if digest != info.sha256:
        raise ValueError(
            f"ax_chaining/test_functions/data/{file} has SHA-256 {digest}"
            + (" once decompressed" if file.endswith(".gz") else "")
            + f", expected {info.sha256}: the vendored file was modified."
        )
    return key, info, list(csv.DictReader(data.decode("utf-8").splitlines()))


@lru_cache(maxsize=4)
def library(
    name: str, radius: int = 2, n_bits: int = 2048
) -> tuple[MoleculeDataset, Tensor]:
    """``(dataset, gram)``: the molecules and their Morgan fingerprints' Tanimoto
    Gram matrix (cached).

    Example:
        >>> data, gram = library("freesolv")
    """
    from ax_chaining.molecules import morgan_fingerprints, tanimoto_gram

    data = load_dataset(name)
    gram = tanimoto_gram(morgan_fingerprints(data.smiles, radius, n_bits))
    return data, gram
