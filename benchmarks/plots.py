r"""Figures of Contal, Malherbe & Vayatis (2015) redrawn with this package.

* :func:`plot_simple_regret`: Figure 2, the mean simple regret :math:`S_n`
  against the query number, one panel per problem, one line per method, with a
  band of one standard error.
* :func:`figure1_data` / :func:`plot_figure1`: Figure 1, the exploration /
  exploitation trade-off of Chaining-UCB and GP-UCB on a 1-D toy problem.

matplotlib is imported inside the functions, with the non-interactive ``Agg``
backend unless a backend was already chosen (e.g. inline in a notebook).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "figure1_data",
    "plot_cumulative_regret",
    "plot_figure1",
    "plot_simple_regret",
]

_COLORS = {
    "chaining": "tab:green",
    "chaining-continuous": "tab:olive",
    "gp-ucb": "tab:blue",
    "ucb": "tab:orange",
    "logei": "tab:purple",
    "random": "tab:gray",
}
_STYLES = {
    "chaining": "-",
    "chaining-continuous": "-",
    "gp-ucb": ":",
    "ucb": "-.",
    "logei": "--",
    "random": "-",
}


def _pyplot() -> Any:
    import matplotlib

    # Keep a backend chosen by the user (notebooks); otherwise draw off-screen.
    if "matplotlib.pyplot" not in sys.modules and "ipykernel" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _curve_panels(
    summary: dict[str, Any],
    key: str,
    ylabel: str,
    start: int,
    problems: Sequence[str] | None,
    title: str | None,
    path: str | os.PathLike | None,
    logy: bool,
) -> Any:
    from benchmarks.runner import METHOD_LABELS, PROBLEM_LABELS

    plt = _pyplot()
    curves = summary["curves"]
    problems = [p for p in (problems or list(curves)) if p in curves]
    if not problems:
        raise ValueError("The summary holds no curves to plot.")
    rows = {(r["problem"], r["method"]): r for r in summary.get("rows", [])}
    fig, axes = plt.subplots(
        1, len(problems), figsize=(4.2 * len(problems), 3.4), squeeze=False
    )
    for ax, problem in zip(axes[0], problems, strict=True):
        for method, c in curves[problem].items():
            mean = torch.tensor(c[f"{key}_mean"], dtype=torch.float64)
            se = torch.tensor(c[f"{key}_se"], dtype=torch.float64)
            x = torch.arange(start, start + mean.numel())
            color = _COLORS.get(method)
            ax.plot(
                x,
                mean,
                _STYLES.get(method, "-"),
                color=color,
                label=METHOD_LABELS.get(method, method),
                lw=1.6,
            )
            ax.fill_between(x, mean - se, mean + se, color=color, alpha=0.18, lw=0)
        row = next(
            (r for (p, _), r in rows.items() if p == problem), {"n": "?", "runs": "?"}
        )
        ax.set_title(
            f"{PROBLEM_LABELS.get(problem, problem)} "
            f"(N={row['n']}, {row['runs']} runs)",
            fontsize=10,
        )
        ax.set_xlabel("iteration n (queries after 10 initial points)")
        if logy:
            ax.set_yscale("symlog", linthresh=1e-2)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=8, loc="upper right")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=130)
    return fig


def plot_simple_regret(
    summary: dict[str, Any],
    path: str | os.PathLike | None = None,
    problems: Sequence[str] | None = None,
    title: str | None = None,
    logy: bool = False,
) -> Any:
    r"""Figure 2 of the paper: mean simple regret :math:`S_n` against ``n``.

    ``n = 0`` is the initial design alone (the same for every method of a run).
    The band is one standard error of the mean over runs.

    Args:
        summary: Output of :func:`~benchmarks.runner.summarize`.
        path: If given, save the figure there (PNG by extension).
        problems: Panels to draw (default: every problem in ``summary``).
        title: Optional figure title.
        logy: Symmetric-log y axis (linear below ``1e-2``, since :math:`S_n`
            reaches 0).

    Returns:
        The matplotlib ``Figure``.

    Example:
        >>> fig = plot_simple_regret(summarize(records), "results/fig2.png")
    """
    return _curve_panels(
        summary,
        "simple_regret",
        "mean simple regret $S_n$",
        0,
        problems,
        title,
        path,
        logy,
    )


def plot_cumulative_regret(
    summary: dict[str, Any],
    path: str | os.PathLike | None = None,
    problems: Sequence[str] | None = None,
    title: str | None = None,
) -> Any:
    r"""Mean cumulative regret :math:`R_n` against ``n``, one panel per problem.

    Args:
        summary: Output of :func:`~benchmarks.runner.summarize`.
        path: If given, save the figure there.
        problems: Panels to draw (default: all).
        title: Optional figure title.

    Returns:
        The matplotlib ``Figure``.
    """
    return _curve_panels(
        summary,
        "cumulative_regret",
        "mean cumulative regret $R_n$",
        1,
        problems,
        title,
        path,
        False,
    )


def figure1_data(
    n: int = 500,
    seed: int = 0,
    num_obs: int = 6,
    delta: float = 0.05,
    obs_seed: int = 1,
) -> dict[str, Any]:
    r"""The curves of the paper's Figure 1 on :func:`toy_1d_problem`.

    A GP with the true prior (SE kernel, variance 1, so the paper's
    :math:`k \le 1` and :math:`s = 1` hold) is conditioned on ``num_obs`` noisy
    observations at uniformly drawn grid points. With ``t = num_obs + 1``:

    * Chaining-UCB target :math:`\mu_t(x) + b_t(x) - \min_{x'} b_t(x')`, with
      :math:`b_t(x) = \sum_{i:\sigma_t^{\min} \le \epsilon_i < \sigma_t(x)} H_i`,
    * GP-UCB target :math:`\mu_t(x) + \sqrt{\beta_t}\,(\sigma_t(x) -
      \min_{x'} \sigma_t(x'))`, with :math:`\beta_t = 2\log(|X| t^2 \pi^2 /
      (6\delta))`,

    i.e. each exploration term is shifted so that its minimum over :math:`X` is
    0, as in the caption of the paper's figure.

    Args:
        n: Grid size.
        seed: Seed of the toy function.
        num_obs: Number of noisy observations.
        delta: Confidence parameter of both algorithms.
        obs_seed: Seed of the observation locations and noise.

    Returns:
        A dict of 1-D tensors ``x``, ``f``, ``mean``, ``sigma``, ``chaining``,
        ``gp_ucb``, ``obs_x``, ``obs_y``, plus ``beta``, ``t`` and the
        ``chaining`` result (``acqf.chaining``) under ``"covers"``.

    Example:
        >>> data = figure1_data()
        >>> float(data["chaining"].max() - data["mean"].max()) >= 0
        True
    """
    from botorch.models import SingleTaskGP

    from ax_chaining.acquisition import GPUCB, ChainingUCB
    from benchmarks.moved_kernels import toy_1d_problem

    problem = toy_1d_problem(n=n, seed=seed)
    gen = torch.Generator().manual_seed(obs_seed)
    idx = torch.randperm(problem.n, generator=gen)[:num_obs]
    y = problem.f[idx] + problem.noise_std * torch.randn(
        num_obs, generator=gen, dtype=torch.float64
    )
    model = SingleTaskGP(
        problem.X[idx],
        y.unsqueeze(-1),
        train_Yvar=torch.full((num_obs, 1), problem.noise_std**2, dtype=torch.float64),
        covar_module=problem.get_covar_module(),
        outcome_transform=None,
        input_transform=None,
    ).eval()
    X = problem.X
    chaining = ChainingUCB(model, X, delta=delta)
    gp_ucb = GPUCB(model, num_candidates=problem.n, delta=delta)
    with torch.no_grad():
        posterior = model.posterior(X)
        mean = posterior.mean.squeeze(-1)
        sigma = posterior.variance.squeeze(-1).clamp_min(0).sqrt()
        bonus = chaining.chaining.bonus(sigma)
        ucb_bonus = gp_ucb.beta.sqrt() * sigma
    return {
        "x": X.squeeze(-1),
        "f": problem.f,
        "mean": mean,
        "sigma": sigma,
        "chaining": mean + bonus - bonus.min(),
        "gp_ucb": mean + ucb_bonus - ucb_bonus.min(),
        "obs_x": X[idx].squeeze(-1),
        "obs_y": y,
        "beta": float(gp_ucb.beta),
        "t": chaining.t,
        "covers": chaining.chaining,
    }


def plot_figure1(
    path: str | os.PathLike | None = None,
    data: dict[str, Any] | None = None,
    show_truth: bool = True,
    **kwargs: Any,
) -> Any:
    r"""Draw the paper's Figure 1 (see :func:`figure1_data`).

    Red crosses: noisy observations; black line: posterior mean; dashed green:
    Chaining-UCB target; dotted blue: GP-UCB target (both shifted so that their
    exploration terms have minimum 0 over :math:`X`); the maximizer of each target
    is marked. The true function is drawn in light grey when ``show_truth``.

    Args:
        path: If given, save the figure there.
        data: Precomputed :func:`figure1_data` output.
        show_truth: Whether to draw the true function.
        kwargs: Passed to :func:`figure1_data` when ``data`` is None.

    Returns:
        The matplotlib ``Figure``.
    """
    plt = _pyplot()
    data = data if data is not None else figure1_data(**kwargs)
    x = data["x"]
    fig, ax = plt.subplots(figsize=(8.2, 3.6))
    if show_truth:
        ax.plot(x, data["f"], color="0.75", lw=1.0, label="true f")
    ax.plot(x, data["mean"], "k-", lw=1.6, label=r"posterior mean $\mu_t$")
    ax.plot(x, data["chaining"], "--", color="tab:green", lw=1.8, label="Chaining-UCB")
    ax.plot(x, data["gp_ucb"], ":", color="tab:blue", lw=1.8, label="GP-UCB")
    ax.plot(data["obs_x"], data["obs_y"], "x", color="red", ms=8, mew=2, label="obs.")
    for key, color in (("chaining", "tab:green"), ("gp_ucb", "tab:blue")):
        i = int(torch.argmax(data[key]))
        ax.plot(x[i], data[key][i], "o", color=color, ms=6)
    ax.set_xlabel("x")
    ax.set_title(
        f"t = {data['t']}, $\\beta_t$ = {data['beta']:.1f}; exploration terms "
        "shifted to minimum 0",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=130)
    return fig
