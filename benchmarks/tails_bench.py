r"""Which Student-t tails should the default certificate use? Refits of the
validity benchmark's loops, one tail law at a time.

The cap of the default tails (``tail=None``,
:data:`ax_chaining.certificate.AUTO_DOF_CAP`) is
chosen by this measurement: the heaviest tails with which the certificate
still reaches 10% of the range within 60 queries on GP samples, checked for
validity on the molecule library whose best values lie furthest out
(FreeSolv). For every run of the committed validity records
(``benchmarks/results/validity.jsonl.gz``: the candidates each Ax loop
evaluated, in order) and every ``--stride``-th step, the model is refitted to
the same observations by BoTorch as Ax fits it (``SingleTaskGP`` with a
``Standardize`` outcome transform: the precomputed Tanimoto kernel of the
molecules, or the default kernel with the grid normalized to the unit
square), and the evaluated candidate with the smallest bound is certified
(``certify_model``: the leave-one-out check from the first step, without its
minimum number of observations, the union bound at the step's share of
``delta``) with Student-t tails of each ``--dofs`` degrees of freedom
(``n-1``: ``tail=StudentTail(n - 1)``, ``n - 1`` everywhere; ``auto``: the default,
``n - 1`` for explored candidates and ``min(n - 1, 10)`` for the others;
``gaussian``).
The refits are not Ax's own fits (which the validity benchmark records), so
the numbers differ from those of the validity runs in detail.

One JSON line per (problem, method, seed): per tail law, whether any refitted
step was violated, the share of violated steps and the first query at which
the bound fell to 10% of the range. ``--table`` summarizes the lines.

``--problems grid-true``: the same tail laws where the model is exactly right,
on the certificate benchmark's grid (:mod:`benchmarks.certificate_bench`: GP
samples, the true prior, nothing fitted, 10 initial points, 100 Chaining-UCB
queries, 20 runs): the usefulness bar there is the running minimum of the
bound at 10% of the range within 60 queries in at least half the runs.

``--small`` (seconds, what the tests run): one grid run and one FreeSolv run
of the records, their first 3 steps, two tail laws.

Example::

    python -m benchmarks tails --problems freesolv,grid --stride 3 \
        > docs/results/certificate/tails.jsonl
    python -m benchmarks tails --table docs/results/certificate/tails.jsonl
    python -m benchmarks tails --small
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.records import read_packed

DTYPE = torch.float64
RECORDS = Path("benchmarks/results/validity.jsonl.gz")
DOFS = ("6", "8", "10", "12", "15", "20", "n-1", "auto")


def _law(name: str, n: int) -> Any:
    """The tail law ``name`` at a step with ``n`` observations (None: the
    default)."""
    from ax_chaining.certificate import GAUSSIAN, StudentTail

    if name == "n-1":
        return StudentTail(max(1, n - 1))
    if name == "auto":
        return None
    if name == "gaussian":
        return GAUSSIAN
    return StudentTail(float(name))


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
    X = torch.arange(len(data), dtype=DTYPE).unsqueeze(-1)
    f = data.y.numpy()
    return X, f, f[items], gram


def _model(problem: str, X: torch.Tensor, y: np.ndarray, gram: Any):
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.transforms import Normalize, Standardize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from ax_chaining.kernels import PrecomputedKernel

    Y = torch.as_tensor(y, dtype=DTYPE).unsqueeze(-1)
    if gram is None:
        bounds = torch.tensor([[0.0, 0.0], [6.0, 6.0]], dtype=DTYPE)
        model = SingleTaskGP(
            X,
            Y,
            input_transform=Normalize(2, bounds=bounds),
            outcome_transform=Standardize(1),
        )
    else:
        kernel = PrecomputedKernel(gram)
        model = SingleTaskGP(
            X, Y, covar_module=kernel, outcome_transform=Standardize(1)
        )
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    return model.eval()


def run_one(
    record: dict[str, Any], dofs: tuple[str, ...], stride: int, max_steps: int | None
) -> dict[str, Any]:
    """Refit the steps of one validity run; per tail law, its violations and
    usefulness (see the module docstring)."""
    from ax_chaining.certificate import CertificateOptions, certify_model

    torch.manual_seed(0)  # BoTorch's fit draws random restarts only on failure
    C, f, y, gram = _values(record)
    items, n_init = record["items"], record["config"]["n_init"]
    f_max, f_range = float(f.max()), float(f.max() - f.min())
    steps = record["steps"][::stride][:max_steps]
    out: dict[str, dict[str, Any]] = {
        d: {"violated": [], "bound": [], "regret": []} for d in dofs
    }
    for step in steps:
        n = step["n"]
        model = _model(record["problem"], C[items[:n]], y[:n], gram)
        for d in dofs:
            # Every step, the first ones included: the tails are compared
            # here, the minimum number of observations in `validity`.
            options = CertificateOptions(
                tail=_law(d, n),
                min_observations=1,
                # The LOO scale's point estimate, as when the records were
                # made (the tails are compared here, not the scale).
                scale_level=None,
            )
            cert = certify_model(
                model, C, delta=record["config"]["delta"], options=options
            )
            regret = f_max - float(f[cert.index])
            bound = cert.bound if cert.valid else None
            out[d]["bound"].append(bound)
            out[d]["regret"].append(regret)
            out[d]["violated"].append(bound is not None and regret > bound + 1e-9)
    summary = {}
    for d, r in out.items():
        first = next(
            (
                s["n"] - n_init + 1
                for s, b in zip(steps, r["bound"], strict=True)
                if b is not None and b <= 0.1 * f_range
            ),
            None,
        )
        summary[d] = {
            "any_violated": any(r["violated"]),
            "violated_steps": sum(r["violated"]),
            "first_10pct": first,
            "bound_over_range": [
                None if b is None else b / f_range for b in r["bound"]
            ],
        }
    return {
        "problem": record["problem"],
        "method": record["method"],
        "seed": record["seed"],
        "steps": [s["n"] for s in steps],
        "f_range": f_range,
        "tails": summary,
    }


def run_true_prior(seed: int, dofs: tuple[str, ...], queries: int) -> dict[str, Any]:
    """One run of the certificate benchmark's grid with the true prior, the
    default certificate (leave-one-out check, combined bound) at each tail."""
    from benchmarks.certificate_bench import CertificateConfig
    from benchmarks.certificate_bench import run_one as certificate_run

    def variant(d: str) -> Any:
        # The law may depend on the step's number of observations (n - 1).
        return lambda n: {
            "tail": _law(d, n),
            "calibration": "loo",
            "min_observations": 1,
        }

    variants = {d: variant(d) for d in dofs}
    config = CertificateConfig(iters=queries)
    rec = certificate_run("grid", seed, config, variants=variants)
    f_range = rec["f_range"]
    summary = {}
    for d in dofs:
        given = rec["variants"][d]["bound"]
        bound = np.array([np.inf if b is None else b for b in given])
        regret = np.array(rec["variants"][d]["regret"])
        running = np.minimum.accumulate(bound)
        hit = np.flatnonzero(running <= 0.1 * f_range)
        summary[d] = {
            "any_violated": bool((regret > bound + 1e-9).any()),
            "violated_steps": int((regret > bound + 1e-9).sum()),
            "first_10pct": int(hit[0]) + 1 if hit.size else None,
            "bound_over_range": (bound / f_range).tolist(),
        }
    return {
        "problem": "grid-true",
        "method": "chaining",
        "seed": seed,
        "steps": list(range(config.n_init, config.n_init + queries)),
        "f_range": f_range,
        "tails": summary,
    }


def table(paths: list[str]) -> str:
    """The markdown summary of JSON-lines files written by this script."""
    rows = [json.loads(line) for p in paths for line in open(p) if line.strip()]
    return table_from_rows(rows)


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
        # Numbers of degrees of freedom in order, then the named laws.
        names = {d for r in runs for d in r["tails"]}
        dofs = sorted(
            names, key=lambda d: (not d.isdigit(), float(d) if d.isdigit() else 0, d)
        )
        for d in dofs:
            viol = sum(r["tails"][d]["any_violated"] for r in runs)
            steps = sum(r["tails"][d]["violated_steps"] for r in runs)
            total = sum(len(r["steps"]) for r in runs)
            firsts = [r["tails"][d]["first_10pct"] for r in runs]
            hit = [q for q in firsts if q is not None]
            first = (
                f"{statistics.median(hit):g} ({len(hit)}/{len(runs)})"
                if hit
                else (f"never (0/{len(runs)})")
            )
            early = sum(q <= 60 for q in hit)
            lines.append(
                f"| {problem} | {method} | {d} | {viol}/{len(runs)} | "
                f"{steps}/{total} | {first} | {early}/{len(runs)} |"
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
    problems = set(args.problems.split(","))
    methods = set(args.methods.split(","))
    dofs = tuple(args.dofs.split(","))
    max_steps = None
    if args.small:
        dofs, max_steps, methods = ("auto", "n-1"), 3, {"chaining"}
    if "grid-true" in problems:
        runs, queries = (1, 3) if args.small else (args.runs, args.queries)
        for seed in range(runs):
            row = run_true_prior(seed, dofs, queries)
            print(json.dumps(row, sort_keys=True), flush=True)
            print(f"[tails] grid-true {seed}", file=sys.stderr)
        problems.discard("grid-true")
    records = read_packed(args.records)
    done: set[str] = set()
    for record in records:
        if record["problem"] not in problems or record["method"] not in methods:
            continue
        if args.small and record["problem"] in done:
            continue
        if args.small and record["seed"] != 0:
            continue
        done.add(record["problem"])
        row = run_one(record, dofs, args.stride, max_steps)
        print(json.dumps(row, sort_keys=True), flush=True)
        print(
            f"[tails] {row['problem']} {row['method']} {row['seed']}", file=sys.stderr
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
