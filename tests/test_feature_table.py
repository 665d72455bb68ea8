"""The feature-table kernel over an item index and its priors
(ax_chaining.kernels.features, .priors) and its Ax surrogate spec
(ax_chaining.ax.surrogates)."""

from __future__ import annotations

import copy
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from botorch.models import SingleTaskGP
from botorch.models.transforms import Standardize
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel

from ax_chaining.kernels import FeatureTableKernel
from ax_chaining.kernels.priors import baybe_priors, chen_priors, likelihood_options
from benchmarks.testbeds import feature_table_likelihood

DTYPE = torch.float64


def _table(n: int = 40, d: int = 6, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, d, generator=g, dtype=DTYPE)


def _objective(F: torch.Tensor) -> torch.Tensor:
    return torch.sin(3 * F[:, 0]) + F[:, 1] ** 2 - 0.5 * F[:, 2]


def _index_model(
    F: torch.Tensor, train: torch.Tensor, base: str, prior: str
) -> SingleTaskGP:
    n = F.shape[0]
    X = (train.to(DTYPE) / (n - 1)).unsqueeze(-1)
    Y = _objective(F)[train].unsqueeze(-1)
    kernel = FeatureTableKernel(F, base=base, prior=prior, normalized_inputs=True)
    return SingleTaskGP(
        X,
        Y,
        covar_module=kernel,
        likelihood=feature_table_likelihood(prior, F.shape[1]),
        outcome_transform=Standardize(1),
    )


@pytest.mark.parametrize(
    "base,prior",
    [
        ("matern52", "botorch"),
        ("rbf", "botorch"),
        ("matern52", "baybe"),
        ("matern52", "chen"),
    ],
)
def test_feature_table_gp_equals_a_singletaskgp_on_the_features(
    base: str, prior: str
) -> None:
    """Fitted over the item index, then the same hyperparameters in BoTorch's
    SingleTaskGP on the feature rows: the same posterior at every candidate."""
    from botorch.fit import fit_gpytorch_mll
    from gpytorch.mlls import ExactMarginalLogLikelihood

    F = _table()
    train = torch.tensor([0, 3, 5, 8, 13, 21, 22, 30, 34, 39])
    model = _index_model(F, train, base, prior)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    base_kernel = copy.deepcopy(model.covar_module.base_kernel)
    expected_type = {"matern52": MaternKernel, "rbf": RBFKernel}[base]
    scaled = prior != "botorch"  # BayBE's presets have an output scale
    inner = base_kernel.base_kernel if scaled else base_kernel
    assert type(inner) is expected_type
    assert inner.lengthscale.shape == (1, F.shape[1])  # ARD: one per column
    assert scaled == isinstance(base_kernel, ScaleKernel)
    reference = SingleTaskGP(
        F[train],
        _objective(F)[train].unsqueeze(-1),
        covar_module=base_kernel,
        likelihood=copy.deepcopy(model.likelihood),
        outcome_transform=Standardize(1),
    )
    reference.load_state_dict(
        {k: v for k, v in model.state_dict().items() if "covar_module" not in k},
        strict=False,
    )
    reference.eval()
    model.eval()
    everything = (torch.arange(F.shape[0], dtype=DTYPE) / (F.shape[0] - 1)).unsqueeze(
        -1
    )
    with torch.no_grad():
        ours = model.posterior(everything)
        theirs = reference.posterior(F)
    torch.testing.assert_close(ours.mean, theirs.mean, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours.variance, theirs.variance, atol=1e-6, rtol=0)
    # And the posterior is not trivial: it moved away from the prior.
    assert float(ours.variance.min()) < 0.5 * float(ours.variance.max())


def test_chaining_engine_rows_equal_the_models_posterior() -> None:
    """The engine's low-rank rows of d_t (kernel rows in column blocks through
    the generic route) equal the model's own posterior covariance."""
    from ax_chaining.distances import DenseDistance
    from ax_chaining.posterior import candidate_posterior

    F = _table(n=300, d=4, seed=1)
    train = torch.arange(0, 300, 17)
    model = _index_model(F, train, "matern52", "baybe")
    model.eval()
    Z = (torch.arange(300, dtype=DTYPE) / 299).unsqueeze(-1)
    with torch.no_grad():
        cov = model.posterior(Z).distribution.covariance_matrix
    fast = candidate_posterior(model, Z, path="low_rank").distance
    idx = torch.tensor([0, 5, 299, 5])
    torch.testing.assert_close(
        fast.rows(idx), DenseDistance(cov).rows(idx), atol=1e-10, rtol=0
    )


