r"""Molecule libraries for Chaining-UCB: datasets, Morgan fingerprints, Tanimoto Gram.

A finite library of molecules is a natural candidate set for Chaining-UCB: the
search space is the library itself, and the kernel is the Tanimoto similarity of
the molecules' Morgan fingerprints,

.. math::

    k(a, b) = \frac{\langle a, b\rangle}{\|a\|^2 + \|b\|^2 - \langle a, b\rangle},

for binary fingerprints :math:`a, b \in \{0, 1\}^m` (the number of bits set in
both over the number set in either; 1 when both are empty). It is positive
semi-definite on binary vectors and :math:`k(a, a) = 1`, the normalization the
paper uses for its graph kernel.

Three public datasets ship with the package (``ax_chaining/data``; provenance,
licences and checksums in ``ax_chaining/data/PROVENANCE.md``):

============  =========  ==========================================  =========
name          molecules  objective (maximized)                        units
============  =========  ==========================================  =========
``esol``      1,128      measured log aqueous solubility              log mol/L
``freesolv``  642        minus the hydration free energy              kcal/mol
``lipo``      4,200      logD (octanol/water, pH 7.4)                 log units
============  =========  ==========================================  =========

FreeSolv is negated so that "maximize" means "most favourable hydration".

rdkit is needed only for :func:`morgan_fingerprints` (``pip install
'ax-chaining[bench]'``); it is imported on first use.

Example:
    >>> from ax_chaining.chem import load_dataset, morgan_fingerprints, tanimoto_gram
    >>> data = load_dataset("esol")
    >>> gram = tanimoto_gram(morgan_fingerprints(data.smiles))
    >>> gram.shape
    torch.Size([1128, 1128])
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import torch
from torch import Tensor

__all__ = [
    "DATASETS",
    "MoleculeDataset",
    "load_dataset",
    "morgan_fingerprints",
    "tanimoto_gram",
]


@dataclass(frozen=True)
class _DatasetInfo:
    file: str
    sha256: str
    smiles_column: str
    target_column: str
    sign: float  # +1: maximize the column; -1: minimize it
    objective: str


DATASETS: dict[str, _DatasetInfo] = {
    "esol": _DatasetInfo(
        file="ESOL.csv",
        sha256="7af5d09ba78f194df727c346ac777565f53d3581aa997af0e2152894ac507387",
        smiles_column="smiles",
        target_column="measured log solubility in mols per litre",
        sign=1.0,
        objective="log aqueous solubility (mol/L), maximized",
    ),
    "freesolv": _DatasetInfo(
        file="FreeSolv.csv",
        sha256="a4fbf3b28fe2e604d6bd7ea0e20b4494ff732400a80f58d1b393677cfbc1b06c",
        smiles_column="smiles",
        target_column="expt",
        sign=-1.0,
        objective="minus the hydration free energy (kcal/mol), maximized",
    ),
    "lipo": _DatasetInfo(
        file="Lipophilicity.csv",
        sha256="3d2a409dc8bdf620876bb7257faf4996df29a19dd0244d0b4a6a8064c306cded",
        smiles_column="smiles",
        target_column="exp",
        sign=1.0,
        objective="logD at pH 7.4, maximized",
    ),
}


@dataclass(frozen=True)
class MoleculeDataset:
    """A molecule library with one measured property per molecule.

    Attributes:
        name: Dataset key (see :data:`DATASETS`).
        smiles: SMILES strings, in file order.
        y: ``n`` float64 objective values, to be maximized (the measured
            property, negated where the dataset's goal is to minimize it).
        objective: What ``y`` is, in words.
    """

    name: str
    smiles: tuple[str, ...]
    y: Tensor
    objective: str

    def __len__(self) -> int:
        return len(self.smiles)


def load_dataset(name: str) -> MoleculeDataset:
    """Load one of the vendored datasets, checking its SHA-256.

    Args:
        name: ``"esol"``, ``"freesolv"`` or ``"lipo"``.

    Returns:
        A :class:`MoleculeDataset`.

    Raises:
        ValueError: Unknown name, or a file whose checksum does not match.
    """
    key = str(name).lower()
    if key not in DATASETS:
        raise ValueError(
            f"`name` must be one of {', '.join(sorted(DATASETS))}, got {name!r}."
        )
    info = DATASETS[key]
    raw = resources.files("ax_chaining").joinpath("data", info.file).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != info.sha256:
        raise ValueError(
            f"ax_chaining/data/{info.file} has SHA-256 {digest}, expected "
            f"{info.sha256}: the vendored file was modified."
        )
    rows = list(csv.DictReader(raw.decode("utf-8").splitlines()))
    smiles = tuple(row[info.smiles_column] for row in rows)
    y = torch.tensor(
        [info.sign * float(row[info.target_column]) for row in rows],
        dtype=torch.float64,
    )
    return MoleculeDataset(name=key, smiles=smiles, y=y, objective=info.objective)


def _rdkit_modules():
    try:
        from rdkit import Chem, RDLogger
        from rdkit.Chem import rdFingerprintGenerator
    except ImportError as e:  # pragma: no cover - exercised only without rdkit
        raise ImportError(
            "Morgan fingerprints need rdkit, which is not installed; install it "
            "with `pip install 'ax-chaining[bench]'` (or `pip install rdkit`)."
        ) from e
    return Chem, RDLogger, rdFingerprintGenerator


def morgan_fingerprints(
    smiles: Sequence[str], radius: int = 2, n_bits: int = 2048
) -> Tensor:
    """Binary Morgan (ECFP-like) fingerprints of molecules, computed with rdkit.

    Args:
        smiles: SMILES strings.
        radius: Morgan radius (2 gives ECFP4-like fingerprints).
        n_bits: Fingerprint length (folded).

    Returns:
        A ``len(smiles) x n_bits`` ``torch.uint8`` tensor of 0/1.

    Raises:
        ValueError: Empty input, a non-positive ``radius`` / ``n_bits``, or a
            SMILES string rdkit cannot parse (its index is given).
        ImportError: rdkit is not installed.
    """
    if isinstance(smiles, str):
        raise TypeError("`smiles` must be a sequence of SMILES strings, got a str.")
    smiles = list(smiles)
    if not smiles:
        raise ValueError("`smiles` is empty.")
    for arg, value, low in (("radius", radius, 0), ("n_bits", n_bits, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"`{arg}` must be an integer >= {low}, got {value!r}.")
    Chem, RDLogger, rdFingerprintGenerator = _rdkit_modules()
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)
    out = torch.zeros(len(smiles), n_bits, dtype=torch.uint8)
    # rdkit prints parse errors to stderr; the ValueError below says it instead.
    RDLogger.DisableLog("rdApp.*")
    try:
        for i, s in enumerate(smiles):
            mol = Chem.MolFromSmiles(s) if isinstance(s, str) else None
            if mol is None:
                raise ValueError(f"`smiles[{i}]` = {s!r} is not a valid SMILES.")
            out[i] = torch.from_numpy(generator.GetFingerprintAsNumPy(mol).copy())
    finally:
        RDLogger.EnableLog("rdApp.*")
    return out


def tanimoto_gram(fingerprints: Tensor, other: Tensor | None = None) -> Tensor:
    r"""Tanimoto similarity of binary fingerprints.

    :math:`k(a, b) = \langle a, b\rangle / (|a| + |b| - \langle a, b\rangle)`,
    with :math:`k(a, b) = 1` when both are all zeros.

    Args:
        fingerprints: ``n x m`` binary tensor (bool or integer 0/1).
        other: Optional ``p x m`` binary tensor; default ``fingerprints``.

    Returns:
        ``n x p`` float64 matrix (symmetric PSD with unit diagonal when
        ``other`` is None).

    Raises:
        ValueError: Not 2-D, mismatched widths, or entries other than 0 and 1.
    """
    a = _binary("fingerprints", fingerprints)
    b = a if other is None else _binary("other", other)
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"`fingerprints` has {a.shape[1]} bits but `other` has {b.shape[1]}."
        )
    inter = a @ b.T
    union = a.sum(-1, keepdim=True) + b.sum(-1) - inter
    # Exact integer counts in float64 (m < 2^53), so equal rows give exactly 1.
    return torch.where(union > 0, inter / union.clamp_min(1), torch.ones_like(inter))


def _binary(arg: str, x: Tensor) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"`{arg}` must be a torch.Tensor, got {type(x).__name__}.")
    if x.dim() != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(
            f"`{arg}` must be a non-empty 2-D tensor, got {tuple(x.shape)}."
        )
    x = x.to(torch.float64)
    if not bool(((x == 0) | (x == 1)).all()):
        raise ValueError(f"`{arg}` must hold only 0 and 1.")
    return x
