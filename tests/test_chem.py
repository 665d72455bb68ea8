"""ax_chaining.chem: vendored datasets, Morgan fingerprints, Tanimoto Gram."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ax_chaining.benchmark.molecules import DATASETS, load_dataset
from ax_chaining.chem import morgan_fingerprints, tanimoto_gram


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
    with pytest.raises(ValueError, match=r"smiles\[1\]"):
        morgan_fingerprints(["CCO", "not a molecule"])
    with pytest.raises(ValueError, match="empty"):
        morgan_fingerprints([])
    with pytest.raises(TypeError, match="sequence"):
        morgan_fingerprints("CCO")
    with pytest.raises(ValueError, match="n_bits"):
        morgan_fingerprints(["CCO"], n_bits=0)


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
