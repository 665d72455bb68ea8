"""featurize_library: a cached, resumable featurization of a SMILES library
into packed fingerprints (ax_chaining.molecules.library)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ax_chaining.kernels import PackedFingerprints
from ax_chaining.molecules import (
    FeaturizedLibrary,
    featurize_library,
    morgan_fingerprints,
)
from ax_chaining.test_functions.molecules import load_dataset

pytest.importorskip("rdkit")

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
    kwargs.setdefault("progress", False)
    kwargs.setdefault("n_jobs", 1)
    with pytest.warns(UserWarning, match=r"skipped 4 of 1128 SMILES.*input row 3"):
        return featurize_library(smiles, path, **kwargs)


def _featurize_quiet(smiles, path, **kwargs):
    return featurize_library(smiles, path, progress=False, n_jobs=1, **kwargs)


def _pack(bits):
    return PackedFingerprints.from_bits(bits)


def test_featurize_library_matches_morgan_and_reports_invalid(tmp_path):
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
    # Resumed with another chunk size and two workers: it keeps the chunk size
    # it started with, and featurizes the chunks not yet recorded (at least
    # the three reported).
    resumed = _featurize(
        smiles,
        tmp_path / "two",
        chunk_size=7,
        n_jobs=2,
        callback=lambda *a: calls.append(a),
    )
    assert calls[0][0] >= 4 and calls[-1] == (12, 12)
    assert len(calls) == 12 - calls[0][0] + 1 <= 9
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
    smiles = ["CCO", "c1ccccc1", "CC(=O)O", "CCN"]
    table = pd.DataFrame({"id": range(4), "SMILES": smiles})
    file = tmp_path / "lib.csv.gz"
    table.to_csv(file, index=False)
    from_file = featurize_library(file, tmp_path / "cache", progress=False, n_jobs=1)
    assert len(from_file) == 4 and len(from_file.skipped) == 0
    assert np.array_equal(
        from_file.fingerprints.words, _pack(morgan_fingerprints(smiles)).words
    )
    with pytest.raises(ValueError, match=r"radius=3 \(cache: 2\)"):
        featurize_library(file, tmp_path / "cache", radius=3, progress=False)
    with pytest.raises(ValueError, match=r"another library \(its SMILES differ\)"):
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
    with pytest.raises(ValueError, match="`n_jobs` must be None or a non-zero int"):
        featurize_library(smiles, tmp_path / "other", n_jobs=0)
