"""Fixed-seed BoTorch steps and Ax loops whose printed picks, bonuses and
certificates must not change when the package's code is reorganized.

Run ``python -m benchmarks.equivalence [CASE ...] > out.jsonl`` on two commits
and compare the files (``diff``): every line is one case, its floats printed
exactly (JSON's shortest round-trip form) and long vectors as a SHA-256 of
their float64 bytes beside their sum. One torch thread, so that sums are taken
in one order. The cases: ``botorch`` (dense, low-rank, continuous bonus,
batches, a fingerprint library), ``ax`` (a grid and a table), ``dask`` (a
2-worker ``LocalCluster``), ``freesolv`` (the default molecule model) and
``reaction`` (a Buchwald-Hartwig table, per-component descriptors).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import sys
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

CASES: dict[str, Callable[[], list[dict[str, Any]]]] = {}
#: Certificates from 10 observations on, so that the short loops record some.
try:  # the certificate's options as one object, and as keywords before
    from ax_chaining.certificate import CertificateOptions

    FEW: dict[str, Any] = {"certificate": CertificateOptions(min_observations=10)}
except ImportError:
    FEW = {"certificate_min_observations": 10}


def case(fn: Callable[[], list[dict[str, Any]]]) -> Callable[[], list[dict]]:
    CASES[fn.__name__] = fn
    return fn


def vec(x: Any) -> dict[str, Any]:
    """A long vector as its SHA-256 (float64 bytes), sum and first values."""
    a = np.ascontiguousarray(np.asarray(torch.as_tensor(x).detach().double().cpu()))
    return {
        "sha256": hashlib.sha256(a.tobytes()).hexdigest()[:16],
        "sum": float(a.sum()),
        "head": [float(v) for v in a.reshape(-1)[:4]],
    }


def summary(chaining: Any) -> dict[str, Any]:
    return {
        "t": int(chaining.t),
        "scale": float(chaining.scale),
        "eps": [float(e) for e in chaining.eps],
        "sizes": [int(s) for s in chaining.cover_sizes],
        "H": [float(h) for h in chaining.H],
    }


def cert(c: Any) -> dict[str, Any]:
    d = c.as_dict() if hasattr(c, "as_dict") else dict(c)
    for key in ("bounds", "certified"):
        if isinstance(d.get(key), list) and len(d[key]) > 8:
            d[key] = vec(d[key]) if key == "bounds" else len(d[key])
    return d


def _gp(train_X: torch.Tensor, train_Y: torch.Tensor) -> Any:
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    model = SingleTaskGP(train_X, train_Y)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model


def _problem(n: int, seed: int) -> tuple[torch.Tensor, Any]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64)
    idx = torch.randperm(n, generator=g)[:20]
    Y = torch.sin(6 * X[idx, :1]) + X[idx, 1:] ** 2
    return X, _gp(X[idx], Y)


@case
def botorch() -> list[dict[str, Any]]:
    from botorch.optim import optimize_acqf_discrete

    from ax_chaining import ChainingUCB

    out = []
    X, model = _problem(400, 0)
    for name, opts in (
        ("dense", {}),
        ("dense_continuous", {"bonus": "continuous"}),
        ("dense_proof", {"h_radius": "proof", "delta": 0.1}),
        ("low_rank", {"path": "low_rank"}),
        ("low_rank_greedy", {"path": "low_rank", "cover": "greedy"}),
    ):
        acqf = ChainingUCB(model, X, **opts)
        values = acqf(X.unsqueeze(1))
        pick, _ = optimize_acqf_discrete(acqf, q=3, choices=X)
        out.append(
            {
                "case": f"botorch/{name}",
                "chaining": summary(acqf.chaining),
                "values": vec(values),
                "batch": pick.tolist(),
                "certificate": cert(acqf.certificate()),
                "regret_bound": acqf.regret_bound(pick).tolist(),
                "certificate_all_union": cert(_union_certificate(acqf)),
            }
        )
    acqf = ChainingUCB(model, X, pending_covers="reuse")
    pick, _ = optimize_acqf_discrete(acqf, q=3, choices=X)
    out.append({"case": "botorch/reuse", "batch": pick.tolist()})
    out.append(_library_case())
    return out


def _union_certificate(acqf: Any) -> Any:
    """The union bound over every candidate (its options' spelling changed)."""
    try:
        from ax_chaining.certificate import CertificateOptions
    except ImportError:
        return acqf.certificate(among="all", method="union")
    return acqf.certificate(among="all", options=CertificateOptions(method="union"))


def _library_case() -> dict[str, Any]:
    from botorch.models import SingleTaskGP
    from botorch.optim import optimize_acqf_discrete
    from gpytorch.kernels import ScaleKernel

    from ax_chaining import ChainingUCB, PackedFingerprints, TanimotoKernel

    g = torch.Generator().manual_seed(1)
    bits = torch.rand(300, 64, generator=g) < 0.2
    library = PackedFingerprints.from_bits(bits)
    items = torch.arange(300, dtype=torch.float64).unsqueeze(-1)
    train = items[:25]
    y = bits[:25].double().sum(-1, keepdim=True) / 10
    kernel = ScaleKernel(TanimotoKernel(library=library))
    model = SingleTaskGP(train, y, covar_module=kernel)
    acqf = ChainingUCB(model, items, delta=0.05)
    pick, _ = optimize_acqf_discrete(acqf, q=2, choices=items)
    return {
        "case": "botorch/library",
        "chaining": summary(acqf.chaining),
        "values": vec(acqf(items.unsqueeze(1))),
        "batch": pick.tolist(),
        "certificate": cert(acqf.certificate()),
    }


def _loop(client: Any, f: Callable[[dict], float], steps: int) -> list[dict]:
    trials = []
    for _ in range(steps):
        for index, params in client.get_next_trials(max_trials=1).items():
            client.complete_trial(index, raw_data={"f": f(params)})
            trials.append({k: v for k, v in sorted(params.items())})
    return trials


def _records(client: Any) -> dict[str, Any]:
    from ax_chaining.ax import certificate_history, recommend

    history = certificate_history(client)
    try:  # the certificate's options as one object, and as keywords before
        from ax_chaining.certificate import CertificateOptions

        few = {"options": CertificateOptions(min_observations=10)}
    except ImportError:
        few = {"min_observations": 10}
    answer = recommend(client, delta=0.05, **few)
    answer["certificate"] = cert(answer["certificate"])
    return {"history": history, "recommend": answer}


@case
def ax() -> list[dict[str, Any]]:
    import pandas as pd
    from ax.api.client import Client
    from ax.api.configs import RangeParameterConfig

    from ax_chaining.ax import (
        chaining_generation_strategy,
        qlognei_generation_strategy,
    )

    def bump(p: dict) -> float:
        return math.exp(-((p["x"] - 13) ** 2 + (p["y"] - 6) ** 2) / 30.0)

    out = []
    for name, gs in (
        ("grid_chaining", chaining_generation_strategy(6, **FEW)),
        ("grid_chaining_batch", chaining_generation_strategy(6, delta=0.1, **FEW)),
    ):
        client = Client(random_seed=0)
        client.configure_experiment(
            parameters=[
                RangeParameterConfig(name=n, bounds=(0, 19), parameter_type="int")
                for n in ("x", "y")
            ]
        )
        client.configure_optimization(objective="f")
        client.set_generation_strategy(gs)
        if name.endswith("batch"):
            trials = []
            for _ in range(4):
                batch = client.get_next_trials(max_trials=3)
                for index, params in batch.items():
                    client.complete_trial(index, raw_data={"f": bump(params)})
                    trials.append(dict(sorted(params.items())))
        else:
            trials = _loop(client, bump, 12)
        out.append({"case": f"ax/{name}", "trials": trials, **_records(client)})

    rng = np.random.default_rng(0)
    table = pd.DataFrame(
        {
            "part": [f"P{i:03d}" for i in range(120)],
            "a": rng.uniform(0, 1, 120).round(3),
            "b": rng.uniform(0, 1, 120).round(3),
        }
    )
    truth = dict(zip(table.part, np.sin(5 * table.a) + table.b, strict=True))
    from ax_chaining.ax import parameters_from_table

    for name, strategy in (
        ("table_chaining", chaining_generation_strategy),
        ("table_qlognei", qlognei_generation_strategy),
    ):
        client = Client(random_seed=1)
        client.configure_experiment(
            parameters=parameters_from_table(table, exclude=["part"])
        )
        client.configure_optimization(objective="f")
        client.set_generation_strategy(
            strategy(init_trials=5, candidates=table, id_column="part", **FEW)
        )

        def f(p: dict) -> float:
            row = table[(table.a == p["a"]) & (table.b == p["b"])]
            return float(truth[row.part.iloc[0]])

        trials = _loop(client, f, 12)
        out.append({"case": f"ax/{name}", "trials": trials, **_records(client)})
    return out


@case
def dask() -> list[dict[str, Any]]:
    import distributed
    from ax.api.client import Client as AxClient

    from ax_chaining import ChainingUCB as Acqf
    from ax_chaining import PackedFingerprints
    from ax_chaining.ax import (
        candidate_index_parameter,
        chaining_generation_strategy,
        fingerprint_kernel_surrogate_spec,
    )
    from ax_chaining.distributed import ShardedCandidates

    out = []
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    )
    client = distributed.Client(cluster)
    try:
        X, model = _problem(9000, 2)
        sharded = ShardedCandidates(client, X)
        acqf = Acqf(model, sharded)
        x, value = sharded.optimize(acqf, q=3)
        out.append(
            {
                "case": "dask/se",
                "chaining": summary(acqf.chaining),
                "batch": x.tolist(),
                "values": vec(value),
                "certificate": cert(acqf.certificate()),
            }
        )
        sharded.close()

        g = torch.Generator().manual_seed(3)
        bits = torch.rand(9000, 64, generator=g) < 0.15
        library = PackedFingerprints.from_bits(bits)
        y = (bits[:, :8].double().sum(-1) - bits[:, 8:16].double().sum(-1)).numpy()
        sharded = ShardedCandidates(client, library)
        ax_client = AxClient(random_seed=0)
        ax_client.configure_experiment(
            parameters=[candidate_index_parameter(len(library), name="item")]
        )
        ax_client.configure_optimization(objective="f")
        gs = chaining_generation_strategy(
            init_trials=5,
            candidates=sharded,
            surrogate_spec=fingerprint_kernel_surrogate_spec(library),
            **FEW,
        )
        ax_client.set_generation_strategy(gs)
        trials = _loop(ax_client, lambda p: float(y[int(p["item"])]), 8)
        from ax_chaining.ax import certificate_history

        out.append(
            {
                "case": "dask/ax_library",
                "trials": trials,
                "history": certificate_history(gs),
            }
        )
        sharded.close()
    finally:
        client.close()
        cluster.close()
    return out


