"""The default molecule model (ax_chaining.molecules.default_model)."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from botorch.models import SingleTaskGP
from gpytorch.kernels import ScaleKernel

from ax_chaining.kernels import (
    FeatureTableKernel,
    TanimotoKernel,
    register_features,
    registered_features,
)
from ax_chaining.kernels.priors import baybe_priors, chen_priors
from ax_chaining.molecules import molecule_features, molecule_surrogate_spec

DTYPE = torch.float64


def _table(n: int = 40, d: int = 6, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, d, generator=g, dtype=DTYPE)


def test_public_names_and_their_one_definition() -> None:
    """The Ax layer's spec factories and the molecule model are each defined
    once and reached from the package under the same name."""
    import ax_chaining
    import ax_chaining.ax as axc
    from ax_chaining.ax import surrogates
    from ax_chaining.molecules import default_model

    for name in (
        "candidate_index_parameter",
        "precomputed_kernel_surrogate_spec",
        "fingerprint_kernel_surrogate_spec",
        "feature_table_surrogate_spec",
    ):
        assert getattr(axc, name) is getattr(surrogates, name)
        assert getattr(ax_chaining, name) is getattr(surrogates, name)
    assert ax_chaining.molecule_surrogate_spec is default_model.molecule_surrogate_spec
    assert molecule_surrogate_spec is default_model.molecule_surrogate_spec


def _library_loop(spec: Any, y: list[float], n: int, seed: int = 0) -> tuple[Any, Any]:
    from ax.api.client import Client

    from ax_chaining.ax import candidate_index_parameter, chaining_generation_strategy

    client = Client(random_seed=seed)
    client.configure_experiment(parameters=[candidate_index_parameter(n, "molecule")])
    client.configure_optimization(objective="y")
    gs = chaining_generation_strategy(init_trials=4, seed=seed, surrogate_spec=spec)
    client.set_generation_strategy(gs)
    for _ in range(7):
        for index, p in client.get_next_trials(max_trials=1).items():
            client.complete_trial(index, raw_data={"y": y[p["molecule"]]})
    return client, gs


@pytest.mark.filterwarnings("ignore::Warning")
def test_molecule_surrogate_spec_in_an_ax_loop_and_json(tmp_path: Path) -> None:
    """A real Ax loop over FreeSolv's first 120 molecules: Ax fits the
    feature-table GP (ARD lengthscales moved off their initial value), its
    predictions equal a SingleTaskGP on the features with Ax's
    hyperparameters, and the JSON stores the cached table's path, not the
    table."""
    pytest.importorskip("rdkit")
    pytest.importorskip("mordred")
    from ax.api.client import Client

    from ax_chaining.test_functions.molecules import load_dataset

    logging.getLogger("ax").setLevel(logging.WARNING)
    data = load_dataset("freesolv")
    smiles, y = data.smiles[:120], data.y[:120].tolist()
    spec = molecule_surrogate_spec(smiles, path=tmp_path / "features")
    client, gs = _library_loop(spec, y, len(smiles))
    model = gs.adapter.generator.surrogate.model
    kernel = model.covar_module
    assert type(kernel) is FeatureTableKernel
    # The default model's table: Mordred, decorrelated at 0.7 (BayBE's).
    options = {"cleaning": {"max_correlation": 0.7}}
    F = molecule_features(smiles, "mordred", path=tmp_path / "features", **options)
    F = F.tensor()
    torch.testing.assert_close(kernel.features, F)
    # CHEN's output scale wraps the ARD Matern kernel.
    assert isinstance(kernel.base_kernel, ScaleKernel)
    lengthscale = kernel.base_kernel.base_kernel.lengthscale.detach().flatten()
    assert lengthscale.numel() == F.shape[1]
    assert float((lengthscale - lengthscale[0]).abs().max()) > 0  # fitted ARD
    train = torch.round(model.train_inputs[0][:, 0] * (len(smiles) - 1)).long()
    reference = SingleTaskGP(
        F[train],
        model.train_targets.unsqueeze(-1),
        covar_module=copy.deepcopy(kernel.base_kernel),
        likelihood=copy.deepcopy(model.likelihood),
        mean_module=copy.deepcopy(model.mean_module),
        outcome_transform=None,
    )
    reference.eval()
    model.eval()
    Z = (torch.arange(len(smiles), dtype=DTYPE) / (len(smiles) - 1)).unsqueeze(-1)
    with torch.no_grad():
        # Model space (standardized): both see the same targets and noise.
        mine = model(Z)
        theirs = reference(F)
    torch.testing.assert_close(mine.mean, theirs.mean, atol=1e-6, rtol=0)
    torch.testing.assert_close(mine.variance, theirs.variance, atol=1e-6, rtol=0)
    path = tmp_path / "client.json"
    client.save_to_json_file(str(path))
    text = path.read_text()
    # The cached table goes by its file: the JSON holds its path, no table.
    assert kernel.features_file == str(tmp_path / "features" / "features.npy")
    assert json.dumps(kernel.features_file) in text
    assert register_features(F) not in text
    assert path.stat().st_size < 1_000_000  # 120 x d floats would be far more
    loaded = Client.load_from_json_file(str(path))
    assert loaded.get_next_trials(max_trials=1) == client.get_next_trials(max_trials=1)


def test_molecule_surrogate_spec_default_is_baybes_model() -> None:
    """The default spec is BayBE 0.15's model of a SubstanceParameter: Mordred
    descriptors decorrelated at 0.7 (the same table as molecule_features with
    that option), ARD Matern-5/2 under the CHEN priors of that many
    dimensions; an explicit ``cleaning`` replaces the 0.7."""
    pytest.importorskip("rdkit")
    pytest.importorskip("mordred")

    smiles = ["CCO", "c1ccccc1O", "CC(=O)N", "CCCl", "c1ccncc1", "CCN", "CCCCO"]
    config = molecule_surrogate_spec(smiles).model_configs[0]
    assert config.covar_module_class is FeatureTableKernel
    options = config.covar_module_options
    assert (options["base"], options["prior"]) == ("matern52", "chen")
    F = registered_features(options["features"])
    cleaning = {"max_correlation": 0.7}
    expected = molecule_features(smiles, "mordred", cleaning=cleaning).tensor()
    assert torch.equal(F, expected)
    corr = torch.corrcoef(F.T).abs() - torch.eye(F.shape[1])
    assert float(corr.max()) <= 0.7
    # CHEN: no noise prior, a plain GaussianLikelihood.
    assert "noise_prior" not in config.likelihood_options
    ell = 0.4 * F.shape[1] ** 0.5 + 4
    assert chen_priors(F.shape[1])["lengthscale"][0] == pytest.approx(2 * ell)
    looser = molecule_surrogate_spec(smiles, cleaning={"max_correlation": 0.95})
    wider = registered_features(
        looser.model_configs[0].covar_module_options["features"]
    )
    assert wider.shape[1] > F.shape[1]


def test_molecule_surrogate_spec_options() -> None:
    pytest.importorskip("rdkit")

    smiles = ["CCO", "c1ccccc1O", "CC(=O)N", "CCCl", "c1ccncc1", "CCN"]
    config = molecule_surrogate_spec(smiles, "rdkit2d", prior="botorch")
    config = config.model_configs[0]
    assert config.covar_module_class is FeatureTableKernel
    assert config.covar_module_options["base"] == "rbf"  # BoTorch's own pairing
    baybe = molecule_surrogate_spec(smiles, "rdkit2d", prior="baybe").model_configs[0]
    assert baybe.covar_module_options["base"] == "matern52"  # BayBE's
    with pytest.raises(ValueError, match="`kernel` must be None with encoding"):
        molecule_surrogate_spec(smiles, "fragprints", kernel="rbf")
    with pytest.raises(ValueError, match="`kernel` must be 'rbf' or 'matern52'"):
        molecule_surrogate_spec(smiles, "rdkit2d", kernel="minmax")
    counts = molecule_surrogate_spec(smiles, "fragprints", prior="baybe")
    config = counts.model_configs[0]
    assert config.covar_module_options["base"] == "minmax"
    dims = registered_features(config.covar_module_options["features"]).shape[1]
    rate = baybe_priors(dims)["noise"][1]
    assert float(config.likelihood_options["noise_prior"].rate) == pytest.approx(rate)
    bits = molecule_surrogate_spec(smiles, "morgan_bits").model_configs[0]
    assert bits.covar_module_class is TanimotoKernel
    with pytest.raises(ValueError, match="`prior` must be 'botorch' with"):
        molecule_surrogate_spec(smiles, "morgan_bits", prior="baybe")
    # What the bits' route cannot honour is refused, not ignored.
    for option in ({"path": "cache"}, {"n_jobs": 2}):
        name = next(iter(option))
        with pytest.raises(ValueError, match=f"`{name}` must be None with encoding"):
            molecule_surrogate_spec(smiles, "morgan_bits", **option)
    with pytest.raises(ValueError, match=r"smiles\[\d\] = 'OCC' is the molecule"):
        molecule_surrogate_spec([*smiles, "OCC"], "morgan_bits")
    mapped = molecule_surrogate_spec([*smiles, "OCC"], "morgan_bits", duplicates="map")
    assert mapped.model_configs[0].covar_module_class is TanimotoKernel
    with pytest.raises(ValueError, match="`encoding` must be"):
        molecule_surrogate_spec(smiles, "ecfp")
    with pytest.raises(ValueError, match="duplicate"):
        molecule_surrogate_spec([*smiles, "OCC"], "rdkit2d")


def test_molecule_surrogate_spec_cleaning_reaches_the_features() -> None:
    """``cleaning`` replaces the encoding's default steps: the spec's table is
    ``molecule_features``' with those options, a stricter decorrelation keeps
    fewer columns, and options that cannot apply are refused up front."""
    pytest.importorskip("rdkit")

    smiles = ["CCO", "c1ccccc1O", "CC(=O)N", "CCCl", "c1ccncc1", "CCN", "CCCCO"]

    def table(**options):
        config = molecule_surrogate_spec(smiles, "rdkit2d", **options)
        config = config.model_configs[0]
        return registered_features(config.covar_module_options["features"])

    default, strict = table(), table(cleaning={"max_correlation": 0.5})
    assert strict.shape[1] < default.shape[1]
    expected = molecule_features(smiles, cleaning={"max_correlation": 0.5}).tensor()
    assert torch.equal(strict, expected)
    # A 0.5 threshold keeps no pair of columns correlated above 0.5.
    corr = torch.corrcoef(strict.T).abs() - torch.eye(strict.shape[1])
    assert float(corr.max()) <= 0.5
    with pytest.raises(ValueError, match="`cleaning` must be None with"):
        molecule_surrogate_spec(smiles, "morgan_bits", cleaning={"scale": None})
    with pytest.raises(ValueError, match="lengthscale"):
        molecule_surrogate_spec(smiles, "rdkit2d", cleaning={"lengthscale": 1.0})
