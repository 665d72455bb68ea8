r"""The MOSES training set (1.58 M ZINC molecules) and a multi-property objective
a medicinal chemist would screen for.

The molecules are not vendored: :func:`moses_smiles` fetches the ``molsets``
wheel (``pip download --no-deps molsets==0.3.1``) into a cache directory once
and reads ``moses/dataset/data/train.csv.gz`` from it.

**The objective** (:func:`mpo`), in the style of GuacaMol's multi-property
objectives (a geometric mean of desirabilities in ``[0, 1]``), computed with
RDKit from three descriptors of oral drugs:

.. math::

    \mathrm{MPO}(m) = \big(d_{\log P}(m)\; d_{\mathrm{TPSA}}(m)\;
    d_{\mathrm{Fsp3}}(m)\big)^{1/3},

* :math:`d_{\log P} = \exp(-(\log P - 2.5)^2 / 2)`: Crippen logP
  (``Descriptors.MolLogP``) near 2.5;
* :math:`d_{\mathrm{TPSA}} = \exp(-((\mathrm{TPSA} - 65) / 25)^2 / 2)`: the
  topological polar surface area (``rdMolDescriptors.CalcTPSA``, Å²) near 65,
  for permeability;
* :math:`d_{\mathrm{Fsp3}} = \sqrt{\mathrm{Fsp3}}`: the fraction of sp3
  carbons (``rdMolDescriptors.CalcFractionCSP3``), "escape from flatland".

Each term is smooth, so the best molecules are not tied.

RDKit's QED would be the obvious fourth term; its structural alerts cost about
ten times the rest, hours for the 1.6 M molecules on two cores, so it is left
out.

Larger is better; an unparsable SMILES scores ``nan``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from ax_chaining.checks import check_int

__all__ = ["MOSES_REQUIREMENT", "mpo", "mpo_scores", "moses_smiles"]

#: The wheel that ships the MOSES data set.
MOSES_REQUIREMENT = "molsets==0.3.1"
_MEMBER = "moses/dataset/data/train.csv.gz"


def moses_smiles(cache_dir: str | Path) -> list[str]:
    """The 1,584,663 SMILES of the MOSES training set, in file order.

    Downloads the ``molsets`` wheel into ``cache_dir`` on first use (about
    90 MB, with pip; nothing else of it is installed or imported).
    """
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    csv_path = cache / "moses_train.csv.gz"
    if not csv_path.exists():
        wheels = sorted(cache.glob("molsets-0.3.1-*.whl"))
        if not wheels:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
                + [MOSES_REQUIREMENT, "-d", str(cache)],
                check=True,
            )
            wheels = sorted(cache.glob("molsets-0.3.1-*.whl"))
        with zipfile.ZipFile(wheels[0]) as wheel:
            data = wheel.read(_MEMBER)
        partial = csv_path.with_suffix(".part")
        partial.write_bytes(data)
        partial.rename(csv_path)
    with gzip.open(csv_path, "rt") as fh:
        text = fh.read()
    lines = text.splitlines()
    header = lines[0].split(",")
    column = header.index("SMILES")
    return [line.split(",")[column] for line in lines[1:] if line]


def mpo(smiles: str) -> float:
    """The multi-property objective of the module docstring for one molecule."""
    from rdkit import Chem, RDLogger
    from rdkit.Chem import Descriptors, rdMolDescriptors

    RDLogger.DisableLog("rdApp.*")
    mol = Chem.MolFromSmiles(smiles) if isinstance(smiles, str) else None
    if mol is None:
        return math.nan
    logp = Descriptors.MolLogP(mol)
    tpsa = rdMolDescriptors.CalcTPSA(mol)
    fsp3 = rdMolDescriptors.CalcFractionCSP3(mol)
    d_logp = math.exp(-0.5 * (logp - 2.5) ** 2)
    d_tpsa = math.exp(-0.5 * ((tpsa - 65.0) / 25.0) ** 2)
    d_fsp3 = math.sqrt(fsp3)
    return (d_logp * d_tpsa * d_fsp3) ** (1.0 / 3.0)


def _chunk(smiles: Sequence[str]) -> np.ndarray:
    return np.array([mpo(s) for s in smiles], dtype=np.float64)


def _save_npy(array: np.ndarray, path: Path) -> None:
    """Write atomically: a reader sees the old file or the whole new one."""
    partial = path.with_name(path.name + ".tmp")
    with open(partial, "wb") as fh:
        np.save(fh, array)
    partial.replace(path)


def mpo_scores(
    smiles: Sequence[str],
    cache: str | Path | None = None,
    workers: int = 2,
    progress: bool = True,
    chunk_size: int = 20_000,
) -> np.ndarray:
    """:func:`mpo` of every molecule, in parallel, with a progress bar.

    With ``cache`` (a ``.npy`` path) the scores are kept there, beside a
    ``.json`` naming the SHA-256 of the SMILES, and reused only for the same
    SMILES in the same order; an interrupted run resumes from its finished
    chunks (kept in ``<cache>.parts/`` until the last one is done).
    """
    check_int("workers", workers, 1)
    check_int("chunk_size", chunk_size, 1)
    items = list(smiles)
    digest = hashlib.sha256("\n".join(map(str, items)).encode()).hexdigest()
    meta = {"num_smiles": len(items), "smiles_sha256": digest}
    path = None if cache is None else Path(cache)
    if path is not None:
        side = path.with_suffix(".json")
        if path.exists() and side.exists() and json.loads(side.read_text()) == meta:
            return np.load(path)
        parts = path.with_name(path.name + ".parts")
        manifest = parts / "manifest.json"
        if parts.exists() and (
            not manifest.exists() or json.loads(manifest.read_text()) != meta
        ):
            shutil.rmtree(parts)  # parts of other SMILES
        parts.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps(meta))
    starts = list(range(0, len(items), chunk_size))
    done: dict[int, np.ndarray] = {}
    if path is not None:
        for start in starts:
            part = parts / f"{start:012d}.npy"
            if part.exists():
                done[start] = np.load(part)
    todo = [s for s in starts if s not in done]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        initial = sum(len(v) for v in done.values())
        bar = tqdm(total=len(items), initial=initial, desc="MPO", unit="mol")
    with ProcessPoolExecutor(max_workers=workers) as pool:
        chunks = (items[s : s + chunk_size] for s in todo)
        for start, values in zip(todo, pool.map(_chunk, chunks), strict=True):
            done[start] = values
            if path is not None:
                _save_npy(values, parts / f"{start:012d}.npy")
            if bar is not None:
                bar.update(len(values))
    if bar is not None:
        bar.close()
    result = np.concatenate([done[s] for s in starts]) if starts else np.zeros(0)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        _save_npy(result, path)
        path.with_suffix(".json").write_text(json.dumps(meta))
        shutil.rmtree(parts)
    return result
