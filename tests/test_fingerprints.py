"""Fingerprint kernels: Tanimoto and MinMax, feature and library modes, in BoTorch
and Ax."""

from __future__ import annotations

import copy
import logging
import pickle
from typing import Any

import numpy as np
import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from gpytorch.kernels import ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ax_chaining.kernels import (
    MinMaxKernel,
    PackedFingerprints,
    TanimotoKernel,
    register_fingerprints,
)

ROUTES = ("inverted", "popcount", "matmul")

# Four fingerprints: |a| = 2, |b| = 2, |c| = 3, z empty; every pair shares one bit.
BITS = torch.tensor(
    [[1, 1, 0, 0], [1, 0, 1, 0], [0, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.float64
)
TANIMOTO = torch.tensor(
    [
        [1.0, 1 / 3, 1 / 4, 0.0],
        [1 / 3, 1.0, 1 / 4, 0.0],
        [1 / 4, 1 / 4, 1.0, 0.0],
        [0.0, 0.0, 0.0, 1.0],
    ],
    dtype=torch.float64,
)
# Counts: sum min / sum max = 2/6 (u, v), 1/5 (u, x), 2/6 (v, x); w empty.
COUNTS = torch.tensor([[2, 1, 0], [1, 1, 3], [0, 0, 0], [0, 2, 1]], dtype=torch.float64)
MINMAX = torch.tensor(
    [
        [1.0, 1 / 3, 0.0, 1 / 5],
        [1 / 3, 1.0, 0.0, 1 / 3],
        [0.0, 0.0, 1.0, 0.0],
        [1 / 5, 1 / 3, 0.0, 1.0],
    ],
    dtype=torch.float64,
)


def _bit_matrices(max_rows: int = 12, max_bits: int = 140) -> st.SearchStrategy:
    shape = st.tuples(st.integers(1, max_rows), st.integers(1, max_bits))
    return shape.flatmap(lambda s: hnp.arrays(np.uint8, s, elements=st.integers(0, 1)))


def _col(values: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.as_tensor(values, dtype=dtype).reshape(-1, 1)


# ---------------------------------------------------------------------------
# Values.
# ---------------------------------------------------------------------------


def test_tanimoto_hand_computed() -> None:
    k = TanimotoKernel()
    assert torch.equal(k(BITS).to_dense(), TANIMOTO)
    assert torch.equal(k(BITS, diag=True), torch.ones(4, dtype=torch.float64))
    library = PackedFingerprints.from_bits(BITS)
    assert library.popcounts.tolist() == [2, 2, 3, 0]
    for route in ROUTES:
        assert torch.equal(library.tanimoto([0, 1, 2, 3], route=route), TANIMOTO)
    indexed = TanimotoKernel(library=library)
    assert torch.equal(indexed(_col([0, 1, 2, 3])).to_dense(), TANIMOTO)
    assert torch.equal(
        indexed(_col([2, 0]), _col([3, 1])).to_dense(), TANIMOTO[[2, 0]][:, [3, 1]]
    )


def test_minmax_hand_computed() -> None:
    k = MinMaxKernel()
    assert torch.equal(k(COUNTS).to_dense(), MINMAX)
    assert torch.equal(k(COUNTS, COUNTS.flip(0), diag=True), MINMAX.flip(1).diagonal())
    # On bits, MinMax is Tanimoto.
    assert torch.equal(k(BITS).to_dense(), TANIMOTO)


@pytest.mark.parametrize("kernel", [TanimotoKernel(), MinMaxKernel()])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batches_diag_and_dtypes(kernel: Any, dtype: torch.dtype) -> None:
    x = BITS.to(dtype)
    batch = torch.stack([x, x.flip(0)])  # 2 x 4 x 4
    out = kernel(batch, x.unsqueeze(0)).to_dense()  # batch shapes broadcast
    assert out.shape == (2, 4, 4) and out.dtype == dtype
    assert torch.equal(out[0], TANIMOTO.to(dtype))
    assert torch.equal(out[1], TANIMOTO.to(dtype).flip(0))
    assert torch.equal(kernel(batch, batch, diag=True), torch.ones(2, 4, dtype=dtype))
    # Integer and boolean fingerprints: the default dtype.
    ints = kernel(BITS.to(torch.uint8)).to_dense()
    assert ints.dtype == torch.get_default_dtype()
    assert torch.equal(ints, TANIMOTO.to(ints.dtype))
    assert torch.equal(kernel(BITS.bool()).to_dense(), ints)


@given(bits=_bit_matrices(), seed=st.integers(0, 2**16))
def test_packed_and_unpacked_routes_are_identical(bits: np.ndarray, seed: int) -> None:
    dense = TanimotoKernel()(torch.from_numpy(bits).double()).to_dense()
    library = PackedFingerprints.from_bits(bits)
    assert torch.equal(library.unpack(), torch.from_numpy(bits))
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, bits.shape[0], size=5)
    cols = rng.integers(0, bits.shape[0], size=7)
    first = int(rng.integers(0, bits.shape[0]))
    for route in ROUTES:
        assert torch.equal(library.tanimoto(np.arange(len(bits)), route=route), dense)
        part = library.tanimoto(rows, slice(first, None), route=route)
        assert torch.equal(part, dense[rows][:, first:])
        assert torch.equal(
            library.tanimoto(rows, cols, route=route), dense[rows][:, cols]
        )
        f32 = library.tanimoto(rows, cols, route=route, dtype=torch.float32)
        feature32 = TanimotoKernel()(
            torch.from_numpy(bits[rows]).float(), torch.from_numpy(bits[cols]).float()
        )
        assert torch.equal(f32, feature32.to_dense())
    pairs = library.tanimoto_pairs(rows, cols[:5])
    assert torch.equal(pairs, dense[rows, cols[:5]])


@given(bits=_bit_matrices(max_rows=16, max_bits=40))
def test_tanimoto_is_psd(bits: np.ndarray) -> None:
    K = TanimotoKernel()(torch.from_numpy(bits).double()).to_dense()
    assert torch.equal(K, K.T) and torch.all(K.diagonal() == 1)
    assert torch.linalg.eigvalsh(K).min() > -1e-10
    K_library = PackedFingerprints.from_bits(bits).tanimoto(np.arange(len(bits)))
    assert torch.equal(K_library, K)


@given(
    counts=st.tuples(st.integers(1, 16), st.integers(1, 30)).flatmap(
        lambda s: hnp.arrays(np.int64, s, elements=st.integers(0, 5))
    )
)
def test_minmax_is_psd_and_matches_its_definition(counts: np.ndarray) -> None:
    x = torch.from_numpy(counts).double()
    K = MinMaxKernel()(x).to_dense()
    low = torch.minimum(x[:, None], x[None]).sum(-1)
    high = torch.maximum(x[:, None], x[None]).sum(-1)
    expected = torch.where(high > 0, low / high.clamp_min(1), 1.0)
    torch.testing.assert_close(K, expected, rtol=0, atol=1e-15)
    assert torch.linalg.eigvalsh(K).min() > -1e-10


def test_equals_rdkit_on_esol() -> None:
    rdkit = pytest.importorskip("rdkit")
    from rdkit import Chem, DataStructs
    from rdkit.Chem import rdFingerprintGenerator

    from ax_chaining.molecules import morgan_fingerprints
    from ax_chaining.test_functions.molecules import load_dataset

    assert rdkit is not None
    smiles = load_dataset("esol").smiles
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    fps = [generator.GetFingerprint(Chem.MolFromSmiles(s)) for s in smiles]
    rows = np.arange(0, len(smiles), 53)
    expected = torch.tensor(
        [DataStructs.BulkTanimotoSimilarity(fps[i], fps) for i in rows],
        dtype=torch.float64,
    )
    bits = morgan_fingerprints(smiles)
    library = PackedFingerprints.from_bits(bits)
    results = [library.tanimoto(rows, route=route) for route in ROUTES]
    results.append(TanimotoKernel()(bits[rows].double(), bits).to_dense())
    kernel = TanimotoKernel(library=library)
    results.append(kernel(_col(rows), _col(range(len(smiles)))).to_dense())
    for values in results:
        torch.testing.assert_close(values, expected, rtol=0, atol=1e-12)
        assert torch.equal(values, expected)  # in fact bit for bit


# ---------------------------------------------------------------------------
# The packed library and library mode.
# ---------------------------------------------------------------------------


def test_save_and_open_memory_map(tmp_path: Any) -> None:
    bits = np.random.default_rng(0).integers(0, 2, size=(300, 100), dtype=np.uint8)
    library = PackedFingerprints.from_bits(bits)
    path = library.save(tmp_path / "lib")
    assert path.name == "lib.npy" and (tmp_path / "lib.json").exists()
    opened = PackedFingerprints.open(path)
    assert isinstance(opened.words, np.memmap)
    assert opened.key == library.key and len(opened) == 300 and opened.n_bits == 100
    assert torch.equal(opened.tanimoto([3, 7]), library.tanimoto([3, 7]))
    assert PackedFingerprints.from_bits(bits[:299]).key != library.key
    with pytest.raises(FileNotFoundError, match="PackedFingerprints.save"):
        PackedFingerprints.open(tmp_path / "missing.npy")
    again = pickle.loads(pickle.dumps(opened))
    assert again.key == library.key


def test_library_mode_inputs_normalized_batched_and_diag() -> None:
    bits = np.random.default_rng(1).integers(0, 2, size=(9, 30), dtype=np.uint8)
    dense = TanimotoKernel()(torch.from_numpy(bits).double()).to_dense()
    library = PackedFingerprints.from_bits(bits)
    k = TanimotoKernel(library=register_fingerprints(library), normalized_inputs=True)
    assert k.num_items == 9 and TanimotoKernel().num_items is None
    x = _col([0.0, 0.25, 1.0])  # items 0, 2, 8
    assert torch.equal(k(x).to_dense(), dense[[0, 2, 8]][:, [0, 2, 8]])
    batch = torch.tensor([[[0.5], [0.125]], [[1.0], [0.5]]])  # 2 x 2 x 1, float32
    out = k(batch, x).to_dense()
    assert out.dtype == torch.float32
    items = torch.tensor([[4, 1], [8, 4]])
    assert torch.equal(out, dense[items][..., [0, 2, 8]].float())
    diag = k(batch, batch.flip(-2), diag=True)
    assert torch.equal(diag, dense[items, items.flip(-1)].float())
    # Copies (BoTorch deep-copies models) share the library.
    assert copy.deepcopy(k).library is k.library is library


def test_botorch_fit_in_feature_and_library_modes() -> None:
    g = torch.Generator().manual_seed(0)
    bits = (torch.rand(40, 64, generator=g) < 0.2).double()
    y = (bits[:, :8].sum(-1, keepdim=True) - bits[:, 8:16].sum(-1, keepdim=True)) / 4
    train = torch.arange(0, 40, 2)
    model = SingleTaskGP(
        bits[train], y[train], covar_module=ScaleKernel(TanimotoKernel())
    )
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    with torch.no_grad():
        mean = model.posterior(bits).mean
    assert torch.isfinite(mean).all()
    assert torch.corrcoef(torch.cat([mean, y], 1).T)[0, 1] > 0.5
    # The same GP over item indices of a library: the same posterior.
    library = PackedFingerprints.from_bits(bits)
    X = train.double().unsqueeze(-1)
    indexed = SingleTaskGP(
        X, y[train], covar_module=ScaleKernel(TanimotoKernel(library))
    )
    indexed.load_state_dict(model.state_dict())
    indexed.eval()
    with torch.no_grad():
        torch.testing.assert_close(indexed.posterior(_col(range(40))).mean, mean)
        # q-batches (b x q x 1) go through the distinct items.
        q_batch = torch.arange(40.0).reshape(10, 4, 1)
        assert indexed.posterior(q_batch).mean.shape == (10, 4, 1)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(indexed.likelihood, indexed))


# ---------------------------------------------------------------------------
# Errors name the argument, what it got and what was expected.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "x1", "x2", "match"),
    [
        (
            TanimotoKernel(),
            [[0.0, 2.0]],
            [[1.0, 0.0]],
            r"`x1` must hold only 0 and 1.*got 2\.0 at index \(0, 1\)",
        ),
        (
            TanimotoKernel(),
            [[0.0, 1.0]],
            [[0.5, 0.0]],
            r"`x2` must hold only 0 and 1.*got 0\.5",
        ),
        (
            MinMaxKernel(),
            [[1.0, 3.0]],
            [[0.0, -1.0]],
            r"`x2` must hold non-negative finite counts, got -1\.0",
        ),
        (
            MinMaxKernel(),
            [[float("nan"), 3.0]],
            [[0.0, 1.0]],
            r"`x1` must hold non-negative finite counts, got nan",
        ),
        (
            TanimotoKernel(),
            [[0.0, 1.0]],
            [[1.0, 0.0, 1.0]],
            r"`x1` and `x2` must have the same fingerprint width.*got 2 and 3",
        ),
        (
            MinMaxKernel(),
            torch.zeros(2, 0),
            torch.zeros(2, 0),
            r"`x1` must be `... x n x m` fingerprints with m >= 1 bits, got shape",
        ),
    ],
)
def test_bad_features_are_rejected(kernel: Any, x1: Any, x2: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        kernel(torch.as_tensor(x1), torch.as_tensor(x2)).to_dense()


def test_bad_libraries_and_indices_are_rejected() -> None:
    with pytest.raises(
        ValueError, match=r"`bits` must hold only 0 and 1.*got 3 at index \(1, 0\)"
    ):
        PackedFingerprints.from_bits(np.array([[0, 1], [3, 0]]))
    with pytest.raises(
        ValueError, match=r"`bits` must be an N x m array.*got shape \(2, 0\)"
    ):
        PackedFingerprints.from_bits(np.zeros((2, 0)))
    with pytest.raises(
        ValueError, match=r"`bits` must be an N x m array.*got shape \(0, 5\)"
    ):
        PackedFingerprints.from_bits(torch.zeros(0, 5))
    with pytest.raises(
        TypeError, match="`bits` must be a torch.Tensor or numpy array, got list"
    ):
        PackedFingerprints.from_bits([[0, 1]])
    with pytest.raises(ValueError, match=r"`words` has bits set beyond n_bits=3"):
        PackedFingerprints(np.array([[8]], dtype=np.uint64), 3)
    library = PackedFingerprints.from_bits(BITS)
    k = TanimotoKernel(library=library)
    with pytest.raises(
        ValueError, match=r"single column holding the item index.*got shape \(4, 4\)"
    ):
        k(BITS).to_dense()
    with pytest.raises(
        ValueError, match=r"out of range.*integer item indices in 0\.\.3"
    ):
        k(_col([0, 4])).to_dense()
    with pytest.raises(
        ValueError,
        match=r"`cols` must be library rows in 0\.\.3, got values in \[-1, 2\]",
    ):
        library.tanimoto([0], [2, -1])
    with pytest.raises(
        ValueError, match=r"`route` must be 'auto' or 'inverted'.*got 'gpu'"
    ):
        TanimotoKernel(library=library, route="gpu")
    with pytest.raises(
        TypeError,
        match="`library` must be a PackedFingerprints, its registered key, or None",
    ):
        TanimotoKernel(library=BITS)
    with pytest.raises(
        ValueError,
        match=r"no fingerprint library with that content.*register_fingerprints",
    ):
        TanimotoKernel(library="sha256:" + "0" * 64)


# ---------------------------------------------------------------------------
# Ax.
# ---------------------------------------------------------------------------


def _ax_run(
    library: PackedFingerprints, y: list[float], trials: int, seed: int
) -> tuple[Any, Any]:
    from ax.api.client import Client

    from ax_chaining.ax import (
        candidate_index_parameter,
        chaining_generation_strategy,
        fingerprint_kernel_surrogate_spec,
    )

    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[candidate_index_parameter(len(library), "molecule")]
    )
    client.configure_optimization(objective="logS")
    spec = fingerprint_kernel_surrogate_spec(library)
    gs = chaining_generation_strategy(init_trials=4, seed=seed, surrogate_spec=spec)
    client.set_generation_strategy(gs)
    for _ in range(trials):
        for index, p in client.get_next_trials(max_trials=1).items():
            client.complete_trial(index, raw_data={"logS": y[p["molecule"]]})
    return client, gs