@pytest.mark.parametrize(
    "nu,prior,outer,normalized",
    [
        (2.5, "chen", False, True),  # the default molecule model
        (2.5, "botorch", True, False),
        (1.5, "baybe", False, True),
        (None, "botorch", True, True),  # RBF
    ],
)
def test_fast_feature_rows_equal_the_kernels_rows(nu, prior, outer, normalized) -> None:
    """The engine's route for a feature table's RBF or Matern kernel
    (FeatureRows: scaled rows, one matrix product, the profile) gives the
    kernel's own values, for every base, with an output scale inside, outside
    or none, and any column range of the candidates."""
    from ax_chaining.posterior import FeatureRows, KernelRows

    n, d = 700, 9
    F = _table(n=n, d=d, seed=4)
    base = "rbf" if nu is None else "matern52"
    kernel = FeatureTableKernel(F, base=base, prior=prior, normalized_inputs=normalized)
    inner = kernel.base_kernel
    inner = inner.base_kernel if isinstance(inner, ScaleKernel) else inner
    if nu is not None:
        inner.nu = nu
    inner.lengthscale = torch.linspace(0.3, 2.0, d)
    covar = ScaleKernel(kernel) if outer else kernel
    if outer:
        covar.outputscale = 1.7
    index = torch.arange(n, dtype=DTYPE)
    Zt = (index / (n - 1) if normalized else index).unsqueeze(-1)
    train = Zt[::37]
    rows = FeatureRows.of(covar, Zt, train)
    assert rows is not None
    reference = KernelRows(covar, Zt)
    idx = torch.tensor([0, 5, 699, 350, 5])
    with torch.no_grad():
        expected = reference(reference.features(idx))
        torch.testing.assert_close(
            rows(rows.features(idx)), expected, atol=1e-12, rtol=1e-12
        )
        part = rows(rows.features(idx), 600, 123)
        torch.testing.assert_close(part, expected[:, 123:600], atol=1e-12, rtol=1e-12)
    # The value at distance 0 is the output scale (c * 1).
    scale = 1.7 if outer else 1.0
    if isinstance(kernel.base_kernel, ScaleKernel):
        scale *= float(kernel.base_kernel.outputscale.detach())
    assert float(rows(rows.features(idx[:1]))[0, 0]) == pytest.approx(scale)


def test_fast_feature_rows_leave_other_kernels_to_the_kernel() -> None:
    """MinMax and Matern-1/2 bases, and kernels that read only some input
    columns, go through the kernel itself."""
    from ax_chaining.posterior import FeatureRows

    counts = torch.randint(0, 4, (30, 5), generator=torch.Generator().manual_seed(0))
    Zt = torch.arange(30, dtype=DTYPE).unsqueeze(-1)
    minmax = FeatureTableKernel(counts.to(DTYPE), base="minmax")
    assert FeatureRows.of(minmax, Zt, Zt[:5]) is None
    rough = FeatureTableKernel(_table(30, 3), base="matern52")
    rough.base_kernel.nu = 0.5
    assert FeatureRows.of(rough, Zt, Zt[:5]) is None
    two_columns = torch.cat([Zt, torch.zeros_like(Zt)], dim=-1)
    by_column = FeatureTableKernel(_table(30, 3), base="rbf", active_dims=(0,))
    assert FeatureRows.of(by_column, two_columns, two_columns[:5]) is None


def test_kernel_reads_a_memory_mapped_table_without_copying(tmp_path: Path) -> None:
    F = _table(n=50, d=3)
    np.save(tmp_path / "f.npy", F.numpy())
    mapped = torch.from_numpy(np.load(tmp_path / "f.npy", mmap_mode="c"))
    kernel = FeatureTableKernel(mapped, base="rbf")
    assert kernel.features.data_ptr() == mapped.data_ptr()
    assert copy.deepcopy(kernel).features.data_ptr() == mapped.data_ptr()
    assert "features" not in kernel.state_dict()
    x1 = torch.tensor([[0.0], [7.0], [49.0]], dtype=DTYPE)
    x2 = torch.tensor([[3.0], [7.0]], dtype=DTYPE)
    expected = kernel.base_kernel(F[[0, 7, 49]], F[[3, 7]]).to_dense()
    torch.testing.assert_close(kernel(x1, x2).to_dense(), expected)
    torch.testing.assert_close(
        kernel(x1, diag=True), torch.ones(3, dtype=DTYPE), atol=1e-12, rtol=0
    )


