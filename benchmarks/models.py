r"""Which model for molecule libraries? Leave-one-out fit of every encoding x prior.

Each model of :data:`MODELS` is fitted as Ax fits it to a random subset and
scored by :func:`loo_predictions`; one JSON line per fit, appended to ``--out``
(a run resumes); ``--table FILE`` writes ``summary.md`` (``docs/results/models.md``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from benchmarks._tables import json_lines, parse_names

DTYPE = torch.float64
DATASETS = ("esol", "freesolv", "lipo")
SIZES = (50, 200)
MODELS = tuple(
    # ``:corr0.7``: BayBE's decorrelation threshold instead of the encoding's
    # 0.95; ``:chen``: BayBE 0.15's own priors (mordred:chen:corr0.7 is its
    # model of a molecule).
    "morgan_bits:botorch morgan_counts:botorch morgan_counts:baybe "
    "fragprints:botorch fragprints:baybe rdkit2d:botorch rdkit2d:botorch:rbf "
    "rdkit2d:botorch:std rdkit2d:baybe mordred:botorch mordred:baybe "
    "rdkit2d:botorch:rbf:corr0.7 rdkit2d:baybe:corr0.7 mordred:baybe:corr0.7 "
    "rdkit2d:chen mordred:chen:corr0.7".split()
)
# What the headline columns are sorted and compared by.
MEASURES = ("loo_ll", "loo_rmse", "loo_z2")


def subset(num_items: int, size: int, seed: int) -> np.ndarray:
    """The first ``size`` of a seeded permutation: nested across sizes."""
    return np.random.default_rng(seed).permutation(num_items)[:size]


def loo_predictions(model: Any) -> tuple[Tensor, Tensor]:
    r"""Closed-form leave-one-out means and variances of an exact GP, in
    outcome units, with the model's hyperparameters: item :math:`i` has mean
    :math:`y_i - [K^{-1} r]_i / [K^{-1}]_{ii}` and variance
    :math:`1 / [K^{-1}]_{ii}` (Rasmussen and Williams, 2006, eq. 5.12)."""
    model.eval()
    X = model.train_inputs[0]
    y = model.train_targets
    r = y - model.mean_module(X)
    noise = model.likelihood.noise.reshape(-1).expand(X.shape[0])
    with torch.no_grad():
        K = model.covar_module(X).to_dense() + torch.diag_embed(noise)
        inverse = torch.cholesky_inverse(torch.linalg.cholesky(K))
        diag = inverse.diagonal()
        mean = y - (inverse @ r) / diag
        var = 1.0 / diag
    transform = getattr(model, "outcome_transform", None)
    if transform is not None:
        std = transform.stdvs.reshape(())
        mean = mean * std + transform.means.reshape(())
        var = var * std**2
    return mean.detach(), var.detach()


def _parse_model(name: str) -> tuple[str, str, str, str, float | None]:
    """``(encoding, prior, kernel, scale, max_correlation)`` of a model name of
    :data:`MODELS` (``max_correlation`` None: the encoding's default)."""
    parts = name.split(":")
    encoding, prior, extra = parts[0], parts[1], parts[2:]
    kernel = "rbf" if "rbf" in extra else "matern52"
    scale = "standardize" if "std" in extra else "unit"
    corr = [float(e.removeprefix("corr")) for e in extra if e.startswith("corr")]
    return encoding, prior, kernel, scale, (corr[0] if corr else None)


def build_model(name: str, raw: np.ndarray, y: Tensor) -> tuple[Any, int]:
    """The unfitted ``SingleTaskGP`` of model ``name`` on a subset's raw
    encoding, and the number of feature columns it sees."""
    from botorch.models import SingleTaskGP
    from botorch.models.transforms import Standardize

    from ax_chaining.kernels import FeatureTableKernel, PrecomputedKernel
    from ax_chaining.molecules import (
        COUNT_ENCODINGS,
        clean_features,
        default_cleaning,
        tanimoto_gram,
    )
    from benchmarks.testbeds import feature_table_likelihood

    encoding, prior, kernel, scale, max_correlation = _parse_model(name)
    n = raw.shape[0]
    X = torch.linspace(0, 1, n, dtype=DTYPE).unsqueeze(-1)
    Y = y.reshape(-1, 1).to(DTYPE)
    if encoding == "morgan_bits":
        gram = tanimoto_gram(torch.from_numpy(raw))
        covar = PrecomputedKernel(gram, normalized_inputs=True)
        model = SingleTaskGP(X, Y, covar_module=covar, outcome_transform=Standardize(1))
        return model, raw.shape[1]
    options = default_cleaning(encoding)
    if encoding not in COUNT_ENCODINGS:
        options["scale"] = scale
    if max_correlation is not None:
        options["max_correlation"] = max_correlation
    features = torch.from_numpy(clean_features(raw, **options).values)
    base = "minmax" if encoding in COUNT_ENCODINGS else kernel
    covar = FeatureTableKernel(features, base=base, prior=prior, normalized_inputs=True)
    model = SingleTaskGP(
        X,
        Y,
        covar_module=covar,
        likelihood=feature_table_likelihood(prior, features.shape[1]),
        outcome_transform=Standardize(1),
    )
    return model, features.shape[1]


def evaluate(name: str, raw: np.ndarray, y: Tensor) -> dict[str, Any]:
    """Fit model ``name`` and measure its leave-one-out predictions."""
    from botorch.fit import fit_gpytorch_mll
    from gpytorch.mlls import ExactMarginalLogLikelihood

    start = time.perf_counter()
    model, dims = build_model(name, raw, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BoTorch's input-scaling notices
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    seconds = time.perf_counter() - start
    mean, var = loo_predictions(model)
    y = y.to(DTYPE)
    err = y - mean
    ll = -0.5 * (torch.log(2 * math.pi * var) + err.square() / var)
    return {
        "dims": int(dims),
        "loo_ll": float(ll.mean()),
        "loo_rmse": float(err.square().mean().sqrt()),
        "loo_z2": float((err.square() / var).mean()),
        "noise": float(model.likelihood.noise.detach().reshape(-1)[0]),
        "fit_seconds": round(seconds, 3),
    }


def _raw_encodings(
    dataset: str, rows: np.ndarray, encodings: set[str], cache: Path
) -> dict[str, np.ndarray]:
    """Raw encodings of a dataset's rows ``rows`` (sorted), cached under ``cache``."""
    from ax_chaining.molecules import encode_molecules, morgan_fingerprints
    from ax_chaining.test_functions.molecules import load_dataset

    smiles = load_dataset(dataset).smiles
    out = {}
    for encoding in sorted(encodings):
        file = cache / f"{dataset}-{encoding}-{len(rows)}.npz"
        if file.is_file():
            stored = np.load(file)
            if np.array_equal(stored["rows"], rows):
                out[encoding] = stored["values"]
                continue
        message = f"models: encoding {dataset} {encoding} ({len(rows)} molecules)"
        print(message, file=sys.stderr, flush=True)
        chosen = [smiles[i] for i in rows]
        if encoding == "morgan_bits":
            values = morgan_fingerprints(chosen).numpy()
        else:
            values = encode_molecules(chosen, encoding)[0]
        cache.mkdir(parents=True, exist_ok=True)
        np.savez(file, rows=rows, values=values)
        out[encoding] = values
    return out


def run(
    datasets: list[str],
    sizes: list[int],
    seeds: list[int],
    models: list[str],
    out: Path | None,
    cache: Path,
) -> list[dict[str, Any]]:
    """Every (dataset, size, seed, model) not yet in ``out``; returns the new lines."""
    from ax_chaining.test_functions.molecules import load_dataset

    stored = json_lines([out]) if out is not None and out.is_file() else []
    done = {(r["dataset"], r["size"], r["seed"], r["model"]) for r in stored}
    # Seed by seed: a run stopped early leaves whole seeds over every cell.
    tasks = [
        (d, s, seed, m)
        for seed in seeds
        for d in datasets
        for s in sizes
        for m in models
        if (d, s, seed, m) not in done
    ]
    lines = []
    for k, (dataset, size, seed, model) in enumerate(tasks):
        data = load_dataset(dataset)
        union = np.unique([subset(len(data), max(sizes), s) for s in seeds])
        raw = _raw_encodings(
            dataset, union, {_parse_model(m)[0] for m in models}, cache
        )
        rows = subset(len(data), size, seed)
        at = np.searchsorted(union, rows)
        encoding = _parse_model(model)[0]
        record = {"dataset": dataset, "size": size, "seed": seed, "model": model}
        record |= evaluate(model, raw[encoding][at], data.y[torch.from_numpy(rows)])
        text = json.dumps(record, sort_keys=True)
        print(text, flush=True)
        print(
            f"models: {k + 1}/{len(tasks)} {dataset} n={size} seed={seed} {model}: "
            f"ll={record['loo_ll']:.3f} rmse={record['loo_rmse']:.3f} "
            f"({record['fit_seconds']:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            with out.open("a") as fh:
                fh.write(text + "\n")
        lines.append(record)
    return lines


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard error over seeds of each measure, per dataset, size, model."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[(r["dataset"], r["size"], r["model"])].append(r)
    rows = []
    for (dataset, size, model), rs in sorted(groups.items()):
        row: dict[str, Any] = {
            "dataset": dataset,
            "size": size,
            "model": model,
            "seeds": len(rs),
            "dims": statistics.median(r["dims"] for r in rs),
            "fit_seconds": statistics.mean(r["fit_seconds"] for r in rs),
        }
        for m in MEASURES:
            values = [r[m] for r in rs]
            row[m] = statistics.mean(values)
            n = len(values)
            row[m + "_se"] = statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0
        rows.append(row)
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one table per dataset and size, models in :data:`MODELS` order,
    then the mean rank of each model's ``loo_ll`` over the (dataset, size) cells."""
    order = {m: i for i, m in enumerate(MODELS)}
    out = []
    cells = sorted({(r["dataset"], r["size"]) for r in rows})
    ranks: dict[str, list[int]] = defaultdict(list)
    for dataset, size in cells:
        cell = [r for r in rows if (r["dataset"], r["size"]) == (dataset, size)]
        cell.sort(key=lambda r: order.get(r["model"], len(order)))
        for rank, r in enumerate(sorted(cell, key=lambda r: -r["loo_ll"]), 1):
            ranks[r["model"]].append(rank)
        out += [
            f"### {dataset}, {size} molecules",
            "",
            "| model | features | LOO log-lik. | LOO RMSE | mean z^2 | fit s | seeds |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in cell:
            out.append(
                f"| {r['model']} | {r['dims']:g} | {r['loo_ll']:.3f} ± "
                f"{r['loo_ll_se']:.3f} | {r['loo_rmse']:.3f} ± {r['loo_rmse_se']:.3f}"
                f" | {r['loo_z2']:.2f} | {r['fit_seconds']:.1f} | {r['seeds']} |"
            )
        out.append("")
    out += [
        "### Mean rank by LOO log-likelihood over the library x size cells",
        "",
        "| model | mean rank | cells |",
        "|---|---:|---:|",
    ]
    for model in sorted(ranks, key=lambda m: statistics.mean(ranks[m])):
        mean = statistics.mean(ranks[model])
        out.append(f"| {model} | {mean:.2f} | {len(ranks[model])} |")
    return "\n".join(out) + "\n"


def table(paths: list[str]) -> str:
    """The summary table of the JSON lines in ``paths`` (what ``--table`` writes)."""
    return format_table(summarize(json_lines(paths)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks models")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", help="JSON-lines file (appended)")
    parser.add_argument("--cache", default="results/models_cache", help="encodings")
    parser.add_argument("--table", metavar="FILE", help="summary.md beside FILE")
    parser.add_argument("--small", action="store_true", help="FreeSolv, 30, (a test)")
    args = parser.parse_args(argv)
    if args.table is not None:
        text = table([args.table])
        (Path(args.table).parent / "summary.md").write_text(text)
        print(text)
        return 0
    datasets, sizes, seeds = list(DATASETS), list(SIZES), list(range(5))
    models = parse_names(args.models, MODELS, "model")
    if args.small:
        datasets, sizes, seeds = ["freesolv"], [30], [0]
        models = ["morgan_bits:botorch", "fragprints:baybe", "rdkit2d:botorch"]
    mordred = [m for m in models if m.startswith("mordred")]
    if mordred and importlib.util.find_spec("mordred") is None:
        print("models: mordredcommunity is not installed: no mordred", file=sys.stderr)
        models = [m for m in models if m not in mordred]
    out = None if args.out is None else Path(args.out)
    default = torch.get_default_dtype()
    torch.set_default_dtype(DTYPE)
    try:
        run(datasets, sizes, seeds, models, out, Path(args.cache))
    finally:  # main() also runs inside other processes (the tests)
        torch.set_default_dtype(default)
    return 0


if __name__ == "__main__":
    sys.exit(main())
