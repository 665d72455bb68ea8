r"""Molecules as candidates: Morgan fingerprints and their Tanimoto similarity.

The Tanimoto similarity of binary fingerprints :math:`a, b \in \{0, 1\}^m`,

.. math::

    k(a, b) = \frac{\langle a, b\rangle}{\|a\|^2 + \|b\|^2 - \langle a, b\rangle},

is the number of bits set in both over the number set in either (1 when both
are empty). It is positive semi-definite on binary vectors and
:math:`k(a, a) = 1`, the normalization the paper uses for its graph kernel.

rdkit is needed only for :func:`morgan_fingerprints` (``pip install
'ax-chaining[chem]'``); it is imported on first use.

Example:
    >>> from ax_chaining.benchmark.molecules import load_dataset
    >>> from ax_chaining.chem import morgan_fingerprints, tanimoto_gram
    >>> gram = tanimoto_gram(morgan_fingerprints(load_dataset("esol").smiles))
    >>> gram.shape
    torch.Size([1128, 1128])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["morgan_fingerprints", "tanimoto_gram"]


def _rdkit_modules():
    try:
        from rdkit import Chem, RDLogger
        from rdkit.Chem import rdFingerprintGenerator
    except ImportError as e:  # pragma: no cover - exercised only without rdkit
        raise ImportError(
            "Morgan fingerprints need rdkit, which is not installed; install it "
            "with `pip install 'ax-chaining[chem]'` (or `pip install rdkit`)."
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
