"""Sharded candidates give one machine's answers: on an in-process Dask
cluster (threads, many cases) and a 2-worker ``LocalCluster`` of processes
(lost workers, batches, Ax loops)."""

from __future__ import annotations

import os
import pickle
import threading
import time
import uuid

import numpy as np
import pytest
import torch
from botorch.acquisition.objective import ScalarizedPosteriorTransform
from botorch.exceptions import UnsupportedError
from botorch.models import ModelListGP, SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.optim import optimize_acqf_discrete
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel

from ax_chaining import ChainingUCB
from ax_chaining.certificate import CHERNOFF, GAUSSIAN, CertificateOptions
from ax_chaining.covers import farthest_first_order
from ax_chaining.distances import MemoryBudgetError
from ax_chaining.kernels import PackedFingerprints, TanimotoKernel
from ax_chaining.posterior import candidate_posterior

pytest.importorskip("distributed")

from ax_chaining.distributed import (  # noqa: E402
    ShardedCandidates,
    ShardLostError,
    shard_bounds,
)
from ax_chaining.distributed.candidates import cluster_workers  # noqa: E402
from ax_chaining.distributed.store import ShardedStore  # noqa: E402

DTYPE = torch.float64


def se_problem(n: int, seed: int = 0, d: int = 2, obs: int = 40, **kw):
    """The speed benchmark's SE problem: candidates in a square of side 20,
    lengthscale 1, noisy observations at random candidates."""
    g = torch.Generator().manual_seed(seed)
    C = 20.0 * torch.rand(n, d, generator=g, dtype=DTYPE)
    idx = torch.randperm(n, generator=g)[:obs]
    X = C[idx]
    Y = torch.sin(X[:, :1]) + torch.cos(X[:, 1:2])
    Y = Y + 0.05 * torch.randn(obs, 1, generator=g, dtype=DTYPE)
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 1.0
    kernel.outputscale = 1.0
    model = SingleTaskGP(X, Y, covar_module=kernel, outcome_transform=None, **kw)
    model.likelihood.noise = 0.05**2
    return model.eval(), C


def library_problem(n: int, seed: int = 0, normalized: bool = False):
    """Random fingerprints (20 of 256 bits), a library-mode Tanimoto GP."""
    rng = np.random.default_rng(seed)
    bits = np.zeros((n, 256), dtype=np.uint8)
    rows = np.repeat(np.arange(n), 20)
    bits[rows, rng.integers(0, 256, rows.size)] = 1
    library = PackedFingerprints.from_bits(bits)
    C = torch.arange(n, dtype=DTYPE).unsqueeze(-1)
    if normalized:
        C = C / (n - 1)
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(n, generator=g)[:30]
    Y = torch.randn(30, 1, generator=g, dtype=DTYPE)
    kernel = TanimotoKernel(library=library, normalized_inputs=normalized)
    model = SingleTaskGP(C[idx], Y, covar_module=ScaleKernel(kernel).to(DTYPE))
    return model.eval(), C, library


@pytest.fixture(scope="module")
def threads():
    """An in-process cluster of four single-thread workers (the same code as a
    cluster of processes, without starting any)."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=4, threads_per_worker=1, processes=False, dashboard_address=None
    )
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def shards(client, candidates, k: int = 2, **kwargs) -> ShardedCandidates:
    """``candidates`` sharded over ``k`` of the client's workers."""
    workers = cluster_workers(client)[:k]
    return ShardedCandidates(client, candidates, workers=workers, **kwargs)


