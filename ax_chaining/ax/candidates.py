r"""The finite candidate set :math:`X` of an Ax experiment, in the user's space,
and which of its candidates a node may propose at a step."""

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from ax.adapter.registry import Generators
from ax.api.configs import ChoiceParameterConfig, RangeParameterConfig
from ax.core import Arm, ChoiceParameter, Experiment, ObservationFeatures, SearchSpace
from ax.core.parameter import DerivedParameter, ParameterType
from ax.core.trial_status import TrialStatus
from ax.core.types import TParameterization, TParamValue
from ax.exceptions.core import SearchSpaceExhausted, UnsupportedError
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
#: Trials whose arms are evaluated.
EVALUATED = (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED)
#: Trials whose arms are not evaluated and do not count as used.
DROPPED = (TrialStatus.FAILED, TrialStatus.ABANDONED)
#: The random stream of the audits (the uniform initialization's is 1).
AUDIT_STREAM = 2


@dataclass
class CandidateSetSpec:
    """Definition of the finite candidate set :math:`X` (stored in JSON).

    Args:
        candidates: Table of candidates, one row each: a column per parameter,
            other columns kept as metadata.
        num_candidates: Size of the Sobol design of continuous or mixed spaces.
        seed: Seed of the design, the uniform initialization and the audits;
            None: drawn at the first generation (see :meth:`resolve_seed`).
        max_candidates: Largest allowed ``N`` (a guard on ``N^2`` distance work).
        exclude_evaluated: Never propose an evaluated candidate (noise-free).
        exclude_pending: Avoid pending candidates while others remain.
        id_column: A column of ``candidates`` whose unique values name the
            arms; default ``"row_<i>"``.
        retry_failed: Propose a candidate again after its trial failed.
        num_items: Items of an item-index kernel (the search space is one
            integer parameter ``0 .. num_items - 1``).
        audit_every: Spend every ``audit_every``-th model-based query on a
            uniformly drawn unexplored candidate; None: no audit.
        row_labels: The table's row labels, which errors name the rows by.
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
        for name, low in (("seed", 0), ("num_items", 2), ("audit_every", 1)):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), low)
        for name in ("exclude_evaluated", "exclude_pending", "retry_failed"):
            check_bool(name, getattr(self, name))
        if (column := self.id_column) is not None:
            if self.candidates is None:
                msg = "`id_column` names a column of `candidates`; got no table."
                raise ValueError(msg)
            if not isinstance(column, str) or any(
                column not in row for row in self.candidates
            ):
                columns = sorted({str(k) for row in self.candidates for k in row})
                msg = (
                    f"`id_column`={column!r} is not a column of every row; the "
                    f"table's columns are {columns}."
                )
                raise ValueError(msg)
            seen: dict[str, int] = {}
            for i, row in enumerate(self.candidates):
                label = str(row[column])
                if (first := seen.setdefault(label, i)) != i:
                    a, b = (
                        row_name("candidates", j, self.row_labels) for j in (first, i)
                    )
                    msg = f"{a} and {b} both have {column}={label!r}"
                    raise ValueError(f"`id_column` values must be unique: {msg}.")
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
        torch RNG (which Ax seeds); stored."""
        if self.seed is None:
            self.seed = next((int(s) for s in known if s is not None), None)
        if self.seed is None:
            self.seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
        return self.seed


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def parameters_from_table(
    table: CandidateTable, exclude: Sequence[str] = ()
) -> list[RangeParameterConfig | ChoiceParameterConfig]:
    """Ax parameter configs that span a table's columns (numeric: a range; str
    or bool: a choice), for ``Client.configure_experiment(parameters=...)``.

    Columns in ``exclude`` or with a single value are left out. Refused,
    naming the column: numbers stored as strings, and a string column unique
    per row when the other columns already tell the rows apart (an ID).

    Example:
        >>> table = [{"id": "a", "x": 1, "s": "u"}, {"id": "b", "x": 4, "s": "v"}]
        >>> [p.name for p in parameters_from_table(table, exclude=["id"])]
        ['x', 's']
    """
    rows = check_records("table", table)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    if unknown := sorted(set(exclude) - set(columns)):
        raise ValueError(
            f"`exclude` names no column of the table: {unknown}; the columns are "
            f"{columns}."
        )
    out: list[RangeParameterConfig | ChoiceParameterConfig] = []
    for name in (c for c in columns if c not in exclude):
        values = [r[name] for r in rows if name in r]
        if len(values) != len(rows):
            raise ValueError(f"Column {name!r} is missing in some rows of `table`.")
        distinct = list(dict.fromkeys(values))
        if len(distinct) < 2:
            continue
        strings = [v for v in distinct if isinstance(v, str)]
        if numeric := [v for v in strings if _number(v) is not None]:
            raise TypeError(
                f"Column {name!r} holds numbers stored as strings (e.g. "
                f"{numeric[0]!r}); convert it first (pandas.to_numeric), or name it "
                "in `exclude`."
            )
        if all(isinstance(v, bool) for v in distinct):
            out.append(ChoiceParameterConfig(name, [False, True], "bool"))
        elif len(strings) == len(distinct):
            out.append(ChoiceParameterConfig(name, sorted(distinct), "str", False))
        elif not strings and not any(isinstance(v, bool) for v in distinct):
            kind = "int" if all(isinstance(v, int) for v in distinct) else "float"
            out.append(RangeParameterConfig(name, (min(distinct), max(distinct)), kind))
        else:
            kinds = sorted({type(v).__name__ for v in distinct})
            msg = f"mixes types {kinds}; expected one of int/float, str, bool"
            raise TypeError(f"Column {name!r} of `table` {msg}.")
    kept = [p.name for p in out]
    for p in out:
        others = [c for c in kept if c != p.name]
        if isinstance(p, ChoiceParameterConfig) and len(p.values) == len(rows) > 2:
            if others and len({tuple(r[c] for c in others) for r in rows}) == len(rows):
                raise ValueError(
                    f"Column {p.name!r} holds a different value in each of the "
                    f"{len(rows)} rows, which the other columns ({others}) already "
                    "tell apart: an ID or free text? Name it in `exclude` (and as "
                    "the strategy's `id_column` to name the arms)."
                )
    return out