@pytest.mark.filterwarnings("ignore::Warning:ax")
def test_ax_client_loop_and_lean_json_round_trip(tmp_path: Any) -> None:
    pytest.importorskip("rdkit")
    from ax.api.client import Client

    from ax_chaining.ax import fingerprint_kernel_surrogate_spec, register_storage
    from ax_chaining.molecules import morgan_fingerprints
    from ax_chaining.test_functions.molecules import load_dataset

    logging.getLogger("ax").setLevel(logging.WARNING)
    register_storage()
    data = load_dataset("esol")
    y = data.y.tolist()
    library = PackedFingerprints.from_bits(morgan_fingerprints(data.smiles))
    sizes = []
    for n in (100, 600):
        sub = PackedFingerprints(library.words[:n], library.n_bits)
        client, gs = _ax_run(sub, y, trials=6, seed=0)
        model = gs.adapter.generator.surrogate.model
        assert type(model.covar_module) is TanimotoKernel
        assert model.covar_module.library is sub
        path = tmp_path / f"esol{n}.json"
        client.save_to_json_file(str(path))
        sizes.append(path.stat().st_size)
        assert sub.key in path.read_text()
    # The JSON holds the key, not the fingerprints (500 more would be 128 kB).
    assert abs(sizes[1] - sizes[0]) < 2000, sizes
    loaded = Client.load_from_json_file(str(path))
    assert loaded.get_next_trials(max_trials=1) == client.get_next_trials(max_trials=1)
    # In a new process the library must be registered again, or a clear error.
    import subprocess
    import sys

    sub.save(tmp_path / "library.npy")
    code = (
        "import ax_chaining.ax as axc\n"
        "from ax.api.client import Client\n"
        "from ax_chaining.kernels import PackedFingerprints\n"
        f"c = Client.load_from_json_file({str(path)!r})\n"
        "try:\n"
        "    c.get_next_trials(max_trials=1)\n"
        "except ValueError as e:\n"
        "    print('refused:', 'register_fingerprints' in str(e))\n"
        f"same = PackedFingerprints.open({str(tmp_path / 'library.npy')!r})\n"
        "axc.fingerprint_kernel_surrogate_spec(same)  # a new object, same content\n"
        "print(len(c.get_next_trials(max_trials=1)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["refused:", "True", "1"]
    with pytest.raises(ValueError, match=r"`metric` must be 'tanimoto', got 'minmax'"):
        fingerprint_kernel_surrogate_spec(library, metric="minmax")
    with pytest.raises(TypeError, match="`library` must be a PackedFingerprints"):
        fingerprint_kernel_surrogate_spec(BITS)  # type: ignore[arg-type]


@pytest.mark.slow
def test_speed_benchmark_runs_and_all_routes_agree_with_rdkit(capsys: Any) -> None:
    pytest.importorskip("rdkit")
    import json

    from benchmarks import kernel_rows

    kernel_rows.main(["--quick", "--columns", "16"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["route"] for line in lines] == list(kernel_rows.ROUTES)
    assert {(line["n"], line["columns"]) for line in lines} == {(2000, 16)}
    assert len({line["checksum"] for line in lines}) == 1  # bit-identical values
    assert all(line["rows_per_s"] > 0 and line["peak_rss_mb"] > 0 for line in lines)


def test_tanimoto_route_table_names_the_fastest_of_this_package(tmp_path) -> None:
    import json

    from benchmarks import kernel_rows

    speeds = {"inverted": 10.0, "popcount": 30.0, "matmul": 20.0, "rdkit": 90.0}
    lines = [
        {"n": 5000, "columns": 5000, "route": r, "rows_per_s": v}
        for r, v in speeds.items()
    ]
    lines += [{"n": 5000, "columns": 64, "route": "inverted", "rows_per_s": 7.0}]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    rows = kernel_rows.table([str(path)]).splitlines()
    assert rows[2] == "| 5,000 | all | 10 | 30 | 20 | 90 | popcount |"  # not RDKit
    assert rows[3] == "| 5,000 | 64 | 7 | - | - | - | inverted |"


def _library_model(n: int = 300, obs: int = 20, scaled: bool = True, seed: int = 0):
    from botorch.models import SingleTaskGP
    from gpytorch.kernels import ScaleKernel

    g = np.random.default_rng(seed)
    bits = (g.random((n, 256)) < 0.08).astype(np.uint8)
    library = PackedFingerprints.from_bits(bits)
    kernel = TanimotoKernel(library=library)
    if scaled:
        kernel = ScaleKernel(kernel)
        kernel.outputscale = 2.0
    Z = torch.arange(n, dtype=torch.float64).unsqueeze(-1)
    idx = torch.as_tensor(g.choice(n, obs, replace=False))
    y = torch.as_tensor(g.standard_normal((obs, 1)))
    model = SingleTaskGP(Z[idx], y, covar_module=kernel.to(torch.float64))
    return model.eval(), Z, library


@pytest.mark.parametrize("scaled", [False, True])
@pytest.mark.parametrize("subset", [False, True])
def test_engine_rows_of_a_library_kernel_equal_the_posterior(scaled, subset) -> None:
    """The engine's rows of d_t^2 from the library's fast route equal the
    model's own posterior covariance, for all the library or a subset of it."""
    from ax_chaining.distances import DenseDistance
    from ax_chaining.posterior import candidate_posterior

    model, Z, _ = _library_model(scaled=scaled)
    if subset:
        Z = Z[torch.arange(3, 300, 2)]  # candidates: every other item
    with torch.no_grad():
        cov = model.posterior(Z).distribution.covariance_matrix
    fast = candidate_posterior(model, Z, path="low_rank").distance
    idx = torch.tensor([0, 5, Z.shape[0] - 1, 5])
    expected = DenseDistance(cov).rows(idx)
    torch.testing.assert_close(fast.rows(idx), expected, atol=1e-10, rtol=0)


def test_covers_with_a_library_kernel_equal_the_level_matrix_reference() -> None:
    from ax_chaining import ChainingUCB, chaining_covers
    from ax_chaining.posterior import candidate_posterior

    model, Z, _ = _library_model(n=400, obs=30)
    acqf = ChainingUCB(model, Z)  # the default route (lazy coarse levels, lists)
    distance = candidate_posterior(model, Z, path="low_rank").distance
    common = {"t": acqf.t, "scale": acqf.scale}
    lists = chaining_covers(distance, graph="lists", lazy=False, **common)
    matrix = chaining_covers(distance, graph="matrix", **common)
    reference = [c.tolist() for c in matrix.covers]
    assert len(reference) >= 3
    assert [c.tolist() for c in lists.covers] == reference
    assert [c.tolist() for c in acqf.chaining.covers] == reference


def test_inverted_rows_over_threads_equal_one_thread() -> None:
    rng = np.random.default_rng(3)
    bits = (rng.random((3000, 512)) < 0.05).astype(np.uint8)
    library = PackedFingerprints.from_bits(bits)
    rows = np.arange(0, 3000, 37)
    one = library.tanimoto(rows, slice(0, 3000), route="inverted")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = library.tanimoto(rows, slice(0, 3000), route="inverted")
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    assert torch.equal(one, library.tanimoto(rows, slice(0, 3000), route="popcount"))