def assert_same_step(single: ChainingUCB, sharded: ChainingUCB) -> None:
    """Covers, H_i, radii and levels equal; the bonus at some points equal."""
    a, b = single.chaining, sharded.chaining
    assert len(a.covers) == len(b.covers)
    for ca, cb in zip(a.covers, b.covers, strict=True):
        assert torch.equal(ca, cb)
    assert torch.equal(a.H, b.H) and torch.equal(a.eps, b.eps)
    assert torch.equal(a.cover_sizes, b.cover_sizes)
    assert torch.equal(a.bounded, b.bounded)
    assert (a.scale, a.sigma_min, a.t) == (b.scale, b.sigma_min, b.t)
    n = single.candidates.shape[0]
    some = [0, 1, n // 3, n // 2, n - 1]
    got = sharded.store.values_at(some)
    assert torch.equal(got["mean"], single.candidate_mean[some])
    assert torch.equal(got["sigma"], single.candidate_sigma[some])
    assert torch.equal(a.bonus(got["sigma"]), b.bonus(single.candidate_sigma[some]))


def traffic(monkeypatch) -> dict[str, list[int]]:
    """Pickled bytes of the arguments sent and replies received by every
    ``ShardedCandidates.call`` from now on, measured around the method."""
    seen: dict[str, list[int]] = {"sent": [], "replies": []}
    original = ShardedCandidates.call

    def call(self, method, args, shards=None):
        count = self.num_shards if shards is None else len(shards)
        per = args if isinstance(args, list) else [args] * count
        seen["sent"] += [len(pickle.dumps(a)) for a in per]
        out = original(self, method, args, shards)
        seen["replies"] += [len(pickle.dumps(r)) for r in out]
        return out

    monkeypatch.setattr(ShardedCandidates, "call", call)
    return seen


def factor_argmax(acqf: ChainingUCB, exclude=()) -> int:
    """One machine's pick from the factor's mean and sigma."""
    sign = 1.0 if acqf.maximize else -1.0
    bonus = acqf.chaining.bonus(acqf.candidate_sigma, acqf.options.bonus)
    value = sign * acqf.candidate_mean + bonus
    value[list(exclude)] = -torch.inf
    return int(torch.argmax(value))


def test_shard_bounds_start_at_block_multiples():
    assert shard_bounds(10_000, 2, block=4096) == [0, 8192, 10_000]
    assert shard_bounds(100, 4, block=4096) == [0, 100]
    bounds = shard_bounds(1_000_003, 7)
    assert bounds[0] == 0 and bounds[-1] == 1_000_003
    assert all(b % 4096 == 0 for b in bounds[:-1])
    sizes = np.diff(bounds)
    assert sizes.max() - sizes.min() <= 4096


@pytest.mark.parametrize("k", [2, 3])
def test_in_process_step_equals_one_machine(threads, k):
    model, C = se_problem(10_000)
    single = ChainingUCB(model, C, path="low_rank")
    sharded = shards(threads, C, k)
    acqf = ChainingUCB(model, sharded)
    assert isinstance(acqf.store, ShardedStore)
    assert acqf.chaining.info["path"] == "low_rank"
    assert_same_step(single, acqf)
    best = acqf.store.best_candidate()
    assert best["index"] == factor_argmax(single)
    # BoTorch's discrete optimizer (model.posterior, equal to round-off)
    # picks the same point here, and the value agrees to round-off.
    x, value = optimize_acqf_discrete(single, q=1, choices=C)
    assert torch.equal(x[0], C[best["index"]])
    assert best["value"] == pytest.approx(float(value), rel=1e-9)
    assert float(acqf(C[best["index"]][None, None]).detach()) == pytest.approx(
        float(value), rel=1e-9
    )


def test_an_explicit_batch_is_counted_against_each_workers_budget(threads):
    # 2 shards of 12,000 candidates; at 1 GiB one machine's pool share is
    # 128 MiB, which the default batch fits. A batch of 4,096 means pools of
    # 8,192 rows of a shard (over 390 MB, counted 4 times as one machine
    # counts its pool): refused before any work, naming the remedy.
    model, C = se_problem(12_000)
    budget = 2**30
    ChainingUCB(
        model,
        shards(threads, C, 2),
        memory_budget=budget,
        max_cover_size=64,
    )
    big = shards(threads, C, 2, batch_size=4096)
    with pytest.raises(MemoryBudgetError, match=r"A shard of \d+ .*batch_size"):
        ChainingUCB(model, big, memory_budget=budget, max_cover_size=64)


@pytest.mark.parametrize(
    ("batch", "max_size", "k"),
    [(1, 150, 2), (2, 300, 3), (3, 400, 2), (5, 700, 4), (8, 2048, 3), (32, 900, 2)],
)
def test_traversal_equals_farthest_first_order(threads, batch, max_size, k):
    # The pool's seeded sample, the picks and breaks: the covers of the
    # sharded step are the prefixes of farthest_first_order on one machine's
    # rows (same start, batch, size cap and last radius), for any batch and
    # shards. sigma_floor sets the last radius (0.02 to 0.64 here).
    model, C = se_problem(12_000, seed=batch)
    sharded = shards(threads, C, k, batch_size=batch)
    floor = 0.02 * batch
    acqf = ChainingUCB(model, sharded, max_cover_size=max_size, sigma_floor=floor)
    res = acqf.chaining
    distance = candidate_posterior(model, C, path="low_rank").distance
    start = int(torch.argmin(distance.variance))
    order, radii = farthest_first_order(
        distance.rows,
        C.shape[0],
        start,
        max_size,
        float(res.eps[-1]),
        batch_size=batch,
    )
    # The deepest cover is the whole traversal (it stops at the last radius or
    # at the cap); each level is the shortest prefix within its radius, or
    # the whole traversal, bounded, where none is (farthest_first_order's rule).
    assert torch.equal(res.covers[-1], order)
    for eps, cover, bounded in zip(res.eps, res.covers, res.bounded, strict=True):
        within = (radii <= eps).nonzero()
        size = int(within[0]) + 1 if within.numel() else order.numel()
        assert torch.equal(cover, order[:size])
        assert bool(bounded) == (within.numel() == 0)
    assert res.cover_method == "farthest_first"


def test_transforms_matern_minimize_and_flip(threads):
    g = torch.Generator().manual_seed(3)
    C = 20.0 * torch.rand(9000, 3, generator=g, dtype=DTYPE)
    idx = torch.randperm(9000, generator=g)[:40]
    X, Y = C[idx], torch.sin(C[idx, :1]) + torch.cos(C[idx, 1:2])
    model = SingleTaskGP(
        X,
        Y,
        covar_module=ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=3)),
        input_transform=Normalize(3),
        outcome_transform=Standardize(1),
    ).eval()
    sharded = shards(threads, C)
    flip = ScalarizedPosteriorTransform(weights=torch.tensor([-1.0], dtype=DTYPE))
    for kw in (
        {"maximize": False, "max_cover_size": 300},
        {"posterior_transform": flip, "delta": 0.1},
    ):
        single = ChainingUCB(model, C, path="low_rank", **kw)
        acqf = ChainingUCB(model, sharded, **kw)
        assert_same_step(single, acqf)
        assert acqf.store.best_candidate()["index"] == factor_argmax(single)


