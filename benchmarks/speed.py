r"""Speed and memory of one Chaining-UCB step against stock UCB (SE, Tanimoto or
feature-table problems); one JSON line per result, ``--table`` renders the
docs' tables. Imports nothing of ``benchmarks``, so ``python
benchmarks/speed.py`` measures whichever ``ax_chaining`` is on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from inspect import signature
from pathlib import Path
from typing import Any

import numpy as np
import torch

DTYPE = torch.float64


def random_fingerprints(n: int, seed: int, path: Path | None = None) -> Any:
    """``n`` random fingerprints, 40 to 60 of 2,048 bits set a row; in a
    library file at ``path`` if given."""
    from ax_chaining.kernels import PackedFingerprints

    rng = np.random.default_rng(seed)
    words = (
        PackedFingerprints.allocate(path, n, 2048)
        if path is not None
        else np.zeros((n, 32), dtype=np.uint64)
    )
    for start in range(0, n, 100_000):
        size = min(n, start + 100_000) - start
        chunk = np.zeros((size, 32), dtype=np.uint64)
        k = rng.integers(40, 61, size)
        cols = rng.integers(0, 2048, (size, 60))
        keep = np.arange(60) < k[:, None]
        rows = np.repeat(np.arange(size), keep.sum(1))
        bits = cols[keep]
        one = np.uint64(1) << (bits % 64).astype(np.uint64)
        np.bitwise_or.at(chunk, (rows, bits // 64), one)
        words[start : start + size] = chunk
        if n >= 2_000_000 and (start + size) % 1_000_000 == 0:
            print(f"generated {start + size:,} of {n:,} fingerprints", file=sys.stderr)
    if path is None:
        return PackedFingerprints(words, 2048, validate=False)
    words.flush()
    del words
    return PackedFingerprints.open(path)


def _problem(
    n: int,
    num_obs: int,
    seed: int,
    device: str = "cpu",
    kernel: str = "se",
    library: str | None = None,
    dims: int = 200,
) -> tuple[Any, torch.Tensor]:
    """A GP with ``num_obs`` observations at random candidates (noise sd 0.05),
    and the candidates: ``n`` points of a square of side 20 (SE kernel), items
    of a fingerprint library (the first rows of ``library``, or random;
    Tanimoto) or of an ``n x dims`` feature table (a smooth map of 8 latent
    coordinates; ARD Matern-5/2, CHEN priors). Drawn on the CPU."""
    from botorch.models import SingleTaskGP
    from gpytorch.kernels import RBFKernel, ScaleKernel

    g = torch.Generator().manual_seed(seed)
    if kernel == "se":
        C = 20.0 * torch.rand(n, 2, generator=g, dtype=DTYPE)
        obs = torch.randperm(n, generator=g)[:num_obs]
        X = C[obs]
        Y = torch.sin(X[:, :1]) + torch.cos(X[:, 1:])
        Y = Y + 0.05 * torch.randn(num_obs, 1, generator=g, dtype=DTYPE)
        covar = ScaleKernel(RBFKernel()).to(DTYPE)
        covar.base_kernel.lengthscale = 1.0
        covar.outputscale = 1.0
    else:  # items: an index into a library or a feature table
        if kernel == "tanimoto":
            from ax_chaining.kernels import PackedFingerprints, TanimotoKernel

            if library:
                full = PackedFingerprints.open(library)
                lib = PackedFingerprints(full.words[:n], full.n_bits, validate=False)
            else:
                lib = random_fingerprints(n, seed)
            covar = ScaleKernel(TanimotoKernel(library=lib)).to(DTYPE)
            covar.outputscale = 1.0
        else:
            from ax_chaining.kernels import FeatureTableKernel

            W = torch.randn(8, dims, generator=g, dtype=DTYPE)
            # In blocks: one N x 8 @ 8 x d product at a time, never N x d twice.
            table = torch.empty(n, dims, dtype=DTYPE)
            for start in range(0, n, 100_000):
                Z = torch.randn(min(n - start, 100_000), 8, generator=g, dtype=DTYPE)
                table[start : start + 100_000] = torch.sigmoid(Z @ W)
            covar = FeatureTableKernel(table, base="matern52", prior="chen").to(DTYPE)
        C = torch.arange(n, dtype=DTYPE).unsqueeze(-1)
        X = C[torch.randperm(n, generator=g)[:num_obs]]
        Y = torch.randn(num_obs, 1, generator=g, dtype=DTYPE)
    model = SingleTaskGP(X, Y, covar_module=covar, outcome_transform=None)
    model.likelihood.noise = 0.05**2
    return model.to(device).eval(), C.to(device)


def _args_problem(args: argparse.Namespace, n: int, device: str = "cpu") -> tuple:
    return _problem(
        n, args.obs, args.seed, device, args.kernel, args.library, args.dims
    )


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _machine() -> dict[str, Any]:
    return {
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def _warm_up(model: Any, C: torch.Tensor) -> Any:
    """A step on a small set first: imports, caches and kernels loaded."""
    from botorch.optim import optimize_acqf_discrete

    from ax_chaining import ChainingUCB

    small = C[: min(C.shape[0], 300)]
    acqf = ChainingUCB(model, small)
    optimize_acqf_discrete(acqf, q=1, choices=small)
    return acqf


def _worker(args: argparse.Namespace) -> dict:
    """One (method, N, q) in this process: the median of ``--repeats`` steps."""
    from botorch.acquisition import UpperConfidenceBound
    from botorch.optim import optimize_acqf_discrete

    from ax_chaining import ChainingUCB

    baseline = _rss_mb()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    model, C = _args_problem(args, args.n, args.device)
    times, info = [], {}
    if cuda:  # the first CUDA call loads the context and kernels
        with torch.no_grad():
            _warm_up(model, C)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(args.repeats):
        start = time.perf_counter()
        with torch.no_grad():
            if args.method == "chaining":
                acqf = ChainingUCB(
                    model, C, path=args.path, pending_covers=args.pending_covers
                )
            else:
                acqf = UpperConfidenceBound(model, beta=0.2)
            optimize_acqf_discrete(acqf, q=args.q, choices=C)
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
        if args.method == "chaining":
            res = acqf.chaining
            info = {
                **({"pending_covers": args.pending_covers} if args.q > 1 else {}),
                "path": res.info["path"],
                "cover": res.cover_method,
                "levels": res.num_levels,
                "cover_sizes": res.cover_sizes.tolist(),
                "bounded_levels": int(res.bounded.sum()),
            }
    gpu = {}
    if cuda:
        gpu["gpu"] = torch.cuda.get_device_name(device)
        gpu["peak_gpu_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return {
        "method": args.method,
        "n": args.n,
        "q": args.q,
        "obs": args.obs,
        "repeats": args.repeats,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "peak_rss_mb": _rss_mb(),
        "baseline_rss_mb": baseline,
        "device": str(device),
        "kernel": args.kernel,
        **({"dims": args.dims} if args.kernel == "features" else {}),
        **gpu,
        **info,
    }


def _run_worker(
    method: str, n: int, q: int, args: argparse.Namespace, pending: str = "rebuild"
) -> dict:
    options = {"method": method, "n": n, "q": q, "pending-covers": pending}
    for k in ("obs", "repeats", "seed", "path", "device", "kernel", "dims", "library"):
        options[k] = getattr(args, k)
    cmd = [sys.executable, "-m", "benchmarks.speed", "--worker"]
    cmd += [f"--{k}={v}" for k, v in options.items() if v is not None]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"method": method, "n": n, "q": q, "error": out.stderr.strip()[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median_s(
    fn: Callable[[], object],
    repeats: int,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Median over ``repeats`` calls of ``fn`` of the seconds ``clock`` counts."""
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def _cpu_time_rows(n: int, args: argparse.Namespace) -> list[dict]:
    """CPU seconds of UCB, a ChainingUCB step and batches, one thread."""
    from botorch.acquisition import UpperConfidenceBound
    from botorch.optim import optimize_acqf_discrete

    import ax_chaining
    from ax_chaining import ChainingUCB

    def cpu(make: Callable[[], Any], q: int, repeats: int) -> float:
        step = lambda: optimize_acqf_discrete(make(), q=q, choices=C)  # noqa: E731
        return _median_s(step, repeats, clock=time.process_time)

    model, C = _args_problem(args, n)
    with torch.no_grad():
        _warm_up(model, C)
        row = {"bench": "cpu_time", "n": n, "obs": args.obs, "threads": 1}
        row["kernel"] = args.kernel
        row["engine"] = args.label or str(Path(ax_chaining.__file__).parent)
        ucb = lambda: UpperConfidenceBound(model, beta=0.2)  # noqa: E731
        row["ucb_cpu_s"] = cpu(ucb, 1, args.repeats)
        for q in args.q:
            chaining = lambda: ChainingUCB(model, C)  # noqa: E731
            row[f"q{q}_cpu_s"] = cpu(chaining, q, args.repeats if q == 1 else 1)
            row[f"q{q}_ratio_to_ucb"] = row[f"q{q}_cpu_s"] / row["ucb_cpu_s"]
            # An earlier engine (measured with this script) may lack the option.
            if q > 1 and "pending_covers" in signature(ChainingUCB).parameters:
                reuse = lambda: ChainingUCB(model, C, pending_covers="reuse")  # noqa: E731
                row[f"q{q}_reuse_cpu_s"] = cpu(reuse, q, 1)
    return [row]


