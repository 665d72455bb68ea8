"""Per-component encodings of a table of several components (reactions,
ax_chaining.molecules.reactions)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from ax_chaining.molecules import component_features, tanimoto_gram

# Three reactions over two ligands and two bases: rows 0 and 1 share their base,
# rows 0 and 2 their ligand.
TABLE = pd.DataFrame(
    {
        "ligand": ["CP(C)C", "CCP(CC)CC", "CP(C)C"],
        "base": ["CCN(CC)CC", "CCN(CC)CC", "C1CCNCC1"],
        "yield": [10.0, 40.0, 25.0],
    }
)


def test_onehot_blocks_by_hand():
    features = component_features(TABLE, ["ligand", "base"])
    assert features.values.tolist() == [
        [1.0, 0.0, 1.0, 0.0],
        [0.0, 1.0, 1.0, 0.0],
        [1.0, 0.0, 0.0, 1.0],
    ]
    assert features.names == (
        "ligand:CP(C)C",
        "ligand:CCP(CC)CC",
        "base:CCN(CC)CC",
        "base:C1CCNCC1",
    )
    assert features.blocks == {"ligand": slice(0, 2), "base": slice(2, 4)}
    assert features.components["base"] == ("CCN(CC)CC", "C1CCNCC1")


def test_tanimoto_of_concatenated_onehot_by_hand():
    # Rows 0 and 1 share one of two set bits each: 1 / (2 + 2 - 1).
    gram = tanimoto_gram(
        torch.as_tensor(component_features(TABLE, ["ligand", "base"]).values)
    )
    assert gram[0, 1].item() == pytest.approx(1 / 3)
    assert gram[1, 2].item() == 0.0
    assert torch.diagonal(gram).tolist() == [1.0, 1.0, 1.0]


def test_callable_encoder_runs_once_per_distinct_component_and_mixes_with_onehot():
    calls = []

    def heavy_atoms(smiles):
        calls.append(list(smiles))
        return np.array(
            [[sum(ch.isalpha() and ch != "H" for ch in s)] for s in smiles]
        ), ["atoms"]

    features = component_features(
        TABLE, ["base", "ligand"], {"base": "onehot", "ligand": heavy_atoms}
    )
    assert calls == [["CP(C)C", "CCP(CC)CC"]]
    # base one-hot first (the column order asked for), then the ligand's count.
    assert features.values.tolist() == [
        [1.0, 0.0, 4.0],
        [1.0, 0.0, 7.0],
        [0.0, 1.0, 4.0],
    ]
    assert features.names[-1] == "ligand:atoms"


def test_morgan_blocks_equal_each_components_fingerprint():
    pytest.importorskip("rdkit")
    from ax_chaining.molecules import morgan_fingerprints

    features = component_features(TABLE, ["ligand", "base"], "morgan", n_bits=64)
    assert features.values.shape == (3, 128)
    for column in ("ligand", "base"):
        expected = morgan_fingerprints(list(TABLE[column]), 2, 64).numpy()
        np.testing.assert_array_equal(
            features.values[:, features.blocks[column]], expected
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"columns": ["ligand", "solvent"]}, "distinct columns"),
        ({"columns": ["ligand", "ligand"]}, "distinct columns"),
        ({"columns": []}, "distinct columns"),
        ({"columns": ["ligand"], "encoding": "ecfp"}, "an encoding must be"),
        ({"columns": ["ligand"], "numeric": ["ligand"]}, "distinct columns"),
        ({"columns": ["ligand"], "numeric": ["temperature"]}, "distinct columns"),
        (
            {"columns": ["ligand"], "encoding": {"base": "onehot"}},
            "one encoding per column",
        ),
        (
            {
                "columns": ["ligand"],
                "encoding": lambda s: (np.ones((1, 2)), ["a", "b"]),
            },
            "one row per distinct component",
        ),
        (
            {"columns": ["ligand"], "encoding": lambda s: (np.ones((2, 2)), ["a"])},
            "name its 2 columns",
        ),
        (
            {
                "columns": ["ligand"],
                "encoding": lambda s: (np.full((2, 1), np.nan), ["a"]),
            },
            "non-finite",
        ),
    ],
)
def test_bad_input_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        component_features(TABLE, **kwargs)


# Three components and a numeric condition: row 2's ligand is row 0's molecule
# spelt another way, row 1 has no base, every solvent is ethanol.
THREE = pd.DataFrame(
    {
        "ligand": ["CP(C)C", "CCP(CC)CC", "P(C)(C)C"],
        "base": ["CCN(CC)CC", None, "C1CCNCC1"],
        "solvent": ["CCO", "CCO", "OCC"],
        "temperature": [60.0, 80.0, 100.0],
    }
)


def test_three_components_by_hand_duplicates_mapped_and_absent_cells():
    features = component_features(
        THREE, ["ligand", "base", "solvent"], numeric=["temperature"]
    )
    assert features.values.tolist() == [
        [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0],
        [0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.5],
        [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0],
    ]
    assert features.names == (
        "ligand:CP(C)C",
        "ligand:CCP(CC)CC",
        "base:CCN(CC)CC",
        "base:C1CCNCC1",
        "base:absent",
        "solvent:CCO",
        "temperature",
    )
    assert features.components == {
        "ligand": ("CP(C)C", "CCP(CC)CC"),
        "base": ("CCN(CC)CC", "C1CCNCC1"),
        "solvent": ("CCO",),
    }
    assert features.blocks["base"] == slice(2, 5)
    assert features.blocks["temperature"] == slice(6, 7)
    # NaN and a blank string are absent too, as None is.
    for empty in (float("nan"), "  "):
        table = THREE.assign(base=["CCN(CC)CC", empty, "C1CCNCC1"])
        again = component_features(table, ["ligand", "base", "solvent"])
        np.testing.assert_array_equal(again.values, features.values[:, :6])


def test_named_descriptors_are_each_columns_cleaned_encoding():
    pytest.importorskip("rdkit")
    from ax_chaining.molecules import clean_features, default_cleaning, encode_molecules

    features = component_features(THREE, ["ligand", "base", "solvent"], "rdkit2d")
    raw, names = encode_molecules(["CP(C)C", "CCP(CC)CC"], "rdkit2d")
    ligand = clean_features(raw, names, **default_cleaning("rdkit2d"))
    np.testing.assert_array_equal(
        features.values[:, features.blocks["ligand"]], ligand.values[[0, 1, 0]]
    )
    base = features.values[:, features.blocks["base"]]
    assert features.names[features.blocks["base"]][-1] == "base:absent"
    assert base[1].tolist() == [0.0] * (base.shape[1] - 1) + [1.0]
    # A single solvent says nothing: its block is empty.
    assert features.blocks["solvent"].start == features.blocks["solvent"].stop


def test_bad_cells_are_named_with_their_row_and_column():
    pytest.importorskip("rdkit")
    bad = THREE.assign(base=["CCN(CC)CC", None, "C1CC"])
    with pytest.raises(ValueError, match=r"table\['base'\]` row 2 is 'C1CC', not a"):
        component_features(bad, ["ligand", "base"])
    number = THREE.assign(ligand=["CP(C)C", 3.0, "CP(C)C"])
    with pytest.raises(ValueError, match=r"table\['ligand'\]` row 1 is 3.0"):
        component_features(number, ["ligand", "base"])
    hot = THREE.assign(temperature=[60.0, None, 100.0])
    with pytest.raises(ValueError, match=r"table\['temperature'\]` row 1"):
        component_features(hot, ["ligand"], numeric=["temperature"])
    with pytest.raises(TypeError, match="columns"):
        component_features(TABLE, "ligand")


def test_reaction_spec_defaults_and_refusals():
    pytest.importorskip("rdkit")
    from ax_chaining.molecules import reaction_surrogate_spec

    def options(spec):
        return spec.model_configs[0].covar_module_options

    spec = reaction_surrogate_spec(THREE, ["ligand", "base"], ["temperature"])
    assert (options(spec)["base"], options(spec)["prior"]) == ("matern52", "chen")
    onehot = reaction_surrogate_spec(THREE, ["ligand", "base"], encoding="onehot")
    assert (options(onehot)["base"], options(onehot)["prior"]) == ("rbf", "botorch")
    with pytest.raises(ValueError, match="`encoding` must be 'onehot' or"):
        reaction_surrogate_spec(THREE, ["ligand"], encoding="morgan_counts")
    with pytest.raises(ValueError, match="do not vary"):
        reaction_surrogate_spec(THREE, ["solvent"])


def test_descriptor_blocks_equal_each_components_encoding():
    pytest.importorskip("rdkit")
    from functools import partial

    from ax_chaining.molecules import encode_molecules

    encode = partial(encode_molecules, encoding="fragments")
    features = component_features(TABLE, ["ligand", "base"], encode)
    for column in ("ligand", "base"):
        expected, names = encode(list(TABLE[column]))
        np.testing.assert_array_equal(
            features.values[:, features.blocks[column]], expected
        )
        assert features.names[features.blocks[column]][0] == f"{column}:{names[0]}"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::Warning")
def test_default_reaction_model_in_an_ax_loop_on_direct_arylation():
    """Three steps of qLogNEI over 288 reactions of the direct arylation table
    (2 solvents, 4 ligands, every base, concentration and temperature) on the
    default model, and the recommended reaction with its certificate."""
    pytest.importorskip("rdkit")
    from ax.api.client import Client

    from ax_chaining.ax import (
        candidate_index_parameter,
        qlognei_generation_strategy,
        recommend,
    )
    from ax_chaining.molecules import reaction_surrogate_spec
    from ax_chaining.test_functions.reactions import load_reactions

    data = load_reactions("direct-arylation")
    keep = data.table["solvent"].isin(data.table["solvent"].unique()[:2]) & data.table[
        "ligand"
    ].isin(data.table["ligand"].unique()[:4])
    table = data.table[keep].reset_index(drop=True)
    y = data.y.numpy()[keep.to_numpy()]
    assert len(table) == 288
    spec = reaction_surrogate_spec(table, data.components, data.numeric)
    client = Client(random_seed=0)
    client.configure_experiment(parameters=[candidate_index_parameter(288, "item")])
    client.configure_optimization(objective="y")
    client.set_generation_strategy(
        qlognei_generation_strategy(
            init_trials=4, surrogate_spec=spec, exclude_evaluated=True
        )
    )
    tested = []
    for _ in range(3):
        for index, params in client.get_next_trials(max_trials=3).items():
            item = int(params["item"])
            assert 0 <= item < 288 and item not in tested
            tested.append(item)
            client.complete_trial(index, raw_data={"y": float(y[item])})
    assert len(tested) == 9
    best = recommend(client)
    item = int(best["parameters"]["item"])
    assert item in tested and best["value"] == max(float(y[i]) for i in tested)
    assert best["certificate"]["delta"] == 0.05


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::Warning")
def test_reaction_table_through_the_item_index_route():
    """An Ax loop over a 3 x 3 reaction table, one item per reaction, the GP's
    covariance the Tanimoto similarity of the concatenated one-hot rows."""
    from ax.api.client import Client

    from ax_chaining.ax import (
        candidate_index_parameter,
        precomputed_kernel_surrogate_spec,
        qlognei_generation_strategy,
    )

    ligands = ["CP(C)C", "CCP(CC)CC", "c1ccccc1P"]
    bases = ["CCN(CC)CC", "C1CCNCC1", "CC(C)(C)[O-]"]
    table = pd.DataFrame(
        [(lig, base) for lig in ligands for base in bases], columns=["ligand", "base"]
    )
    y = [float(3 * i + j) for i in range(3) for j in range(3)]
    features = component_features(table, ["ligand", "base"])
    gram = tanimoto_gram(torch.as_tensor(features.values))
    client = Client(random_seed=0)
    client.configure_experiment(parameters=[candidate_index_parameter(9, "item")])
    client.configure_optimization(objective="y")
    client.set_generation_strategy(
        qlognei_generation_strategy(
            init_trials=2,
            surrogate_spec=precomputed_kernel_surrogate_spec(gram),
            exclude_evaluated=True,
        )
    )
    tested = [0, 4]
    for i in tested:
        index = client.attach_trial(parameters={"item": i})
        client.complete_trial(index, raw_data={"y": y[i]})
    for _ in range(3):
        for index, params in client.get_next_trials(max_trials=1).items():
            item = int(params["item"])
            assert 0 <= item < 9 and item not in tested
            tested.append(item)
            client.complete_trial(index, raw_data={"y": y[item]})
    assert len(tested) == 5


# ---------------------------------------------------------------------------
# The vendored reaction table (Ahneman et al., 2018, through GAUCHE).
# ---------------------------------------------------------------------------


def test_buchwald_hartwig_table_as_the_csv_holds_it():
    from ax_chaining.test_functions.reactions import load_reactions

    data = load_reactions("buchwald-hartwig")
    assert len(data) == 3955 == data.y.shape[0]
    assert data.components == ("ligand", "additive", "base", "aryl halide")
    assert list(data.table.columns) == list(data.components)
    # Every combination of 4 ligands x 22 additives x 3 bases x 15 aryl halides
    # (3,960) but five, each once.
    assert data.table.nunique().to_dict() == {
        "ligand": 4,
        "additive": 22,
        "base": 3,
        "aryl halide": 15,
    }
    assert not data.table.duplicated().any()
    # The CSV's first row: 2-chloropyridine, the phosphazene base P2Et,
    # 3,5-dimethylisoxazole, yield 70.41045785.
    first = data.table.iloc[0]
    assert first["aryl halide"] == "ClC1=NC=CC=C1"
    assert first["base"] == "CN(C)P(N(C)C)(N(C)C)=NP(N(C)C)(N(C)C)=NCC"
    assert first["additive"] == "CC1=CC(C)=NO1"
    assert data.y[0].item() == 70.41045785
    assert data.y.dtype == torch.float64
    assert (data.y.min().item(), data.y.max().item()) == (0.0, 99.99999)


def test_reaction_loader_refuses_an_unknown_name_and_a_modified_file(
    tmp_path, monkeypatch
):
    import gzip
    from importlib import resources

    from ax_chaining.test_functions.reactions import REACTIONS, load_reactions

    with pytest.raises(ValueError, match="must be one of buchwald-hartwig, direct-"):
        load_reactions("suzuki")
    # The vendored file with one yield changed, where the loader reads its data.
    source = resources.files("ax_chaining.test_functions").joinpath("data")
    text = gzip.decompress(source.joinpath("DreherDoyle.csv.gz").read_bytes())
    assert b",70.41045785\n" in text
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "DreherDoyle.csv.gz").write_bytes(
        gzip.compress(text.replace(b",70.41045785\n", b",90.41045785\n", 1))
    )
    monkeypatch.setattr(resources, "files", lambda package: tmp_path)
    expected = REACTIONS["buchwald-hartwig"].sha256
    with pytest.raises(ValueError, match=f"once decompressed, expected {expected}"):
        load_reactions("buchwald-hartwig")