@pytest.mark.parametrize("normalized", [False, True])
def test_library_shards_equal_one_machine(threads, normalized):
    model, C, library = library_problem(12_000, normalized=normalized)
    single = ChainingUCB(model, C, path="low_rank")
    sharded = shards(threads, library, 3, normalized_inputs=normalized)
    acqf = ChainingUCB(model, sharded)
    assert_same_step(single, acqf)
    X, _, idx = sharded.optimize(acqf, q=2, return_indices=True)
    first = factor_argmax(single)
    single.set_X_pending(C[[first]])
    assert idx.tolist() == [first, factor_argmax(single, exclude=[first])]
    assert torch.equal(X, C[idx])


def test_library_from_a_saved_file(threads, tmp_path):
    model, C, library = library_problem(9000)
    path = library.save(tmp_path / "lib.npy")
    single = ChainingUCB(model, C, path="low_rank")
    acqf = ChainingUCB(model, shards(threads, path))
    assert_same_step(single, acqf)


def test_feature_table_from_a_file_travels_as_its_path(threads, tmp_path, monkeypatch):
    """A descriptor GP over an item index (FeatureTableKernel): the sharded step
    equals one machine's; built from a file, the step sends the shards the
    table's path, built from a tensor, the table itself to each shard."""
    from ax_chaining.kernels import FeatureTableKernel

    n, d = 9000, 40
    g = torch.Generator().manual_seed(3)
    F = torch.rand(n, d, generator=g, dtype=DTYPE)
    file = tmp_path / "features.npy"
    np.save(file, F.numpy())
    C = torch.arange(n, dtype=DTYPE).unsqueeze(-1)
    idx = torch.randperm(n, generator=g)[:30]
    Y = F[idx, :1].sin() + F[idx, 1:2]
    sent = {}
    seen = traffic(monkeypatch)
    for name, features in (("tensor", F), ("file", file)):
        kernel = FeatureTableKernel(features, base="rbf")
        kernel.base_kernel.lengthscale = 2.0
        model = SingleTaskGP(C[idx], Y, covar_module=kernel, outcome_transform=None)
        model.likelihood.noise = 1e-3
        model.eval()
        sharded = shards(threads, C)
        seen["sent"].clear()
        acqf = ChainingUCB(model, sharded)
        sent[name] = sum(seen["sent"])
        assert_same_step(ChainingUCB(model, C, path="low_rank"), acqf)
    # The tensor-built kernel carries the table to each of the two shards;
    # everything else (the factors, the traversal's rounds) is the same.
    table = F.numel() * F.element_size()
    assert sent["tensor"] - sent["file"] > 2 * table * 0.99