def candidate_parameterizations(
    search_space: SearchSpace, spec: CandidateSetSpec | None = None
) -> list[TParameterization]:
    r"""The finite candidate set :math:`X` of ``search_space``: a user table,
    every combination of a fully discrete space, or an Ax Sobol design.

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
    else:
        # Ax's Sobol rounding under constraints draws from the global RNGs.
        seed = spec.resolve_seed()
        try:
            with with_rng_seed(seed):
                adapter = Generators.SOBOL(
                    experiment=Experiment(search_space=search_space),
                    search_space=search_space,
                    seed=seed,
                    deduplicate=False,
                )
                arms = adapter.gen(n=spec.num_candidates).arms
        except Exception as e:  # Ax raises when rejection sampling finds no point
            what = f"Ax's Sobol generator failed ({e})"
            raise _no_candidate(search_space, what) from e
        rows = [dict(a.parameters) for a in arms]
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
    # In search-space order, as Ax's discrete optimizer.
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


def _check_item_index(search_space: SearchSpace, num_items: int) -> str:
    """The name of the one integer parameter ``0 .. num_items - 1``."""
    free = list(search_space.tunable_parameters.values())
    p = free[0] if len(free) == 1 else None
    ok = p is not None and p.parameter_type == ParameterType.INT
    ok = ok and (int(p.lower), int(p.upper)) == (0, num_items - 1)  # type: ignore[union-attr]
    if not ok:
        got = ", ".join(str(q) for q in free)
        raise ValueError(
            f"The candidate set holds {num_items} items (an item-index kernel's "
            f"Gram matrix or fingerprint library, or sharded candidates), but the "
            f"search space is [{got}]; "
            f"expected one integer parameter 0..{num_items - 1}, e.g. "
            f"`candidate_index_parameter({num_items})`."
        )
    return p.name  # type: ignore[union-attr]


def _validate_table(search_space: SearchSpace, spec: CandidateSetSpec) -> list[dict]:
    """The table's parameter columns, checked and cast by Ax."""
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
            kinds = {k: type(v).__name__ for k, v in params.items()}
            msg = f"{where(i)} = {given} (types {kinds}) is not in the search space"
            raise ValueError(f"{msg}: {e}") from e
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
    """A hashable key of a parameterization; floats rounded to 9 decimals (Ax's
    arms and the table's rows may differ in int/float type and last bits)."""
    return tuple(
        v if v is None or isinstance(v, bool | str) else round(float(v), 9)
        for v in (row.get(n) for n in names)
    )


