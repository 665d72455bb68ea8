r"""The finite candidate set :math:`X` of an Ax experiment, in the user's space."""

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from ax.adapter.registry import Generators
from ax.api.configs import ChoiceParameterConfig, RangeParameterConfig
from ax.core import Arm, ChoiceParameter, Experiment, SearchSpace
from ax.core.parameter import DerivedParameter, ParameterType
from ax.core.types import TParameterization, TParamValue
from ax.exceptions.core import UnsupportedError
from ax.utils.common.random import with_rng_seed

from ax_chaining.checks import (
    check_bool,
    check_int,
    check_records,
    index_labels,
    row_name,
)

#: A ``pandas.DataFrame`` (a column per parameter) or a sequence of dicts.
CandidateTable = pd.DataFrame | Sequence[Mapping[str, TParamValue]]


@dataclass
class CandidateSetSpec:
    """Definition of the finite candidate set :math:`X` (stored in JSON).

    Args:
        candidates: Optional table of candidates (finite values): a column per
            parameter, and any other columns (an ID, a name, a price) as
            metadata that travels with the arm (its name, and the step record).
            One row per candidate: rows with the same parameters are refused.
        num_candidates: Size of the Sobol design of continuous or mixed spaces.
        seed: Seed of the design and of the uniform initialization; None: drawn
            from the global torch RNG (which Ax's ``Client`` and ``ax.benchmark``
            seed) at the first generation, then stored.
        max_candidates: Largest allowed ``N`` (a guard on ``N^2`` distance work).
        exclude_evaluated: Never propose an evaluated candidate (noise-free).
        exclude_pending: Avoid pending candidates while others remain.
        id_column: A column of ``candidates`` (not a parameter) whose values
            name the arms, e.g. a catalogue number; default ``"row_<i>"`` for
            row ``i`` of the table. Its values must be unique.
        retry_failed: Propose a candidate again after its trial failed (default
            False: a failed evaluation is not repeated). Abandoned trials free
            their candidate either way.
        num_items: The number of items of an item-index kernel (a precomputed
            Gram matrix or fingerprint library), set from the surrogate spec by
            the strategy builders: the search space must then be one integer
            parameter ``0 .. num_items - 1``.
        audit_every: Spend every ``audit_every``-th model-based query on a
            candidate drawn uniformly (with ``seed``) from the unexplored ones
            (:mod:`ax_chaining.ax.audit`); None (default): no audit.
        row_labels: The table's row labels, which errors name the rows by: a
            ``DataFrame``'s index labels (set from it; after ``dropna()`` they
            are not the positions); None for a sequence of dicts (positions).
    """

    candidates: list[dict[str, TParamValue]] | None = None
    num_candidates: int = 1024
    seed: int | None = 0
    max_candidates: int = 100_000
    exclude_evaluated: bool = False
    exclude_pending: bool = True
    id_column: str | None = None
    retry_failed: bool = False
    num_items: int | None = None
    audit_every: int | None = None
    row_labels: list[int | str] | None = None

    def __post_init__(self) -> None:
        if self.candidates is not None:
            if isinstance(self.candidates, pd.DataFrame) and self.row_labels is None:
                self.row_labels = index_labels(self.candidates)
            self.candidates = check_records(
                "candidates", self.candidates, id_column=self.id_column
            )
        check_int("num_candidates", self.num_candidates, 1)
        most = check_int("max_candidates", self.max_candidates, 1)
        if self.seed is not None:
            check_int("seed", self.seed)
        if self.num_items is not None:
            check_int("num_items", self.num_items, 2)
        if self.audit_every is not None:
            check_int("audit_every", self.audit_every, 1)
        for name in ("exclude_evaluated", "exclude_pending", "retry_failed"):
            check_bool(name, getattr(self, name))
        if self.id_column is not None:
            _check_id_column(self.candidates, self.id_column, self.row_labels)
        table = self.candidates is not None
        size = len(self.candidates or ()) if table else self.num_candidates
        if size > most:
            what = (
                f"{size:,} `candidates` rows" if table else f"`num_candidates`={size}"
            )
            msg = "pass fewer candidates or raise `max_candidates`"
            raise ValueError(f"{what}, more than `max_candidates`={most:,}; {msg}.")

    def resolve_seed(self, known: Iterable[Any] = ()) -> int:
        """The seed; if None, the first of ``known``, else a draw from the global
        torch RNG (which Ax seeds around generation); stored."""
        if self.seed is None:
            self.seed = next((int(s) for s in known if s is not None), None)
        if self.seed is None:
            self.seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
        return self.seed


def _check_id_column(
    table: list[dict] | None, column: Any, labels: list | None = None
) -> None:
    if table is None:
        raise ValueError("`id_column` names a column of `candidates`; got no table.")
    if not isinstance(column, str) or any(column not in row for row in table):
        raise ValueError(f"`id_column`={column!r} is not a column of every row.")
    seen: dict[str, int] = {}
    for i, row in enumerate(table):
        label = str(row[column])
        if label in seen:
            rows = [row_name("candidates", j, labels) for j in (seen[label], i)]
            msg = f"{rows[0]} and {rows[1]} both have {column}={label!r}"
            raise ValueError(f"`id_column` values must be unique: {msg}.")
        seen[label] = i