def test_continuous_bonus_on_shards_picks_as_one_machine(threads):
    model, C = se_problem(9000, seed=5)
    sharded = shards(threads, C)
    single = ChainingUCB(model, C, path="low_rank", bonus="continuous")
    acqf = ChainingUCB(model, sharded, bonus="continuous")
    assert acqf.store.best_candidate()["index"] == factor_argmax(single)
    x = C[[7, 4000]].unsqueeze(1)
    torch.testing.assert_close(acqf(x), single(x), rtol=1e-12, atol=0)


def test_pending_points_and_batches(threads):
    model, C = se_problem(9000, seed=5)
    sharded = shards(threads, C)
    for covers in ("rebuild", "reuse"):
        single = ChainingUCB(model, C, path="low_rank", pending_covers=covers)
        acqf = ChainingUCB(model, sharded, pending_covers=covers)
        pending = C[[10, 4000, 8500]]
        single.set_X_pending(pending)
        acqf.set_X_pending(pending)
        assert_same_step(single, acqf)
        assert acqf.store.best_candidate()["index"] == factor_argmax(single)
        x = C[[7]].unsqueeze(1)
        assert float(acqf(x)) == pytest.approx(float(single(x)), rel=1e-12)
        single.set_X_pending(None)
        acqf.set_X_pending(None)
    # q = 3: BoTorch's sequential greedy, picks excluded, pending restored.
    X, values, idx = sharded.optimize(acqf, q=3, exclude=[0], return_indices=True)
    picks: list[int] = []
    for _ in range(3):
        picks.append(factor_argmax(single, exclude=[0, *picks]))
        single.set_X_pending(C[picks])
    assert idx.tolist() == picks and acqf.X_pending is None
    assert values.shape == (3,) and torch.equal(X, C[picks])


def test_certificates_equal_one_machine(threads):
    model, C = se_problem(9000, seed=2, obs=30)
    single = ChainingUCB(model, C, path="low_rank", max_cover_size=64)
    acqf = ChainingUCB(model, shards(threads, C, 3))
    for among, kw in (
        (None, {}),
        (None, {"calibration": "none", "rule": "max_mean"}),
        (None, {"method": "pairwise", "calibration": "none"}),
        ([1, 2, 3, 100], {"calibration": "none"}),
        (None, {"tail": CHERNOFF, "calibration": "none"}),
        (None, {"tail": GAUSSIAN}),
        (None, {"scale_level": 0.05}),
        (None, {"min_observations": 31}),  # 30 observations: both refuse
    ):
        union = CertificateOptions(**{"method": "union", **kw})
        one = single.certificate(among, options=union)
        got = acqf.certificate(among, options=CertificateOptions(**kw))
        assert (got.index, got.valid, got.method) == (one.index, one.valid, one.method)
        # Main's default tails (None: Student-t under the LOO check).
        assert got.tail == one.tail
        # The tail sums add over shards in another order: equal to the
        # bisection's tolerance (here, and usually, exactly).
        assert got.bound == pytest.approx(one.bound, rel=2e-6)
        assert np.allclose(got.bounds, one.bounds, rtol=2e-6, atol=0)
        assert torch.equal(got.x, one.x) and got.mean == one.mean
    assert acqf.certificate().tail.startswith("student-")
    X = C[[5, 17]].unsqueeze(1)
    assert torch.allclose(acqf.regret_bound(X), single.regret_bound(X), rtol=2e-6)
    with pytest.raises(ValueError, match="method"):
        acqf.certificate(options=CertificateOptions(method="chaining"))


