r"""Soundness and usefulness of the regret certificates on GP samples: at every
Chaining-UCB step each variant of :data:`VARIANTS` and of :data:`OTHERS`
certifies its point beside the true regret; ``--scaling`` compares union and
chaining bounds as ``N`` grows (``docs/certificate.md``).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from botorch.models import SingleTaskGP
from botorch.optim import optimize_acqf_discrete
from torch import Tensor

from ax_chaining.acquisition import ChainingUCB, gp_ucb_beta
from ax_chaining.certificate import (
    CHERNOFF,
    GAUSSIAN,
    CertificateOptions,
    recommend,
    running_minimum,
    ucb_lcb_bound,
)
from ax_chaining.test_functions.problems import fixed_se_kernel, grid_problem
from benchmarks._tables import fill_preset, json_lines, parse_names
from benchmarks.records import add_record_options, command_line, resume, write_summary
from benchmarks.runner import fixed_model
from benchmarks.testbeds import se_problem

FORMAT_VERSION = 2
DTYPE = torch.float64

#: Certificate variants: name -> ``CertificateOptions`` keywords
#: (``calibration="none"``, the model taken as true, unless given). ``robust``
#: is the calibration for fitted hyperparameters as the records were made (the
#: LOO check on the scale's point estimate, from the first step), here on the
#: true prior: what it costs where the model is right.
VARIANTS: dict[str, dict[str, Any]] = {
    "robust": {"calibration": "loo", "min_observations": 1, "scale_level": None},
    "combined": {"method": "combined", "links": "actual", "tail": GAUSSIAN},
    "combined-split": {"method": "combined", "split_delta": True},
    "union": {"method": "union", "tail": GAUSSIAN},
    "union-chernoff": {"method": "union", "tail": CHERNOFF},
    "pairwise": {"method": "pairwise", "tail": GAUSSIAN},
    "pairwise-chernoff": {"method": "pairwise", "tail": CHERNOFF},
    "chaining": {"method": "chaining", "links": "actual", "tail": GAUSSIAN},
    "chaining-chernoff": {"method": "chaining", "links": "actual", "tail": CHERNOFF},
    "chaining-radius": {"method": "chaining", "links": "radius", "tail": GAUSSIAN},
    "chaining-radius-chernoff": dict(method="chaining", links="radius", tail=CHERNOFF),
}
#: Comparators: UCB - LCB (valid at any evaluated point), Eq. (ucb) at the query.
OTHERS = ("ucb-lcb", "eq-ucb@query")
PROBLEMS = ("grid", "se")
CHECKPOINTS = (25, 50, 100)


@dataclass(frozen=True)
class CertificateConfig:
    """Sizes and constants of one ``certificate`` experiment (``runs`` aside,
    what a stored run must match)."""

    grid_side: int = 30
    se_n: int = 1000
    iters: int = 100
    runs: int = 20
    n_init: int = 10
    noise_std: float = 0.05
    delta: float = 0.05

    def key(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("runs")
        return d


DEFAULT_CONFIG = CertificateConfig()
SMALL_CONFIG = CertificateConfig(grid_side=8, se_n=120, iters=6, runs=2, n_init=5)


def _model(X: Tensor, y: Tensor, noise_std: float) -> SingleTaskGP:
    """The true prior: SE kernel, lengthscale 1, variance 1, mean 0."""
    return fixed_model(X, y.unsqueeze(-1), fixed_se_kernel(1.0, 1.0), noise_std, 0.0)


#: ``CertificateOptions`` keywords, or a function of the step's number of
#: observations that gives them.
Variant = dict[str, Any] | Callable[[int], dict[str, Any]]

#: The plain certificate that builds the chaining tree every variant shares.
_PAIRWISE = CertificateOptions(method="pairwise", calibration="none")


def _options(variant: Variant, num_obs: int) -> CertificateOptions:
    """The options of ``variant`` at a step with ``num_obs`` observations."""
    kwargs = variant(num_obs) if callable(variant) else variant
    return CertificateOptions(**{"calibration": "none", **kwargs})


def run_one(
    problem: str,
    seed: int,
    config: CertificateConfig,
    variants: dict[str, Variant] | None = None,
) -> dict[str, Any]:
    """One run: ``config.iters`` Chaining-UCB queries and at each step every
    certificate (``variants``, default :data:`VARIANTS`, then :data:`OTHERS`):
    per variant the lists ``bound``, ``regret`` (of the certified point) and
    ``index``."""
    if problem not in PROBLEMS:
        raise ValueError(f"problem must be one of {PROBLEMS}, got {problem!r}.")
    if problem == "grid":
        X, f = grid_problem(config.grid_side, seed)
    else:
        X, f = (p := se_problem(n=config.se_n, seed=seed)).X, p.f
    n = X.shape[0]
    f_max, f_range = float(f.max()), float(f.max() - f.min())
    gen = torch.Generator().manual_seed(10_000 + seed)
    idx = torch.randperm(n, generator=gen)[: config.n_init].tolist()
    ys = (
        f[idx] + config.noise_std * torch.randn(len(idx), generator=gen, dtype=DTYPE)
    ).tolist()
    variants = VARIANTS if variants is None else variants
    names = [*variants, *OTHERS]
    rec: dict[str, dict[str, list]] = {
        k: {"bound": [], "regret": [], "index": []} for k in names
    }
    seconds: dict[str, float] = {k: 0.0 for k in names}
    query_seconds = tree_seconds = 0.0

    def add(name: str, bound: float, index: int) -> None:
        rec[name]["bound"].append(bound)
        rec[name]["index"].append(index)
        rec[name]["regret"].append(f_max - float(f[index]))

    for _ in range(config.iters):
        model = _model(X[idx], torch.tensor(ys, dtype=DTYPE), config.noise_std)
        start = time.perf_counter()
        acqf = ChainingUCB(model, X, delta=config.delta)
        x, _ = optimize_acqf_discrete(acqf, q=1, choices=X, unique=False)
        query_seconds += time.perf_counter() - start
        evaluated = torch.zeros(n, dtype=torch.bool)
        evaluated[idx] = True
        start = time.perf_counter()
        # The true prior: the plain certificate (no calibration check).
        acqf.certificate(among=evaluated, options=_PAIRWISE)
        tree_seconds += time.perf_counter() - start
        for name, variant in variants.items():
            options = _options(variant, len(idx))
            start = time.perf_counter()
            cert = acqf.certificate(among=evaluated, options=options)
            seconds[name] += time.perf_counter() - start
            add(name, cert.bound, cert.index)
        # UCB - LCB with GP-UCB's beta_t, same t and posterior.
        start = time.perf_counter()
        beta = gp_ucb_beta(n, len(idx) + 1, config.delta)  # t of the certificates
        ev = evaluated.nonzero().squeeze(-1)
        b = ucb_lcb_bound(acqf.candidate_mean, acqf.candidate_sigma, ev, beta)
        pos = recommend(b, ev, acqf.candidate_mean)
        seconds["ucb-lcb"] += time.perf_counter() - start
        add("ucb-lcb", float(b[pos]), int(ev[pos]))
        # The paper's Eq. (ucb) at the query x_t.
        nxt = int(torch.cdist(x, X).argmin())
        sigma = acqf.candidate_sigma[nxt : nxt + 1]
        add("eq-ucb@query", float(acqf.chaining.regret_bound(sigma)), nxt)
        idx.append(nxt)
        eps = float(torch.randn(1, generator=gen, dtype=DTYPE))
        ys.append(float(f[nxt]) + config.noise_std * eps)
    return {
        "format_version": FORMAT_VERSION,
        "complete": True,
        "problem": problem,
        "seed": int(seed),
        "config": config.key(),
        "n": n,
        "f_max": f_max,
        "f_range": f_range,
        "variants": rec,
        "certificate_seconds": seconds,
        "query_seconds": query_seconds,
        "tree_seconds": tree_seconds,
        "torch_version": torch.__version__,
    }


def _is_complete(record: Any, config: CertificateConfig) -> bool:
    return (
        isinstance(record, dict)
        and record.get("complete") is True
        and record.get("format_version") == FORMAT_VERSION
        and record.get("config") == config.key()
    )


def select(
    records: Iterable[dict[str, Any]], problems: list[str], config: CertificateConfig
) -> list[dict[str, Any]]:
    """The complete runs of ``problems`` made with ``config`` (seeds below
    ``config.runs``), in problem and seed order."""
    keep = [
        r
        for r in records
        if r.get("problem") in problems
        and _is_complete(r, config)
        and r["seed"] < config.runs
    ]
    return sorted(keep, key=lambda r: (problems.index(r["problem"]), r["seed"]))


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def summarize(
    records: list[dict[str, Any]], delta: float = 0.05
) -> list[dict[str, Any]]:
    """Per (problem, variant): violations, usefulness and the checkpoint
    medians of the *running minimum* of the bound (what a user stops on) and
    the true regret of the point that attained it."""
    rows = []
    problems = sorted({r["problem"] for r in records})
    for problem in problems:
        recs = [r for r in records if r["problem"] == problem]
        for name in [*VARIANTS, *OTHERS]:
            steps = violations = runs_violated = within = 0
            first_hit = []
            ratio_range: dict[int, list[float]] = {c: [] for c in CHECKPOINTS}
            ratio_regret: dict[int, list[float]] = {c: [] for c in CHECKPOINTS}
            zero: dict[int, int] = {c: 0 for c in CHECKPOINTS}
            secs = 0.0
            for r in recs:
                v = r["variants"][name]
                bound = torch.tensor(v["bound"], dtype=DTYPE)
                regret = torch.tensor(v["regret"], dtype=DTYPE)
                bad = int((regret > bound).sum())
                steps += bound.numel()
                violations += bad
                runs_violated += bad > 0
                run_min = running_minimum(bound)
                hit = (run_min <= 0.1 * r["f_range"]).nonzero()
                first = int(hit[0]) + 1 if hit.numel() else None
                first_hit.append(first)
                within += first is not None and first <= 60
                arg = [int(torch.argmin(bound[: s + 1])) for s in range(bound.numel())]
                for c in CHECKPOINTS:
                    if c <= bound.numel():
                        b = float(run_min[c - 1])
                        reg = float(regret[arg[c - 1]])
                        ratio_range[c].append(b / r["f_range"])
                        ratio_regret[c].append(b / reg if reg > 0 else math.inf)
                        zero[c] += reg <= 0
                secs += r.get("certificate_seconds", {}).get(name, 0.0)
            hits = [h for h in first_hit if h is not None]
            rows.append(
                {
                    "problem": problem,
                    "variant": name,
                    "runs": len(recs),
                    "steps": steps,
                    "violation_fraction": violations / max(steps, 1),
                    "runs_with_violation": runs_violated,
                    "delta": delta,
                    "runs_within_10pct_by_60": within,
                    "median_first_query_10pct": _median(hits) if hits else None,
                    **{
                        f"median_bound_over_range_{c}": _median(ratio_range[c])
                        for c in CHECKPOINTS
                    },
                    **{
                        f"median_bound_over_regret_{c}": _median(ratio_regret[c])
                        for c in CHECKPOINTS
                    },
                    **{f"runs_zero_regret_{c}": zero[c] for c in CHECKPOINTS},
                    "seconds_per_step": secs / max(steps, 1),
                }
            )
    return rows


def _fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.3g}"


def format_table(rows: list[dict[str, Any]]) -> str:
    """The README's markdown table."""
    head = (
        "| problem | certificate | violations (steps) | runs violated | "
        "runs <= 10% by 60 | B/range @25 | @50 | @100 | B/regret @25 | @50 | @100 "
        "| regret 0 @25/50/100 | s/step |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['problem']} | {r['variant']} | {r['violation_fraction']:.4f} | "
            f"{r['runs_with_violation']}/{r['runs']} | "
            f"{r['runs_within_10pct_by_60']}/{r['runs']} | "
            + " | ".join(_fmt(r[f"median_bound_over_range_{c}"]) for c in CHECKPOINTS)
            + " | "
            + " | ".join(_fmt(r[f"median_bound_over_regret_{c}"]) for c in CHECKPOINTS)
            + " | "
            + "/".join(
                str(r[f"runs_zero_regret_{c}"])
                if r[f"median_bound_over_range_{c}"]
                == r[f"median_bound_over_range_{c}"]
                else "-"
                for c in CHECKPOINTS
            )
            + f" | {r['seconds_per_step']:.3f} |"
        )
    return "\n".join(lines)


