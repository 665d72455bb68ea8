"""Tests for :class:`ax_chaining.kernels.PrecomputedKernel`."""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
import torch
from gpytorch.kernels import ProductKernel, RBFKernel, ScaleKernel

from ax_chaining.kernels import PrecomputedKernel, register_gram
from ax_chaining.kernels.precomputed import item_indices

# A hand-made symmetric positive definite 3 x 3 Gram with distinct entries.
GRAM = torch.tensor(
    [[2.0, 0.5, -0.3], [0.5, 1.0, 0.2], [-0.3, 0.2, 1.5]], dtype=torch.float64
)


def _col(values: list[float], dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype).unsqueeze(-1)


def _ou_gram(n: int) -> torch.Tensor:
    t = torch.arange(n, dtype=torch.float64)
    return torch.exp(-(t[:, None] - t[None, :]).abs() / 5.0)


def test_gram_is_positive_definite() -> None:
    assert torch.linalg.eigvalsh(GRAM).min() > 0


def test_exact_entries_for_index_pairs() -> None:
    k = PrecomputedKernel(GRAM)
    x1 = _col([0, 2, 1, 2, 0])
    x2 = _col([1, 0, 2])
    out = k(x1, x2).to_dense()
    expected = torch.tensor(
        [
            [0.5, 2.0, -0.3],
            [0.2, -0.3, 1.5],
            [1.0, 0.5, 0.2],
            [0.2, -0.3, 1.5],
            [0.5, 2.0, -0.3],
        ],
        dtype=torch.float64,
    )
    assert out.shape == (5, 3)
    assert torch.equal(out, expected)
    # x2 defaults to x1
    full = k(_col([0, 1, 2])).to_dense()
    assert torch.equal(full, GRAM)


def test_rounds_to_nearest_index() -> None:
    k = PrecomputedKernel(GRAM)
    out = k(_col([0.2, 1.6, 2.4]), _col([0.0, 1.0, 2.0])).to_dense()
    assert torch.equal(out, GRAM[[0, 2, 2]])


def test_no_trainable_hyperparameters() -> None:
    k = PrecomputedKernel(GRAM)
    assert list(k.parameters()) == []
    assert "gram" in dict(k.named_buffers())
    assert torch.equal(k.state_dict()["gram"], GRAM)
    assert k.num_items == 3


def test_does_not_copy_float_gram() -> None:
    k = PrecomputedKernel(GRAM)
    assert k.gram.data_ptr() == GRAM.data_ptr()
    k_int = PrecomputedKernel(torch.eye(3, dtype=torch.long))
    assert k_int.gram.is_floating_point()


def test_batch_shapes() -> None:
    g = torch.Generator().manual_seed(0)
    x1 = torch.randint(0, 3, (2, 3, 4, 1), generator=g).double()
    x2 = torch.randint(0, 3, (2, 3, 5, 1), generator=g).double()
    k = PrecomputedKernel(GRAM)
    out = k(x1, x2).to_dense()
    assert out.shape == (2, 3, 4, 5)
    i1, i2 = x1[..., 0].long(), x2[..., 0].long()
    for b in range(2):
        for c in range(3):
            assert torch.equal(out[b, c], GRAM[i1[b, c]][:, i2[b, c]])
    # broadcasting a non-batched x2 against batched x1
    x2b = _col([2, 0])
    out_b = k(x1, x2b).to_dense()
    assert out_b.shape == (2, 3, 4, 2)
    assert torch.equal(out_b[1, 2], GRAM[i1[1, 2]][:, [2, 0]])
    # ScaleKernel in batch mode
    sk = ScaleKernel(PrecomputedKernel(GRAM), batch_shape=torch.Size([2, 3])).double()
    assert sk(x1, x2).to_dense().shape == (2, 3, 4, 5)


def test_diag() -> None:
    k = PrecomputedKernel(GRAM)
    x = torch.tensor([[[0.0], [2.0], [1.0]], [[1.0], [1.0], [0.0]]]).double()
    d = k(x, diag=True)
    assert d.shape == (2, 3)
    assert torch.equal(d, torch.tensor([[2.0, 1.5, 1.0], [1.0, 1.0, 2.0]]).double())
    # diag between two different inputs of the same size: the pairwise entries
    d2 = k(_col([0, 1, 2]), _col([1, 2, 0]), diag=True)
    assert torch.equal(d2, torch.tensor([0.5, 0.2, -0.3], dtype=torch.float64))
    # consistent with the diagonal of the full matrix
    full = k(x, x).to_dense()
    assert torch.equal(full.diagonal(dim1=-2, dim2=-1), d)
    with pytest.raises(ValueError, match="same number of points"):
        k(_col([0, 1]), _col([0, 1, 2]), diag=True)


