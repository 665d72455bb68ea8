r"""The README's demo: Chaining-UCB against GP-UCB and stock UCB in a BoTorch loop.

The built-in problem is the paper's first experiment at small size: functions
drawn exactly from a GP with an isotropic 2-D SE kernel (bandwidth 1, variance 1)
on a uniform random design of ``N`` points in a square of side 20 (side scaled
down with ``N`` to keep the paper's density of points per unit area), noise
standard deviation 0.05, 10 initial points drawn uniformly from the candidates,
and every method given the true prior. It prints the mean simple regret
:math:`S_n = \max f - \max_{t \le n} f(x_t)` with its standard error.

Run it with ``make demo`` or ``python -m ax_chaining.demo --help``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable

import torch
from botorch.acquisition import AcquisitionFunction, UpperConfidenceBound
from botorch.models import SingleTaskGP
from botorch.optim import optimize_acqf_discrete
from gpytorch.kernels import RBFKernel, ScaleKernel
from torch import Tensor

from ax_chaining.acquisition import GPUCB, ChainingUCB

DTYPE = torch.float64
NOISE_STD = 0.05

Policy = Callable[[SingleTaskGP, Tensor], AcquisitionFunction]

POLICIES: dict[str, Policy] = {
    "Chaining-UCB": lambda model, C: ChainingUCB(model, C, delta=0.05),
    "GP-UCB": lambda model, C: GPUCB(model, num_candidates=C.shape[0], delta=0.05),
    "UCB(beta=0.2)": lambda model, C: UpperConfidenceBound(model, beta=0.2),
}


def se_kernel() -> ScaleKernel:
    """The true prior: isotropic SE, bandwidth 1, variance 1."""
    kernel = ScaleKernel(RBFKernel()).to(DTYPE)
    kernel.base_kernel.lengthscale = 1.0
    kernel.outputscale = 1.0
    return kernel


def make_problem(n: int, seed: int) -> tuple[Tensor, Tensor]:
    """Candidates ``n x 2`` and an exact GP sample ``f`` over them."""
    g = torch.Generator().manual_seed(seed)
    side = 20.0 * math.sqrt(n / 10_000)
    C = side * torch.rand(n, 2, generator=g, dtype=DTYPE)
    with torch.no_grad():
        K = se_kernel()(C).to_dense()
    L = torch.linalg.cholesky(K + 1e-6 * torch.eye(n, dtype=DTYPE))
    f = L @ torch.randn(n, generator=g, dtype=DTYPE)
    return C, f


def fixed_model(X: Tensor, Y: Tensor) -> SingleTaskGP:
    model = SingleTaskGP(X, Y, covar_module=se_kernel(), outcome_transform=None)
    model.likelihood.noise = NOISE_STD**2
    return model.eval()


def run(policy: str, C: Tensor, f: Tensor, iters: int, seed: int) -> list[float]:
    """Simple regret after each of ``iters`` queries (10 initial points first)."""
    g = torch.Generator().manual_seed(10_000 + seed)
    n = C.shape[0]
    idx = torch.randint(n, (10,), generator=g).tolist()
    y = (f[idx] + NOISE_STD * torch.randn(10, generator=g, dtype=DTYPE)).tolist()
    regret = []
    for _ in range(iters):
        if policy == "Random":
            nxt = int(torch.randint(n, (1,), generator=g))
        else:
            model = fixed_model(C[idx], torch.tensor(y, dtype=DTYPE).unsqueeze(-1))
            acqf = POLICIES[policy](model, C)
            x, _ = optimize_acqf_discrete(acqf, q=1, choices=C)
            nxt = int((C == x).all(dim=-1).nonzero()[0])
        idx.append(nxt)
        y.append(float(f[nxt] + NOISE_STD * torch.randn(1, generator=g, dtype=DTYPE)))
        regret.append(float(f.max() - f[idx].max()))
    return regret


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="number of candidates")
    parser.add_argument("--runs", type=int, default=5, help="seeds")
    parser.add_argument("--iters", type=int, default=30, help="queries per run")
    args = parser.parse_args(argv)
    methods = [*POLICIES, "Random"]
    checkpoints = sorted({min(args.iters, k) for k in (5, 10, 20, args.iters)})
    print(
        f"SE GP samples, N={args.n} candidates, noise std {NOISE_STD}, 10 initial "
        f"points, {args.runs} runs x {args.iters} queries, true prior for all."
    )
    results: dict[str, list[list[float]]] = {m: [] for m in methods}
    seconds: dict[str, float] = {m: 0.0 for m in methods}
    for seed in range(args.runs):
        C, f = make_problem(args.n, seed)
        for m in methods:
            start = time.perf_counter()
            results[m].append(run(m, C, f, args.iters, seed))
            seconds[m] += time.perf_counter() - start
    header = f"{'method':<15}" + "".join(f"{f'S_{k}':>17}" for k in checkpoints)
    print(header + f"{'s/step':>9}")
    for m in methods:
        row = f"{m:<15}"
        for k in checkpoints:
            vals = torch.tensor([r[k - 1] for r in results[m]], dtype=DTYPE)
            se = vals.std() / math.sqrt(len(vals)) if len(vals) > 1 else 0.0
            row += f"{float(vals.mean()):>10.3f} ± {float(se):<5.3f}"
        print(row + f"{seconds[m] / (args.runs * args.iters):>9.3f}")
    print(
        "S_n: mean simple regret (± standard error) after n queries; lower is better."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