def test_a_kernel_from_a_file_pickles_its_path_not_the_table(tmp_path: Path) -> None:
    """Built from a saved table, the kernel maps the file; its pickle holds the
    path and content key (a few kB for a 3 MB table) and unpickles to the same
    kernel; a rewritten file is refused on unpickling, a tensor-built kernel
    pickles the table itself, and a missing or non-table file is refused."""
    import pickle

    F = _table(n=6000, d=60)
    file = tmp_path / "f.npy"
    np.save(file, F.numpy())
    kernel = FeatureTableKernel(file, base="rbf")
    kernel.base_kernel.lengthscale = 0.7
    assert kernel.features_file == str(file.resolve())
    torch.testing.assert_close(kernel.features, F, atol=0, rtol=0)
    blob = pickle.dumps(kernel)
    assert len(blob) < 20_000 < F.numel() * 8
    assert len(pickle.dumps(FeatureTableKernel(F, base="rbf"))) > F.numel() * 8
    again = pickle.loads(blob)
    x1 = torch.tensor([[0.0], [17.0], [5999.0]], dtype=DTYPE)
    x2 = torch.tensor([[3.0], [17.0]], dtype=DTYPE)
    expected = kernel.base_kernel(F[[0, 17, 5999]], F[[3, 17]]).to_dense()
    torch.testing.assert_close(again(x1, x2).to_dense(), expected)
    # Another table in the same file (another modification time): refused.
    np.save(file, (F + 0.25).numpy())
    os.utime(file, ns=(0, 10**9))
    with pytest.raises(ValueError, match="changed since this kernel was pickled"):
        pickle.loads(blob)
    with pytest.raises(ValueError, match="existing .npy file"):
        FeatureTableKernel(tmp_path / "missing.npy")
    np.save(tmp_path / "text.npy", np.array(["a", "b"]))
    with pytest.raises(ValueError, match="floating|numeric|N x d"):
        FeatureTableKernel(tmp_path / "text.npy")


