r"""The README's demo: Chaining-UCB beside GP-UCB, stock UCB, LogEI and random search.

The paper's SE experiment at small size (paired runs, true prior): regret,
paired differences and Chaining-UCB's certificate. ``make demo``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch
from botorch.models import SingleTaskGP
from botorch.optim import optimize_acqf_discrete
from torch import Tensor

from ax_chaining.acquisition import ChainingUCB
from ax_chaining.certificate import CertificateOptions
from ax_chaining.test_functions.problems import fixed_se_kernel
from benchmarks._tables import fill_preset, mean_se, paired
from benchmarks.runner import BenchmarkConfig, acquisition

DTYPE = torch.float64
NOISE_STD = 0.05
#: The README's run (``make demo``) and the ``--small`` preset.
FULL = {"n": 500, "runs": 40, "iters": 30}
SMALL = {"n": 60, "runs": 2, "iters": 3}


#: Each policy's method of :func:`benchmarks.runner.acquisition` (delta 0.05).
POLICIES: dict[str, str] = {
    "Chaining-UCB": "chaining",
    "GP-UCB": "gp-ucb",
    "UCB(beta=0.2)": "ucb",
    "LogEI": "logei",
}


def make_problem(n: int, seed: int) -> tuple[Tensor, Tensor]:
    """Candidates ``n x 2`` and an exact GP sample ``f`` over them."""
    g = torch.Generator().manual_seed(seed)
    side = 20.0 * math.sqrt(n / 10_000)
    C = side * torch.rand(n, 2, generator=g, dtype=DTYPE)
    with torch.no_grad():
        K = fixed_se_kernel(1.0, 1.0)(C).to_dense()
    L = torch.linalg.cholesky(K + 1e-6 * torch.eye(n, dtype=DTYPE))
    f = L @ torch.randn(n, generator=g, dtype=DTYPE)
    return C, f


def fixed_model(X: Tensor, Y: Tensor) -> SingleTaskGP:
    model = SingleTaskGP(
        X, Y, covar_module=fixed_se_kernel(1.0, 1.0), outcome_transform=None
    )
    model.likelihood.noise = NOISE_STD**2
    return model.eval()


def run(
    policy: str, C: Tensor, f: Tensor, iters: int, seed: int
) -> tuple[list[float], list[int], list[float]]:
    """The simple regret after each of ``iters`` queries (10 initial points
    first), the evaluated indices and the noisy observations."""
    g = torch.Generator().manual_seed(10_000 + seed)
    n = C.shape[0]
    idx = torch.randint(n, (10,), generator=g).tolist()
    y = (f[idx] + NOISE_STD * torch.randn(10, generator=g, dtype=DTYPE)).tolist()
    # The noise of the k-th query is the same for every method (paired runs).
    noise = NOISE_STD * torch.randn(iters, generator=g, dtype=DTYPE)
    rand = torch.Generator().manual_seed(20_000 + seed)
    regret = []
    for k in range(iters):
        if policy == "Random":
            nxt = int(torch.randint(n, (1,), generator=rand))
        else:
            model = fixed_model(C[idx], torch.tensor(y, dtype=DTYPE).unsqueeze(-1))
            acqf = acquisition(POLICIES[policy], model, C, BenchmarkConfig())
            x, _ = optimize_acqf_discrete(acqf, q=1, choices=C)
            nxt = int((C == x).all(dim=-1).nonzero()[0])
        idx.append(nxt)
        y.append(float(f[nxt] + noise[k]))
        regret.append(float(f.max() - f[idx].max()))
    return regret, idx, y


def reading(
    final: dict[str, list[float]], iters: int, reference: str = "Chaining-UCB"
) -> tuple[list[tuple[str, float, float, bool]], str]:
    """Paired differences of the final regret, rows ``(method, mean, se,
    separated)`` (at least two standard errors from zero), and one sentence
    reading them."""
    rows = []
    for m, values in final.items():
        if m == reference:
            continue
        diff = paired(final[reference], values, higher_is_better=False)
        mean, se = diff["mean"], diff["se"]
        rows.append((m, mean, se, abs(mean) >= 2 * se and mean != 0))
    better = [m for m, mean, _, sep in rows if sep and mean < 0]
    worse = [m for m, mean, _, sep in rows if sep and mean > 0]
    tied = [m for m, _, _, sep in rows if not sep]
    pairs = (("lower", better), ("higher", worse))
    parts = [f"{word} than {_join(names)}" for word, names in pairs if names]
    if parts:
        sentence = (
            f"After {iters} queries, {reference}'s simple regret is "
            + " and ".join(parts)
            + " by at least two standard errors of the paired difference"
        )
        sentence += (
            f"; against {_join(tied)} the runs do not separate the methods."
            if tied
            else "."
        )
    else:
        sentence = (
            f"After {iters} queries, the paired differences are all within two "
            f"standard errors: these runs do not separate {reference} from "
            f"{_join(tied)}."
        )
    return rows, sentence


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, help=f"candidates ({FULL['n']})")
    parser.add_argument("--runs", type=int, help=f"seeds ({FULL['runs']})")
    parser.add_argument("--iters", type=int, help=f"queries ({FULL['iters']})")
    parser.add_argument(
        "--small",
        action="store_true",
        help=f"small preset (a test): N={SMALL['n']}, {SMALL['runs']} runs x "
        f"{SMALL['iters']} queries; explicit options override it",
    )
    args = parser.parse_args(argv)
    fill_preset(args, SMALL if args.small else FULL)
    for name in ("n", "runs", "iters"):
        if getattr(args, name) < (11 if name == "n" else 1):
            parser.error(f"--{name} is too small: {getattr(args, name)}")
    methods = [*POLICIES, "Random"]
    checkpoints = sorted({min(args.iters, k) for k in (5, 10, 20, args.iters)})
    print(
        f"SE GP samples, N={args.n} candidates, noise std {NOISE_STD}, 10 initial "
        f"points, {args.runs} runs x {args.iters} queries, true prior for all.",
        flush=True,
    )
    results: dict[str, list[list[float]]] = {m: [] for m in methods}
    seconds: dict[str, float] = {m: 0.0 for m in methods}
    last: tuple[Tensor, Tensor, list[int], list[float]] | None = None
    for seed in range(args.runs):
        C, f = make_problem(args.n, seed)
        for m in methods:
            start = time.perf_counter()
            regret, idx, y = run(m, C, f, args.iters, seed)
            seconds[m] += time.perf_counter() - start
            results[m].append(regret)
            if m == "Chaining-UCB":
                last = (C, f, idx, y)
    header = f"{'method':<15}" + "".join(f"{f'S_{k}':>17}" for k in checkpoints)
    print(header + f"{'s/step':>9}")
    for m in methods:
        row = f"{m:<15}"
        for k in checkpoints:
            mean, se = mean_se([r[k - 1] for r in results[m]])
            row += f"{mean:>10.3f} ± {se:<5.3f}"
        print(row + f"{seconds[m] / (args.runs * args.iters):>9.3f}")
    print(
        "S_n: mean simple regret (± standard error) after n queries; lower is better."
    )

    final = {m: [r[-1] for r in results[m]] for m in methods}
    rows, sentence = reading(final, args.iters)
    print(f"\nPaired difference of S_{args.iters}, Chaining-UCB minus each method:")
    for m, mean, se, sep in rows:
        verdict = "separated" if sep else "not separated (within 2 SE)"
        print(f"  {m:<15}{mean:>+8.3f} ± {se:.3f}   {verdict}")
    print(sentence)

    assert last is not None
    C, f, idx, y = last
    model = fixed_model(C[idx], torch.tensor(y, dtype=DTYPE).unsqueeze(-1))
    # The true prior (fixed_model): the plain certificate, no calibration check.
    plain = CertificateOptions(calibration="none")
    cert = ChainingUCB(model, C, delta=0.05).certificate(options=plain)
    true_regret = float(f.max() - f[cert.index])
    print(
        f"\nCertificate for the recommended point of the last Chaining-UCB run "
        f"(candidate {cert.index}, after {len(idx)} observations): with "
        f"probability >= {1 - cert.delta:.2f}, max f - f(x) <= {cert.bound:.3f}. "
        f"Its true regret, which only a benchmark knows: {true_regret:.3f}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
