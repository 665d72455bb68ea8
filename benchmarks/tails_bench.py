r"""Which Student-t tails should the default certificate use? Refits of the
validity benchmark's loops certified with each tail law of ``--dofs``; one
JSON line per run, ``--table`` summarizes them (``docs/certificate.md``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._tables import json_lines, md_row
from benchmarks.records import read_packed

DTYPE = torch.float64
RECORDS = Path("benchmarks/results/validity.jsonl.gz")
DOFS = ("6", "8", "10", "12", "15", "20", "n-1", "auto")


def _law(name: str, n: int) -> Any:
    """The tail law ``name`` at a step with ``n`` observations (None: default)."""
    from ax_chaining.certificate import GAUSSIAN, StudentTail

    if name == "n-1":
        return StudentTail(max(1, n - 1))
    if name == "auto":
        return None
    return GAUSSIAN if name == "gaussian" else StudentTail(float(name))


def _values(record: dict[str, Any]) -> tuple[torch.Tensor, np.ndarray, np.ndarray, Any]:
    """(candidates, true values, observed values in order, Gram or None)."""
    problem, items = record["problem"], record["items"]
    if problem == "grid":
        from ax_chaining.test_functions.problems import grid_problem

        X, f = grid_problem(record["config"]["side"], record["seed"])
        # The validity loop's noise: one draw per observation, in order.
        noise = np.random.default_rng(10_000 + record["seed"])
        y = np.array([float(f[i]) + 0.05 * noise.standard_normal() for i in items])
        return X, f.numpy(), y, None
    from ax_chaining.test_functions.molecules import library

    data, gram = library(problem)
    f = data.y.numpy()
    return torch.arange(len(data), dtype=DTYPE).unsqueeze(-1), f, f[items], gram


def _model(X: torch.Tensor, y: np.ndarray, gram: Any) -> Any:
    """The fit Ax makes: ``SingleTaskGP`` with ``Standardize``, on the Gram or
    on the grid normalized to the unit square."""
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.transforms import Normalize, Standardize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from ax_chaining.kernels import PrecomputedKernel

    Y = torch.as_tensor(y, dtype=DTYPE).unsqueeze(-1)
    if gram is None:
        bounds = torch.tensor([[0.0, 0.0], [6.0, 6.0]], dtype=DTYPE)
        kw: dict[str, Any] = {"input_transform": Normalize(2, bounds=bounds)}
    else:
        kw = {"covar_module": PrecomputedKernel(gram)}
    model = SingleTaskGP(X, Y, outcome_transform=Standardize(1), **kw)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model.eval()


def _summary(bounds: list, regrets: list, firsts: Any, f_range: float) -> dict:
    violated = [
        b is not None and r > b + 1e-9 for b, r in zip(bounds, regrets, strict=True)
    ]
    return {
        "any_violated": any(violated),
        "violated_steps": sum(violated),
        "first_10pct": firsts,
        "bound_over_range": [None if b is None else b / f_range for b in bounds],
    }


def run_one(
    record: dict[str, Any], dofs: tuple[str, ...], stride: int, max_steps: int | None
) -> dict[str, Any]:
    """Refit the steps of one validity run; per tail law, its violations and
    first query at 10% of the range."""
    from ax_chaining.certificate import CertificateOptions, certify_model

    torch.manual_seed(0)  # BoTorch's fit draws random restarts only on failure
    C, f, y, gram = _values(record)
    items, n_init = record["items"], record["config"]["n_init"]
    f_max, f_range = float(f.max()), float(f.max() - f.min())
    steps = record["steps"][::stride][:max_steps]
    bounds: dict[str, list] = {d: [] for d in dofs}
    regrets: dict[str, list] = {d: [] for d in dofs}
    for step in steps:
        n = step["n"]
        model = _model(C[items[:n]], y[:n], gram)
        for d in dofs:
            # From the first step, on the LOO scale's point estimate, as when
            # the records were made: the tails are compared here.
            options = CertificateOptions(
                tail=_law(d, n), min_observations=1, scale_level=None
            )
            delta = record["config"]["delta"]
            cert = certify_model(model, C, delta=delta, options=options)
            bounds[d].append(cert.bound if cert.valid else None)
            regrets[d].append(f_max - float(f[cert.index]))
    tails = {}
    for d in dofs:
        hits = [
            s["n"] - n_init + 1
            for s, b in zip(steps, bounds[d], strict=True)
            if b is not None and b <= 0.1 * f_range
        ]
        first = hits[0] if hits else None
        tails[d] = _summary(bounds[d], regrets[d], first, f_range)
    return {
        "problem": record["problem"],
        "method": record["method"],
        "seed": record["seed"],
        "steps": [s["n"] for s in steps],
        "f_range": f_range,
        "tails": tails,
    }


def run_true_prior(seed: int, dofs: tuple[str, ...], queries: int) -> dict[str, Any]:
    """One run of the certificate benchmark's grid with the true prior, the
    default certificate at each tail law."""
    from benchmarks.certificate_bench import CertificateConfig
    from benchmarks.certificate_bench import run_one as certificate_run

    def variant(d: str) -> Any:  # the law may depend on the step (n - 1)
        return lambda n: {
            "tail": _law(d, n),
            "calibration": "loo",
            "min_observations": 1,
        }

    config = CertificateConfig(iters=queries)
    rec = certificate_run("grid", seed, config, variants={d: variant(d) for d in dofs})
    f_range = rec["f_range"]
    tails = {}
    for d in dofs:
        bound = np.array(
            [np.inf if b is None else b for b in rec["variants"][d]["bound"]]
        )
        regret = np.array(rec["variants"][d]["regret"])
        hit = np.flatnonzero(np.minimum.accumulate(bound) <= 0.1 * f_range)
        first = int(hit[0]) + 1 if hit.size else None
        tails[d] = _summary(bound.tolist(), regret.tolist(), first, f_range)
    return {
        "problem": "grid-true",
        "method": "chaining",
        "seed": seed,
        "steps": list(range(config.n_init, config.n_init + queries)),
        "f_range": f_range,
        "tails": tails,
    }


def table(paths: list[str]) -> str:
    """The markdown summary of JSON-lines files written by this script."""
    return table_from_rows(json_lines(paths))


def table_from_rows(rows: list[dict[str, Any]]) -> str:
    """Per problem, method and tail law: runs with a violated step, violated
    steps, and the median first query at 10% of the range."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["problem"], r["method"]), []).append(r)
    lines = [
        "| problem | method | tails | runs violated | violated steps | "
        "first <= 10% (runs) | <= 10% within 60 queries |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for (problem, method), runs in sorted(groups.items()):
        names = {d for r in runs for d in r["tails"]}  # numbers first, then names
        for d in sorted(
            names, key=lambda d: (not d.isdigit(), float(d) if d.isdigit() else 0, d)
        ):
            viol = sum(r["tails"][d]["any_violated"] for r in runs)
            steps = sum(r["tails"][d]["violated_steps"] for r in runs)
            total = sum(len(r["steps"]) for r in runs)
            hit = [r["tails"][d]["first_10pct"] for r in runs]
            hit = [q for q in hit if q is not None]
            first = (
                f"{statistics.median(hit):g} ({len(hit)}/{len(runs)})"
                if hit
                else f"never (0/{len(runs)})"
            )
            early = sum(q <= 60 for q in hit)
            counts = f"{viol}/{len(runs)}", f"{steps}/{total}"
            lines.append(
                md_row(problem, method, d, *counts, first, f"{early}/{len(runs)}")
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks tails")
    parser.add_argument("--records", default=str(RECORDS))
    parser.add_argument("--problems", default="freesolv,grid")
    parser.add_argument("--methods", default="chaining,qlognei")
    parser.add_argument("--dofs", default=",".join(DOFS))
    parser.add_argument("--stride", type=int, default=3, help="every k-th step")
    parser.add_argument("--runs", type=int, default=20, help="grid-true runs")
    parser.add_argument("--queries", type=int, default=100, help="grid-true queries")
    parser.add_argument("--small", action="store_true", help="two runs, 3 steps")
    parser.add_argument("--table", nargs="+", help="JSON-lines files to tabulate")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.table:
        print(table(args.table))
        return 0
    torch.set_num_threads(1)
    problems, methods = set(args.problems.split(",")), set(args.methods.split(","))
    dofs, max_steps = tuple(args.dofs.split(",")), None
    if args.small:
        dofs, max_steps, methods = ("auto", "n-1"), 3, {"chaining"}
    runs, queries = (1, 3) if args.small else (args.runs, args.queries)
    true = range(runs) if "grid-true" in problems else range(0)
    records, done = [], set()
    for r in read_packed(args.records):
        if r["problem"] not in problems or r["method"] not in methods:
            continue
        if args.small and (r["problem"] in done or r["seed"] != 0):
            continue
        done.add(r["problem"])
        records.append(r)
    for row in itertools.chain(
        (run_true_prior(seed, dofs, queries) for seed in true),
        (run_one(r, dofs, args.stride, max_steps) for r in records),
    ):
        print(json.dumps(row, sort_keys=True), flush=True)
        print(
            f"[tails] {row['problem']} {row['method']} {row['seed']}", file=sys.stderr
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