def arm_names(spec: CandidateSetSpec) -> list[str] | None:
    """Arm names of the table's rows (``id_column`` values, or ``"row_<i>"``);
    None without a table."""
    if spec.candidates is None:
        return None
    if spec.id_column is None:
        return [f"row_{i}" for i in range(len(spec.candidates))]
    return [str(row[spec.id_column]) for row in spec.candidates]


def row_metadata(search_space: SearchSpace, spec: CandidateSetSpec) -> list[dict]:
    """The table's non-parameter columns, row by row (empty dicts without one)."""
    if spec.candidates is None:
        return []
    names = set(search_space.parameters)
    return [{k: v for k, v in r.items() if k not in names} for r in spec.candidates]


def parameters_from_table(
    table: CandidateTable, exclude: Sequence[str] = ()
) -> list[RangeParameterConfig | ChoiceParameterConfig]:
    """Ax parameter configs that span a table's columns, for
    ``Client.configure_experiment(parameters=...)``.

    A numeric column becomes a range parameter over its smallest and largest
    values (``"int"`` if every value is an int), a string or bool column a
    choice parameter over its values. Columns in ``exclude`` (an ID, a name)
    and columns with a single value are left out.

    Example:
        >>> table = [{"id": "a", "x": 1, "s": "u"}, {"id": "b", "x": 4, "s": "v"}]
        >>> [p.name for p in parameters_from_table(table, exclude=["id"])]
        ['x', 's']
    """
    rows = check_records("table", table)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    if unknown := sorted(set(exclude) - set(columns)):
        raise ValueError(f"`exclude` names no column of the table: {unknown}.")
    out: list[RangeParameterConfig | ChoiceParameterConfig] = []
    for name in columns:
        if name in exclude:
            continue
        values = [r[name] for r in rows if name in r]
        if len(values) != len(rows):
            raise ValueError(f"Column {name!r} is missing in some rows of `table`.")
        distinct = list(dict.fromkeys(values))
        if len(distinct) < 2:
            continue
        if all(isinstance(v, bool) for v in distinct):
            out.append(ChoiceParameterConfig(name, [False, True], "bool"))
        elif all(isinstance(v, str) for v in distinct):
            out.append(ChoiceParameterConfig(name, sorted(distinct), "str", False))
        elif all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in distinct
        ):
            kind = "int" if all(isinstance(v, int) for v in distinct) else "float"
            out.append(RangeParameterConfig(name, (min(distinct), max(distinct)), kind))
        else:
            kinds = sorted({type(v).__name__ for v in distinct})
            msg = f"mixes types {kinds}; expected one of int/float, str, bool"
            raise TypeError(f"Column {name!r} of `table` {msg}.")
    return out


def candidate_parameterizations(
    search_space: SearchSpace, spec: CandidateSetSpec | None = None
) -> list[TParameterization]:
    r"""The finite candidate set :math:`X` of ``search_space``: ``N >= 1``
    distinct, complete parameterizations, in a fixed order. A user table, every
    combination of a fully discrete space, or a design of Ax's Sobol generator.

    Args:
        search_space: The experiment's search space (not hierarchical).
        spec: The candidate set definition; default ``CandidateSetSpec()``.

    Example:
        >>> ss = SearchSpace([ChoiceParameter("a", ParameterType.INT, [1, 2, 3])])
        >>> candidate_parameterizations(ss)
        [{'a': 1}, {'a': 2}, {'a': 3}]
    """
    spec = spec if spec is not None else CandidateSetSpec()
    if search_space.is_hierarchical:
        msg = "flatten it, or pass `candidates=` with one row per configuration"
        raise UnsupportedError(f"Hierarchical search spaces are unsupported: {msg}.")
    free = list(search_space.tunable_parameters.values())
    if spec.num_items is not None:
        _check_item_index(search_space, spec.num_items)
    if spec.candidates is not None:
        return _validate_table(search_space, spec)
    if all(
        isinstance(p, ChoiceParameter) or p.parameter_type == ParameterType.INT
        for p in free
    ):
        rows = _enumerate_discrete(search_space, free, spec.max_candidates)
    else:  # a seed of None is drawn here, and stored in the spec
        rows = _sobol_design(search_space, spec.num_candidates, spec.resolve_seed())
    unique: dict[tuple, dict] = {}
    for r in rows:
        unique.setdefault(row_key(r, list(search_space.parameters)), r)
    return list(unique.values())


def _complete(search_space: SearchSpace, row: dict[str, TParamValue]) -> dict:
    """Fill in fixed, then derived, parameters (in place)."""
    extra = search_space.nontunable_parameters.values()
    for p in sorted(extra, key=lambda p: isinstance(p, DerivedParameter)):
        if p.name not in row:
            row[p.name] = p.compute(row) if isinstance(p, DerivedParameter) else p.value
    return row


