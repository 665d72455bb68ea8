r"""Figures of Contal, Malherbe & Vayatis (2015) redrawn with this package:
Figure 2 (:func:`plot_simple_regret`, and :func:`plot_cumulative_regret`) and
Figure 1 (:func:`figure1_data`, :func:`plot_figure1`). Each returns its
matplotlib figure, drawn off-screen unless a backend was chosen (notebooks).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from benchmarks._tables import COLORS, band, pyplot, save_figure

_STYLES = {"gp-ucb": ":", "ucb": "-.", "logei": "--"}


def _curve_panels(
    summary: dict[str, Any],
    key: str,
    ylabel: str,
    start: int,
    path: str | os.PathLike | None,
    logy: bool = False,
) -> Any:
    from benchmarks.runner import METHOD_LABELS, PROBLEM_LABELS

    curves = summary["curves"]
    problems = list(curves)
    if not problems:
        raise ValueError("The summary holds no curves to plot.")
    rows = {r["problem"]: r for r in reversed(summary.get("rows", []))}
    fig, axes = pyplot().subplots(
        1, len(problems), figsize=(4.2 * len(problems), 3.4), squeeze=False
    )
    for ax, problem in zip(axes[0], problems, strict=True):
        for method, c in curves[problem].items():
            mean, se = c[f"{key}_mean"], c[f"{key}_se"]
            x = range(start, start + len(mean))
            label = METHOD_LABELS.get(method, method)
            style = _STYLES.get(method, "-")
            band(ax, x, mean, se, COLORS.get(method), label, style=style, lw=1.6)
        row = rows.get(problem, {"n": "?", "runs": "?"})
        name = PROBLEM_LABELS.get(problem, problem)
        ax.set_title(f"{name} (N={row['n']}, {row['runs']} runs)", fontsize=10)
        ax.set_xlabel("iteration n (queries after 10 initial points)")
        if logy:
            ax.set_yscale("symlog", linthresh=1e-2)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path, dpi=130, close=False)
    return fig


def plot_simple_regret(
    summary: dict[str, Any],
    path: str | os.PathLike | None = None,
    logy: bool = False,
) -> Any:
    r"""Figure 2: the mean simple regret :math:`S_n` (``n = 0``: the initial
    design) ± one standard error, one panel per problem of a
    :func:`~benchmarks.runner.summarize` result; saved to ``path`` if given;
    ``logy``: a symmetric-log y axis.

    Example:
        >>> fig = plot_simple_regret(summarize(records), "results/fig2.png")
    """
    label = "mean simple regret $S_n$"
    return _curve_panels(summary, "simple_regret", label, 0, path, logy)


def plot_cumulative_regret(
    summary: dict[str, Any],
    path: str | os.PathLike | None = None,
) -> Any:
    r"""The mean cumulative regret :math:`R_n`, as :func:`plot_simple_regret`."""
    label = "mean cumulative regret $R_n$"
    return _curve_panels(summary, "cumulative_regret", label, 1, path)


def figure1_data(
    n: int = 500,
    seed: int = 0,
    num_obs: int = 6,
    delta: float = 0.05,
    obs_seed: int = 1,
) -> dict[str, Any]:
    r"""The curves of the paper's Figure 1 on a 1-D toy problem (``seed``): the
    true prior conditioned on ``num_obs`` noisy observations (``obs_seed``),
    the Chaining-UCB and GP-UCB targets with each exploration term shifted to
    minimum 0 over the grid, as in the paper's caption.

    Returns:
        1-D tensors ``x``, ``f``, ``mean``, ``sigma``, ``chaining``,
        ``gp_ucb``, ``obs_x``, ``obs_y``; ``beta``, ``t``, and the chaining
        result under ``"covers"``.

    Example:
        >>> data = figure1_data()
        >>> float(data["chaining"].max() - data["mean"].max()) >= 0
        True
    """
    from ax_chaining.acquisition import GPUCB, ChainingUCB
    from benchmarks.runner import fixed_model
    from benchmarks.testbeds import toy_1d_problem

    problem = toy_1d_problem(n=n, seed=seed)
    gen = torch.Generator().manual_seed(obs_seed)
    idx = torch.randperm(problem.n, generator=gen)[:num_obs]
    noise = torch.randn(num_obs, generator=gen, dtype=torch.float64)
    y = problem.f[idx] + problem.noise_std * noise
    X = problem.X
    kernel, noise_std = problem.get_covar_module(), problem.noise_std
    model = fixed_model(X[idx], y.unsqueeze(-1), kernel, noise_std, mean=0.0)
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
    path: str | os.PathLike | None = None, data: dict[str, Any] | None = None
) -> Any:
    r"""Draw Figure 1 from ``data`` (default :func:`figure1_data`):
    observations, true function, posterior mean, both targets and their
    maximizers; saved to ``path`` if given."""
    data = data if data is not None else figure1_data()
    x = data["x"]
    fig, ax = pyplot().subplots(figsize=(8.2, 3.6))
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
        save_figure(fig, path, dpi=130, close=False)
    return fig
