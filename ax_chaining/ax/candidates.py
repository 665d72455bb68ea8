r"""The finite candidate set :math:`X` of an Ax experiment, in the user's space.

A :class:`CandidateSetSpec` holds what defines :math:`X` (it is stored with the
generation strategy); :func:`candidate_parameterizations` computes it:

* a user table of parameterizations, validated against the search space;
* every combination of a fully discrete search space, enumerated in the order of
  Ax's own discrete optimizer (``itertools.product`` over the parameters in
  search-space order, which ``Acquisition.optimize`` uses for discrete spaces);
* otherwise a fixed design of ``num_candidates`` points from Ax's Sobol generator
  (``Generators.SOBOL``, constraint-aware) with the spec's seed, hence the same
  design at every iteration.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
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

__all__ = [
    "DEFAULT_MAX_CANDIDATES",
    "DEFAULT_NUM_CANDIDATES",
    "CandidateSetSpec",
    "candidate_parameterizations",
]

#: Default size of the fixed Sobol design for continuous or mixed search spaces.
DEFAULT_NUM_CANDIDATES: int = 1024
#: Default cap on the candidate set (Python rows, an ``N x d`` tensor, and
#: pseudo-distance work growing like ``N^2``); larger sets are an explicit opt-in.
DEFAULT_MAX_CANDIDATES: int = 100_000

#: A table of parameterizations: a ``pandas.DataFrame`` with one column per
#: parameter, or a sequence of ``{parameter name: value}`` mappings.
CandidateTable = pd.DataFrame | Sequence[Mapping[str, TParamValue]]


@dataclass
class CandidateSetSpec:
    """Definition of the finite candidate set :math:`X` (stored in JSON).

    Args:
        candidates: Optional table of parameterizations (normalized to a list of
            dicts; NaN or inf values are refused here). If given, it is :math:`X`.
        num_candidates: Size of the Sobol design of continuous or mixed spaces.
        seed: Seed of the Sobol design and of the uniform initialization. None
            (the strategy factories' default) means: drawn from the global torch
            RNG at the experiment's first generation, which Ax's ``Client`` and
            ``ax.benchmark`` seed with their ``random_seed``; it is then stored
            here and in every generator run's ``gen_metadata``.
        max_candidates: Largest allowed candidate set (memory guard).
        exclude_evaluated: Never propose an evaluated candidate (noise-free
            problems). Default False: re-evaluation is allowed (noisy setting).
        exclude_pending: Do not propose a pending candidate (running, or chosen
            earlier in the same ``get_next_trials`` call) while others remain.
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
            if not isinstance(getattr(self, name), bool):
                got = type(getattr(self, name)).__name__
                raise TypeError(f"`{name}` must be a bool, got {got}.")
        if self.candidates is not None and len(self.candidates) > self.max_candidates:
            raise ValueError(
                f"`candidates` has {len(self.candidates):,} rows, more than "
                f"`max_candidates`={self.max_candidates:,}, the memory budget of the "
                "candidate set. Pass fewer candidates or raise `max_candidates`."
            )
        if self.candidates is None and self.num_candidates > self.max_candidates:
            raise ValueError(
                f"`num_candidates`={self.num_candidates} exceeds `max_candidates`="
                f"{self.max_candidates}; lower num_candidates or raise max_candidates."
            )

    def resolve_seed(self, experiment: Experiment) -> int:
        """The seed, resolved in place when None (see the class docstring).

        A seed recorded in the experiment's generator runs wins over a fresh draw,
        so a reloaded experiment (whose two nodes hold separate copies of this
        spec) continues with the seed of its first generation.
        """
        if self.seed is None:
            from ax_chaining.ax.nodes import recorded

            seeds = [m["seed"] for _, m in recorded(experiment) if "seed" in m]
            self.seed = int(seeds[0]) if seeds else draw_seed()
        return self.seed


def draw_seed() -> int:
    """A seed from the global torch RNG, which Ax seeds around generation."""
    import torch

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
        ValueError: Bad table entries, a set larger than ``max_candidates``, or
            parameter constraints that leave no candidate.
        UnsupportedError: Hierarchical search spaces.

    Example:
        >>> ss = SearchSpace([ChoiceParameter("a", ParameterType.INT, [1, 2, 3])])
        >>> candidate_parameterizations(ss)
        [{'a': 1}, {'a': 2}, {'a': 3}]
    """
    spec = spec if spec is not None else CandidateSetSpec()
    if search_space.is_hierarchical:
        raise UnsupportedError(
            "Chaining-UCB candidate sets do not support hierarchical search spaces "
            "(parameters with `dependent_parameters`); flatten the search space or "
            "pass `candidates=` with one row per configuration."
        )
    if spec.candidates is not None:
        rows = _validate_table(search_space, spec.candidates)
    elif all(_is_discrete(p) for p in _free_parameters(search_space)):
        rows = _enumerate_discrete(search_space, spec.max_candidates)
    else:
        seed = spec.seed if spec.seed is not None else draw_seed()
        rows = _sobol_design(search_space, spec.num_candidates, seed)
    names = list(search_space.parameters)
    unique: dict[tuple, dict] = {}
    for r in rows:
        unique.setdefault(row_key(r, names), r)
    return list(unique.values())


def _free_parameters(search_space: SearchSpace) -> list[Parameter]:
    return [
        p
        for p in search_space.parameters.values()
        if not isinstance(p, FixedParameter | DerivedParameter)
    ]


def _is_discrete(p: Parameter) -> bool:
    return isinstance(p, ChoiceParameter) or (
        isinstance(p, RangeParameter) and p.parameter_type == ParameterType.INT
    )


def _complete(search_space: SearchSpace, row: dict[str, TParamValue]) -> None:
    """Fill in fixed and derived parameters, in place."""
    for p in search_space.parameters.values():
        if isinstance(p, FixedParameter) and p.name not in row:
            row[p.name] = p.value
    for p in search_space.parameters.values():
        if isinstance(p, DerivedParameter) and p.name not in row:
            row[p.name] = p.compute(row)


def _constraints_repr(search_space: SearchSpace) -> str:
    return ", ".join(str(c) for c in search_space.parameter_constraints) or "none"


def _enumerate_discrete(search_space: SearchSpace, max_candidates: int) -> list[dict]:
    free = _free_parameters(search_space)
    values = [
        list(p.values)
        if isinstance(p, ChoiceParameter)
        else list(range(int(p.lower), int(p.upper) + 1))  # type: ignore[attr-defined]
        for p in free
    ]
    total = math.prod(len(v) for v in values)
    if total > max_candidates:
        sizes = " x ".join(f"{p.name}:{len(v)}" for p, v in zip(free, values))
        raise ValueError(
            f"The fully discrete search space has {total:,} combinations ({sizes}), "
            f"more than `max_candidates`={max_candidates:,}, the memory budget of "
            "the candidate set. Pass `candidates=` (a table of the parameterizations "
            "to consider) or raise `max_candidates`."
        )
    rows = []
    for combo in itertools.product(*values):
        row = {p.name: v for p, v in zip(free, combo, strict=True)}
        _complete(search_space, row)
        rows.append(row)
    df = pd.DataFrame(rows, columns=list(search_space.parameters))
    mask = np.asarray(search_space.check_membership_df(df), dtype=bool)
    if not mask.any():
        raise ValueError(
            f"The parameter constraints ({_constraints_repr(search_space)}) leave no "
            f"candidate: none of the {total:,} combinations of the search space "
            "satisfies them. Expected constraints with at least one feasible "
            "combination."
        )
    return [row for row, ok in zip(rows, mask, strict=True) if ok]


def _sobol_design(search_space: SearchSpace, num: int, seed: int) -> list[dict]:
    # Ax's own Sobol generator: log/logit scales, choice parameters and
    # parameter constraints (by rejection) exactly as Ax handles them. Its
    # rounding of integers under constraints draws from the global RNGs, so
    # those follow the seed too: the design is a function of the seed alone.
    try:
        with with_rng_seed(seed):
            adapter = Generators.SOBOL(
                experiment=Experiment(search_space=search_space),
                search_space=search_space,
                seed=seed,
                deduplicate=False,
            )
            arms = adapter.gen(n=num).arms
    except Exception as e:  # Ax raises when rejection sampling finds no point
        raise ValueError(
            f"The parameter constraints ({_constraints_repr(search_space)}) leave "
            f"too few candidates: Ax's Sobol generator could not draw {num} "
            f"feasible points ({e}). Expected constraints with a feasible region "
            "of positive volume, or pass `candidates=`."
        ) from e
    return [dict(a.parameters) for a in arms]


def _normalize_table(candidates: Any) -> list[dict[str, TParamValue]] | None:
    """Structural checks of a candidate table; returns JSON-friendly rows."""
    if candidates is None:
        return None
    if isinstance(candidates, pd.DataFrame):
        records: Iterable[Any] = candidates.to_dict(orient="records")
    elif isinstance(candidates, str | bytes | Mapping) or not isinstance(
        candidates, Iterable
    ):
        raise TypeError(
            "`candidates` must be a pandas DataFrame or a sequence of "
            "{parameter name: value} mappings (one per candidate), got "
            f"{type(candidates).__name__}."
        )
    else:
        records = candidates
    rows: list[dict[str, TParamValue]] = []
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise TypeError(
                f"`candidates[{i}]` must be a mapping from parameter name to value, "
                f"got {type(rec).__name__}."
            )
        row: dict[str, TParamValue] = {}
        for k, v in rec.items():
            v = v.item() if isinstance(v, np.generic) else v  # JSON needs Python
            if not isinstance(k, str) or not isinstance(v, bool | int | float | str):
                raise TypeError(
                    f"`candidates[{i}]` has entry {k!r}: {v!r} of type "
                    f"{type(v).__name__}; expected parameter names mapped to int, "
                    "float, str or bool."
                )
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(
                    f"`candidates[{i}][{k!r}]` is {v}; expected a finite number "
                    "(drop or fill rows with NaN or inf before passing the table)."
                )
            row[k] = v
        rows.append(row)
    if not rows:
        raise ValueError("`candidates` is empty; expected at least one candidate.")
    return rows


def _validate_table(search_space: SearchSpace, table: list[dict]) -> list[dict]:
    params = search_space.parameters
    required = {p.name for p in _free_parameters(search_space)}
    rows = []
    for i, given in enumerate(table):
        unknown = sorted(set(given) - set(params))
        missing = sorted(required - set(given))
        if unknown or missing:
            raise ValueError(
                f"`candidates[{i}]` has unknown parameter(s) {unknown} and lacks "
                f"{missing}; expected a value for each of {sorted(required)}."
            )
        row = dict(given)
        _complete(search_space, row)
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


def _canon(v: TParamValue) -> Any:
    # Arms from Ax and rows from the table may differ in int/float type and in
    # the last bits of a float; compare on a rounded common representation.
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    return round(float(v), 9)


def row_key(row: Mapping[str, TParamValue], names: Sequence[str]) -> tuple:
    """A hashable key of a parameterization, tolerant to int/float noise."""
    return tuple(_canon(row.get(n)) for n in names)


def check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__}.")
    return int(value)


def check_positive_int(name: str, value: Any) -> int:
    if check_int(name, value) < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value}.")
    return int(value)
