"""The CUDA routes give the CPU's answers (skipped without a GPU; CI has none).

Run on a lent GPU with ``python -m pytest tests/test_cuda.py``."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from botorch.models import SingleTaskGP
from gpytorch.kernels import RBFKernel, ScaleKernel

from ax_chaining import ChainingUCB
from ax_chaining.certificate import CertificateOptions
from ax_chaining.chaining import chaining_covers
from ax_chaining.distances import DenseDistance
from ax_chaining.kernels import FeatureTableKernel, PackedFingerprints, TanimotoKernel

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
DTYPE = torch.float64


def _se_model(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    C = 20.0 * torch.rand(n, 2, generator=g, dtype=DTYPE)
    X = C[torch.randperm(n, generator=g)[:40]]
    Y = torch.sin(X[:, :1]) + torch.cos(X[:, 1:])
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 1.0
    kernel.outputscale = 1.0
    model = SingleTaskGP(X, Y, covar_module=kernel, outcome_transform=None)
    model.likelihood.noise = 0.05**2
    return model.eval(), C


def _library(n: int, n_bits: int, seed: int = 0) -> PackedFingerprints:
    rng = np.random.default_rng(seed)
    bits = (rng.random((n, n_bits)) < 0.05).astype(np.uint8)
    bits[:4] = 0  # empty fingerprints: k(a, a) = 1 and k(a, b) = 0
    return PackedFingerprints.from_bits(bits)


@pytest.mark.parametrize("n_bits", [256, 2048, 4096])
def test_library_rows_on_cuda_equal_cpu(n_bits):
    # float16 bits up to 2048, float32 beyond: exact either way.
    library = _library(3000, n_bits)
    rows = [0, 1, 5, 2999]
    cpu = library.tanimoto(rows)
    gpu = library.tanimoto(rows, device="cuda")
    assert gpu.is_cuda and torch.equal(gpu.cpu(), cpu)
    cols = np.array([3, 17, 2000, 7])
    assert torch.equal(library.tanimoto(rows, cols, device="cuda").cpu(), cpu[:, cols])


def test_greedy_covers_on_cuda_lists_equal_matrix():
    model, C = _se_model(1500)
    with torch.no_grad():
        cov = model.posterior(C).distribution.covariance_matrix
    distance = DenseDistance(cov.cuda())
    runs = [
        chaining_covers(distance, t=41, graph=graph) for graph in ("lists", "matrix")
    ]
    for a, b in zip(runs[0].covers, runs[1].covers, strict=True):
        assert torch.equal(a.cpu(), b.cpu())
    assert runs[0].covers[0].is_cuda


@pytest.mark.parametrize("bonus", ["paper", "continuous"])
@pytest.mark.parametrize("problem", ["se", "tanimoto"])
def test_chaining_step_on_cuda_follows_cpu(problem, bonus):
    if problem == "se":
        model, C = _se_model(4000)
    else:
        library = _library(4000, 2048)
        C = torch.arange(4000, dtype=DTYPE).unsqueeze(-1)
        g = torch.Generator().manual_seed(0)
        idx = torch.randperm(4000, generator=g)[:30]
        Y = torch.randn(30, 1, generator=g, dtype=DTYPE)
        kernel = ScaleKernel(TanimotoKernel(library=library)).to(DTYPE)
        model = SingleTaskGP(C[idx], Y, covar_module=kernel).eval()
    cpu = ChainingUCB(model, C, bonus=bonus)
    gpu = ChainingUCB(copy.deepcopy(model).cuda(), C.cuda(), bonus=bonus)
    assert gpu.chaining.covers[0].is_cuda
    values_cpu = cpu(C.unsqueeze(1))
    values_gpu = gpu(C.cuda().unsqueeze(1)).cpu()
    # Posterior factors are rounded differently by the two BLAS: values agree
    # to rounding, and the covers are the CPU's wherever no pair sits on a radius.
    assert torch.allclose(values_gpu, values_cpu, rtol=1e-6, atol=1e-8)
    assert int(values_gpu.argmax()) == int(values_cpu.argmax())
    assert gpu.chaining.cover_sizes.tolist() == cpu.chaining.cover_sizes.tolist()


def test_default_certificate_on_cuda_follows_cpu():
    """The default certificate (leave-one-out check, tails by exploration,
    union and chaining bounds) on the GPU: the CPU's point and bound."""
    model, C = _se_model(3000, seed=3)
    cpu = ChainingUCB(model, C).certificate(among="all")
    gpu = ChainingUCB(copy.deepcopy(model).cuda(), C.cuda()).certificate(among="all")
    assert gpu.tail == cpu.tail and gpu.index == cpu.index
    assert gpu.bound == pytest.approx(cpu.bound, rel=1e-6)


