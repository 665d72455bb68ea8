"""Fixed-seed BoTorch steps and Ax loops whose printed picks, bonuses and
certificates must not change when the package's code is reorganized.

``python -m benchmarks.equivalence [CASE ...] > out.jsonl``, then ``diff``
against ``docs/results/equivalence/current.jsonl`` (``before.jsonl``: the
output before the reorganization; ``current.jsonl`` differs from it only
where certificates below the leave-one-out check's minimum now state the
model's own numbers, and where ``recommend`` adds ``p_better`` and
``tolerance``): one line per case, floats
exact, long vectors as a SHA-256 of their float64 bytes beside their sum; one
torch thread, so that sums are taken in one order. Cases: ``botorch``,
``ax``, ``dask`` (a 2-worker ``LocalCluster``), ``freesolv`` (the default
molecule model) and ``reaction`` (a Buchwald-Hartwig table). Another CPU
changes the last digits (and the reaction case's fitted hyperparameters in
the fourth): compare two commits' outputs made on the same machine.
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

from ax_chaining.certificate import CertificateOptions

CASES: dict[str, Callable[[], list[dict[str, Any]]]] = {}
#: Certificates from 10 observations on, so that the short loops record some.
FEW: dict[str, Any] = {"certificate": CertificateOptions(min_observations=10)}


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


def _problem(n: int, seed: int) -> tuple[torch.Tensor, Any]:
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64)
    idx = torch.randperm(n, generator=g)[:20]
    model = SingleTaskGP(X[idx], torch.sin(6 * X[idx, :1]) + X[idx, 1:] ** 2)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return X, model


@case
def botorch() -> list[dict[str, Any]]:
    from botorch.models import SingleTaskGP
    from botorch.optim import optimize_acqf_discrete
    from gpytorch.kernels import ScaleKernel

    from ax_chaining import ChainingUCB, PackedFingerprints, TanimotoKernel

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
        union = CertificateOptions(method="union")
        out.append(
            {
                "case": f"botorch/{name}",
                "chaining": summary(acqf.chaining),
                "values": vec(values),
                "batch": pick.tolist(),
                "certificate": cert(acqf.certificate()),
                "regret_bound": acqf.regret_bound(pick).tolist(),
                "certificate_all_union": cert(
                    acqf.certificate(among="all", options=union)
                ),
            }
        )
    acqf = ChainingUCB(model, X, pending_covers="reuse")
    pick, _ = optimize_acqf_discrete(acqf, q=3, choices=X)
    out.append({"case": "botorch/reuse", "batch": pick.tolist()})
    # A fingerprint library.
    g = torch.Generator().manual_seed(1)
    bits = torch.rand(300, 64, generator=g) < 0.2
    items = torch.arange(300, dtype=torch.float64).unsqueeze(-1)
    kernel = ScaleKernel(TanimotoKernel(library=PackedFingerprints.from_bits(bits)))
    y = bits[:25].double().sum(-1, keepdim=True) / 10
    model = SingleTaskGP(items[:25], y, covar_module=kernel)
    acqf = ChainingUCB(model, items, delta=0.05)
    pick, _ = optimize_acqf_discrete(acqf, q=2, choices=items)
    out.append(
        {
            "case": "botorch/library",
            "chaining": summary(acqf.chaining),
            "values": vec(acqf(items.unsqueeze(1))),
            "batch": pick.tolist(),
            "certificate": cert(acqf.certificate()),
        }
    )
    return out


def _client(parameters: list, seed: int, strategy: Any) -> Any:
    """An Ax ``Client`` maximizing ``f``; ``strategy``: a generation strategy,
    or a function that makes it once the experiment is configured."""
    from ax.api.client import Client

    client = Client(random_seed=seed)
    client.configure_experiment(parameters=parameters)
    client.configure_optimization(objective="f")
    client.set_generation_strategy(strategy() if callable(strategy) else strategy)
    return client


def _loop(client: Any, f: Callable[[dict], float], steps: int, q: int = 1) -> list:
    trials = []
    for _ in range(steps):
        for index, params in client.get_next_trials(max_trials=q).items():
            client.complete_trial(index, raw_data={"f": f(params)})
            trials.append(dict(sorted(params.items())))
    return trials


def _records(client: Any) -> dict[str, Any]:
    from ax_chaining.ax import certificate_history, recommend

    history = certificate_history(client)
    options = CertificateOptions(min_observations=10)
    answer = recommend(client, delta=0.05, options=options)
    answer["certificate"] = cert(answer["certificate"])
    return {"history": history, "recommend": answer}


@case
def ax() -> list[dict[str, Any]]:
    import pandas as pd
    from ax.api.configs import RangeParameterConfig

    from ax_chaining.ax import (
        chaining_generation_strategy,
        parameters_from_table,
        qlognei_generation_strategy,
    )

    def bump(p: dict) -> float:
        return math.exp(-((p["x"] - 13) ** 2 + (p["y"] - 6) ** 2) / 30.0)

    out = []
    for name, gs, steps, q in (
        ("grid_chaining", chaining_generation_strategy(6, **FEW), 12, 1),
        (
            "grid_chaining_batch",
            chaining_generation_strategy(6, delta=0.1, **FEW),
            4,
            3,
        ),
    ):
        grid = [
            RangeParameterConfig(name=n, bounds=(0, 19), parameter_type="int")
            for n in ("x", "y")
        ]
        client = _client(grid, 0, gs)
        trials = _loop(client, bump, steps, q)
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

    def f(p: dict) -> float:
        row = table[(table.a == p["a"]) & (table.b == p["b"])]
        return float(truth[row.part.iloc[0]])

    for name, strategy in (
        ("table_chaining", chaining_generation_strategy),
        ("table_qlognei", qlognei_generation_strategy),
    ):
        client = _client(
            parameters_from_table(table, exclude=["part"]),
            1,
            lambda s=strategy: s(
                init_trials=5, candidates=table, id_column="part", **FEW
            ),
        )
        trials = _loop(client, f, 12)
        out.append({"case": f"ax/{name}", "trials": trials, **_records(client)})
    return out


@case
def dask() -> list[dict[str, Any]]:
    import distributed

    from ax_chaining import ChainingUCB, PackedFingerprints
    from ax_chaining.ax import (
        candidate_index_parameter,
        certificate_history,
        chaining_generation_strategy,
        fingerprint_kernel_surrogate_spec,
    )
    from ax_chaining.distributed import ShardedCandidates

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
        acqf = ChainingUCB(model, sharded)
        x, value = sharded.optimize(acqf, q=3)
        se = {
            "case": "dask/se",
            "chaining": summary(acqf.chaining),
            "batch": x.tolist(),
            "values": vec(value),
            "certificate": cert(acqf.certificate()),
        }
        sharded.close()
        g = torch.Generator().manual_seed(3)
        bits = torch.rand(9000, 64, generator=g) < 0.15
        library = PackedFingerprints.from_bits(bits)
        y = (bits[:, :8].double().sum(-1) - bits[:, 8:16].double().sum(-1)).numpy()
        sharded = ShardedCandidates(client, library)
        gs = None

        def strategy() -> Any:
            nonlocal gs
            spec = fingerprint_kernel_surrogate_spec(library)
            gs = chaining_generation_strategy(
                init_trials=5, candidates=sharded, surrogate_spec=spec, **FEW
            )
            return gs

        parameters = [candidate_index_parameter(len(library), name="item")]
        ax_client = _client(parameters, 0, strategy)
        trials = _loop(ax_client, lambda p: float(y[int(p["item"])]), 8)
        history = certificate_history(gs)
        sharded.close()
    finally:
        client.close()
        cluster.close()
    return [se, {"case": "dask/ax_library", "trials": trials, "history": history}]


def _table_loop(y: np.ndarray, strategy: Any, seed: int) -> dict:
    from ax_chaining.ax import candidate_index_parameter

    parameters = [candidate_index_parameter(len(y), name="item")]
    client = _client(parameters, seed, strategy)
    rng = np.random.default_rng(seed)
    for i in rng.choice(len(y), 8, replace=False):
        index = client.attach_trial(parameters={"item": int(i)})
        client.complete_trial(index, raw_data={"f": float(y[i])})
    trials = _loop(client, lambda p: float(y[int(p["item"])]), 6)
    return {"trials": trials, **_records(client)}


@case
def freesolv() -> list[dict[str, Any]]:
    from ax_chaining.ax import chaining_generation_strategy, qlognei_generation_strategy
    from ax_chaining.molecules import molecule_surrogate_spec
    from ax_chaining.test_functions.molecules import load_dataset

    data = load_dataset("freesolv")
    y = data.y.numpy()
    with tempfile.TemporaryDirectory() as cache:
        spec = molecule_surrogate_spec(list(data.smiles), path=cache, n_jobs=2)
        # The feature table the spec's kernel reads.
        options = spec.model_configs[0].covar_module_options
        table = options.get("features", options.get("table"))
        if isinstance(table, str) and table.endswith(".npy"):
            table = np.load(table)
        else:
            from ax_chaining.kernels import registered_features

            table = registered_features(table).numpy()
        out = [{"case": "freesolv/features", "features": vec(table)}]
        for name, make in (
            ("chaining", chaining_generation_strategy),
            ("qlognei", qlognei_generation_strategy),
        ):
            strategy = make(init_trials=0, surrogate_spec=spec, **FEW)
            out.append({"case": f"freesolv/{name}", **_table_loop(y, strategy, 0)})
    return out


@case
def reaction() -> list[dict[str, Any]]:
    from ax_chaining.ax import (
        chaining_generation_strategy,
        feature_table_surrogate_spec,
    )
    from ax_chaining.molecules import component_features
    from ax_chaining.test_functions.reactions import load_reactions

    data = load_reactions("buchwald-hartwig")
    table = data.table.iloc[:600].reset_index(drop=True)
    features = component_features(table, data.components, "rdkit2d")
    spec = feature_table_surrogate_spec(
        torch.as_tensor(features.values), kernel="rbf", prior="botorch"
    )
    strategy = chaining_generation_strategy(init_trials=0, surrogate_spec=spec, **FEW)
    return [
        {
            "case": "reaction/chaining",
            "features": vec(features.values),
            "names": len(features.names),
            **_table_loop(data.y.numpy()[:600], strategy, 0),
        }
    ]


def main(argv: list[str]) -> None:
    from ax.utils.common.logger import set_stderr_log_level

    torch.set_num_threads(1)
    set_stderr_log_level(logging.ERROR)
    warnings.simplefilter("ignore")
    for name in argv or list(CASES):
        for line in CASES[name]():
            print(json.dumps(line, sort_keys=True, default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