def test_errors_name_the_argument(threads):
    model, C = se_problem(5000)
    sharded = shards(threads, C)
    with pytest.raises(TypeError, match="`candidates` must be an N x d torch"):
        ChainingUCB(model, [[1.0, 2.0]])
    with pytest.raises(ValueError, match="`path`='dense'"):
        ChainingUCB(model, sharded, path="dense")
    with pytest.raises(ValueError, match="`cover`='greedy'"):
        ChainingUCB(model, sharded, cover="greedy")
    with pytest.raises(UnsupportedError, match="low-rank"):
        ChainingUCB(ModelListGP(model, model), sharded)
    with pytest.raises(ValueError, match="`candidates` must be an N x d"):
        ShardedCandidates(threads, torch.zeros(3))
    with pytest.raises(TypeError, match="`candidates` must be"):
        ShardedCandidates(threads, [[1.0]])
    with pytest.raises(TypeError, match="`client` must be a distributed.Client"):
        ShardedCandidates(None, C)
    with pytest.raises(ValueError, match="`X_pending` must have shape p x 2"):
        ChainingUCB(model, sharded, X_pending=torch.zeros(2, 3, dtype=DTYPE))
    acqf = ChainingUCB(model, sharded, max_cover_size=16)
    with pytest.raises(ValueError, match="not a candidate"):
        acqf.regret_bound(torch.full((1, 1, 2), 99.0, dtype=DTYPE))
    with pytest.raises(ValueError, match="`exclude` leaves none"):
        sharded.optimize(acqf, exclude=range(5000))
    with pytest.raises(RuntimeError, match="values_at"):
        acqf.candidate_mean  # noqa: B018
    lib_model, _, _ = library_problem(3000)
    with pytest.raises(ValueError, match="3000 items"):
        ChainingUCB(lib_model, sharded)


# --------------------------------------------------------------- LocalCluster
# Seconds a cluster call or wait may take before the test gives up: a safety
# net only (no test outcome depends on it), large enough for a loaded machine,
# where placing a shard (a worker process importing torch) can take a minute.
SAFETY_S = 300


def _cluster(n_workers: int):
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    )
    return cluster, distributed.Client(cluster)


@pytest.fixture(scope="module")
def client():
    """Two workers that no test kills (the lost-worker tests get their own)."""
    cluster, c = _cluster(2)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


@pytest.fixture
def fragile_client():
    """A fresh cluster of three workers for one test that kills some: the
    shards use two of them, so after a loss there is still a worker to rebuild
    on, without waiting for a nanny to restart one (which imports torch, BoTorch
    and Ax again, and once took over five minutes on a loaded machine)."""
    cluster, c = _cluster(3)
    c.wait_for_workers(3, timeout=SAFETY_S)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def test_cluster_healthy_shards_never_called_lost(client):
    """A client's cached cluster view is refreshed every
    ``scheduler-info-interval`` with one that lists no workers; read between a
    fetch and that refresh, it once made ``restore()`` rebuild every shard of a
    healthy cluster. With the refresh every millisecond, no call may see a
    shard lost."""
    import dask
    import distributed

    with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}):
        eager = distributed.Client(client.cluster.scheduler_address)
    try:
        model, C = se_problem(9000, seed=2)
        sharded = ShardedCandidates(eager, C, timeout=SAFETY_S)
        assert sharded.workers == cluster_workers(client)
        assert [sharded.restore() for _ in range(300)] == [[]] * 300
        sharded.close()
    finally:
        eager.close()


def _kill_later(delay: float = 0.1) -> int:
    """Run on a worker: end its process shortly after answering."""
    threading.Timer(delay, os._exit, (1,)).start()
    return os.getpid()


def _kill(client, worker: str) -> None:
    """End ``worker``'s process and wait until the scheduler has noticed: the
    loss is in place before the test's next call, whatever the machine's load."""
    client.submit(_kill_later, workers=[worker], pure=False).result()
    deadline = time.monotonic() + SAFETY_S
    while worker in cluster_workers(client):
        if time.monotonic() > deadline:
            raise AssertionError(f"{worker} did not leave in {SAFETY_S} s")
        time.sleep(0.05)


def _two_workers(client) -> list[str]:
    """Two workers of the cluster that are alive now."""
    workers = cluster_workers(client)
    assert len(workers) >= 2, workers
    return workers[:2]