def test_normalized_inputs_mapping() -> None:
    n = 101
    gram = _ou_gram(n)
    k = PrecomputedKernel(gram, normalized_inputs=True)
    idx = torch.tensor([0, 1, 37, 99, 100])
    # Ax's unit-cube normalization of an integer parameter with bounds [0, n - 1]
    x = (idx.double() / (n - 1)).unsqueeze(-1)
    assert torch.equal(item_indices(x, n, True, "k"), idx)
    assert torch.equal(k(x).to_dense(), gram[idx][:, idx])
    # float32 inputs (their round-off) still map to the right indices
    assert torch.equal(item_indices(x.float(), n, True, "k"), idx)
    # an index parameter of another size: refused, never mapped to wrong rows
    other = (torch.tensor([0, 1, 37, 79]).double() / 79).unsqueeze(-1)
    with pytest.raises(ValueError, match=r"bounds \(0, 100\)"):
        item_indices(other, n, True, "k")
    # out of [0, 1] -> error naming what was expected
    with pytest.raises(ValueError, match=r"normalized values in \[0, 1\]"):
        k(_col([1.2])).to_dense()
    with pytest.raises(ValueError, match="out of range"):
        k(_col([-0.1])).to_dense()
    # un-normalized kernel rejects large indices and hints at normalized_inputs
    with pytest.raises(ValueError, match="normalized_inputs=True"):
        PrecomputedKernel(gram)(_col([101.0])).to_dense()


def test_dtype_and_device_via_to() -> None:
    k = PrecomputedKernel(GRAM).to(torch.float32)
    assert k.gram.dtype == torch.float32
    out = k(_col([0, 2], dtype=torch.float32)).to_dense()
    assert out.dtype == torch.float32
    assert torch.allclose(out, GRAM[[0, 2]][:, [0, 2]].float())
    # output follows the input's dtype
    k64 = PrecomputedKernel(GRAM)
    assert k64(_col([0, 1], dtype=torch.float32)).to_dense().dtype == torch.float32
    k_cpu = k64.to(torch.device("cpu"))
    assert k_cpu.gram.device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda() -> None:  # pragma: no cover - only with a GPU
    k = PrecomputedKernel(GRAM).to("cuda")
    assert k.gram.is_cuda
    out = k(_col([0, 2]).cuda()).to_dense()
    assert out.is_cuda and torch.equal(out.cpu(), GRAM[[0, 2]][:, [0, 2]])
    # a CPU kernel still answers CUDA inputs on the input's device
    out2 = PrecomputedKernel(GRAM)(_col([0, 2]).cuda()).to_dense()
    assert out2.is_cuda and torch.equal(out2.cpu(), GRAM[[0, 2]][:, [0, 2]])


@pytest.mark.parametrize(
    ("x", "match"),
    [
        (_col([3.0]), "out of range"),
        (_col([-1.0]), "out of range"),
        (_col([2.6]), "out of range"),
        (_col([float("nan")]), "non-finite"),
        (torch.zeros(2, 2, dtype=torch.float64), "single column"),
    ],
)
def test_bad_inputs(x: torch.Tensor, match: str) -> None:
    k = PrecomputedKernel(GRAM)
    with pytest.raises(ValueError, match=match):
        k(x).to_dense()


def test_out_of_range_message_names_argument_got_and_expected() -> None:
    with pytest.raises(ValueError) as err:
        PrecomputedKernel(GRAM)(_col([0.0, 5.0])).to_dense()
    msg = str(err.value)
    assert "`x`" in msg and "5.0" in msg and "0..2" in msg