def test_minmax_base_on_counts_is_the_minmax_similarity() -> None:
    counts = torch.tensor([[2.0, 0.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    kernel = FeatureTableKernel(counts.to(DTYPE), base="minmax")
    x = torch.tensor([[0.0], [1.0], [2.0]], dtype=DTYPE)
    # min/max sums by hand: (1 + 0 + 1) / (2 + 1 + 1) = 0.5; 0 against 0 is 1.
    expected = torch.tensor([[1.0, 0.5, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 1.0]])
    torch.testing.assert_close(kernel(x, x).to_dense(), expected.to(DTYPE))
    with pytest.raises(ValueError, match="non-negative for base='minmax'"):
        FeatureTableKernel(-counts.to(DTYPE), base="minmax")


def test_bad_arguments_are_refused() -> None:
    F = _table(n=5, d=2)
    with pytest.raises(ValueError, match="`base` must be"):
        FeatureTableKernel(F, base="linear")
    with pytest.raises(ValueError, match="`prior` must be"):
        FeatureTableKernel(F, prior="edbo")
    with pytest.raises(ValueError, match="must be finite"):
        FeatureTableKernel(torch.full((3, 2), float("nan"), dtype=DTYPE))
    with pytest.raises(ValueError, match="N x d table with N >= 2"):
        FeatureTableKernel(torch.ones(1, 3, dtype=DTYPE))
    with pytest.raises(TypeError, match="`features` must be a torch.Tensor"):
        FeatureTableKernel(np.ones((3, 2)))  # type: ignore[arg-type]
    kernel = FeatureTableKernel(F, normalized_inputs=True)
    with pytest.raises(ValueError, match=r"bounds \(0, 4\)"):
        kernel(
            torch.tensor([[0.3]], dtype=DTYPE), torch.tensor([[0.0]], dtype=DTYPE)
        ).to_dense()
    with pytest.raises(ValueError, match="no feature table with that content"):
        FeatureTableKernel("sha256:" + "0" * 64)


def test_baybe_priors_by_hand() -> None:
    """BayBE's DefaultKernelFactory: the low-dimensional values up to 8
    dimensions, the high-dimensional ones from 75, linear between."""
    assert baybe_priors(3)["lengthscale"] == (1.2, 1.1, 0.2)
    assert baybe_priors(500)["outputscale"] == (3.5, 0.15, 15.0)
    assert baybe_priors(75)["noise"] == (1.5, 0.1, 5.0)
    middle = baybe_priors(41.5)  # halfway between 8 and 75
    assert middle["lengthscale"] == pytest.approx((1.85, 0.825, 3.1))
    assert likelihood_options("botorch", 10) is None
    noise = likelihood_options("baybe", 200)["noise_prior"]
    assert float(noise.concentration) == 1.5 and float(noise.rate) == pytest.approx(0.1)
    kernel = FeatureTableKernel(_table(d=100), prior="baybe")
    assert float(kernel.base_kernel.outputscale.detach()) == pytest.approx(15.0)
    lengthscale = kernel.base_kernel.base_kernel.lengthscale.detach().flatten()
    assert float(lengthscale[0]) == pytest.approx(6.0)
    # BoTorch's: no output scale, the log-normal prior's mode as initial value.
    botorch = FeatureTableKernel(_table(d=100), prior="botorch")
    assert type(botorch.base_kernel) is MaternKernel


def test_chen_priors_by_hand() -> None:
    """BayBE 0.15's CHEN preset: ell = 0.4 sqrt(d) + 4; lengthscale prior
    Gamma(2 ell, 2), output scale prior Gamma(ell, 1), both starting at ell;
    no noise prior."""
    assert chen_priors(100) == {
        "lengthscale": (16.0, 2.0, 8.0),
        "outputscale": (8.0, 1.0, 8.0),
    }
    assert chen_priors(25)["lengthscale"] == pytest.approx((12.0, 2.0, 6.0))
    kernel = FeatureTableKernel(_table(d=100), prior="chen")
    assert float(kernel.base_kernel.outputscale.detach()) == pytest.approx(8.0)
    inner = kernel.base_kernel.base_kernel
    assert type(inner) is MaternKernel and float(inner.nu) == 2.5
    lengthscale = inner.lengthscale.detach().flatten()
    assert lengthscale.shape == (100,)
    assert torch.allclose(lengthscale, torch.full((100,), 8.0, dtype=lengthscale.dtype))
    prior = inner.lengthscale_prior
    assert (float(prior.concentration), float(prior.rate)) == (16.0, 2.0)
    scale_prior = kernel.base_kernel.outputscale_prior
    assert (float(scale_prior.concentration), float(scale_prior.rate)) == (8.0, 1.0)
    assert likelihood_options("chen", 100) == {}
    likelihood = feature_table_likelihood("chen", 100)
    assert not any("prior" in name for name, _ in likelihood.named_priors())


def test_engine_rows_equal_those_of_the_same_gp_on_coordinates() -> None:
    """Chaining-UCB's pseudo-distance over the items of a feature table equals
    the one over the feature rows as coordinates (the SE route), same GP."""
    from botorch.models.utils.gpytorch_modules import (
        get_covar_module_with_dim_scaled_prior,
    )

    from ax_chaining.posterior import candidate_posterior

    F = _table(n=500, d=8, seed=3)
    train = torch.arange(0, 500, 23)
    Y = _objective(F)[train].unsqueeze(-1)
    X = (train.to(DTYPE) / 499).unsqueeze(-1)
    kernel = FeatureTableKernel(F, base="rbf", normalized_inputs=True)
    kernel.base_kernel.lengthscale = torch.linspace(0.5, 2.0, 8)
    by_index = SingleTaskGP(X, Y, covar_module=kernel, outcome_transform=Standardize(1))
    on_rows = SingleTaskGP(
        F[train],
        Y,
        covar_module=copy.deepcopy(get_covar_module_with_dim_scaled_prior(8)),
        outcome_transform=Standardize(1),
    )
    on_rows.covar_module.lengthscale = torch.linspace(0.5, 2.0, 8)
    for m in (by_index, on_rows):
        m.likelihood.noise = 0.01
        m.eval()
    Z = (torch.arange(500, dtype=DTYPE) / 499).unsqueeze(-1)
    ours = candidate_posterior(by_index, Z, path="low_rank")
    theirs = candidate_posterior(on_rows, F, path="low_rank")
    torch.testing.assert_close(ours.mean, theirs.mean, atol=1e-9, rtol=0)
    idx = torch.tensor([0, 17, 499, 250])
    torch.testing.assert_close(
        ours.distance.rows(idx), theirs.distance.rows(idx), atol=1e-9, rtol=0
    )


@pytest.mark.parametrize("base", ["matern52", "rbf", "minmax"])
def test_batches_that_repeat_items_equal_each_batch_alone(base: str) -> None:
    # qLogNEI's shape: a shared baseline of 3 items beside each of 40
    # candidates (b x 4 x 1), against itself and against the 5 training items.
    gen = torch.Generator().manual_seed(0)
    kernel = FeatureTableKernel(
        torch.rand(50, 4, generator=gen, dtype=torch.float64), base=base
    )
    baseline = torch.tensor([3.0, 7.0, 11.0], dtype=torch.float64)
    rows = [
        torch.cat([baseline, torch.tensor([c], dtype=torch.float64)])
        for c in range(10, 50)
    ]
    x = torch.stack(rows).unsqueeze(-1)
    train = torch.tensor([[0.0], [3.0], [5.0], [7.0], [9.0]], dtype=torch.float64)
    same = baseline.expand(40, 3).unsqueeze(-1)  # the same items in every batch
    cases = ((x, x), (x, train.expand(40, 5, 1)), (x, train), (same, same))
    for x1, x2 in cases:
        batched = kernel(x1, x2).to_dense()
        alone = torch.stack(
            [
                kernel(x1[b], x2 if x2.dim() == 2 else x2[b]).to_dense()
                for b in range(40)
            ]
        )
        assert batched.shape == alone.shape
        torch.testing.assert_close(batched, alone, rtol=1e-12, atol=1e-12)
