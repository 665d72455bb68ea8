"""ax_chaining.chem: vendored datasets, Morgan fingerprints, Tanimoto Gram."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ax_chaining.chem import morgan_fingerprints, tanimoto_gram
from ax_chaining.test_functions.molecules import DATASETS, load_dataset


def test_tanimoto_hand_computed():
    a = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]], dtype=torch.uint8)
    K = tanimoto_gram(a)
    # rows 0, 1: one common bit, three bits in the union; empty row: 0 with others.
    expected = torch.tensor(
        [[1.0, 1 / 3, 0.0], [1 / 3, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64
    )
    torch.testing.assert_close(K, expected)
    b = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    torch.testing.assert_close(
        tanimoto_gram(a, b),
        torch.tensor([[2 / 3], [2 / 3], [0.0]], dtype=torch.float64),
    )


@given(
    st.integers(2, 12).flatmap(
        lambda n: st.lists(
            st.lists(st.integers(0, 1), min_size=10, max_size=10),
            min_size=n,
            max_size=n,
        )
    )
)
def test_tanimoto_is_a_psd_similarity(rows):
    x = torch.tensor(rows, dtype=torch.uint8)
    K = tanimoto_gram(x)
    torch.testing.assert_close(K, K.T)
    assert torch.all(K.diagonal() == 1)
    assert torch.all((K >= 0) & (K <= 1))
    assert torch.linalg.eigvalsh(K).min() > -1e-10


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (torch.tensor([[0, 2]]), "only 0 and 1"),
        (torch.tensor([1, 0]), "2-D"),
        ([[1, 0]], "torch.Tensor"),
    ],
)
def test_tanimoto_rejects_bad_input(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        tanimoto_gram(bad)
    with pytest.raises(ValueError, match="bits"):
        tanimoto_gram(torch.ones(2, 3), torch.ones(2, 4))


def test_morgan_fingerprints():
    pytest.importorskip("rdkit")
    fp = morgan_fingerprints(["C", "C", "CCO", "c1ccccc1"], radius=2, n_bits=1024)
    assert fp.shape == (4, 1024) and fp.dtype == torch.uint8
    assert int(fp[0].sum()) == 1  # methane: one atom environment
    K = tanimoto_gram(fp)
    assert K[0, 1] == 1  # same molecule, same fingerprint
    assert 0 <= K[0, 2] < 1 and 0 <= K[2, 3] < 1
    assert K[2, 3] == 0  # ethanol and benzene share no atom environment


def test_morgan_rejects_bad_input():
    pytest.importorskip("rdkit")
    with pytest.raises(ValueError, match=r"smiles\[1\].*syntax"):
        morgan_fingerprints(["CCO", "not a molecule"])
    with pytest.raises(ValueError, match="empty"):
        morgan_fingerprints([])
    with pytest.raises(TypeError, match="sequence"):
        morgan_fingerprints("CCO")
    with pytest.raises(ValueError, match="`n_bits` must be a positive int, got 0"):
        morgan_fingerprints(["CCO"], n_bits=0)
    with pytest.raises(ValueError, match="`radius` must be >= 0, got -1"):
        morgan_fingerprints(["CCO"], radius=-1)
    with pytest.raises(TypeError, match="`radius` must be an int, got float"):
        morgan_fingerprints(["CCO"], radius=2.0)


@pytest.mark.parametrize(
    ("name", "n", "first_smiles", "first_y"),
    [
        ("esol", 1128, "OCC3OC(OCC2OC(OC(C#N)c1ccccc1)C(O)C(O)C2O)C(O)C(O)C3O", -0.77),
        ("freesolv", 642, "CN(C)C(=O)c1ccc(cc1)OC", 11.01),  # minus expt
        ("lipo", 4200, "Cn1c(CN2CCN(CC2)c3ccc(Cl)cc3)nc4ccccc14", 3.54),
    ],
)
def test_load_dataset(name, n, first_smiles, first_y):
    data = load_dataset(name)
    assert len(data) == n == data.y.shape[0]
    assert data.smiles[0] == first_smiles
    assert float(data.y[0]) == pytest.approx(first_y)
    assert data.y.dtype == torch.float64 and torch.isfinite(data.y).all()


def test_load_dataset_errors():
    with pytest.raises(ValueError, match="esol"):
        load_dataset("qm9")
    assert set(DATASETS) == {"esol", "freesolv", "lipo"}


# ---------------------------------------------------------------------------
# featurize_library: a cached, resumable featurization of a SMILES library.
# ---------------------------------------------------------------------------

# ESOL with four invalid entries: a syntax error, an empty string, a valence
# error and a non-string.
_INVALID = {3: "C1CC", 10: "", 20: "C(C)(C)(C)(C)C", 40: None}


def _smiles_with_invalid() -> list:
    smiles = list(load_dataset("esol").smiles)
    for row, bad in _INVALID.items():
        smiles[row] = bad
    return smiles


def _featurize(smiles, path, **kwargs):
    from ax_chaining.chem import featurize_library

    kwargs.setdefault("progress", False)
    kwargs.setdefault("workers", 1)
    with pytest.warns(UserWarning, match=r"skipped 4 of 1128 SMILES.*input row 3"):
        return featurize_library(smiles, path, **kwargs)


def _featurize_quiet(smiles, path, **kwargs):
    from ax_chaining.chem import featurize_library

    return featurize_library(smiles, path, progress=False, workers=1, **kwargs)


def _pack(bits):
    from ax_chaining.kernels import PackedFingerprints

    return PackedFingerprints.from_bits(bits)


def test_featurize_library_matches_morgan_and_reports_invalid(tmp_path):
    pytest.importorskip("rdkit")
    from ax_chaining.kernels import PackedFingerprints

    smiles = _smiles_with_invalid()
    library = _featurize(smiles, tmp_path / "cache", chunk_size=300)
    valid = [i for i in range(len(smiles)) if i not in _INVALID]
    assert library.rows.tolist() == valid and len(library) == len(valid) == 1124
    expected = morgan_fingerprints([smiles[i] for i in valid])
    assert np.array_equal(library.fingerprints.words, _pack(expected).words)
    assert isinstance(library.fingerprints, PackedFingerprints)
    skipped = library.skipped
    assert skipped.input_row.tolist() == list(_INVALID)
    assert skipped.smiles.tolist() == ["C1CC", "", "C(C)(C)(C)(C)C", "None"]
    reasons = skipped.reason.tolist()
    assert "syntax" in reasons[0] and reasons[1] == "empty SMILES"
    assert "valence" in reasons[2].lower() and "NoneType" in reasons[3]


def test_featurize_library_resumes_after_an_interruption(tmp_path):
    pytest.importorskip("rdkit")
    from ax_chaining.chem import FeaturizedLibrary

    smiles = _smiles_with_invalid()
    one_shot = _featurize(smiles, tmp_path / "one", chunk_size=100)
    calls = []

    def stop_after_three(done, total):
        calls.append((done, total))
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _featurize_quiet(
            smiles, tmp_path / "two", chunk_size=100, callback=stop_after_three
        )
    assert calls == [(1, 12), (2, 12), (3, 12)]
    with pytest.raises(ValueError, match="unfinished"):
        FeaturizedLibrary.open(tmp_path / "two")
    calls.clear()
    # Resumed with another chunk size: it keeps the one it started with.
    resumed = _featurize(
        smiles,
        tmp_path / "two",
        chunk_size=7,
        workers=2,
        callback=lambda *a: calls.append(a),
    )
    assert calls[0] == (4, 12) and calls[-1] == (12, 12) and len(calls) == 9
    assert np.array_equal(resumed.fingerprints.words, one_shot.fingerprints.words)
    assert np.array_equal(resumed.rows, one_shot.rows)
    assert resumed.skipped.equals(one_shot.skipped)
    assert resumed.fingerprints.key == one_shot.fingerprints.key
    # Finished: reopened as is, nothing recomputed.
    calls.clear()
    again = _featurize(smiles, tmp_path / "two", callback=lambda *a: calls.append(a))
    assert calls == [] and again.fingerprints.key == one_shot.fingerprints.key
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [
        "fingerprints.json",
        "fingerprints.npy",
        "manifest.json",
        "rows.npy",
        "skipped.csv",
    ]


def test_featurize_library_refuses_another_cache_and_reads_csv(tmp_path):
    pytest.importorskip("rdkit")
    import pandas as pd

    from ax_chaining.chem import featurize_library

    smiles = ["CCO", "c1ccccc1", "CC(=O)O", "CCN"]
    table = pd.DataFrame({"id": range(4), "SMILES": smiles})
    file = tmp_path / "lib.csv.gz"
    table.to_csv(file, index=False)
    from_file = featurize_library(file, tmp_path / "cache", progress=False, workers=1)
    assert len(from_file) == 4 and len(from_file.skipped) == 0
    assert np.array_equal(
        from_file.fingerprints.words, _pack(morgan_fingerprints(smiles)).words
    )
    with pytest.raises(ValueError, match=r"radius=3 \(cache: 2\)"):
        featurize_library(file, tmp_path / "cache", radius=3, progress=False)
    with pytest.raises(ValueError, match="another input"):
        featurize_library(smiles[::-1], tmp_path / "cache", progress=False)
    with pytest.raises(ValueError, match=r"`column` must be a column of lib.csv.gz"):
        featurize_library(file, tmp_path / "other", column="smi", progress=False)
    with pytest.raises(ValueError, match="`smiles` is the str 'CCO', which is no file"):
        featurize_library("CCO", tmp_path / "other", progress=False)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a featurization cache"):
        featurize_library(smiles, tmp_path / "busy", progress=False)
    with pytest.raises(ValueError, match=r"no valid SMILES.*'C1CC'"):
        featurize_library(["C1CC"], tmp_path / "none", progress=False)
    with pytest.raises(ValueError, match="`chunk_size` must be a positive int"):
        featurize_library(smiles, tmp_path / "other", chunk_size=0)