def scaling(
    sizes: list[int], num_obs: int = 50, side: float = 20.0, seed: int = 0
) -> list[dict[str, Any]]:
    r"""Union against chaining certificates on one posterior, as ``N`` grows:
    ``N`` uniform points of :math:`[0, \text{side}]^2`, SE kernel with
    lengthscale 1, ``num_obs`` noisy observations of a prior sample drawn at
    those points only; each variant's bound at its recommended point."""
    rows = []
    for n in sizes:
        gen = torch.Generator().manual_seed(seed)
        X = side * torch.rand(n, 2, generator=gen, dtype=DTYPE)
        idx = torch.randperm(n, generator=gen)[:num_obs]
        K = torch.exp(-0.5 * torch.cdist(X[idx], X[idx]).square())
        L = torch.linalg.cholesky(K + 1e-10 * torch.eye(num_obs, dtype=DTYPE))
        y = L @ torch.randn(num_obs, generator=gen, dtype=DTYPE)
        y = y + 0.05 * torch.randn(num_obs, generator=gen, dtype=DTYPE)
        model = _model(X[idx], y, 0.05)
        start = time.perf_counter()
        acqf = ChainingUCB(model, X)
        build = time.perf_counter() - start
        start = time.perf_counter()
        acqf.certificate(options=_PAIRWISE)  # the shared tree
        tree = time.perf_counter() - start
        row: dict[str, Any] = {
            "n": n,
            "num_obs": num_obs,
            "side": side,
            "cover_sizes": acqf.chaining.cover_sizes.tolist(),
            "bounded": acqf.chaining.bounded.tolist(),
            "path": acqf.chaining.info.get("path"),
            "build_seconds": build,
            "tree_seconds": tree,
        }
        for name in ("union", "pairwise", "chaining", "chaining-radius"):
            options = _options(VARIANTS[name], num_obs)
            start = time.perf_counter()
            row[name] = acqf.certificate(options=options).bound
            row[f"{name}_seconds"] = time.perf_counter() - start
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def table(paths: list[str]) -> str:
    """The markdown table of the :func:`scaling` rows saved in ``paths``."""
    lines = [
        "| N | side | obs | path | cover sizes | union | pairwise | chaining | "
        "chaining (radius) | chaining / union |",
        "|---:|---:|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in (r for r in json_lines(paths) if "cover_sizes" in r):
        sizes = ", ".join(
            f"{s}*" if b else str(s)
            for s, b in zip(r["cover_sizes"], r["bounded"], strict=True)
        )
        lines.append(
            f"| {r['n']:,} | {r['side']:g} | {r['num_obs']} | {r['path']} | {sizes} | "
            f"{r['union']:.3f} | {r['pairwise']:.3f} | {r['chaining']:.3f} | "
            f"{r['chaining-radius']:.3f} | {r['chaining'] / r['union']:.2f} |"
        )
    return "\n".join(lines)


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks certificate",
        description="Soundness and usefulness of the regret certificates.",
    )
    add_record_options(parser, "results/certificate", "tiny preset (tests)", False)
    add = parser.add_argument
    add("--problem", default="grid,se", help="grid, se or both")
    for name in ("--runs", "--iters", "--grid-side", "--se-n", "--threads"):
        add(name, type=int)
    add("--table", action="store_true", help="print the finished runs' table only")
    add("--scaling", type=int, nargs="+", metavar="N", help="union vs chaining at N")
    add("--obs", type=int, default=50, help="observations (--scaling)")
    add("--scaling-table", nargs="+", metavar="JSONL", help="the --scaling table")
    add("--side", type=float, default=20.0, help="square (--scaling)")
    args = parser.parse_args(argv)
    if args.scaling_table:
        print(table(args.scaling_table))
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.scaling:
        scaling(args.scaling, num_obs=args.obs, side=args.side)
        return 0
    p = SMALL_CONFIG if args.small else DEFAULT_CONFIG
    fill_preset(args, {"grid_side": p.grid_side, "se_n": p.se_n})
    fill_preset(args, {"iters": p.iters, "runs": p.runs})
    config = CertificateConfig(
        args.grid_side, args.se_n, args.iters, args.runs, n_init=p.n_init
    )
    problems = parse_names(args.problem, PROBLEMS, "problem")
    if config.iters < 1 or config.runs < 1 or config.grid_side < 4 or config.se_n < 20:
        raise SystemExit(
            "error: need --iters >= 1, --runs >= 1, --grid-side >= 4, --se-n >= 20; "
            f"got --iters {config.iters}, --runs {config.runs}, --grid-side "
            f"{config.grid_side}, --se-n {config.se_n}."
        )
    start = time.perf_counter()
    args.summary_only = args.summary_only or args.table
    # Every (problem, seed); a run of another configuration is refused.
    tasks = [(p, s) for p in problems for s in range(config.runs)]
    run = functools.partial(run_one, config=config)
    kw = {
        "refuse_other": True,
        "complete": functools.partial(_is_complete, config=config),
    }
    records = resume(args, "certificate", tasks, config.key(), run, **kw)
    rows = summarize(select(records, problems, config), config.delta)
    text = format_table(rows)
    if args.table:
        print(text)
        return 0
    meta: dict[str, Any] = {"config": {**config.key(), "runs": config.runs}}
    if not args.summary_only:  # the same records give the same summary bytes
        meta["wall_seconds_this_call"] = time.perf_counter() - start
    safe = [{k: _json_safe(v) for k, v in row.items()} for row in rows]
    write_summary(
        args.out, command_line(["certificate", *argv]), text, {**meta, "rows": safe}
    )
    for row in safe:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
