"""The screening objective (MPO) and its resumable, content-checked cache."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks.testbeds import mpo, mpo_scores

pytest.importorskip("rdkit")


def test_mpo_by_hand() -> None:
    from rdkit import Chem
    from rdkit.Chem import Descriptors, rdMolDescriptors

    # Benzene has no sp3 carbon: the geometric mean is 0 exactly.
    assert mpo("c1ccccc1") == 0.0
    # Cyclohexane: all carbons sp3, no polar surface.
    mol = Chem.MolFromSmiles("C1CCCCC1")
    logp = Descriptors.MolLogP(mol)
    assert rdMolDescriptors.CalcTPSA(mol) == 0.0
    assert rdMolDescriptors.CalcFractionCSP3(mol) == 1.0
    by_hand = (math.exp(-0.5 * (logp - 2.5) ** 2) * math.exp(-0.5 * 2.6**2)) ** (1 / 3)
    assert mpo("C1CCCCC1") == pytest.approx(by_hand, rel=1e-12)
    assert math.isnan(mpo("not a molecule"))


def test_mpo_scores_resume_from_parts_and_check_the_smiles(tmp_path) -> None:
    smiles = ["CCO", "C1CCCCC1", "c1ccccc1", "CC(=O)O", "CCN"]
    direct = np.array([mpo(s) for s in smiles])
    cache = tmp_path / "mpo.npy"
    # An interrupted run left its first chunk (of 2); a marked value shows
    # that the next run takes it instead of recomputing.
    first = mpo_scores(smiles, cache, workers=1, progress=False, chunk_size=2)
    np.testing.assert_array_equal(first, direct)
    parts = tmp_path / "mpo.npy.parts"
    parts.mkdir()
    meta = json.loads((tmp_path / "mpo.json").read_text())
    (parts / "manifest.json").write_text(json.dumps(meta))
    np.save(parts / f"{0:012d}.npy", np.array([-1.0, -2.0]))
    cache.unlink()
    resumed = mpo_scores(smiles, cache, workers=1, progress=False, chunk_size=2)
    np.testing.assert_array_equal(resumed[:2], [-1.0, -2.0])
    np.testing.assert_array_equal(resumed[2:], direct[2:])
    assert not parts.exists()
    # The finished cache is reused for the same SMILES only.
    np.testing.assert_array_equal(mpo_scores(smiles, cache, progress=False), resumed)
    other = smiles[::-1]
    np.testing.assert_array_equal(
        mpo_scores(other, cache, workers=1, progress=False), direct[::-1]
    )


def test_mpo_scores_bad_arguments() -> None:
    with pytest.raises(ValueError, match="`workers`"):
        mpo_scores(["CCO"], workers=0)
    with pytest.raises(ValueError, match="`chunk_size`"):
        mpo_scores(["CCO"], chunk_size=0)