def _table_loop(y: np.ndarray, spec: Any, strategy: Any, seed: int) -> dict:
    from ax.api.client import Client

    from ax_chaining.ax import candidate_index_parameter

    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[candidate_index_parameter(len(y), name="item")]
    )
    client.configure_optimization(objective="f")
    client.set_generation_strategy(strategy)
    rng = np.random.default_rng(seed)
    for i in rng.choice(len(y), 8, replace=False):
        index = client.attach_trial(parameters={"item": int(i)})
        client.complete_trial(index, raw_data={"f": float(y[i])})
    trials = _loop(client, lambda p: float(y[int(p["item"])]), 6)
    return {"trials": trials, **_records(client)}


def _table_of(spec: Any) -> np.ndarray:
    """The feature table a feature-table surrogate spec's kernel reads."""
    options = spec.model_configs[0].covar_module_options
    kernel = options.get("features", options.get("table"))
    if isinstance(kernel, str) and kernel.endswith(".npy"):
        return np.load(kernel)
    from ax_chaining.kernels import registered_features

    return registered_features(kernel).numpy()


@case
def freesolv() -> list[dict[str, Any]]:
    from ax_chaining.ax import (
        chaining_generation_strategy,
        qlognei_generation_strategy,
    )

    try:
        from ax_chaining.molecules import molecule_surrogate_spec
    except ImportError:  # before the molecules package
        from ax_chaining.ax import molecule_surrogate_spec
    from ax_chaining.test_functions.molecules import load_dataset

    data = load_dataset("freesolv")
    y = data.y.numpy()
    out = []
    with tempfile.TemporaryDirectory() as cache:
        spec = molecule_surrogate_spec(list(data.smiles), path=cache, n_jobs=2)
        out.append({"case": "freesolv/features", "features": vec(_table_of(spec))})
        for name, make in (
            ("chaining", chaining_generation_strategy),
            ("qlognei", qlognei_generation_strategy),
        ):
            strategy = make(init_trials=0, surrogate_spec=spec, **FEW)
            out.append(
                {"case": f"freesolv/{name}", **_table_loop(y, spec, strategy, 0)}
            )
    return out