@pytest.mark.parametrize(
    ("gram", "match"),
    [
        (torch.zeros(2, 3, dtype=torch.float64), "square"),
        (torch.zeros(3, dtype=torch.float64), "square"),
        (torch.zeros(2, 2, 2, dtype=torch.float64), "square"),
        (torch.zeros(0, 0, dtype=torch.float64), "at least one item"),
        (torch.tensor([[1.0, 0.5], [0.4, 1.0]], dtype=torch.float64), "symmetric"),
        (torch.tensor([[1.0, float("nan")], [float("nan"), 1.0]]), "finite"),
        (torch.tensor([[float("inf"), 0.0], [0.0, 1.0]]), "finite"),
        (torch.tensor([[-1.0, 0.0], [0.0, 1.0]]), "positive semi-definite"),
        (torch.ones(2, 2, dtype=torch.complex64), "real"),
    ],
)
def test_bad_gram(gram: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        PrecomputedKernel(gram)
    assert "`gram`" in str(err.value)


def test_a_gram_that_is_not_psd_is_refused_beyond_round_off() -> None:
    indefinite = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match="smallest eigenvalue -1"):
        PrecomputedKernel(indefinite)
    with pytest.raises(ValueError, match="positive semi-definite"):
        register_gram(indefinite)
    PrecomputedKernel(indefinite, check_psd=False)  # the caller's responsibility
    PrecomputedKernel(GRAM)
    # Round-off negatives of a PSD matrix pass: a rank-2 Gram of 50 points.
    z = torch.randn(
        50, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    low_rank = z @ z.T
    assert torch.linalg.eigvalsh(low_rank).min() < 0  # round-off
    PrecomputedKernel(low_rank)


@pytest.mark.parametrize(("n", "min_eig"), [(200, -1.41), (400, -0.05)])
def test_a_float32_gram_with_a_clearly_negative_eigenvalue_is_refused(
    n: int, min_eig: float
) -> None:
    # I - c 11^T: eigenvalues 1 and 1 - c n = min_eig, diagonal just under 1.
    # With n = 400, -0.05 was within the former -n sqrt(eps32) = -0.138.
    c = (1.0 - min_eig) / n
    gram = (torch.eye(n) - c * torch.ones(n, n)).to(torch.float32)
    with pytest.raises(ValueError, match="positive semi-definite") as err:
        PrecomputedKernel(gram)
    assert f"smallest eigenvalue {min_eig:.3g}" in str(err.value)
    assert "eps of torch.float32" in str(err.value)
    with pytest.raises(ValueError, match="positive semi-definite"):
        register_gram(gram)


def test_a_float32_gram_psd_up_to_float32_rounding_is_accepted() -> None:
    g = torch.Generator().manual_seed(0)
    # A rank-3 float64 Gram rounded to float32, and one computed in float32:
    # their zero eigenvalues come out negative by float32 round-off.
    f = torch.randn(400, 3, dtype=torch.float64, generator=g)
    rounded = (f @ f.T / 3).to(torch.float32)
    h = torch.randn(400, 64, generator=g)
    computed = (h @ h.T / 64).to(torch.float32)
    for gram in (rounded, computed):
        assert torch.linalg.eigvalsh(gram.double()).min() < 0
        assert PrecomputedKernel(gram).gram.dtype == torch.float32
        register_gram(gram)


def test_symmetry_tolerance_and_validate_flag() -> None:
    g = GRAM.clone()
    g[0, 1] += 1e-12
    PrecomputedKernel(g)  # within tolerance
    g[0, 1] += 1e-3
    with pytest.raises(ValueError, match="symmetric"):
        PrecomputedKernel(g)
    PrecomputedKernel(g, validate=False)


def test_bad_constructor_options() -> None:
    with pytest.raises(ValueError, match="batch_shape"):
        PrecomputedKernel(GRAM, batch_shape=torch.Size([2]))
    with pytest.raises(ValueError, match="active_dims"):
        PrecomputedKernel(GRAM, active_dims=(0, 1))


def test_active_dims_in_product_kernel() -> None:
    k = ProductKernel(
        PrecomputedKernel(GRAM, active_dims=(1,)),
        RBFKernel(active_dims=(0,)).double(),
    )
    x = torch.tensor([[0.0, 2.0], [0.0, 0.0]], dtype=torch.float64)
    out = k(x).to_dense()
    assert torch.allclose(out, GRAM[[2, 0]][:, [2, 0]])


def test_deepcopy_shares_gram_and_pickle_roundtrip() -> None:
    k = ScaleKernel(PrecomputedKernel(GRAM, normalized_inputs=True)).double()
    k.outputscale = 2.0
    k2 = copy.deepcopy(k)
    assert k2.base_kernel is not k.base_kernel
    assert k2.base_kernel.gram.data_ptr() == k.base_kernel.gram.data_ptr()
    assert k2.base_kernel.normalized_inputs
    # the copy's own parameters are independent
    k2.outputscale = 3.0
    assert k.outputscale.item() == pytest.approx(2.0)
    # moving the copy does not affect the original
    k3 = copy.deepcopy(k).float()
    assert k.base_kernel.gram.dtype == torch.float64
    assert k3.base_kernel.gram.dtype == torch.float32
    k4 = pickle.loads(pickle.dumps(k))
    assert torch.equal(k4.base_kernel.gram, GRAM)
    x = _col([0.0, 0.5, 1.0])
    assert torch.equal(k4(x).to_dense(), k(x).to_dense())


def _fit_gp(train_X, train_Y, covar_module, **kwargs):
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SingleTaskGP(train_X, train_Y, covar_module=covar_module, **kwargs)
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        fit_gpytorch_mll(mll)
    return model


def test_single_task_gp_fits_and_interpolates() -> None:
    n = 40
    gram = _ou_gram(n)
    gen = torch.Generator().manual_seed(0)
    f = torch.linalg.cholesky(gram) @ torch.randn(n, generator=gen, dtype=gram.dtype)
    train_X = torch.arange(n, dtype=torch.float64).unsqueeze(-1)
    train_Y = (f + 1e-3 * torch.randn(n, generator=gen, dtype=gram.dtype))[:, None]
    covar = ScaleKernel(PrecomputedKernel(gram))
    model = _fit_gp(train_X, train_Y, covar)
    # only the output scale, the noise and the mean were trained
    names = {name for name, p in model.named_parameters() if p.requires_grad}
    assert any("outputscale" in name for name in names)
    assert not any("gram" in name for name in names)
    post = model.posterior(train_X)
    assert post.mean.shape == (n, 1)
    assert (post.mean - train_Y).abs().max() < 0.05 * train_Y.std()
    assert (post.variance > 0).all()
    # batched test points
    Xt = torch.tensor([[[3.0], [7.0]], [[1.0], [39.0]]], dtype=torch.float64)
    assert model.posterior(Xt).mean.shape == (2, 2, 1)
    # fixed low noise: posterior mean reproduces the observations
    fixed = _fit_gp(
        train_X,
        train_Y,
        ScaleKernel(PrecomputedKernel(gram)),
        train_Yvar=torch.full_like(train_Y, 1e-6),
    )
    assert torch.allclose(fixed.posterior(train_X).mean, train_Y, atol=1e-2)
    # a held-out index is predicted from its neighbours
    mask = torch.ones(n, dtype=torch.bool)
    mask[20] = False
    held = _fit_gp(train_X[mask], train_Y[mask], ScaleKernel(PrecomputedKernel(gram)))
    pred = held.posterior(train_X[20:21])
    assert (pred.mean - train_Y[20]).abs().item() < 3 * pred.variance.sqrt().item()


def test_single_task_gp_with_normalized_inputs_matches_indices() -> None:
    from botorch.models.transforms.input import Normalize

    n = 30
    gram = _ou_gram(n)
    gen = torch.Generator().manual_seed(1)
    y = torch.linalg.cholesky(gram) @ torch.randn(n, generator=gen, dtype=gram.dtype)
    idx = torch.arange(0, n, 3)
    X_idx = idx.double().unsqueeze(-1)
    Y = y[idx].unsqueeze(-1)
    bounds = torch.tensor([[0.0], [n - 1.0]], dtype=torch.float64)
    m_idx = _fit_gp(X_idx, Y, ScaleKernel(PrecomputedKernel(gram)))
    m_norm = _fit_gp(
        X_idx,
        Y,
        ScaleKernel(PrecomputedKernel(gram, normalized_inputs=True)),
        input_transform=Normalize(d=1, bounds=bounds),
    )
    test = torch.arange(n, dtype=torch.float64).unsqueeze(-1)
    assert torch.allclose(
        m_idx.posterior(test).mean, m_norm.posterior(test).mean, atol=1e-4
    )


def test_gram_registered_by_content_hash() -> None:
    from ax_chaining.kernels import gram_key, register_gram

    gram = _ou_gram(5)
    key = register_gram(gram)
    assert key == gram_key(gram.clone()) and key.startswith("sha256:")
    assert gram_key(gram.float()) != key  # dtype is part of the content
    other = gram.clone()
    other[0, 1] = other[1, 0] = 0.5
    assert gram_key(other) != key
    by_key, by_tensor = PrecomputedKernel(key), PrecomputedKernel(gram)
    assert by_key.gram is gram  # a reference, not a copy
    x = _col([0.0, 3.0, 4.0])
    assert torch.equal(by_key(x, x).to_dense(), by_tensor(x, x).to_dense())
    with pytest.raises(ValueError, match="no Gram matrix with that content"):
        PrecomputedKernel(gram_key(other))
    with pytest.raises(ValueError, match="symmetric"):
        register_gram(torch.tensor([[1.0, 0.9], [0.0, 1.0]]))
