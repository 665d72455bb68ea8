"""Molecule encodings, their cleaning and their cache
(ax_chaining.molecules.encodings), and the vendored molecule datasets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ax_chaining.molecules import (
    CLEANING_STEPS,
    clean_features,
    default_cleaning,
    encode_molecules,
    encodings,
    molecule_features,
    morgan_fingerprints,
    tanimoto_gram,
)
from ax_chaining.test_functions.molecules import DATASETS, load_dataset

pytest.importorskip("rdkit")

MOLECULES = ["CCO", "c1ccccc1O", "CC(=O)N"]


def test_rdkit2d_values_are_rdkits_own() -> None:
    from rdkit import Chem
    from rdkit.Chem import Crippen, Descriptors, Lipinski, rdMolDescriptors

    values, names = encode_molecules(MOLECULES, "rdkit2d")
    column = {name: j for j, name in enumerate(names)}
    for i, s in enumerate(MOLECULES):
        mol = Chem.MolFromSmiles(s)
        assert values[i, column["MolWt"]] == pytest.approx(Descriptors.MolWt(mol))
        assert values[i, column["TPSA"]] == pytest.approx(
            rdMolDescriptors.CalcTPSA(mol)
        )
        assert values[i, column["MolLogP"]] == pytest.approx(Crippen.MolLogP(mol))
        assert values[i, column["NumHDonors"]] == Lipinski.NumHDonors(mol)
    # By hand: ethanol C2H6O weighs 46.069; one donor each (OH, OH, NH2).
    assert values[0, column["MolWt"]] == pytest.approx(46.069, abs=1e-3)
    assert values[:, column["NumHDonors"]].tolist() == [1, 1, 1]


def test_fragment_counts_and_count_fingerprints_by_hand() -> None:
    from rdkit import Chem
    from rdkit.Chem import Fragments

    values, names = encode_molecules(MOLECULES, "fragments")
    assert all(name.startswith("fr_") for name in names) and len(names) == 85
    column = {name: j for j, name in enumerate(names)}
    # Phenol has one phenol group, ethanol one aliphatic OH, acetamide an amide.
    assert values[:, column["fr_phenol"]].tolist() == [0, 1, 0]
    assert values[:, column["fr_Al_OH"]].tolist() == [1, 0, 0]
    assert values[:, column["fr_amide"]].tolist() == [0, 0, 1]
    for i, s in enumerate(MOLECULES):
        mol = Chem.MolFromSmiles(s)
        assert values[i, column["fr_ether"]] == Fragments.fr_ether(mol)
    counts, _ = encode_molecules(MOLECULES, "morgan_counts", n_bits=1024)
    # The bits set are those of the binary fingerprint; ethanol's three heavy
    # atoms give 3 radius-0 and 3 radius-1 environments (+1 at radius 2: the
    # centre carbon sees the whole molecule, identical to its radius-1 one
    # and not counted again).
    bits = morgan_fingerprints(MOLECULES, n_bits=1024).numpy()
    np.testing.assert_array_equal(counts > 0, bits.astype(bool))
    assert counts[0].sum() == 6
    both, names = encode_molecules(MOLECULES, "fragprints", n_bits=1024)
    np.testing.assert_array_equal(both, np.concatenate([values, counts], axis=1))
    assert len(names) == 85 + 1024


def test_invalid_smiles_is_named() -> None:
    with pytest.raises(ValueError, match=r"`smiles\[1\]` = 'C1CC' is not a valid"):
        encode_molecules(["CCO", "C1CC"], "fragments")
    with pytest.raises(ValueError, match="`encoding` must be"):
        encode_molecules(["CCO"], "ecfp")


def test_cleaning_by_hand() -> None:
    X = np.array(
        [
            [1.0, 5.0, 2.0, np.nan, 0.0],
            [3.0, 5.0, 6.0, 1.0, 1.0],
            [2.0, 5.0, 4.0, 2.0, 0.0],
        ]
    )
    out = clean_features(X, ["a", "b", "c", "d", "e"])
    # d has a NaN, b is constant, c = 2a is a's duplicate: a and e are left.
    assert out.dropped == {
        "nonfinite": ("d",),
        "constant": ("b",),
        "decorrelate": ("c",),
    }
    assert out.names == ("a", "e")
    np.testing.assert_allclose(out.values, [[0, 0], [1, 1], [0.5, 0]])
    np.testing.assert_allclose(out.offset, [1, 0])
    np.testing.assert_allclose(out.scale, [2, 1])
    std = clean_features(X, scale="standardize", max_correlation=None)
    assert std.names == ("x0", "x2", "x4")
    np.testing.assert_allclose(std.values.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(std.values.std(0), 1)
    # Every step switched off but the finite check: the table as it was.
    finite = X[:, [0, 1, 2, 4]]
    kept = clean_features(finite, constant=False, scale=None, max_correlation=None)
    np.testing.assert_array_equal(kept.values, finite)
    assert set(kept.dropped) == {"nonfinite"} and CLEANING_STEPS[0] == "nonfinite"


def test_cleaning_refuses_bad_input() -> None:
    X = np.array([[1.0, np.inf], [2.0, 3.0]])
    with pytest.raises(ValueError, match="got inf in row 0, column 'x1'"):
        clean_features(X, nonfinite=False)
    with pytest.raises(ValueError, match="`scale` must be"):
        clean_features(X, scale="max")
    with pytest.raises(ValueError, match=r"`max_correlation` must be in \(0, 1\]"):
        clean_features(X, max_correlation=0.0)
    with pytest.raises(ValueError, match="needs `constant=True`"):
        clean_features(X, constant=False)
    with pytest.raises(ValueError, match="No column of the 2 is left"):
        clean_features(np.array([[1.0, np.nan], [1.0, 2.0]]))
    with pytest.raises(ValueError, match="N x d table with N >= 2"):
        clean_features(np.ones((1, 3)))
    with pytest.raises(ValueError, match="`names` must have 2 entries"):
        clean_features(X, ["a"])


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    threshold=st.sampled_from([0.5, 0.8, 0.95]),
)
def test_decorrelation_keeps_no_close_pair_and_drops_only_close_columns(
    seed: int, threshold: float
) -> None:
    g = np.random.default_rng(seed)
    base = g.normal(size=(12, 4))
    # Near-copies of the first columns among independent ones.
    X = np.concatenate([base, base[:, :2] + 0.05 * g.normal(size=(12, 2))], axis=1)
    X = X[:, g.permutation(6)]
    out = clean_features(X, max_correlation=threshold, scale=None)
    corr = np.abs(np.corrcoef(X, rowvar=False))
    kept = [int(n[1:]) for n in out.names]
    dropped = [int(n[1:]) for n in out.dropped["decorrelate"]]
    assert sorted(kept + dropped) == list(range(6))
    for a in kept:
        for b in kept:
            assert a == b or corr[a, b] <= threshold
    for j in dropped:  # each dropped column is too close to a kept earlier one
        assert any(corr[j, k] > threshold for k in kept if k < j)
    again = clean_features(X, max_correlation=threshold, scale=None)
    assert again.names == out.names


def test_duplicates_refused_or_mapped() -> None:
    library = ["CCO", "c1ccccc1", "OCC", "CC(=O)N"]
    with pytest.raises(ValueError, match=r"smiles\[2\] = 'OCC' is the molecule of "):
        molecule_features(library, "fragments")
    table = molecule_features(library, "fragments", duplicates="map")
    assert len(table) == 4 and table.first_row.tolist() == [0, 1, 0, 3]
    np.testing.assert_array_equal(table.values[2], table.values[0])
    assert not np.array_equal(table.values[1], table.values[0])


def test_cache_reopens_and_detects_a_changed_library(tmp_path: Path) -> None:
    path = tmp_path / "cache"
    library = ["CCO", "c1ccccc1O", "CC(=O)N", "CCCl", "c1ccncc1"]
    first = molecule_features(library, "rdkit2d", path=path)
    assert (path / "manifest.json").is_file()
    again = molecule_features(library, "rdkit2d", path=path)
    assert isinstance(again.values, np.memmap)  # read, not recomputed
    np.testing.assert_array_equal(again.values, first.values)
    assert again.names == first.names and again.dropped == first.dropped
    assert torch.equal(again.tensor(), torch.from_numpy(first.values))
    changed = [*library[:-1], "c1ccoc1"]
    with pytest.raises(ValueError, match=r"another library \(its SMILES differ\)"):
        molecule_features(changed, "rdkit2d", path=path)
    with pytest.raises(ValueError, match="encoding='fragments'"):
        molecule_features(library, "fragments", path=path)
    with pytest.raises(ValueError, match="max_correlation"):
        molecule_features(
            library, "rdkit2d", path=path, cleaning={"max_correlation": 0.9}
        )
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    with pytest.raises(ValueError, match="is not a molecule-features cache"):
        molecule_features(library, "rdkit2d", path=tmp_path / "other")


def test_an_interrupted_cache_is_recomputed(tmp_path: Path) -> None:
    """A cache directory holding the table but no manifest (a write stopped
    before its end, or another process's under way) is recomputed into a
    complete cache, not refused and not trusted: a table there that is not
    the library's is replaced."""
    library = ["CCO", "c1ccccc1O", "CC(=O)N", "CCCl", "c1ccncc1"]
    alone = molecule_features(library, "rdkit2d")
    path = tmp_path / "cache"
    path.mkdir()
    np.save(path / "features.npy", np.zeros((2, 2)))  # no manifest beside it
    (path / "features.npy12345.tmp").write_bytes(b"")  # an unfinished write
    table = molecule_features(library, "rdkit2d", path=path)
    np.testing.assert_array_equal(table.values, alone.values)
    assert (path / "manifest.json").is_file()
    reopened = molecule_features(library, "rdkit2d", path=path)
    assert isinstance(reopened.values, np.memmap)
    np.testing.assert_array_equal(reopened.values, alone.values)


def test_default_cleaning_of_each_encoding() -> None:
    assert default_cleaning("rdkit2d")["scale"] == "unit"
    assert default_cleaning("fragprints")["scale"] is None
    table = molecule_features(MOLECULES, "morgan_counts")
    # Raw counts (MinMax needs them), only all-zero columns dropped.
    assert table.values.min() >= 0 and (table.values.sum(0) > 0).all()
    assert float(table.values.max()).is_integer()
    with pytest.raises(ValueError, match="unknown keys"):
        molecule_features(MOLECULES, "rdkit2d", cleaning={"scaling": "unit"})


def test_worker_processes_give_the_same_features(tmp_path: Path) -> None:
    """``n_jobs`` splits the encoding over joblib's worker processes: the same
    raw array (NaNs where they were) and the same cleaned table, a cache made
    with one worker is reused with two, and a bad ``n_jobs`` is refused
    before anything is computed."""
    library = ["CCO", "c1ccccc1O", "CC(=O)N", "CCCl", "c1ccncc1", "OC(=O)CCN", "CCOC"]
    raw, names = encode_molecules(library, "fragprints", n_bits=64)
    raw2, names2 = encode_molecules(library, "fragprints", n_bits=64, n_jobs=2)
    np.testing.assert_array_equal(raw2, raw)
    assert names2 == names
    path = tmp_path / "cache"
    one = molecule_features(library, "rdkit2d", path=path)
    two = molecule_features(library, "rdkit2d", path=path, n_jobs=2)
    assert isinstance(two.values, np.memmap)  # the one-worker cache, reused
    fresh = molecule_features(library, "rdkit2d", n_jobs=-1)
    np.testing.assert_array_equal(fresh.values, one.values)
    assert fresh.names == one.names
    for bad in (0, 1.5, True, "2"):
        with pytest.raises(ValueError, match="`n_jobs` must be None or a non-zero"):
            molecule_features(library, "rdkit2d", n_jobs=bad)


@pytest.mark.slow
def test_a_script_without_a_main_guard_encodes_in_workers(tmp_path: Path) -> None:
    """joblib's workers do not import the calling script again: a script
    that encodes with ``n_jobs=2`` at its top level runs and gets the serial
    result."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    script = tmp_path / "encode.py"
    script.write_text(
        "from ax_chaining.molecules import encode_molecules\n"
        "smiles = ['CCO', 'CCN', 'CCC', 'CCCl']\n"
        "two = encode_molecules(smiles, 'fragments', n_jobs=2)[0]\n"
        "print((two == encode_molecules(smiles, 'fragments')[0]).all())\n"
    )
    run = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *sys.path])},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True"]


def test_a_dask_cluster_through_joblib_gives_the_same_features() -> None:
    """``joblib.parallel_config(backend="dask")`` spreads the chunks over a
    Dask cluster (here in this process): the same raw array in input order
    and the same cleaned table as one process makes."""
    distributed = pytest.importorskip("distributed")
    import joblib

    library = ["CCO", "c1ccccc1O", "CC(=O)N", "CCCl", "c1ccncc1", "OC(=O)CCN", "CCOC"]
    raw, names = encode_molecules(library, "fragprints", n_bits=64)
    alone = molecule_features(library, "rdkit2d")
    with distributed.Client(
        processes=False, n_workers=2, threads_per_worker=1, dashboard_address=None
    ):
        with joblib.parallel_config(backend="dask"):
            raw2, names2 = encode_molecules(library, "fragprints", n_bits=64, n_jobs=-1)
            table = molecule_features(library, "rdkit2d", n_jobs=-1)
    np.testing.assert_array_equal(raw2, raw)
    assert names2 == names
    np.testing.assert_array_equal(table.values, alone.values)
    assert table.names == alone.names


def _messy_table(n: int = 50, seed: int = 0) -> np.ndarray:
    """Random columns beside a NaN column, a constant one and near-copies."""
    g = np.random.default_rng(seed)
    X = g.normal(size=(n, 8)) * np.arange(1, 9)
    X[:, 2] = 3.0 * X[:, 0] + 0.01 * g.normal(size=n)  # a near-copy of x0
    X[:, 5] = 7.0  # constant
    X[n // 2, 6] = np.nan  # non-finite in a later block
    return np.concatenate([X, X[:, :2] + 0.3 * g.normal(size=(n, 2))], axis=1)


@pytest.mark.parametrize("scale", ["unit", "standardize", None])
def test_cleaning_in_blocks_equals_cleaning_in_memory(
    scale: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A table larger than CLEAN_BLOCK_BYTES is read a block of rows at a time
    (here 7 of 50, from a memory map): the same columns dropped by each step,
    unit scaling bit for bit, standardizing to round-off."""
    X = _messy_table()
    whole = clean_features(X, scale=scale, max_correlation=0.9)
    np.save(tmp_path / "raw.npy", X)
    mapped = np.load(tmp_path / "raw.npy", mmap_mode="r")
    monkeypatch.setattr(encodings, "CLEAN_BLOCK_BYTES", 7 * 8 * X.shape[1])
    blocks = clean_features(mapped, scale=scale, max_correlation=0.9)
    assert blocks.names == whole.names
    assert blocks.dropped == whole.dropped
    assert whole.dropped["nonfinite"] == ("x6",) and whole.dropped["constant"] == (
        "x5",
    )
    assert "x2" in whole.dropped["decorrelate"]
    if scale == "standardize":
        np.testing.assert_allclose(blocks.values, whole.values, rtol=0, atol=1e-12)
        np.testing.assert_allclose(blocks.scale, whole.scale, rtol=1e-12)
    else:
        np.testing.assert_array_equal(blocks.values, whole.values)
        np.testing.assert_array_equal(blocks.offset, whole.offset)
        np.testing.assert_array_equal(blocks.scale, whole.scale)
    with pytest.raises(ValueError, match=r"got nan in row 25, column 'x6'"):
        clean_features(mapped, nonfinite=False, max_correlation=None)


def test_a_library_too_large_to_clean_in_memory_goes_through_a_raw_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With ``path`` and a raw table above CLEAN_BLOCK_BYTES, the raw table is
    written chunk by chunk to the cache directory, cleaned from there block by
    block, and removed: the same cached table as one made in memory."""
    library = ["CCO", "c1ccccc1O", "CC(=O)N", "CCCl", "c1ccncc1", "OC(=O)CCN", "CCOC"]
    alone = molecule_features(library, "rdkit2d")
    seen = []
    clean = encodings.clean_features

    def spy(values, *args, **kwargs):
        seen.append((type(values), getattr(values, "filename", None)))
        return clean(values, *args, **kwargs)

    monkeypatch.setattr(encodings, "clean_features", spy)
    width = encode_molecules(library[:1], "rdkit2d")[0].shape[1]
    monkeypatch.setattr(encodings, "CLEAN_BLOCK_BYTES", 8 * width * 2)  # 2 rows
    cached = molecule_features(library, "rdkit2d", path=tmp_path / "cache")
    assert seen[0][0] is np.memmap
    assert Path(seen[0][1]).parent == tmp_path / "cache"
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [
        "features.npy",
        "first_row.npy",
        "manifest.json",
    ]
    np.testing.assert_array_equal(cached.values, alone.values)
    assert cached.names == alone.names and cached.dropped == alone.dropped


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
    fp = morgan_fingerprints(["C", "C", "CCO", "c1ccccc1"], radius=2, n_bits=1024)
    assert fp.shape == (4, 1024) and fp.dtype == torch.uint8
    assert int(fp[0].sum()) == 1  # methane: one atom environment
    K = tanimoto_gram(fp)
    assert K[0, 1] == 1  # same molecule, same fingerprint
    assert 0 <= K[0, 2] < 1 and 0 <= K[2, 3] < 1
    assert K[2, 3] == 0  # ethanol and benzene share no atom environment


def test_morgan_rejects_bad_input():
    with pytest.raises(ValueError, match=r"smiles\[1\].*syntax"):
        morgan_fingerprints(["CCO", "not a molecule"])
    with pytest.raises(ValueError, match="at least 1"):
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