def test_cluster_step_equals_one_machine(client, monkeypatch):
    model, C = se_problem(12_000, seed=1)
    single = ChainingUCB(model, C, path="low_rank")
    sharded = ShardedCandidates(client, C)
    assert sharded.num_shards == 2 and sharded.starts == [0, 8192]
    assert sharded.sizes == [8192, 12_000 - 8192]
    seen = traffic(monkeypatch)
    acqf = ChainingUCB(model, sharded)
    # Only small messages came back: the largest reply is a chunk of rows at a
    # pool (16 x 64 floats) or a few points' left data, not O(N).
    assert seen["replies"] and max(seen["replies"]) < 40_000
    assert_same_step(single, acqf)
    X, values, idx = sharded.optimize(acqf, q=2, return_indices=True)
    first = factor_argmax(single)
    single.set_X_pending(C[[first]])
    assert idx.tolist() == [first, factor_argmax(single, exclude=[first])]
    single.set_X_pending(None)
    one = single.certificate(
        options=CertificateOptions(method="union", calibration="none")
    )
    got = acqf.certificate(options=CertificateOptions(calibration="none"))
    assert got.index == one.index and got.bound == pytest.approx(one.bound, rel=2e-6)
    sharded.close()


@pytest.mark.slow  # a cluster of its own, workers killed
def test_cluster_lost_worker_between_calls(fragile_client):
    client = fragile_client
    model, C = se_problem(9000, seed=4)
    sharded = ShardedCandidates(
        client, C, workers=_two_workers(client), retries=0, timeout=SAFETY_S
    )
    acqf = ChainingUCB(model, sharded, max_cover_size=200)
    reference = acqf.store.best_candidate()["index"]
    _kill(client, sharded.workers[1])
    with pytest.raises(ShardLostError, match="shard 1 .* left the cluster"):
        ChainingUCB(model, sharded, max_cover_size=200)
    assert sharded.restore() == [1]
    again = ChainingUCB(model, sharded, max_cover_size=200)
    assert again.store.best_candidate()["index"] == reference
    # With retries, the next loss is absorbed: the step runs again from the
    # start on the rebuilt shards, with the same answer.
    sharded.retries = 1
    _kill(client, sharded.workers[0])
    retried = ChainingUCB(model, sharded, max_cover_size=200)
    assert retried.store.best_candidate()["index"] == reference
    sharded.close()


@pytest.mark.slow  # a cluster of its own, workers killed
@pytest.mark.parametrize("retries", [0, 1])
def test_cluster_lost_worker_mid_step(fragile_client, monkeypatch, retries):
    client = fragile_client
    model, C = se_problem(9000, seed=6)
    sharded = ShardedCandidates(
        client, C, workers=_two_workers(client), retries=retries, timeout=SAFETY_S
    )
    original = ShardedCandidates.call
    calls = {"n": 0}

    def call(self, method, args, shards=None):
        calls["n"] += 1
        if self is sharded and calls["n"] == 12:  # inside the traversal
            _kill(client, self.workers[1])
        return original(self, method, args, shards)

    monkeypatch.setattr(ShardedCandidates, "call", call)
    if retries == 0:
        with pytest.raises(ShardLostError):
            ChainingUCB(model, sharded, max_cover_size=400)
    else:
        acqf = ChainingUCB(model, sharded, max_cover_size=400)
        single = ChainingUCB(model, C, path="low_rank", max_cover_size=400)
        assert_same_step(single, acqf)
    monkeypatch.undo()
    sharded.close()


# ------------------------------------------------------------------------ Ax
def _ax_loop(gs, library_size: int, values, trials: int):
    from ax.api.client import Client

    from ax_chaining.ax import candidate_index_parameter

    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[candidate_index_parameter(library_size, "item")]
    )
    client.configure_optimization(objective="score")
    client.set_generation_strategy(gs)
    items = []
    for _ in range(trials):
        for index, p in client.get_next_trials(max_trials=1).items():
            items.append(p["item"])
            client.complete_trial(index, raw_data={"score": float(values[p["item"]])})
    return client, items