def test_feature_table_step_on_cuda_follows_cpu():
    """A GP over an item index whose kernel reads a feature table (the default
    molecule model's route): the GPU's step is the CPU's."""
    g = torch.Generator().manual_seed(1)
    features = torch.rand(3000, 20, generator=g, dtype=DTYPE)
    C = torch.arange(3000, dtype=DTYPE).unsqueeze(-1)
    idx = torch.randperm(3000, generator=g)[:40]
    Y = features[idx, :3].sum(-1, keepdim=True)
    kernel = ScaleKernel(FeatureTableKernel(features, base="rbf")).to(DTYPE)
    model = SingleTaskGP(C[idx], Y, covar_module=kernel, outcome_transform=None)
    model.eval()
    for bonus in ("paper", "continuous"):
        cpu = ChainingUCB(model, C, bonus=bonus)
        gpu = ChainingUCB(copy.deepcopy(model).cuda(), C.cuda(), bonus=bonus)
        values_cpu = cpu(C.unsqueeze(1))
        values_gpu = gpu(C.cuda().unsqueeze(1)).cpu()
        assert torch.allclose(values_gpu, values_cpu, rtol=1e-6, atol=1e-8)
        assert int(values_gpu.argmax()) == int(values_cpu.argmax())


def _feature_table_loop(device: str) -> tuple[list[int], list[dict]]:
    """An Ax loop over 300 items with a feature table, on ``device``: the
    trials and the certificates recorded at each step."""
    from ax.api.client import Client

    from ax_chaining.ax import (
        candidate_index_parameter,
        certificate_history,
        chaining_generation_strategy,
        feature_table_surrogate_spec,
    )

    g = torch.Generator().manual_seed(2)
    features = torch.rand(300, 12, generator=g, dtype=DTYPE)
    y = (features[:, :3].sum(-1) - (features[:, 3] - 0.5) ** 2).tolist()
    client = Client(random_seed=5)
    client.configure_experiment(parameters=[candidate_index_parameter(300, "item")])
    client.configure_optimization(objective="y")
    gs = chaining_generation_strategy(
        init_trials=4,
        seed=5,
        torch_device=device,
        surrogate_spec=feature_table_surrogate_spec(features, prior="chen"),
        certificate_min_observations=8,
    )
    client.set_generation_strategy(gs)
    items = []
    for _ in range(14):
        for index, p in client.get_next_trials(max_trials=1).items():
            items.append(p["item"])
            client.complete_trial(index, raw_data={"y": y[p["item"]]})
    model = gs.adapter.generator.surrogate.model
    assert model.train_inputs[0].device.type == torch.device(device).type
    return items, certificate_history(client)


@pytest.mark.filterwarnings("ignore::Warning")
def test_ax_loop_with_a_feature_table_on_cuda_follows_cpu():
    """``torch_device="cuda"`` through Ax's adapter: the GP is fitted on the
    GPU, and the loop's trials and certificates are the CPU loop's."""
    cpu_items, cpu_certs = _feature_table_loop("cpu")
    gpu_items, gpu_certs = _feature_table_loop("cuda")
    print("cpu", cpu_items, "\ngpu", gpu_items)
    assert gpu_items == cpu_items
    assert len(gpu_certs) == len(cpu_certs) > 0
    for a, b in zip(gpu_certs, cpu_certs, strict=True):
        assert a["parameters"] == b["parameters"]
        assert a["bound"] == pytest.approx(b["bound"], rel=1e-4)


@pytest.mark.parametrize("path", ["dense", "low_rank"])
def test_certificate_on_cuda_equals_cpu(path):
    # The chaining tree's parents: from the farthest-first traversal (low-rank
    # path) or from each pair once (greedy covers): the same tree and
    # certificate on the GPU as on the CPU.
    model, C = _se_model(3000)
    options = CertificateOptions(calibration="none", method="chaining")
    certs, trees = [], []
    for device in ("cpu", "cuda"):
        m = copy.deepcopy(model).to(device)
        acqf = ChainingUCB(m, C.to(device), path=path)
        trees.append(acqf.chaining.cover_sizes.tolist())
        certs.append(acqf.certificate(options=options))
    assert trees[0] == trees[1]
    assert certs[0].index == certs[1].index
    assert float(certs[1].bound) == pytest.approx(float(certs[0].bound), rel=1e-6)
    assert certs[1].rank_bound == certs[0].rank_bound
