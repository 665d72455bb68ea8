r"""How far is the certificate from the best bound under the model? The Monte
Carlo regret quantile under the exact joint posterior beside the union bound;
one JSON line per (problem, seed), ``--table`` tabulates them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import torch

from benchmarks._tables import json_lines

DTYPE = torch.float64


def _problem(name: str, seed: int) -> tuple:
    """(candidates, true values, the noise sd or the Gram)."""
    if name == "grid":
        from ax_chaining.test_functions.problems import grid_problem

        X, f = grid_problem(30, seed)
        return X, f, 0.05
    from ax_chaining.test_functions.molecules import library

    data, gram = library(name)
    X = torch.arange(len(data), dtype=DTYPE).unsqueeze(-1)
    return X, data.y, gram


def _fit(name: str, X, y, extra):
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from ax_chaining.kernels import PrecomputedKernel

    covar = None if name == "grid" else PrecomputedKernel(extra)
    model = SingleTaskGP(X, y.unsqueeze(-1), covar_module=covar)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model.eval()


def one(name: str, seed: int, obs: int, samples: int, delta: float) -> dict[str, Any]:
    """One posterior: the MC quantile and the bounds at three shares."""
    from ax_chaining.certificate import CheckSchedule, step_delta, union_bound
    from ax_chaining.posterior import candidate_posterior

    X, f, extra = _problem(name, seed)
    n_all = X.shape[0]
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(n_all, generator=g)[:obs]
    noise = 0.05 if name == "grid" else 0.0
    y = f[idx] + noise * torch.randn(obs, generator=g, dtype=DTYPE)
    model = _fit(name, X[idx], y, extra)
    post = candidate_posterior(model, X, path="dense")
    mean = post.mean.to(DTYPE)
    dist = post.distance.rows(idx).clamp_min(0).sqrt()
    per_step = union_bound(mean, dist, idx, delta)
    pick = int(torch.argmin(per_step))
    x = int(idx[pick])
    # The joint posterior of the N candidates: exact samples, in chunks.
    with torch.no_grad():
        cov = model.posterior(X).distribution.covariance_matrix.to(DTYPE)
    cov = 0.5 * (cov + cov.T) + 1e-10 * torch.eye(n_all, dtype=DTYPE)
    L = torch.linalg.cholesky(cov)
    gen = torch.Generator().manual_seed(1000 + seed)
    start = time.perf_counter()
    values = []
    chunk = max(1, min(samples, 2**26 // n_all))
    for done in range(0, samples, chunk):
        m = min(chunk, samples - done)
        z = torch.randn(n_all, m, generator=gen, dtype=DTYPE)
        draws = mean.unsqueeze(-1) + L @ z  # N x m
        values.append((draws.max(dim=0).values - draws[x]).numpy())
    s = np.concatenate(values)
    geometric = CheckSchedule("geometric", start=10)
    shares = {
        "per_step": delta,
        "every_step": step_delta(delta, obs + 1),
        "geometric": geometric.share(delta, geometric.next_check(obs)),
    }
    bounds = {
        k: float(union_bound(mean, dist[pick : pick + 1], idx[pick : pick + 1], p))
        for k, p in shares.items()
    }
    quantiles = {k: float(np.quantile(s, 1 - p)) for k, p in shares.items()}
    return {
        "problem": name,
        "seed": seed,
        "obs": obs,
        "samples": samples,
        "delta": delta,
        "shares": shares,
        "union_bound": bounds,
        "mc_quantile": quantiles,
        "mc_reliable": {k: samples * p >= 100 for k, p in shares.items()},
        "true_regret": float(f.max() - f[x]),
        "f_range": float(f.max() - f.min()),
        "mc_seconds": time.perf_counter() - start,
    }


def table(paths: list[str]) -> str:
    """The docs' markdown table of the JSON lines in ``paths``."""
    lines = [
        "| problem | seed | obs | MC quantile @ delta | union @ delta | ratio | "
        "union @ every-step share | ratio to MC | union @ geometric share | "
        "true regret |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in json_lines(paths):
        q, b = r["mc_quantile"], r["union_bound"]
        lines.append(
            f"| {r['problem']} | {r['seed']} | {r['obs']} | {q['per_step']:.4g} | "
            f"{b['per_step']:.4g} | {b['per_step'] / q['per_step']:.3g} | "
            f"{b['every_step']:.4g} | {b['every_step'] / q['per_step']:.3g} | "
            f"{b['geometric']:.4g} | {r['true_regret']:.4g} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks limit")
    parser.add_argument("--problems", default="freesolv,esol,grid")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--obs", type=int, default=35)
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--small", action="store_true", help="grid, one seed, 2,000")
    parser.add_argument("--table", nargs="+", help="JSON-lines files to tabulate")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.table:
        print(table(args.table))
        return 0
    problems = ["grid"] if args.small else args.problems.split(",")
    seeds = [0] if args.small else args.seeds
    samples = 2000 if args.small else args.samples
    for name in problems:
        for seed in seeds:
            row = one(name, seed, args.obs, samples, args.delta)
            print(json.dumps(row, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
