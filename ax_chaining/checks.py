"""Argument checks shared by the BoTorch and Ax layers: each error names the
argument, what it got and what it expected."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd


def type_error(name: str, expected: str, value: Any) -> TypeError:
    return TypeError(f"`{name}` must be {expected}, got {type(value).__name__}.")


def check_int(name: str, value: Any, low: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise type_error(name, "an int", value)
    if low is not None and value < low:
        expected = "a positive int" if low == 1 else f">= {low}"
        raise ValueError(f"`{name}` must be {expected}, got {value}.")
    return int(value)


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise type_error(name, "a bool", value)
    return value


def check_float(
    name: str,
    value: Any,
    rule: tuple[Callable[[float], bool], str],
    kind: str = "a float",
) -> float:
    """``value`` as a float; ``rule`` is (test, what the test expects)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise type_error(name, kind, value)
    ok, expected = rule
    if not (math.isfinite(value) and ok(value)):
        raise ValueError(f"`{name}` must be {expected}, got {value}.")
    return float(value)


def check_records(name: str, value: Any) -> list[dict[str, bool | int | float | str]]:
    """A table (a pandas DataFrame, or a sequence of mappings from names to values)
    as a non-empty list of dicts, every value a bool, int, str or finite float."""
    if isinstance(value, pd.DataFrame):
        value = value.to_dict(orient="records")
    elif isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        what = "a pandas DataFrame or a sequence of {parameter name: value} mappings"
        raise type_error(name, what, value)
    rows = []
    for i, record in enumerate(value):
        if not isinstance(record, Mapping):
            raise type_error(f"{name}[{i}]", "a mapping from name to value", record)
        row = {
            k: v.item() if isinstance(v, np.generic) else v for k, v in record.items()
        }
        for k, v in row.items():
            if not isinstance(k, str) or not isinstance(v, bool | int | float | str):
                got = f"{k!r}: {v!r} of type {type(v).__name__}"
                msg = f"has entry {got}; expected names mapped to int, float, str, bool"
                raise TypeError(f"`{name}[{i}]` {msg}.")
            if isinstance(v, float) and not math.isfinite(v):
                msg = f"is {v}; expected a finite number (drop or fill the row)"
                raise ValueError(f"`{name}[{i}][{k!r}]` {msg}.")
        rows.append(row)
    if not rows:
        raise ValueError(f"`{name}` is empty; expected at least one row.")
    return rows


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> Any:
    if value not in choices:
        expected = " or ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}` must be {expected}, got {value!r}.")
    return value