@case
def reaction() -> list[dict[str, Any]]:
    from ax_chaining.ax import (
        chaining_generation_strategy,
        feature_table_surrogate_spec,
    )

    try:
        from ax_chaining.molecules import component_features
    except ImportError:  # before the molecules package
        from ax_chaining.reactions import component_features
    from ax_chaining.test_functions.reactions import load_reactions
    from benchmarks.reactions_bench import descriptor_encoder

    data = load_reactions("buchwald-hartwig")
    table = data.table.iloc[:600].reset_index(drop=True)
    y = data.y.numpy()[:600]
    features = component_features(table, data.components, descriptor_encoder)
    spec = feature_table_surrogate_spec(
        torch.as_tensor(features.values), kernel="rbf", prior="botorch"
    )
    strategy = chaining_generation_strategy(init_trials=0, surrogate_spec=spec, **FEW)
    return [
        {
            "case": "reaction/chaining",
            "features": vec(features.values),
            "names": len(features.names),
            **_table_loop(y, spec, strategy, 0),
        }
    ]


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    from ax.utils.common.logger import set_stderr_log_level

    set_stderr_log_level(logging.ERROR)
    warnings.simplefilter("ignore")
    chosen = argv or list(CASES)
    for name in chosen:
        for line in CASES[name]():
            print(json.dumps(line, sort_keys=True, default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