class CandidateSet:
    """The candidates of one search space under a spec. An item index
    (``spec.num_items`` without a table) is never listed: row ``i`` is item ``i``."""

    def __init__(self, search_space: SearchSpace, spec: CandidateSetSpec) -> None:
        self.search_space, self.spec = search_space, spec
        self.names = list(search_space.parameters)
        self.item: str | None = None
        self._rows: list[TParameterization] | None = None
        if spec.num_items is not None and spec.candidates is None:
            self.item = _check_item_index(search_space, spec.num_items)
            self.n = spec.num_items
        else:
            self.n = len(self.rows)
        self.arm_names: list[str] | None = None
        self.metadata: list[dict] = []
        if spec.candidates is not None:
            ids = spec.id_column
            self.arm_names = [
                f"row_{i}" if ids is None else str(r[ids])
                for i, r in enumerate(spec.candidates)
            ]
            self.metadata = [
                {k: v for k, v in r.items() if k not in self.names}
                for r in spec.candidates
            ]

    @property
    def rows(self) -> list[TParameterization]:
        """Every candidate's parameterization, in order (listed on first use)."""
        if self._rows is None:
            self._rows = candidate_parameterizations(self.search_space, self.spec)
            self._index = {row_key(r, self.names): i for i, r in enumerate(self._rows)}
        return self._rows

    def row(self, i: int) -> TParameterization:
        return {self.item: int(i)} if self.item is not None else dict(self.rows[i])

    def index_of(self, parameters: Mapping[str, Any]) -> int | None:
        """The candidate index of an arm's parameters (None: not a candidate)."""
        if self.item is not None:
            value = parameters.get(self.item)
            ok = value is not None and float(value).is_integer()
            return int(value) if ok and 0 <= int(value) < self.n else None
        return self._index.get(row_key(parameters, self.names))

    def indices(self, parameterizations: Iterable[Mapping[str, Any]]) -> np.ndarray:
        """Sorted indices of the candidates among ``parameterizations``."""
        found = {self.index_of(p) for p in parameterizations}
        return np.array(sorted(i for i in found if i is not None), dtype=np.int64)

    def counts(self, parameterizations: Iterable[Mapping[str, Any]]) -> Counter:
        """How often each candidate index occurs in ``parameterizations``."""
        return Counter(self.index_of(p) for p in parameterizations)

    def in_trials(
        self, experiment: Experiment, statuses: Sequence[TrialStatus], within=True
    ) -> list[Mapping[str, Any]]:
        """The parameters of the arms of trials whose status is (or, if not
        ``within``, is not) one of ``statuses``."""
        trials = experiment.trials.values()
        chosen = [t for t in trials if (t.status in statuses) == within]
        return [a.parameters for t in chosen for a in t.arms]

    def matches(self, fixed: ObservationFeatures | None) -> np.ndarray | None:
        """Mask of the candidates that take the fixed features' values (None:
        no fixed feature)."""
        if fixed is None or not fixed.parameters:
            return None
        if self.item is not None:  # None (not an item) matches no index
            mask = np.arange(self.n) == self.index_of(fixed.parameters)
        else:
            names = list(fixed.parameters)
            want = row_key(fixed.parameters, names)
            mask = np.array([row_key(r, names) == want for r in self.rows], dtype=bool)
        if not mask.any():
            msg = f"values in the candidate set, got {fixed.parameters}"
            raise ValueError(f"`fixed_parameters` must take {msg}.")
        return mask


@dataclass(frozen=True)
class SelectableCandidates:
    """The candidates a node may propose at one step, by index in :math:`X`.

    Attributes:
        selectable: Boolean mask (``N``) of the candidates that may be proposed.
        evaluated: Sorted indices of the candidates in evaluated trials.
        pending: Sorted indices of the candidates in pending trials.
        audit: The audited candidate of an audit step, else None.
    """

    selectable: np.ndarray
    evaluated: np.ndarray
    pending: np.ndarray
    audit: int | None = None


def selectable_candidates(
    experiment: Experiment,
    candidates: CandidateSet,
    *,
    pending_observations: Mapping[str, Sequence[ObservationFeatures]] | None = None,
    allowed: np.ndarray | None = None,
    audit_step: int | None = None,
) -> SelectableCandidates:
    """The candidates a node may propose: ``allowed`` ones, less failed
    (``retry_failed=False``) and evaluated (``exclude_evaluated=True``) ones,
    and less pending ones while others remain (``exclude_pending=True``). At an
    audit step the one selectable candidate is drawn, from the seed and the
    step, among the allowed ones neither evaluated nor pending.

    Raises:
        SearchSpaceExhausted: No allowed candidate is left (naming the rule).
    """
    spec, n = candidates.spec, candidates.n
    evaluated = candidates.indices(candidates.in_trials(experiment, EVALUATED))
    failed = candidates.indices(candidates.in_trials(experiment, [TrialStatus.FAILED]))
    given = pending_observations or {}
    pending = candidates.indices(f.parameters for fs in given.values() for f in fs)
    mask = np.ones(n, dtype=bool) if allowed is None else allowed.copy()
    if not spec.retry_failed:
        mask[failed] = False
    if spec.exclude_evaluated:
        mask[evaluated] = False
    if not mask.any():
        why = ["evaluated (`exclude_evaluated=True`)"] if spec.exclude_evaluated else []
        why += [] if spec.retry_failed else ["failed before (`retry_failed=False`)"]
        raise SearchSpaceExhausted(
            f"All {n} candidates are {' or '.join(why) or 'excluded'}."
        )
    if spec.exclude_pending:
        keep = mask.copy()
        keep[pending] = False
        mask = keep if keep.any() else mask
    audit = None
    every = spec.audit_every
    if audit_step is not None and every is not None and audit_step % every == 0:
        explored = np.concatenate([evaluated, pending])
        choices = np.setdiff1d(np.flatnonzero(mask), explored)
        if choices.size:
            rng = np.random.default_rng([spec.resolve_seed(), AUDIT_STREAM, audit_step])
            audit = int(choices[rng.integers(choices.size)])
            mask = np.arange(n) == audit
    return SelectableCandidates(mask, evaluated, pending, audit)
