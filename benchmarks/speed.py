r"""Speed and memory of one Chaining-UCB step, against stock UCB in the same run.

The problem is the paper's SE setting: ``N`` candidates uniform in a square of
side 20, an isotropic SE kernel with lengthscale 1 and variance 1, and ``r``
observations (default 50) at random candidates. One *step* is what a BoTorch
loop does per query: build the acquisition function, then score every candidate
with ``optimize_acqf_discrete``. Each (method, N) runs in a fresh subprocess so
that its peak resident memory (``ru_maxrss``) is its own; the figure includes the
interpreter with torch, BoTorch and GPyTorch imported (reported as
``baseline_rss_mb``).

Subcommands print one JSON line per result:

``python -m benchmarks speed --sizes 1000 10000 30000 100000 1000000``
    median seconds and peak RSS of one step (``q = 1``) and of a batch
    (``q = 5``: ``optimize_acqf_discrete`` sets each pick as a pending point)
    for ChainingUCB (path chosen automatically), and of one step of stock
    ``UpperConfidenceBound(beta=0.2)`` on the same candidates (which has no
    pending points), and the ratio of each to that UCB step.
    ``--small`` (or ``--quick``) is a small preset (``N = 500``, one repeat)
    that a test runs end to end.
``python -m benchmarks speed --kernel features --sizes 10000 100000``
    the same over items with a feature table (``--dims`` columns, 200 by
    default) under the default molecule model's GP, an ARD Matern-5/2 with
    BayBE's ``CHEN`` priors (``--kernel tanimoto``: a fingerprint library).
``python -m benchmarks speed --cpu-time --sizes 10000``
    CPU seconds (``time.process_time``, one torch thread, in one process) of
    a stock UCB step, a ChainingUCB step and a ``q = 5`` batch: on a machine
    shared with other jobs, CPU time moves far less than wall time. Run as a
    script (``python path/to/speed.py --cpu-time``) it measures whichever
    ``ax_chaining`` is first on ``PYTHONPATH``, e.g. an earlier commit's.
``python -m benchmarks speed --certificate --kernel features --sizes 100000``
    in one process, the wall seconds of a stock UCB step, a ChainingUCB step,
    the certificate that follows it (``acqf.certificate`` with
    ``CertificateOptions(calibration="none")``: the evaluated candidates, the
    combined union and chaining bound, the rank statement) and the
    union-bound certificate any model gets
    (:func:`~ax_chaining.certificate.certify_model`), each a median over
    ``--repeats`` (synchronized on a GPU). The plain bound, because these
    problems' observations are random draws that the default leave-one-out
    check refuses, and a refused certificate skips the rank statement (the
    check itself costs a few ``n x n`` solves). Run as a script it
    measures whichever ``ax_chaining`` is first on ``PYTHONPATH``, as
    ``--cpu-time`` does.
``python -m benchmarks speed --rows --sizes 10000``
    the cost of a block of rows of :math:`d_t^2` against the same block of
    prior kernel rows (what a row of :math:`d_t^2` adds to a kernel row).
``python -m benchmarks speed --floor --sizes 10000``
    in one process: a stock UCB step, a ChainingUCB step (exact greedy
    covers), and the least any exact greedy cover of this engine does, one
    pass that computes each of the ``N (N + 1) / 2`` pairs of :math:`d_t^2`
    once and compares it with one radius (``level_graph`` at a radius below
    every distance), in the model's float64 and, for reference, in float32;
    each as a median over ``--repeats`` and a ratio to the UCB step.
``python -m benchmarks speed --compare-covers --n 10000``
    exact greedy covers (dense path) against farthest-first covers (low-rank
    path) on the same posterior: cover sizes per level, their ratio, and whether
    the selected point differs (and by how much in acquisition value).
``python -m benchmarks speed --table step.jsonl [compare.jsonl]``
    the README's markdown tables, rendered from those JSON lines.
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
from pathlib import Path
from typing import Any

import torch

DTYPE = torch.float64


def _tanimoto_problem(
    n: int, num_obs: int, seed: int, library_path: str | None, device: str
):
    """``n`` molecules (the first rows of a packed library, or random
    fingerprints with 40 to 60 of 2,048 bits set), an item index, and a GP
    with a Tanimoto kernel in library mode (output scale 1, noise sd 0.05)."""
    import numpy as np
    from botorch.models import SingleTaskGP
    from gpytorch.kernels import ScaleKernel

    from ax_chaining.kernels import PackedFingerprints, TanimotoKernel

    if library_path:
        full = PackedFingerprints.open(library_path)
        library = PackedFingerprints(full.words[:n], full.n_bits, validate=False)
    else:
        rng = np.random.default_rng(seed)
        words = np.zeros((n, 32), dtype=np.uint64)
        for start in range(0, n, 100_000):  # 40 to 60 random bits a row
            stop = min(n, start + 100_000)
            k = rng.integers(40, 61, stop - start)
            cols = rng.integers(0, 2048, (stop - start, 60))
            keep = np.arange(60) < k[:, None]
            rows = np.repeat(np.arange(start, stop), keep.sum(1))
            bits = cols[keep]
            np.bitwise_or.at(
                words, (rows, bits // 64), np.uint64(1) << (bits % 64).astype(np.uint64)
            )
        library = PackedFingerprints(words, 2048, validate=False)
    g = torch.Generator().manual_seed(seed)
    C = torch.arange(n, dtype=DTYPE).unsqueeze(-1)
    obs = torch.randperm(n, generator=g)[:num_obs]
    Y = torch.randn(num_obs, 1, generator=g, dtype=DTYPE)
    kernel = ScaleKernel(TanimotoKernel(library=library)).to(DTYPE)
    kernel.outputscale = 1.0
    model = SingleTaskGP(C[obs], Y, covar_module=kernel, outcome_transform=None)
    model.likelihood.noise = 0.05**2
    return model.to(device).eval(), C.to(device)


def _features_problem(n: int, num_obs: int, seed: int, dims: int, device: str):
    r"""``n`` items with a ``n x dims`` feature table in the unit cube, an item
    index, and a GP over it as the default molecule model builds it: an ARD
    Matern-5/2 :class:`~ax_chaining.kernels.FeatureTableKernel` with BayBE's
    ``CHEN`` priors at their initial values (noise sd 0.05).

    The table is a smooth map of 8 latent coordinates (``sigmoid(Z W)``), so
    that its columns are correlated as descriptors are, not uniform noise in
    which every item is equally far from every other."""
    from botorch.models import SingleTaskGP

    from ax_chaining.kernels import FeatureTableKernel

    g = torch.Generator().manual_seed(seed)
    W = torch.randn(8, dims, generator=g, dtype=DTYPE)
    # Built in blocks: one N x 8 @ 8 x d product at a time, never N x d twice.
    features = torch.empty(n, dims, dtype=DTYPE)
    for start in range(0, n, 100_000):
        stop = min(n, start + 100_000)
        Z = torch.randn(stop - start, 8, generator=g, dtype=DTYPE)
        features[start:stop] = torch.sigmoid(Z @ W)
    C = torch.arange(n, dtype=DTYPE).unsqueeze(-1)
    obs = torch.randperm(n, generator=g)[:num_obs]
    Y = torch.randn(num_obs, 1, generator=g, dtype=DTYPE)
    kernel = FeatureTableKernel(features, base="matern52", prior="chen").to(DTYPE)
    model = SingleTaskGP(C[obs], Y, covar_module=kernel, outcome_transform=None)
    model.likelihood.noise = 0.05**2
    return model.to(device).eval(), C.to(device)


def _problem(
    n: int,
    num_obs: int,
    seed: int,
    device: str = "cpu",
    kernel: str = "se",
    library: str | None = None,
    dims: int = 200,
):
    if kernel == "tanimoto":
        return _tanimoto_problem(n, num_obs, seed, library, device)
    if kernel == "features":
        return _features_problem(n, num_obs, seed, dims, device)
    from botorch.models import SingleTaskGP
    from gpytorch.kernels import RBFKernel, ScaleKernel

    g = torch.Generator().manual_seed(seed)
    C = 20.0 * torch.rand(n, 2, generator=g, dtype=DTYPE)
    obs = torch.randperm(n, generator=g)[:num_obs]
    X = C[obs]
    Y = (
        torch.sin(X[:, :1])
        + torch.cos(X[:, 1:])
        + 0.05 * torch.randn(num_obs, 1, generator=g, dtype=DTYPE)
    )
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 1.0
    kernel.outputscale = 1.0
    model = SingleTaskGP(X, Y, covar_module=kernel, outcome_transform=None)
    model.likelihood.noise = 0.05**2
    # Drawn on the CPU so that every device gets the same problem.
    return model.to(device).eval(), C.to(device)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _worker(args: argparse.Namespace) -> dict:
    from botorch.acquisition import UpperConfidenceBound
    from botorch.optim import optimize_acqf_discrete

    from ax_chaining import ChainingUCB

    baseline = _rss_mb()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    model, C = _problem(
        args.n, args.obs, args.seed, args.device, args.kernel, args.library, args.dims
    )
    times = []
    info: dict = {}
    if cuda:
        # The first CUDA call pays for context and kernel loading: warm up on
        # a small set so that the timed steps measure the method.
        with torch.no_grad():
            small = C[: min(args.n, 300)]
            optimize_acqf_discrete(ChainingUCB(model, small), q=1, choices=small)
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
            x, _ = optimize_acqf_discrete(acqf, q=args.q, choices=C)
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
        **(
            {
                "gpu": torch.cuda.get_device_name(device),
                "peak_gpu_mb": torch.cuda.max_memory_allocated(device) / 2**20,
            }
            if cuda
            else {}
        ),
        **info,
    }


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


def _row_timings(model, C, distance, idx, repeats: int) -> dict[str, float]:
    return {
        "kernel_rows": _median_s(
            lambda: model.covar_module(C[idx], C).to_dense(), repeats
        ),
        "dist2_rows": _median_s(lambda: distance.rows(idx), repeats),
    }


def _cpu_time_bench(args: argparse.Namespace) -> None:
    """CPU seconds of UCB, a ChainingUCB step and a batch, one thread."""
    from botorch.acquisition import UpperConfidenceBound
    from botorch.optim import optimize_acqf_discrete

    import ax_chaining
    from ax_chaining import ChainingUCB

    torch.set_num_threads(1)

    def cpu(fn: Callable[[], object], repeats: int) -> float:
        return _median_s(fn, repeats, clock=time.process_time)

    for n in args.n:
        model, C = _problem(
            n, args.obs, args.seed, "cpu", args.kernel, args.library, args.dims
        )
        with torch.no_grad():
            # Warm up imports and caches on a small set first.
            small = C[: min(n, 300)]
            optimize_acqf_discrete(ChainingUCB(model, small), q=1, choices=small)
            row = {"bench": "cpu_time", "n": n, "obs": args.obs, "threads": 1}
            row["kernel"] = args.kernel
            row["engine"] = args.label or str(Path(ax_chaining.__file__).parent)
            row["ucb_cpu_s"] = cpu(
                lambda m=model, c=C: optimize_acqf_discrete(
                    UpperConfidenceBound(m, beta=0.2), q=1, choices=c
                ),
                args.repeats,
            )
            for q in args.q:
                row[f"q{q}_cpu_s"] = cpu(
                    lambda q=q, m=model, c=C: optimize_acqf_discrete(
                        ChainingUCB(m, c), q=q, choices=c
                    ),
                    args.repeats if q == 1 else 1,
                )
                row[f"q{q}_ratio_to_ucb"] = row[f"q{q}_cpu_s"] / row["ucb_cpu_s"]
                if q > 1 and _has_reuse(ChainingUCB):
                    row[f"q{q}_reuse_cpu_s"] = cpu(
                        lambda q=q, m=model, c=C: optimize_acqf_discrete(
                            ChainingUCB(m, c, pending_covers="reuse"), q=q, choices=c
                        ),
                        1,
                    )
        print(json.dumps(row), flush=True)


def _chaining_step(model, C: torch.Tensor, args: argparse.Namespace):
    """A ChainingUCB step (construction, covers and scoring); the function."""
    from botorch.optim import optimize_acqf_discrete

    from ax_chaining import ChainingUCB

    acqf = ChainingUCB(model, C, path=args.path)
    optimize_acqf_discrete(acqf, q=1, choices=C)
    return acqf


def _plain_certificate_options() -> dict[str, Any]:
    """The keywords of the plain certificate (``calibration="none"``), in the
    spelling of whichever ``ax_chaining`` is measured (its options became one
    object)."""
    try:
        from ax_chaining.certificate import CertificateOptions
    except ImportError:
        return {"calibration": "none"}
    return {"options": CertificateOptions(calibration="none")}


def _certificate_row(n: int, args: argparse.Namespace) -> dict:
    """Wall seconds of a step and of its certificate at one ``N``."""
    from botorch.acquisition import UpperConfidenceBound
    from botorch.optim import optimize_acqf_discrete

    import ax_chaining
    from ax_chaining import ChainingUCB
    from ax_chaining.certificate import certify_model

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    plain = _plain_certificate_options()

    def wall(fn: Callable[[], object]) -> tuple[float, object]:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        out = fn()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - start, out

    model, C = _problem(
        n, args.obs, args.seed, args.device, args.kernel, args.library, args.dims
    )
    times: dict[str, list[float]] = {"ucb": [], "step": [], "cert": [], "union": []}
    with torch.no_grad():
        small = C[: min(n, 300)]  # warm up imports, caches and kernels
        warm = ChainingUCB(model, small)
        optimize_acqf_discrete(warm, q=1, choices=small)
        warm.certificate(among="all")
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(args.repeats):
            # The step as in a loop: the covers are built with the
            # acquisition function, then every candidate is scored.
            seconds, acqf = wall(lambda: _chaining_step(model, C, args))
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
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    if cuda:
        row["gpu"] = torch.cuda.get_device_name(device)
        row["peak_gpu_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    row["certificate_ratio_to_step"] = row["certificate_s"] / row["step_s"]
    return row


def _certificate_bench(args: argparse.Namespace) -> None:
    """Wall seconds of a step and of its certificate, in one process."""
    for n in args.n:
        print(json.dumps(_certificate_row(n, args)), flush=True)


def _floor_row(n: int, args: argparse.Namespace) -> dict:
    """UCB step, ChainingUCB step and the every-pair-once pass at one ``N``."""
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
        small = C[: min(n, 300)]  # warm up imports and caches
        optimize_acqf_discrete(ChainingUCB(model, small), q=1, choices=small)
        row["ucb_s"] = _median_s(
            lambda: optimize_acqf_discrete(
                UpperConfidenceBound(model, beta=0.2), q=1, choices=C
            ),
            args.repeats,
        )
        row["step_s"] = _median_s(
            lambda: optimize_acqf_discrete(ChainingUCB(model, C), q=1, choices=C),
            args.repeats,
        )
        for key, m, c in (("floor", model, C), ("floor32", single, C.float())):
            distance = candidate_posterior(m, c, path="low_rank").distance
            row[f"{key}_s"] = _median_s(
                lambda d=distance: d.level_graph([radius]), args.repeats
            )
            row[f"{key}_edges"] = distance.level_graph([radius]).num_edges
    for key in ("step", "floor", "floor32"):
        row[f"{key}_ratio"] = row[f"{key}_s"] / row["ucb_s"]
    return row


def _floor_bench(args: argparse.Namespace) -> None:
    """UCB step, ChainingUCB step and the every-pair-once pass, one process."""
    machine = {
        "repeats": args.repeats,
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    for n in args.n:
        print(json.dumps({**_floor_row(n, args), **machine}), flush=True)


def _has_reuse(cls: type) -> bool:
    # An earlier engine (measured with the same script) may lack the option.
    import inspect

    return "pending_covers" in inspect.signature(cls).parameters


def _rows_bench(args: argparse.Namespace) -> None:
    """A block of rows of d_t^2 against the same block of prior kernel rows."""
    from ax_chaining.posterior import candidate_posterior

    for n in args.n:
        model, C = _problem(n, args.obs, args.seed)
        with torch.no_grad():
            distance = candidate_posterior(model, C, path="low_rank").distance
            idx = torch.arange(min(n, 1000))
            timing = _row_timings(model, C, distance, idx, max(3, args.repeats))
        print(
            json.dumps(
                {
                    "bench": "rows",
                    "n": n,
                    "rows": idx.numel(),
                    "obs": args.obs,
                    **{f"{k}_s": v for k, v in timing.items()},
                    "ratio": timing["dist2_rows"] / timing["kernel_rows"],
                }
            ),
            flush=True,
        )


def _run_worker(
    method: str, n: int, q: int, args: argparse.Namespace, pending: str = "rebuild"
) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.speed",
        "--worker",
        "--method",
        method,
        "--n",
        str(n),
        "--q",
        str(q),
        "--obs",
        str(args.obs),
        "--repeats",
        str(args.repeats),
        "--seed",
        str(args.seed),
        "--path",
        args.path,
        "--device",
        args.device,
        "--pending-covers",
        pending,
        "--kernel",
        args.kernel,
        "--dims",
        str(args.dims),
    ] + (["--library", args.library] if args.library else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"method": method, "n": n, "q": q, "error": out.stderr.strip()[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _compare_covers(args: argparse.Namespace) -> None:
    from ax_chaining import ChainingUCB

    for n in args.n:
        for seed in range(args.seed, args.seed + args.repeats):
            model, C = _problem(n, args.obs, seed)
            timing = {}
            acqfs = {}
            for name, kwargs in {
                "greedy": {"path": "dense", "cover": "greedy"},
                "farthest_first": {
                    "path": "low_rank",
                    "cover": "farthest_first",
                    "max_cover_size": n,
                },
            }.items():
                start = time.perf_counter()
                acqfs[name] = ChainingUCB(model, C, **kwargs)
                timing[name] = time.perf_counter() - start
            greedy, ff = acqfs["greedy"], acqfs["farthest_first"]
            with torch.no_grad():
                values = greedy(C.unsqueeze(1))
                values_ff = ff(C.unsqueeze(1))
            pick, pick_ff = int(values.argmax()), int(values_ff.argmax())
            sizes = greedy.chaining.cover_sizes.tolist()
            sizes_ff = ff.chaining.cover_sizes.tolist()
            print(
                json.dumps(
                    {
                        "bench": "compare_covers",
                        "n": n,
                        "obs": args.obs,
                        "seed": seed,
                        "greedy_sizes": sizes,
                        "farthest_first_sizes": sizes_ff,
                        "size_ratio": [
                            round(b / a, 4)
                            for a, b in zip(sizes, sizes_ff, strict=True)
                        ],
                        "same_selection": pick == pick_ff,
                        # Greedy-path acquisition value lost by taking the
                        # farthest-first choice, relative to the bonus scale.
                        "value_gap": float(values[pick] - values[pick_ff]),
                        "greedy_s": timing["greedy"],
                        "farthest_first_s": timing["farthest_first"],
                    }
                ),
                flush=True,
            )


#: Targets (seconds, GB) for ChainingUCB per (N, q), for the README table.
TARGETS = {
    (10_000, 1): (0.5, None),
    (10_000, 5): (2.5, None),
    (100_000, 1): (3.0, None),
    (1_000_000, 1): (30.0, 4.0),
}
#: Targets for the Tanimoto kernel over a molecule library (``--kernel
#: tanimoto``), where no earlier measurements exist.
TANIMOTO_TARGETS = {
    (100_000, 1): (6.0, None),
    (1_000_000, 1): (60.0, 8.0),
}
#: Targets on one GPU (the SE and Tanimoto kernels).
GPU_TARGETS = {(1_000_000, 1): (5.0, None)}
#: How the table names each ``--kernel``.
_KERNEL_LABELS = {"se": "", "tanimoto": ", Tanimoto", "features": ", feature table"}
#: Earlier measurements of one step (seconds, ratio to UCB) for the README
#: table: the level-matrix engine on an idle machine of the same kind.
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


def _ratio(row: dict) -> str:
    return f"{row['ratio_to_ucb']:.3g}" if "ratio_to_ucb" in row else "-"


def _gpu_memory(row: dict) -> str:
    gpu = row.get("peak_gpu_mb")
    return "" if gpu is None else f" + {gpu / 1024:.2f} on GPU"


def _gap(gap: float) -> str:
    return f"no (value gap {gap:.3g})"


def _cpu_line(r: dict) -> str:
    q5 = r.get("q5_cpu_s")
    reuse = r.get("q5_reuse_cpu_s")
    q5_cells = (
        "| | |"
        if q5 is None
        else f"| {q5:.3g} | {r['q5_ratio_to_ucb']:.3g} "
        f"| {'-' if reuse is None else f'{reuse:.3g}'} |"
    )
    return (
        f"| {r['n']:,} | {r['engine']} "
        f"| {r['ucb_cpu_s']:.3g} | {r['q1_cpu_s']:.3g} "
        f"| {r['q1_ratio_to_ucb']:.3g} {q5_cells}"
    )


def _certificate_line(r: dict) -> str:
    where = r.get("gpu") or "CPU"
    return (
        f"| {r['n']:,} | {r['engine']} | {where} | {r['ucb_s']:.3g} "
        f"| {r['step_s']:.3g} | {r['certificate_s']:.3g} "
        f"| {r['certificate_ratio_to_step']:.3g} | {r['model_certificate_s']:.3g} "
        f"| {r['rank_bound']:,} |"
    )


def _rows_line(r: dict) -> str:
    return (
        f"| {r['n']:,} | {r['rows']} | {r['kernel_rows_s']:.3g} "
        f"| {r['dist2_rows_s']:.3g} | {r['ratio']:.3g} |"
    )


def _floor_line(r: dict) -> str:
    return (
        f"| {r['n']:,} | {r['ucb_s']:.3g} | {r['step_s']:.3g} "
        f"| {r['step_ratio']:.3g} | {r['floor_s']:.3g} "
        f"| {r['floor_ratio']:.3g} | {r['floor32_s']:.3g} "
        f"| {r['floor32_ratio']:.3g} |"
    )


def _covers_line(r: dict) -> str:
    return (
        f"| {r['n']:,} | {r['seed']} | {r['greedy_sizes']} "
        f"| {r['farthest_first_sizes']} | {r['size_ratio']} "
        f"| {'yes' if r['same_selection'] else _gap(r['value_gap'])} |"
    )


#: The tables after the step table: the ``bench`` of their lines, their
#: header, and one line of markdown per JSON line.
_SECTIONS: list[tuple[str, list[str], Callable[[dict], str]]] = [
    (
        "cpu_time",
        [
            "| N | engine | UCB CPU s | step CPU s | step / UCB | q = 5 CPU s "
            "| q = 5 / UCB | q = 5 CPU s, covers reused |",
            "|---:|---|---:|---:|---:|---:|---:|---:|",
        ],
        _cpu_line,
    ),
    (
        "certificate",
        [
            "| N | engine | device | UCB step s | ChainingUCB step s "
            "| its certificate s | certificate / step | union certificate s "
            "| rank bound |",
            "|---:|---|---|---:|---:|---:|---:|---:|---:|",
        ],
        _certificate_line,
    ),
    (
        "rows",
        [
            "| N | rows | kernel rows s | d_t^2 rows s | ratio |",
            "|---:|---:|---:|---:|---:|",
        ],
        _rows_line,
    ),
    (
        "floor",
        [
            "| N | UCB step s | ChainingUCB step s | step / UCB "
            "| every pair once s | / UCB | the same in float32 s | / UCB |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ],
        _floor_line,
    ),
    (
        "compare_covers",
        [
            "| N | seed | greedy \\|T_i\\| | farthest-first \\|T_i\\| | ratio "
            "| same point |",
            "|---:|---:|---|---|---|---|",
        ],
        _covers_line,
    ),
]


def table(paths: list[str]) -> str:
    lines = [line for p in paths for line in Path(p).read_text().splitlines()]
    rows = [json.loads(line) for line in lines if line.strip()]
    steps = [r for r in rows if r.get("bench") == "step" and "median_s" in r]
    out = (
        [
            "| N | q | method | path / covers | median s | ratio to UCB | peak RSS GB "
            "| target | previous (idle): s, ratio |",
            "|---:|---:|---|---|---:|---:|---:|---|---:|",
        ]
        if steps
        else []
    )
    for r in steps:
        key = (r["n"], r.get("q", 1))
        chaining = r["method"] == "chaining"
        how = f"{r['path']} / {r['cover']}" if "path" in r else "-"
        if "pending_covers" in r:
            how += f", pending: {r['pending_covers']}"
        kernel = r.get("kernel", "se")
        se = kernel == "se"
        gpu = str(r.get("device", "cpu")).startswith("cuda")
        # A feature table has no targets of its own: it is measured, not judged.
        targets = {
            "se": GPU_TARGETS if gpu else TARGETS,
            "tanimoto": GPU_TARGETS if gpu else TANIMOTO_TARGETS,
        }.get(kernel, {})
        previous = PREVIOUS.get(key) if chaining and se and not gpu else None
        method = ("ChainingUCB" if chaining else "UCB") + _KERNEL_LABELS.get(
            kernel, f", {kernel}"
        )
        out.append(
            f"| {r['n']:,} | {key[1]} | {method} "
            f"| {how} | {r['median_s']:.3g} | {_ratio(r)} "
            f"| {r['peak_rss_mb'] / 1024:.2f}{_gpu_memory(r)} "
            f"| {_target(targets.get(key)) if chaining else ''} "
            f"| {'' if previous is None else f'{previous[0]:.3g}, {previous[1]:.3g}'} |"
        )
    for bench, header, fmt in _SECTIONS:
        lines = [fmt(r) for r in rows if r.get("bench") == bench]
        if lines:
            out += [*([""] if out else []), *header, *lines]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks speed",
        description="Speed and memory of one ChainingUCB step vs stock UCB.",
    )
    parser.add_argument(
        "--sizes", "--n", dest="n", type=int, nargs="+", default=[1000, 10_000]
    )
    parser.add_argument(
        "--q",
        type=int,
        nargs="+",
        default=[1, 5],
        help="batch sizes (default: one step and a batch of 5)",
    )
    parser.add_argument("--obs", type=int, default=50, help="observations")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--small",
        "--quick",
        dest="quick",
        action="store_true",
        help="small preset (a test): N = 500, one repeat",
    )
    parser.add_argument(
        "--rows", action="store_true", help="cost of d_t^2 rows vs kernel rows"
    )
    parser.add_argument(
        "--cpu-time", action="store_true", help="CPU seconds, one thread, in-process"
    )
    parser.add_argument(
        "--label", default=None, help="engine name in --cpu-time and --certificate"
    )
    parser.add_argument(
        "--certificate",
        action="store_true",
        help="wall seconds of a step and of its certificate, in one process",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--path", default="auto", choices=["auto", "dense", "low_rank"])
    parser.add_argument("--compare-covers", action="store_true")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="UCB, ChainingUCB and every pair of d_t^2 once, in one process",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="torch device of the model and candidates (e.g. cuda)",
    )
    parser.add_argument(
        "--table", nargs="+", metavar="JSONL", help="render JSON lines as markdown"
    )
    parser.add_argument(
        "--pending-covers",
        nargs="+",
        default=["rebuild", "reuse"],
        choices=["rebuild", "reuse"],
        help="ChainingUCB pending_covers for batches (default: both)",
    )
    parser.add_argument(
        "--kernel",
        default="se",
        choices=["se", "tanimoto", "features"],
        help="the paper's SE setting, molecules with a Tanimoto kernel, or items "
        "with a feature table (the default molecule model's ARD Matern-5/2)",
    )
    parser.add_argument(
        "--dims",
        type=int,
        default=200,
        help="with --kernel features: columns of the feature table (Mordred's "
        "cleaned table has about 200)",
    )
    parser.add_argument(
        "--library",
        default=None,
        help="with --kernel tanimoto: a packed fingerprint library (.npy) whose "
        "first N rows are the candidates (default: random fingerprints)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--method", default="chaining", help=argparse.SUPPRESS)
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
    if args.rows:
        _rows_bench(args)
        return 0
    if args.cpu_time:
        _cpu_time_bench(args)
        return 0
    if args.certificate:
        _certificate_bench(args)
        return 0
    if args.compare_covers:
        _compare_covers(args)
        return 0
    if args.floor:
        _floor_bench(args)
        return 0
    machine = {
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    failed = False
    for n in args.n:
        # Stock UpperConfidenceBound has no pending points (it would ignore
        # them), so every ChainingUCB row, batches included, is compared with
        # one stock UCB step on the same candidates.
        ucb = _run_worker("ucb", n, 1, args)
        rows = [ucb] + [
            _run_worker("chaining", n, q, args, pending)
            for q in args.q
            for pending in (["rebuild"] if q == 1 else args.pending_covers)
        ]
        for row in rows:
            row.update(bench="step", **machine)
            failed |= "error" in row
            if "median_s" in row and "median_s" in ucb:
                row["ratio_to_ucb"] = row["median_s"] / ucb["median_s"]
            print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
