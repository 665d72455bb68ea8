"""Argument checks (each error names the argument, what it got and what it
expected) and the index helpers every layer shares."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "as_index",
    "check_bool",
    "check_choice",
    "check_delta",
    "check_float",
    "check_int",
    "check_matrix",
    "check_records",
    "index_labels",
    "match_rows",
    "match_tolerance",
    "nearest_rows",
    "row_name",
    "type_error",
]


def type_error(name: str, expected: str, value: Any) -> TypeError:
    """The ``TypeError`` for argument ``name``: what it must be, what it got."""
    return TypeError(f"`{name}` must be {expected}, got {type(value).__name__}.")


def check_int(name: str, value: Any, low: int | None = None) -> int:
    """``value`` as an int (bools and floats are refused), at least ``low``."""
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
    """``value`` as a finite float; ``rule`` is (test, what the test expects)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
        raise type_error(name, kind, value)
    ok, expected = rule
    if not (math.isfinite(value) and ok(value)):
        raise ValueError(f"`{name}` must be {expected}, got {value}.")
    return float(value)


def check_delta(value: Any, name: str = "delta") -> float:
    """A confidence parameter in (0, 1)."""
    return check_float(name, value, (lambda v: 0 < v < 1, "in (0, 1)"))


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    if value not in choices:
        expected = " or ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}` must be {expected}, got {value!r}.")
    return value


def check_matrix(name: str, value: Any) -> Tensor:
    """A non-empty, finite, floating ``N x d`` tensor (returned as is)."""
    if not isinstance(value, Tensor):
        raise type_error(name, "a torch.Tensor of shape N x d", value)
    if value.ndim != 2 or value.shape[0] == 0:
        shape = tuple(value.shape)
        raise ValueError(f"`{name}` must be a non-empty N x d tensor, got {shape}.")
    if not value.is_floating_point():
        raise TypeError(f"`{name}` must be floating point, got {value.dtype}.")
    bad = (~torch.isfinite(value)).any(dim=-1)
    if bool(bad.any()):
        rows = bad.nonzero().squeeze(-1)
        raise ValueError(
            f"`{name}` has NaN or inf in {rows.numel()} row(s), first at row "
            f"{int(rows[0])}; expected finite values."
        )
    return value


def as_index(
    name: str, value: Any, n: int, device: torch.device | None = None
) -> Tensor:
    """A boolean mask of length ``n`` or integer indices into ``0..n-1`` (None:
    all of them), as a sorted tensor of unique indices.

    Example:
        >>> as_index("points", torch.tensor([True, False, True]), 3)
        tensor([0, 2])
    """
    if value is None:
        return torch.arange(n, device=device)
    value = torch.as_tensor(value, device=device)
    if value.dtype == torch.bool:
        if value.shape != (n,):
            got = tuple(value.shape)
            raise ValueError(f"`{name}` as a mask must have shape ({n},), got {got}.")
        return value.nonzero().squeeze(-1)
    if value.ndim > 1 or value.is_floating_point() or value.is_complex():
        raise TypeError(
            f"`{name}` must be a boolean mask or 1-D integer indices, got dtype "
            f"{value.dtype} and shape {tuple(value.shape)}."
        )
    value = value.reshape(-1).long()
    if value.numel() and (int(value.min()) < 0 or int(value.max()) >= n):
        got = f"[{int(value.min())}, {int(value.max())}]"
        raise ValueError(f"`{name}` must index into 0..{n - 1}, got values in {got}.")
    return torch.unique(value)  # sorted


def nearest_rows(X: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """For each row of ``X``, the Euclidean distance to the nearest row of
    ``rows`` (at least one) and its index (the first among ties), in ``rows``'
    dtype."""
    X = X.detach().reshape(-1, rows.shape[-1]).to(rows)
    parts = [
        torch.cdist(
            X[start : start + 4096], rows, compute_mode="donot_use_mm_for_euclid_dist"
        ).min(dim=-1)
        for start in range(0, max(1, X.shape[0]), 4096)  # one empty part for no X
    ]
    return torch.cat([p.values for p in parts]), torch.cat([p.indices for p in parts])


def match_tolerance(scale: float, rtol: float = 1e-9) -> float:
    """:func:`match_rows`' tolerance for a table of largest entry ``scale``."""
    return rtol * (1.0 + float(scale))


def match_rows(X: Tensor, rows: Tensor, rtol: float = 1e-9) -> Tensor:
    """For each row of ``X``, the index of the nearest row of ``rows`` if within
    :func:`match_tolerance` (float round-off of the same point), else -1.

    Example:
        >>> match_rows(torch.tensor([[1.0], [5.0]]), torch.tensor([[0.0], [1.0]]))
        tensor([ 1, -1])
    """
    if rows.shape[0] == 0:
        n = X.reshape(-1, rows.shape[-1]).shape[0]
        return torch.full((n,), -1, dtype=torch.long, device=rows.device)
    dist, index = nearest_rows(X, rows)
    tol = match_tolerance(float(rows.abs().max()), rtol)
    return torch.where(dist <= tol, index, -1)


def check_records(
    name: str, value: Any, *, id_column: str | None = None
) -> list[dict[str, bool | int | float | str]]:
    """A table (a pandas DataFrame or a sequence of mappings from names to values)
    as a non-empty list of dicts of bool, int, str or finite float values."""
    labels = None
    if type(value).__name__ == "DataFrame":
        labels = index_labels(value)
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
        where = row_name(name, i, labels, row, id_column)
        for k, v in row.items():
            if not isinstance(k, str) or not isinstance(v, bool | int | float | str):
                got = f"{k!r}: {v!r} of type {type(v).__name__}"
                msg = f"has entry {got}; expected names mapped to int, float, str, bool"
                raise TypeError(f"{where} {msg}.")
            if isinstance(v, float) and not math.isfinite(v):
                msg = f"is {v}; expected a finite number (drop or fill the row)"
                raise ValueError(f"{where}: {k!r} {msg}.")
        rows.append(row)
    if not rows:
        raise ValueError(f"`{name}` is empty; expected at least one row.")
    return rows


def index_labels(frame: Any) -> list[int | str]:
    """A DataFrame's index labels as JSON values (an int or str; else its str)."""
    labels = [v.item() if isinstance(v, np.generic) else v for v in frame.index]
    return [v if isinstance(v, int | str) else str(v) for v in labels]


def row_name(
    name: str,
    i: int,
    labels: Sequence[Any] | None = None,
    row: Mapping[str, Any] | None = None,
    id_column: str | None = None,
) -> str:
    """How an error names row ``i`` of the table ``name``, e.g. ``"`t[3]`"`` or
    ``"`t` row with index label 180 (sku='P-180')"``."""
    where = f"`{name}[{i}]`"
    if labels is not None:
        where = f"`{name}` row with index label {labels[i]!r}"
    if id_column is not None and row is not None and id_column in row:
        where += f" ({id_column}={row[id_column]!r})"
    return where
