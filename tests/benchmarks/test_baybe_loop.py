"""BayBE as a benchmark method (benchmarks.baybe_loop), on tables of a few rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("baybe")

from benchmarks.baybe_loop import component_table, run_campaign  # noqa: E402

# Six reactions over three bases and two ligands (every pair once).
TABLE = pd.DataFrame(
    {
        "base": ["CCN(CC)CC", "CC(C)(C)[O-]", "CCN(CC)CC", "CC(C)(C)[O-]", "C1CCNCC1"]
        + ["C1CCNCC1"],
        "ligand": ["c1ccccc1P", "CP(C)C", "CP(C)C", "c1ccccc1P", "CP(C)C"]
        + ["c1ccccc1P"],
    }
)
Y = np.array([0.1, 0.5, 0.3, 0.9, 0.2, 0.4])


def test_onehot_table_labels_each_distinct_component():
    table = component_table(TABLE, ["base", "ligand"])
    assert table.rows["base"].tolist() == [
        "base_0",
        "base_1",
        "base_0",
        "base_1",
        "base_4",
        "base_4",
    ]
    assert [p.name for p in table.parameters] == ["base", "ligand"]
    assert len(table.items_by_row()) == 6


@pytest.mark.slow
def test_campaign_starts_from_the_initial_items_and_never_repeats():
    table = component_table(TABLE, ["base", "ligand"])
    items, seconds = run_campaign(table, Y, [0, 1], queries=2, seed=3)
    assert items[:2] == [0, 1]
    assert len(items) == 4 and len(set(items)) == 4
    assert len(seconds) == 2 and all(s > 0 for s in seconds)
    # The same seed gives the same recommendations.
    again, _ = run_campaign(table, Y, [0, 1], queries=2, seed=3)
    assert again == items
    # Four queries from two initial items exhaust the table.
    items, _ = run_campaign(table, Y, [0, 1], queries=4, seed=0)
    assert sorted(items) == list(range(6))


def test_bad_runs_are_refused_before_running():
    table = component_table(TABLE, ["base", "ligand"])
    with pytest.raises(ValueError, match="one value per item"):
        run_campaign(table, Y[:5], [0], 1, seed=0)
    with pytest.raises(ValueError, match="distinct items"):
        run_campaign(table, Y, [0, 0], 1, seed=0)
    with pytest.raises(ValueError, match="distinct items"):
        run_campaign(table, Y, [6], 1, seed=0)
    with pytest.raises(ValueError, match="exceeds the 6 distinct points"):
        run_campaign(table, Y, [0, 1], 5, seed=0)
    with pytest.raises(ValueError, match="encoding"):
        component_table(TABLE, ["base"], encoding="mordred")
    with pytest.raises(ValueError, match="columns"):
        component_table(TABLE, ["solvent"])


def test_substance_table_maps_duplicate_molecules_to_one_label():
    pytest.importorskip("skfp")  # BayBE's chemistry extra (baybe[chem])
    from benchmarks.baybe_loop import substance_table

    # "OCC" is "CCO" written another way: BayBE refuses two labels for it.
    table = substance_table(["CCO", "c1ccccc1O", "OCC", "CC(=O)N"])
    assert table.rows["molecule"].tolist() == ["m0", "m1", "m0", "m3"]
    assert table.items_by_row()[("m0",)] == [0, 2]


@pytest.mark.slow
def test_substance_campaign_measures_a_shared_label_on_its_first_untested_item():
    pytest.importorskip("skfp")
    from benchmarks.baybe_loop import substance_table

    smiles = ["CCO", "c1ccccc1O", "OCC", "CC(=O)N", "CCCCO", "c1ccccc1"]
    table = substance_table(smiles)
    y = np.array([1.0, 0.0, 5.0, 2.0, 3.0, 0.5])
    items, seconds = run_campaign(table, y, [1, 3], queries=3, seed=0)
    assert items[:2] == [1, 3] and len(seconds) == 3
    # Item 2 shares item 0's label: whenever BayBE picks that label, item 0
    # (the first untested) is measured and the label is then done.
    assert 2 not in items
    assert len(set(items)) == 5