@pytest.mark.slow  # an Ax loop on a cluster and on one machine
@pytest.mark.filterwarnings("ignore::Warning:ax")
def test_ax_strategy_over_sharded_library_equals_one_machine(threads, tmp_path):
    import logging

    from ax.storage.json_store.save import save_experiment

    from ax_chaining.ax import (
        certificate_history,
        chaining_generation_strategy,
        fingerprint_kernel_surrogate_spec,
    )

    logging.getLogger("ax").setLevel(logging.WARNING)
    n = 6000
    _, _, library = library_problem(n, seed=7)
    rng = np.random.default_rng(7)
    values = library.unpack().numpy() @ rng.normal(size=256) / 5.0
    spec = fingerprint_kernel_surrogate_spec(library)
    # One machine on the same (low-rank) route, and the same strategy given
    # the sharded library: the same trials, the same certificates (issued from
    # 4 observations in this short loop).
    least = {"certificate": CertificateOptions(min_observations=4)}
    one = chaining_generation_strategy(
        init_trials=4,
        seed=0,
        surrogate_spec=spec,
        engine_options={"path": "low_rank"},
        **least,
    )
    _, expected = _ax_loop(one, n, values, trials=8)
    sharded = shards(threads, library)
    gs = chaining_generation_strategy(
        init_trials=4, seed=0, surrogate_spec=spec, candidates=sharded, **least
    )
    client, items = _ax_loop(gs, n, values, trials=8)
    assert items == expected
    got = certificate_history(gs)
    ref = certificate_history(one)
    assert [h["trial_index"] for h in got] == [h["trial_index"] for h in ref]
    for a, b in zip(got, ref, strict=True):
        assert a["valid"] and b["valid"]
        assert a["bound"] <= b["bound"] * (1 + 2e-6)  # union; one machine min(.)
        assert a["parameters"]["item"] in items
    meta = gs.experiment.trials[5].generator_runs[0].gen_metadata["chaining_ucb"]
    assert meta["certificate"]["method"] == "union"
    assert meta["num_candidates"] == n and meta["shards"] == 2
    # A declared schedule: the same trials, certificates at its checks only
    # (after 6 and 7 observations: trials 6 and 7).
    from ax_chaining.certificate import CheckSchedule

    scheduled = chaining_generation_strategy(
        init_trials=4,
        seed=0,
        surrogate_spec=spec,
        candidates=sharded,
        certificate=CertificateOptions(
            schedule=CheckSchedule("every_k", k=1, start=6), min_observations=4
        ),
    )
    _, again = _ax_loop(scheduled, n, values, trials=8)
    assert again == items
    assert [h["recorded_at"] for h in certificate_history(scheduled)] == [6, 7]
    # The experiment is stored as usual; the strategy (a cluster handle) not.
    save_experiment(gs.experiment, str(tmp_path / "experiment.json"))
    with pytest.raises(TypeError, match="not stored in Ax's JSON"):
        client.save_to_json_file(str(tmp_path / "client.json"))
    with pytest.raises(ValueError, match="normalized_inputs=False"):
        chaining_generation_strategy(
            candidates=shards(threads, library, normalized_inputs=True)
        )
    with pytest.raises(ValueError, match="must be ChainingUCB"):
        from ax_chaining import GPUCB
        from ax_chaining.ax import candidate_set_strategy

        candidate_set_strategy(GPUCB, candidates=sharded)


def _score(values, started, params):
    """An evaluation on a worker: its value, start and end times. It ends only
    once a second trial's task has started (the Dask queue ``started`` counts
    them), so the first two overlap whatever the load, and trials run one at a
    time never end (the test fails after the safety net)."""
    from distributed import Queue

    start = time.time()
    queue = Queue(started)
    queue.put(1)
    deadline = time.monotonic() + SAFETY_S
    while queue.qsize() < 2:
        if time.monotonic() > deadline:
            raise AssertionError(f"no second trial started in {SAFETY_S} s")
        time.sleep(0.05)
    return {
        "score": float(values[int(params["item"])]),
        "start": start,
        "end": time.time(),
    }


