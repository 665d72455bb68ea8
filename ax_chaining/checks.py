"""Argument checks shared by the BoTorch and Ax layers: each error names the
argument, what it got and what it expected."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np


def type_error(name: str, expected: str, value: Any) -> TypeError:
    return TypeError(f"`{name}` must be {expected}, got {type(value).__name__}.")


def check_int(name: str, value: Any, low: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise type_error(name, "an int", value)
    if low is not None and value < low:
        expected = "a positive int" if low == 1 else f">= {low}"
        raise ValueError(f"`{name}` must be {expected}, got {value}.")
    return int(value)


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
