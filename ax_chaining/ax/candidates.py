r"""The finite candidate set :math:`X` of an Ax experiment, in the user's space.

:func:`candidate_parameterizations` computes :math:`X` from a
:class:`CandidateSetSpec` (stored with the strategy): a user table, validated
against the search space; every combination of a fully discrete space, in the
order of Ax's discrete optimizer (``itertools.product`` over the parameters in
search-space order); or a fixed design of ``num_candidates`` points from Ax's
Sobol generator (constraint-aware) with the spec's seed, the same at every step.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from ax.adapter.registry import Generators
from ax.core.experiment import Experiment
from ax.core.parameter import (
    ChoiceParameter,
    DerivedParameter,
    FixedParameter,
    Parameter,
    ParameterType,
    RangeParameter,
)
from ax.core.search_space import SearchSpace
from ax.core.types import TParameterization, TParamValue
from ax.exceptions.core import UnsupportedError
from ax.utils.common.random import with_rng_seed

#: Default size of the fixed Sobol design of continuous or mixed spaces.
DEFAULT_NUM_CANDIDATES: int = 1024
#: Default cap on ``N`` (rows, an ``N x d`` tensor, ``N^2`` distance work).
DEFAULT_MAX_CANDIDATES: int = 100_000
#: A ``pandas.DataFrame`` (a column per parameter) or a sequence of dicts.
CandidateTable = pd.DataFrame | Sequence[Mapping[str, TParamValue]]


@dataclass
class CandidateSetSpec:
    """Definition of the finite candidate set :math:`X` (stored in JSON).

    Args:
        candidates: Optional table of parameterizations; NaN or inf refused here.
        num_candidates: Size of the Sobol design of continuous or mixed spaces.
        seed: Seed of the design and of the uniform initialization. None: drawn
            from the global torch RNG at the first generation (Ax's ``Client``
            and ``ax.benchmark`` seed it with their ``random_seed``), then
            stored here and in every generator run's ``gen_metadata``.
        max_candidates: Largest allowed candidate set (memory guard).
        exclude_evaluated: Never propose an evaluated candidate (noise-free).
        exclude_pending: Avoid pending candidates while others remain.
    """

    candidates: list[dict[str, TParamValue]] | None = None
    num_candidates: int = DEFAULT_NUM_CANDIDATES
    seed: int | None = 0
    max_candidates: int = DEFAULT_MAX_CANDIDATES
    exclude_evaluated: bool = False
    exclude_pending: bool = True

    def __post_init__(self) -> None:
        self.candidates = _normalize_table(self.candidates)
        for name in ("num_candidates", "max_candidates"):
            check_positive_int(name, getattr(self, name))
        if self.seed is not None:
            check_int("seed", self.seed)
        for name in ("exclude_evaluated", "exclude_pending"):
            if not isinstance(value := getattr(self, name), bool):
                raise TypeError(f"`{name}` must be a bool, got {type(value).__name__}.")
        rows = None if self.candidates is None else len(self.candidates)
        if rows is not None and rows > self.max_candidates:
            raise ValueError(
                f"`candidates` has {rows:,} rows, more than `max_candidates`="
                f"{self.max_candidates:,}; pass fewer or raise `max_candidates`."
            )
        if rows is None and self.num_candidates > self.max_candidates:
            raise ValueError(
                f"`num_candidates`={self.num_candidates} exceeds `max_candidates`="
                f"{self.max_candidates}; lower num_candidates or raise max_candidates."
            )

    def resolve_seed(self, recorded: Iterable[dict[str, Any]]) -> int:
        """The seed; when None, the first one in the ``recorded`` generator-run
        metadata (a reload continues with it), else a fresh draw."""
        if self.seed is None:
            seeds = [m["seed"] for m in recorded if "seed" in m]
            self.seed = int(seeds[0]) if seeds else draw_seed()
        return self.seed


def draw_seed() -> int:
    """A seed from the global torch RNG, which Ax seeds around generation."""
    return int(torch.randint(0, 2**31 - 1, (1,)).item())


def candidate_parameterizations(
    search_space: SearchSpace, spec: CandidateSetSpec | None = None
) -> list[TParameterization]:
    r"""The finite candidate set :math:`X` of ``search_space``, as parameterizations.

    Args:
        search_space: The experiment's search space (not hierarchical).
        spec: The candidate set definition; default ``CandidateSetSpec()``.

    Returns:
        ``N >= 1`` distinct parameterizations (fixed and derived parameters
        filled in), in a fixed order.

    Raises:
        ValueError: Bad table entries, too many candidates, or parameter
            constraints that leave none. UnsupportedError: hierarchical spaces.

    Example:
        >>> ss = SearchSpace([ChoiceParameter("a", ParameterType.INT, [1, 2, 3])])
        >>> candidate_parameterizations(ss)
        [{'a': 1}, {'a': 2}, {'a': 3}]
    """
    spec = spec if spec is not None else CandidateSetSpec()
    if search_space.is_hierarchical:
        raise UnsupportedError(
            "Candidate sets do not support hierarchical search spaces; flatten the "
            "search space or pass `candidates=` with one row per configuration."
        )
    free = [
        p
        for p in search_space.parameters.values()
        if not isinstance(p, FixedParameter | DerivedParameter)
    ]
    if spec.candidates is not None:
        rows = _validate_table(search_space, spec.candidates, free)
    elif all(_is_discrete(p) for p in free):
        rows = _enumerate_discrete(search_space, free, spec.max_candidates)
    else:
        seed = spec.seed if spec.seed is not None else draw_seed()
        rows = _sobol_design(search_space, spec.num_candidates, seed)
    unique: dict[tuple, dict] = {}
    for r in rows:
        unique.setdefault(row_key(r, list(search_space.parameters)), r)
    return list(unique.values())


def _is_discrete(p: Parameter) -> bool:
    return isinstance(p, ChoiceParameter) or (
        isinstance(p, RangeParameter) and p.parameter_type == ParameterType.INT
    )


def _complete(search_space: SearchSpace, row: dict[str, TParamValue]) -> dict:
    """Fill in fixed, then derived, parameters (in place)."""
    for kind in (FixedParameter, DerivedParameter):
        for p in search_space.parameters.values():
            if isinstance(p, kind) and p.name not in row:
                row[p.name] = p.value if kind is FixedParameter else p.compute(row)  # type: ignore[attr-defined]
    return row


def _no_candidate(search_space: SearchSpace, what: str) -> ValueError:
    constraints = ", ".join(str(c) for c in search_space.parameter_constraints)
    return ValueError(
        f"The parameter constraints ({constraints or 'none'}) leave no candidate: "
        f"{what}. Expected a feasible region, or pass `candidates=`."
    )


def _enumerate_discrete(
    search_space: SearchSpace, free: list[Parameter], max_candidates: int
) -> list[dict]:
    values = [
        list(p.values)
        if isinstance(p, ChoiceParameter)
        else list(range(int(p.lower), int(p.upper) + 1))  # type: ignore[attr-defined]
        for p in free
    ]
    total = math.prod(len(v) for v in values)
    if total > max_candidates:
        sizes = " x ".join(
            f"{p.name}:{len(v)}" for p, v in zip(free, values, strict=True)
        )
        raise ValueError(
            f"The fully discrete search space has {total:,} combinations ({sizes}), "
            f"more than `max_candidates`={max_candidates:,}. Pass `candidates=` (a "
            "table of the parameterizations to consider) or raise `max_candidates`."
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


def _normalize_table(candidates: Any) -> list[dict[str, TParamValue]] | None:
    """Structural checks of a candidate table; returns JSON-friendly rows."""
    if candidates is None:
        return None
    if isinstance(candidates, pd.DataFrame):
        candidates = candidates.to_dict(orient="records")
    elif isinstance(candidates, str | bytes | Mapping) or not isinstance(
        candidates, Iterable
    ):
        raise TypeError(
            "`candidates` must be a pandas DataFrame or a sequence of {parameter "
            f"name: value}} mappings, got {type(candidates).__name__}."
        )
    rows: list[dict[str, TParamValue]] = []
    for i, rec in enumerate(candidates):
        if not isinstance(rec, Mapping):
            raise TypeError(
                f"`candidates[{i}]` must be a mapping from parameter name to value, "
                f"got {type(rec).__name__}."
            )
        row = {k: v.item() if isinstance(v, np.generic) else v for k, v in rec.items()}
        for k, v in row.items():
            if not isinstance(k, str) or not isinstance(v, bool | int | float | str):
                raise TypeError(
                    f"`candidates[{i}]` has entry {k!r}: {v!r} of type "
                    f"{type(v).__name__}; expected names mapped to int, float, str "
                    "or bool."
                )
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(
                    f"`candidates[{i}][{k!r}]` is {v}; expected a finite number "
                    "(drop or fill rows with NaN or inf)."
                )
        rows.append(row)
    if not rows:
        raise ValueError("`candidates` is empty; expected at least one candidate.")
    return rows


def _validate_table(
    search_space: SearchSpace, table: list[dict], free: list[Parameter]
) -> list[dict]:
    params, required = search_space.parameters, {p.name for p in free}
    rows = []
    for i, given in enumerate(table):
        unknown, missing = (
            sorted(set(given) - set(params)),
            sorted(required - set(given)),
        )
        if unknown or missing:
            raise ValueError(
                f"`candidates[{i}]` has unknown parameter(s) {unknown} and lacks "
                f"{missing}; expected a value for each of {sorted(required)}."
            )
        row = _complete(search_space, dict(given))
        for name, value in row.items():
            p = params[name]
            kwargs = {"parameters": row} if isinstance(p, DerivedParameter) else {}
            if not p.validate(value, **kwargs):
                raise ValueError(
                    f"`candidates[{i}][{name!r}]` = {value!r} is outside the search "
                    f"space: expected {p.domain_repr} "
                    f"({p.parameter_type.name.lower()})."
                )
            row[name] = p.cast(value)
        numeric = {n: float(v) for n, v in row.items() if params[n].is_numeric}
        for c in search_space.parameter_constraints:
            if not c.check(numeric):
                raise ValueError(
                    f"`candidates[{i}]` = {given} violates the parameter constraint "
                    f"'{c}'; expected candidates inside the search space."
                )
        rows.append(row)
    return rows


def row_key(row: Mapping[str, TParamValue], names: Sequence[str]) -> tuple:
    """A hashable key of a parameterization; floats rounded to 9 decimals, since
    Ax's arms and the table's rows may differ in int/float type and last bits."""
    return tuple(
        v if v is None or isinstance(v, bool | str) else round(float(v), 9)
        for v in (row.get(n) for n in names)
    )


def check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__}.")
    return int(value)


def check_positive_int(name: str, value: Any) -> int:
    if check_int(name, value) < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value}.")
    return int(value)
