"""Statistics, number formatting and name checks shared by every benchmark."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike


def mean_se(values: ArrayLike) -> tuple[Any, Any]:
    """Mean and standard error of the mean over the first axis.

    Floats for 1-D ``values``, one array per column for 2-D (runs x steps);
    the standard error is 0 for a single value, and both are NaN for none.
    """
    a = np.asarray(values, dtype=np.float64)
    n = a.shape[0]
    if n == 0:
        mean = se = np.full(a.shape[1:], math.nan)
    else:
        mean = a.mean(axis=0)
        se = a.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else np.zeros_like(mean)
    if a.ndim == 1:
        return float(mean), float(se)
    return mean, se


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
    wins = sum(1 for d in diff if sign * d > tol)
    losses = sum(1 for d in diff if sign * d < -tol)
    return {
        "mean": mean,
        "se": se,
        "wins": wins,
        "ties": len(diff) - wins - losses,
        "losses": losses,
        "n": len(diff),
    }


def num(x: float | None, digits: int = 3, sign: bool = False) -> str:
    """Fixed-point, or scientific when a non-zero value would print as 0 or
    with more than six integer digits."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    spec = "+" if sign else ""
    if x != 0 and math.isfinite(x) and not 0.5 * 10.0**-digits <= abs(x) < 1e6:
        return f"{x:{spec}.1e}"
    return f"{x:{spec}.{digits}f}"


def pm(mean: float, se: float, digits: int = 3, sign: bool = False) -> str:
    """``mean ± se`` with :func:`num`."""
    return f"{num(mean, digits, sign)} ± {num(se, digits)}"


def common_seed_groups(
    records: Sequence[dict[str, Any]],
    field: str,
    names: Sequence[str],
    methods: Sequence[str],
) -> Iterator[tuple[str, list[str], list[int], dict[str, list[dict[str, Any]]]]]:
    """Per name (in ``names`` order, ``record[field]``): the methods present, the
    seeds present for every one of them, and each method's records for those
    seeds, so that table rows and paired differences use the same runs."""
    by: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for r in records:
        by.setdefault(r[field], {}).setdefault(r["method"], {})[r["seed"]] = r
    for name in [n for n in names if n in by]:
        present = [m for m in methods if m in by[name]]
        seeds = sorted(set.intersection(*(set(by[name][m]) for m in present)))
        if seeds:
            recs = {m: [by[name][m][s] for s in seeds] for m in present}
            yield name, present, seeds, recs


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
    """Give each option of ``preset`` that the command line left unset (None)
    the preset's value, so that explicit options override a preset."""
    for name, value in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def parse_names(value: str, allowed: Sequence[str], what: str) -> list[str]:
    """A command-line list (``a,b`` or ``all``) checked against ``allowed``;
    exits with the error of :func:`check_names`."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    if names == ["all"]:
        return list(allowed)
    try:
        return check_names(names, allowed, what)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