def _certificate_rows(n: int, args: argparse.Namespace) -> list[dict]:
    """Wall seconds of a UCB step, a ChainingUCB step, its plain certificate
    and ``certify_model``'s union-bound certificate (medians; synchronized on
    a GPU)."""
    from botorch.acquisition import UpperConfidenceBound
    from botorch.optim import optimize_acqf_discrete

    import ax_chaining
    from ax_chaining import ChainingUCB
    from ax_chaining.certificate import certify_model

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    # The plain certificate in the spelling of whichever engine is measured.
    try:
        from ax_chaining.certificate import CertificateOptions

        plain: dict[str, Any] = {"options": CertificateOptions(calibration="none")}
    except ImportError:  # an earlier engine: no CertificateOptions yet
        plain = {"calibration": "none"}

    def wall(fn: Callable[[], object]) -> tuple[float, object]:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        out = fn()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - start, out

    def step() -> Any:  # the covers built with the acquisition, then scored
        acqf = ChainingUCB(model, C, path=args.path)
        optimize_acqf_discrete(acqf, q=1, choices=C)
        return acqf

    model, C = _args_problem(args, n, args.device)
    times: dict[str, list[float]] = {"ucb": [], "step": [], "cert": [], "union": []}
    with torch.no_grad():
        _warm_up(model, C).certificate(among="all")
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(args.repeats):
            seconds, acqf = wall(step)
            times["step"].append(seconds)
            seconds, cert = wall(lambda a=acqf: a.certificate(**plain))
            times["cert"].append(seconds)
            ucb = UpperConfidenceBound(model, beta=0.2)
            seconds, _ = wall(lambda u=ucb: optimize_acqf_discrete(u, q=1, choices=C))
            times["ucb"].append(seconds)
            seconds, union = wall(lambda: certify_model(model, C, **plain))
            times["union"].append(seconds)
    res = acqf.chaining
    row = {
        "bench": "certificate",
        "n": n,
        "obs": args.obs,
        "repeats": args.repeats,
        "kernel": args.kernel,
        **({"dims": args.dims} if args.kernel == "features" else {}),
        "engine": args.label or str(Path(ax_chaining.__file__).parent),
        "device": str(device),
        "path": res.info.get("path"),
        "cover": res.cover_method,
        "cover_sizes": res.cover_sizes.tolist(),
        "ucb_s": statistics.median(times["ucb"]),
        "step_s": statistics.median(times["step"]),
        "certificate_s": statistics.median(times["cert"]),
        "model_certificate_s": statistics.median(times["union"]),
        "calibration": "none",
        "bound": float(cert.bound),
        "rank_bound": int(cert.rank_bound),
        "model_bound": float(union.bound),
        "peak_rss_mb": _rss_mb(),
        **_machine(),
    }
    if cuda:
        row["gpu"] = torch.cuda.get_device_name(device)
        row["peak_gpu_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    row["certificate_ratio_to_step"] = row["certificate_s"] / row["step_s"]
    return [row]


def _floor_rows(n: int, args: argparse.Namespace) -> list[dict]:
    """A UCB step, a ChainingUCB step and the least any exact greedy cover does:
    each pair of d_t^2 once against one radius (float64, and float32)."""
    import copy

    from botorch.acquisition import UpperConfidenceBound
    from botorch.optim import optimize_acqf_discrete

    from ax_chaining import ChainingUCB
    from ax_chaining.posterior import candidate_posterior

    # Below every positive squared distance of these problems: the graph keeps
    # the N self-pairs only, so the pass is the pairs and one comparison each.
    radius = 1e-150
    model, C = _problem(n, args.obs, args.seed)
    single = copy.deepcopy(model).to(torch.float32)
    row: dict = {"bench": "floor", "n": n, "obs": args.obs}
    with torch.no_grad():
        _warm_up(model, C)
        ucb = lambda: UpperConfidenceBound(model, beta=0.2)  # noqa: E731
        for key, make in (("ucb", ucb), ("step", lambda: ChainingUCB(model, C))):
            step = lambda m=make: optimize_acqf_discrete(m(), q=1, choices=C)  # noqa: E731
            row[f"{key}_s"] = _median_s(step, args.repeats)
        for key, m, c in (("floor", model, C), ("floor32", single, C.float())):
            distance = candidate_posterior(m, c, path="low_rank").distance
            row[f"{key}_s"] = _median_s(
                lambda d=distance: d.level_graph([radius]), args.repeats
            )
            row[f"{key}_edges"] = distance.level_graph([radius]).num_edges
    for key in ("step", "floor", "floor32"):
        row[f"{key}_ratio"] = row[f"{key}_s"] / row["ucb_s"]
    return [{**row, "repeats": args.repeats, **_machine()}]


def _rows_rows(n: int, args: argparse.Namespace) -> list[dict]:
    """A block of rows of d_t^2 against the same block of prior kernel rows."""
    from ax_chaining.posterior import candidate_posterior

    model, C = _problem(n, args.obs, args.seed)
    repeats = max(3, args.repeats)
    with torch.no_grad():
        distance = candidate_posterior(model, C, path="low_rank").distance
        idx = torch.arange(min(n, 1000))
        kernel = _median_s(lambda: model.covar_module(C[idx], C).to_dense(), repeats)
        dist2 = _median_s(lambda: distance.rows(idx), repeats)
    return [
        {
            "bench": "rows",
            "n": n,
            "rows": idx.numel(),
            "obs": args.obs,
            "kernel_rows_s": kernel,
            "dist2_rows_s": dist2,
            "ratio": dist2 / kernel,
        }
    ]


def _compare_covers_rows(n: int, args: argparse.Namespace) -> list[dict]:
    """Per seed, exact greedy covers (dense path) against farthest-first covers
    (low-rank path) on one posterior: sizes, and whether the pick differs."""
    seeds = range(args.seed, args.seed + args.repeats)
    return [_compare_covers(n, seed, args) for seed in seeds]


def _compare_covers(n: int, seed: int, args: argparse.Namespace) -> dict:
    from ax_chaining import ChainingUCB

    model, C = _problem(n, args.obs, seed)
    timing, acqfs = {}, {}
    dense = {"path": "dense", "cover": "greedy"}
    low_rank = {"path": "low_rank", "cover": "farthest_first", "max_cover_size": n}
    for name, kwargs in (("greedy", dense), ("farthest_first", low_rank)):
        start = time.perf_counter()
        acqfs[name] = ChainingUCB(model, C, **kwargs)
        timing[name] = time.perf_counter() - start
    greedy, ff = acqfs["greedy"], acqfs["farthest_first"]
    with torch.no_grad():
        values, values_ff = greedy(C.unsqueeze(1)), ff(C.unsqueeze(1))
    pick, pick_ff = int(values.argmax()), int(values_ff.argmax())
    sizes = greedy.chaining.cover_sizes.tolist()
    sizes_ff = ff.chaining.cover_sizes.tolist()
    return {
        "bench": "compare_covers",
        "n": n,
        "obs": args.obs,
        "seed": seed,
        "greedy_sizes": sizes,
        "farthest_first_sizes": sizes_ff,
        "size_ratio": [round(b / a, 4) for a, b in zip(sizes, sizes_ff, strict=True)],
        "same_selection": pick == pick_ff,
        # The greedy path's value lost by taking the farthest-first choice.
        "value_gap": float(values[pick] - values[pick_ff]),
        "greedy_s": timing["greedy"],
        "farthest_first_s": timing["farthest_first"],
    }


#: Targets (seconds, GB) for ChainingUCB per (N, q): SE, Tanimoto, one GPU.
TARGETS = {
    (10_000, 1): (0.5, None),
    (10_000, 5): (2.5, None),
    (100_000, 1): (3.0, None),
    (1_000_000, 1): (30.0, 4.0),
}
TANIMOTO_TARGETS = {(100_000, 1): (6.0, None), (1_000_000, 1): (60.0, 8.0)}
GPU_TARGETS = {(1_000_000, 1): (5.0, None)}
_KERNEL_LABELS = {"se": "", "tanimoto": ", Tanimoto", "features": ", feature table"}
#: Earlier measurements of one step (seconds, ratio to UCB): the level-matrix
#: engine on an idle machine of the same kind.
PREVIOUS = {
    (1000, 1): (0.0277, 7.66),
    (10_000, 1): (1.84, 66.3),
    (100_000, 1): (4.82, 20.6),
    (1_000_000, 1): (59.2, 34.4),
}


def _target(target: tuple[float, float | None] | None) -> str:
    if target is None:
        return ""
    seconds, gb = target
    return f"{seconds:g} s" + ("" if gb is None else f" / {gb:g} GB")


def _row(*cells: Any) -> str:
    return "| " + " | ".join(map(str, cells)) + " |"


def _step_line(r: dict) -> str:
    key = (r["n"], r.get("q", 1))
    chaining = r["method"] == "chaining"
    how = f"{r['path']} / {r['cover']}" if "path" in r else "-"
    if "pending_covers" in r:
        how += f", pending: {r['pending_covers']}"
    kernel = r.get("kernel", "se")
    gpu = str(r.get("device", "cpu")).startswith("cuda")
    # A feature table has no targets of its own: it is measured, not judged.
    targets = {"se": TARGETS, "tanimoto": TANIMOTO_TARGETS}.get(kernel, {})
    targets = GPU_TARGETS if gpu and kernel in ("se", "tanimoto") else targets
    previous = PREVIOUS.get(key) if chaining and kernel == "se" and not gpu else None
    label = _KERNEL_LABELS.get(kernel, f", {kernel}")
    method = ("ChainingUCB" if chaining else "UCB") + label
    gpu_gb = r.get("peak_gpu_mb")
    return _row(
        f"{r['n']:,}",
        key[1],
        method,
        how,
        f"{r['median_s']:.3g}",
        f"{r['ratio_to_ucb']:.3g}" if "ratio_to_ucb" in r else "-",
        f"{r['peak_rss_mb'] / 1024:.2f}"
        + ("" if gpu_gb is None else f" + {gpu_gb / 1024:.2f} on GPU"),
        _target(targets.get(key)) if chaining else "",
        "" if previous is None else f"{previous[0]:.3g}, {previous[1]:.3g}",
    )


def _cpu_line(r: dict) -> str:
    q5, reuse = r.get("q5_cpu_s"), r.get("q5_reuse_cpu_s")
    q5_cells = (
        "| | |"
        if q5 is None
        else f"| {q5:.3g} | {r['q5_ratio_to_ucb']:.3g} "
        f"| {'-' if reuse is None else f'{reuse:.3g}'} |"
    )
    return (
        f"| {r['n']:,} | {r['engine']} | {r['ucb_cpu_s']:.3g} | {r['q1_cpu_s']:.3g} "
        f"| {r['q1_ratio_to_ucb']:.3g} {q5_cells}"
    )


def _rows_line(r: dict) -> str:
    keys = ("kernel_rows_s", "dist2_rows_s", "ratio")
    return _row(f"{r['n']:,}", r["rows"], *(f"{r[k]:.3g}" for k in keys))


def _certificate_line(r: dict) -> str:
    return _row(
        f"{r['n']:,}",
        r["engine"],
        r.get("gpu") or "CPU",
        *(f"{r[k]:.3g}" for k in ("ucb_s", "step_s", "certificate_s")),
        *(f"{r[k]:.3g}" for k in ("certificate_ratio_to_step", "model_certificate_s")),
        f"{r['rank_bound']:,}",
    )


def _floor_line(r: dict) -> str:
    keys = ("ucb_s", "step_s", "step_ratio", "floor_s", "floor_ratio", "floor32_s")
    return _row(f"{r['n']:,}", *(f"{r[k]:.3g}" for k in (*keys, "floor32_ratio")))


def _covers_line(r: dict) -> str:
    same = "yes" if r["same_selection"] else f"no (value gap {r['value_gap']:.3g})"
    sizes = (r["greedy_sizes"], r["farthest_first_sizes"], r["size_ratio"])
    return _row(f"{r['n']:,}", r["seed"], *sizes, same)


#: The tables: the ``bench`` of their lines, their header, one line of
#: markdown per JSON line.
_SECTIONS: list[tuple[str, str, str, Callable[[dict], str]]] = [
    (
        "step",
        "| N | q | method | path / covers | median s | ratio to UCB | peak RSS GB "
        "| target | previous (idle): s, ratio |",
        "|---:|---:|---|---|---:|---:|---:|---|---:|",
        _step_line,
    ),
    (
        "cpu_time",
        "| N | engine | UCB CPU s | step CPU s | step / UCB | q = 5 CPU s "
        "| q = 5 / UCB | q = 5 CPU s, covers reused |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
        _cpu_line,
    ),
    (
        "certificate",
        "| N | engine | device | UCB step s | ChainingUCB step s "
        "| its certificate s | certificate / step | union certificate s "
        "| rank bound |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|",
        _certificate_line,
    ),
    (
        "rows",
        "| N | rows | kernel rows s | d_t^2 rows s | ratio |",
        "|---:|---:|---:|---:|---:|",
        _rows_line,
    ),
    (
        "floor",
        "| N | UCB step s | ChainingUCB step s | step / UCB "
        "| every pair once s | / UCB | the same in float32 s | / UCB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        _floor_line,
    ),
    (
        "compare_covers",
        "| N | seed | greedy \\|T_i\\| | farthest-first \\|T_i\\| | ratio "
        "| same point |",
        "|---:|---:|---|---|---|---|",
        _covers_line,
    ),
]


def table(paths: list[str]) -> str:
    """The docs' markdown tables of the JSON lines in ``paths``."""
    lines = [line for p in paths for line in Path(p).read_text().splitlines()]
    rows = [json.loads(line) for line in lines if line.strip()]
    out: list[str] = []
    for bench, header, rule, fmt in _SECTIONS:
        body = [
            fmt(r)
            for r in rows
            if r.get("bench") == bench and (bench != "step" or "median_s" in r)
        ]
        if body:
            out += [*([""] if out else []), header, rule, *body]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks speed")
    add = parser.add_argument
    add("--sizes", "--n", dest="n", type=int, nargs="+", default=[1000, 10_000])
    add("--q", type=int, nargs="+", default=[1, 5], help="batch sizes")
    add("--obs", type=int, default=50, help="observations")
    add("--repeats", type=int, default=3)
    add("--small", "--quick", dest="quick", action="store_true", help="N = 500, once")
    add("--rows", action="store_true", help="rows of d_t^2 against kernel rows")
    add("--cpu-time", action="store_true", help="CPU seconds, one thread")
    add("--label", help="the engine's name in --cpu-time and --certificate")
    add("--certificate", action="store_true", help="a step and its certificate")
    add("--seed", type=int, default=0)
    add("--path", default="auto", choices=["auto", "dense", "low_rank"])
    add("--compare-covers", action="store_true", help="greedy vs farthest-first")
    add("--floor", action="store_true", help="UCB, ChainingUCB, each pair once")
    add("--device", default="cpu", help="torch device of the model (e.g. cuda)")
    add("--table", nargs="+", metavar="JSONL", help="render JSON lines as tables")
    add("--pending-covers", nargs="+", default=["rebuild", "reuse"])
    add("--kernel", default="se", choices=["se", "tanimoto", "features"])
    add("--dims", type=int, default=200, help="--kernel features: columns")
    add("--library", help="--kernel tanimoto: a packed library (.npy), first N rows")
    add("--worker", action="store_true", help=argparse.SUPPRESS)
    add("--method", default="chaining", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    if args.worker:
        args.n, args.q = args.n[0], args.q[0]
        args.pending_covers = args.pending_covers[0]
        print(json.dumps(_worker(args)), flush=True)
        return 0
    if args.quick:
        args.n, args.repeats = [500], 1
    if args.cpu_time:
        torch.set_num_threads(1)
    for name in ("rows", "cpu_time", "certificate", "compare_covers", "floor"):
        if getattr(args, name):
            for n in args.n:
                for row in globals()[f"_{name}_rows"](n, args):
                    print(json.dumps(row), flush=True)
            return 0
    failed = False
    for n in args.n:
        # Stock UCB has no pending points, so every ChainingUCB row, batches
        # included, is compared with one UCB step on the same candidates.
        ucb = _run_worker("ucb", n, 1, args)
        rows = [ucb] + [
            _run_worker("chaining", n, q, args, pending)
            for q in args.q
            for pending in (["rebuild"] if q == 1 else args.pending_covers)
        ]
        for row in rows:
            row.update(bench="step", **_machine())
            failed |= "error" in row
            if "median_s" in row and "median_s" in ucb:
                row["ratio_to_ucb"] = row["median_s"] / ucb["median_s"]
            print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