def _no_candidate(search_space: SearchSpace, what: str) -> ValueError:
    constraints = ", ".join(str(c) for c in search_space.parameter_constraints)
    return ValueError(
        f"The parameter constraints ({constraints or 'none'}) leave no candidate: "
        f"{what}. Expected a feasible region, or pass `candidates=`."
    )


def _enumerate_discrete(search_space: SearchSpace, free: list, most: int) -> list:
    # `itertools.product` in search-space order, as Ax's discrete optimizer.
    values = [
        list(p.values)
        if isinstance(p, ChoiceParameter)
        else list(range(int(p.lower), int(p.upper) + 1))
        for p in free
    ]
    total = math.prod(len(v) for v in values)
    if total > most:
        sizes = " x ".join(
            f"{p.name}:{len(v)}" for p, v in zip(free, values, strict=True)
        )
        raise ValueError(
            f"The fully discrete search space has {total:,} combinations ({sizes}), "
            f"more than `max_candidates`={most:,}. Pass `candidates=` (a table of "
            "the parameterizations to consider) or raise `max_candidates`."
        )
    names = [p.name for p in free]
    rows = [
        _complete(search_space, dict(zip(names, c, strict=True)))
        for c in itertools.product(*values)
    ]
    df = pd.DataFrame(rows, columns=list(search_space.parameters))
    mask = np.asarray(search_space.check_membership_df(df), dtype=bool)
    if not mask.any():
        raise _no_candidate(search_space, f"none of the {total:,} combinations fits")
    return [row for row, ok in zip(rows, mask, strict=True) if ok]


def _sobol_design(search_space: SearchSpace, num: int, seed: int) -> list[dict]:
    # Ax's Sobol generator (log/logit scales, choices, constraints by rejection).
    # Its integer rounding under constraints draws from the global RNGs, which
    # follow the seed too: the design is a function of the seed alone.
    try:
        with with_rng_seed(seed):
            adapter = Generators.SOBOL(
                experiment=Experiment(search_space=search_space),
                search_space=search_space,
                seed=seed,
                deduplicate=False,
            )
            return [dict(a.parameters) for a in adapter.gen(n=num).arms]
    except Exception as e:  # Ax raises when rejection sampling finds no point
        raise _no_candidate(search_space, f"Ax's Sobol generator failed ({e})") from e


def _check_item_index(search_space: SearchSpace, num_items: int) -> None:
    """The one integer parameter ``0 .. num_items - 1`` an item-index kernel maps
    (from Ax's unit-cube normalization) onto its ``num_items`` rows."""
    free = list(search_space.tunable_parameters.values())
    p = free[0] if len(free) == 1 else None
    ok = p is not None and p.parameter_type == ParameterType.INT
    ok = ok and (int(p.lower), int(p.upper)) == (0, num_items - 1)  # type: ignore[union-attr]
    if not ok:
        got = ", ".join(str(q) for q in free)
        raise ValueError(
            f"The surrogate's item-index kernel holds {num_items} items (its Gram "
            f"matrix or fingerprint library), but the search space is [{got}]; "
            f"expected one integer parameter 0..{num_items - 1}, e.g. "
            f"`candidate_index_parameter({num_items})`."
        )


def _validate_table(search_space: SearchSpace, spec: CandidateSetSpec) -> list[dict]:
    """Ax's own membership check (names, domains, constraints) and casting of the
    parameter columns; other columns are metadata. One row per candidate."""
    names = set(search_space.parameters)
    table = spec.candidates or []

    def where(i: int) -> str:  # the user's index label and ID, not the position
        return row_name("candidates", i, spec.row_labels, table[i], spec.id_column)

    rows, seen = [], {}
    for i, given in enumerate(table):
        params = {k: v for k, v in given.items() if k in names}
        try:
            row = _complete(search_space, params)
            search_space.check_membership(row, raise_error=True)
        except (ValueError, KeyError) as e:
            msg = f"{where(i)} = {given} is not in the search space: {e}"
            raise ValueError(msg) from e
        row = search_space.cast_arm(Arm(parameters=row)).parameters
        key = row_key(row, list(search_space.parameters))
        if key in seen:
            raise ValueError(
                f"{where(seen[key])} and {where(i)} have the same parameters "
                f"{row}; expected one row per candidate (drop duplicates, or add "
                "a parameter that tells them apart)."
            )
        seen[key] = i
        rows.append(row)
    return rows


def row_key(row: Mapping[str, TParamValue], names: Sequence[str]) -> tuple:
    """A hashable key of a parameterization; floats rounded to 9 decimals, since
    Ax's arms and the table's rows may differ in int/float type and last bits."""
    return tuple(
        v if v is None or isinstance(v, bool | str) else round(float(v), 9)
        for v in (row.get(n) for n in names)
    )
