"""Statistics, formatting, name checks, figures and Ax strategies shared by the
benchmarks."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike


def mean_se(values: ArrayLike) -> tuple[Any, Any]:
    """Mean and standard error over the first axis: floats for 1-D ``values``,
    one array per column for 2-D; SE 0 for one value, both NaN for none."""
    a = np.asarray(values, dtype=np.float64)
    n = a.shape[0]
    if n == 0:
        mean = se = np.full(a.shape[1:], math.nan)
    else:
        mean = a.mean(axis=0)
        se = a.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else np.zeros_like(mean)
    return (float(mean), float(se)) if a.ndim == 1 else (mean, se)


def paired(
    a: Sequence[float], b: Sequence[float], higher_is_better: bool, tol: float = 1e-12
) -> dict[str, Any]:
    """Mean ± SE of the run-by-run difference ``a - b``, and wins/ties/losses of a
    (a tie: a difference within ``tol``)."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}.")
    diff = [x - y for x, y in zip(a, b, strict=True)]
    mean, se = mean_se(diff)
    sign = 1.0 if higher_is_better else -1.0
    wins = sum(sign * d > tol for d in diff)
    losses = sum(sign * d < -tol for d in diff)
    ties = len(diff) - wins - losses
    return dict(mean=mean, se=se, wins=wins, ties=ties, losses=losses, n=len(diff))


def num(x: float | None, digits: int = 3, sign: bool = False) -> str:
    """Fixed point, or scientific where a non-zero value would print as 0 or
    with more than six integer digits; "-" for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    spec = "+" if sign else ""
    if x != 0 and math.isfinite(x) and not 0.5 * 10.0**-digits <= abs(x) < 1e6:
        return f"{x:{spec}.1e}"
    return f"{x:{spec}.{digits}f}"


def pm(mean: float, se: float, digits: int = 3, sign: bool = False) -> str:
    """``mean ± se`` with :func:`num`."""
    return f"{num(mean, digits, sign)} ± {num(se, digits)}"


def md_row(*cells: Any) -> str:
    """One row of a markdown table."""
    return "| " + " | ".join(map(str, cells)) + " |"


def common_seed_groups(
    records: Sequence[dict[str, Any]],
    field: str,
    names: Sequence[str],
    methods: Sequence[str],
) -> Iterator[tuple[str, list[str], list[int], dict[str, list[dict[str, Any]]]]]:
    """Per name (``record[field]``, in ``names`` order): the methods present, the
    seeds every one of them ran, and each method's records for those seeds, so
    that table rows and paired differences use the same runs."""
    by: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for r in records:
        by.setdefault(r[field], {}).setdefault(r["method"], {})[r["seed"]] = r
    for name in [n for n in names if n in by]:
        present = [m for m in methods if m in by[name]]
        seeds = sorted(set.intersection(*(set(by[name][m]) for m in present)))
        if seeds:
            runs = {m: [by[name][m][s] for s in seeds] for m in present}
            yield name, present, seeds, runs


def initial_items(n: int, n_init: int, seed: int) -> list[int]:
    """A run's ``n_init`` distinct initial items of ``0..n-1`` (the same for
    every method)."""
    rng = np.random.default_rng(seed)
    return [int(i) for i in rng.choice(n, size=n_init, replace=False)]


def random_queries(n: int, items: Sequence[int], queries: int, seed: int) -> list[int]:
    """Random search: ``queries`` items of ``0..n-1`` drawn uniformly without
    replacement among those not in ``items``."""
    rest = np.setdiff1d(np.arange(n), np.array(items))
    order = np.random.default_rng(1_000_000 + seed).permutation(rest)
    return [int(i) for i in order[:queries]]


def package_strategy(
    method: str, delta: float, beta: float | None = None, **common: Any
) -> Any:
    """The package's Ax ``GenerationStrategy`` of ``method`` (``chaining``,
    ``chaining-continuous``, ``gp-ucb``, ``ucb`` with ``beta``, ``qlognei`` or
    ``qlognei-table``) with the options ``common``; None for another name."""
    from ax_chaining import ax as axc

    if method in ("chaining", "chaining-continuous"):
        bonus = {"bonus": "continuous"} if method != "chaining" else {}
        return axc.chaining_generation_strategy(delta=delta, **bonus, **common)
    if method == "gp-ucb":
        return axc.gp_ucb_generation_strategy(delta=delta, **common)
    if method == "ucb":
        return axc.ucb_generation_strategy(beta=beta, **common)
    if method in ("qlognei", "qlognei-table"):
        return axc.qlognei_generation_strategy(**common)
    return None


def check_names(names: Sequence[str], allowed: Sequence[str], what: str) -> list[str]:
    """``names`` without repeats, in order; refuses none, or names outside
    ``allowed``."""
    names = list(dict.fromkeys(names))
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise ValueError(
            f"unknown {what}(s) {bad or names}; choose from {', '.join(allowed)}."
        )
    return names


def fill_preset(args: Any, preset: dict[str, Any]) -> None:
    """Give each option of ``preset`` that the command line left None the
    preset's value (explicit options override a preset)."""
    for name, value in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def parse_names(value: str, allowed: Sequence[str], what: str) -> list[str]:
    """A command-line list (``a,b`` or ``all``) checked against ``allowed``."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    if names == ["all"]:
        return list(allowed)
    try:
        return check_names(names, allowed, what)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None


def json_lines(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """The JSON objects of JSON-lines files, in order."""
    lines = (line for p in paths for line in Path(p).read_text().splitlines())
    return [json.loads(line) for line in lines if line.lstrip().startswith("{")]


def pyplot() -> Any:
    """matplotlib's pyplot, off-screen (``Agg``) unless a backend was chosen."""
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules and "ipykernel" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def band(
    ax: Any, x: Any, mean: Any, se: Any, color: Any, label: str, **kw: Any
) -> None:
    """A mean curve with a band of one standard error."""
    mean, se = np.asarray(mean, dtype=float), np.asarray(se, dtype=float)
    ax.plot(x, mean, kw.pop("style", "-"), color=color, label=label, **kw)
    ax.fill_between(x, mean - se, mean + se, color=color, alpha=0.15, lw=0)


def save_figure(fig: Any, path: str | Path, dpi: int = 110, close: bool = True) -> Path:
    """Save ``fig`` (its folder made), and close it unless asked not to."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    if close:
        pyplot().close(fig)
    return path


#: Each method's colour in the figures (a benchmark adds its own methods).
COLORS = {
    "chaining": "tab:green",
    "chaining-continuous": "tab:olive",
    "gp-ucb": "tab:blue",
    "ucb": "tab:orange",
    "logei": "tab:purple",
    "qlognei": "tab:red",
    "random": "tab:gray",
    "baybe": "tab:brown",
}