@pytest.mark.filterwarnings("ignore::Warning:ax")
def test_orchestrator_runs_trials_in_parallel_on_the_cluster(client):
    import functools
    import logging

    from ax.api.client import Client
    from distributed import Future

    from ax_chaining.ax import (
        candidate_index_parameter,
        chaining_generation_strategy,
        fingerprint_kernel_surrogate_spec,
    )
    from ax_chaining.distributed.ax import DaskMetric, DaskRunner

    logging.getLogger("ax").setLevel(logging.WARNING)
    n = 6000
    _, _, library = library_problem(n, seed=8)
    values = np.random.default_rng(8).normal(size=n)
    sharded = ShardedCandidates(client, library)
    ax_client = Client(random_seed=0)
    ax_client.configure_experiment(parameters=[candidate_index_parameter(n, "item")])
    ax_client.configure_optimization(objective="score")
    started = f"started-{uuid.uuid4().hex}"
    runner = DaskRunner(client, functools.partial(_score, values, started))
    ax_client.configure_runner(runner)
    ax_client.configure_metrics([DaskMetric("score", client)])
    gs = chaining_generation_strategy(
        init_trials=4,
        seed=0,
        candidates=sharded,
        surrogate_spec=fingerprint_kernel_surrogate_spec(library),
        engine_options={"max_cover_size": 64},
    )
    ax_client.set_generation_strategy(gs)
    # Ax's Orchestrator (public route): two trials pending at a time.
    ax_client.run_trials(max_trials=6, parallelism=2, initial_seconds_between_polls=0)
    trials = gs.experiment.trials
    assert len(trials) == 6
    assert all(t.status.is_completed for t in trials.values())
    # Each trial's task, by the key the runner records in the trial's run
    # metadata (as DaskMetric reads it): its start and end times.
    spans = [
        Future(trials[i].run_metadata["dask_key"], client=client).result()
        for i in sorted(trials)
    ]
    overlap = any(
        a["start"] < b["end"] and b["start"] < a["end"]
        for k, a in enumerate(spans)
        for b in spans[k + 1 :]
    )
    assert overlap  # trials ran at the same time on the two workers
    summary = ax_client.summarize().sort_values("trial_index")
    nodes = summary["generation_node"].tolist()
    assert nodes == ["UniformCandidates"] * 4 + ["ChainingUCB"] * 2
    data = gs.experiment.lookup_data().df
    for i, t in trials.items():
        got = data[data.trial_index == i]["mean"].item()
        assert got == pytest.approx(values[t.arm.parameters["item"]])
    sharded.close()


# ----------------------------------------------------------------- benchmark
def test_benchmark_refuses_the_removed_backends(capsys):
    """ShardedCandidates has one backend (Dask actors): the benchmark says so
    for the removed ones, before it starts a cluster."""
    from benchmarks.__main__ import main

    for backends in ("futures", "actors,futures", "local"):
        with pytest.raises(SystemExit) as info:
            main(["distributed", "--small", "--backends", backends])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert "Dask actors (--backends actors)" in err
        assert "'futures' and 'local' backends were removed" in err


@pytest.mark.slow  # the CLI end to end, two clusters of its own
def test_benchmark_small_preset_end_to_end(capsys, tmp_path):
    import json

    from benchmarks import distributed_bench as bench
    from benchmarks.__main__ import main

    threads = torch.get_num_threads()
    try:
        assert main(["distributed", "--small", "--backends", "actors"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["kind"] == "command"
    assert "--small" in lines[0]["command"] and lines[0]["machine"]["cpus"] >= 1
    (step,) = [r for r in lines if r["kind"] == "step"]
    assert step["n"] == 6000 and step["backend"] == "actors"
    assert step["same_pick"] and step["same_covers"]
    assert step["single"]["botorch_pick"] == step["sharded"]["pick"]
    s = step["sharded"]
    assert [p["rows"] for p in s["per_shard"]] == [4096, 6000 - 4096]
    assert s["round_trips"] > 0 and 0 < s["largest_reply"] < 100_000
    model = lines[-1]
    assert model["kind"] == "model" and model["a_s_per_candidate"] > 0
    assert {(p["n"], p["workers"]) for p in model["predict"]} >= {(10**9, 512)}
    path = tmp_path / "steps.jsonl"
    path.write_text(out)
    table = bench.table([str(path)])
    assert "| 6,000 | tanimoto | actors | 2 |" in table and "Fitted at" in table
    # One round trip with actors, and with the dask.array baseline.
    assert main(["distributed", "--round-trips", "2"]) == 0
    trips = [json.loads(line) for line in capsys.readouterr().out.splitlines()][1:]
    assert [r["backend"] for r in trips] == ["actors", "dask.array"]
    assert all(r["round_trip_s"] > 0 and r["workers"] == 2 for r in trips)
    path.write_text(out + "\n".join(json.dumps(r) for r in trips))
    assert "| dask.array | 2 | 10,000 |" in bench.table([str(path)])
