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
from ax.core import Arm, ChoiceParameter, Experiment, SearchSpace
from ax.core.parameter import DerivedParameter, ParameterType
from ax.core.types import TParameterization, TParamValue
from ax.exceptions.core import UnsupportedError
from ax.utils.common.random import with_rng_seed

from ax_chaining.checks import check_bool, check_int, check_records

#: A ``pandas.DataFrame`` (a column per parameter) or a sequence of dicts.
CandidateTable = pd.DataFrame | Sequence[Mapping[str, TParamValue]]


@dataclass
class CandidateSetSpec:
    """Definition of the finite candidate set :math:`X` (stored in JSON).

    Args:
        candidates: Optional table of parameterizations (finite values).
        num_candidates: Size of the Sobol design of continuous or mixed spaces.
        seed: Seed of the design and of the uniform initialization; None: drawn
            from the global torch RNG (which Ax's ``Client`` and ``ax.benchmark``
            seed) at the first generation, then stored.
        max_candidates: Largest allowed ``N`` (a guard on ``N^2`` distance work).
        exclude_evaluated: Never propose an evaluated candidate (noise-free).
        exclude_pending: Avoid pending candidates while others remain.
    """

    candidates: list[dict[str, TParamValue]] | None = None
    num_candidates: int = 1024
    seed: int | None = 0
    max_candidates: int = 100_000
    exclude_evaluated: bool = False
    exclude_pending: bool = True

    def __post_init__(self) -> None:
        if self.candidates is not None:
            self.candidates = check_records("candidates", self.candidates)
        check_int("num_candidates", self.num_candidates, 1)
        most = check_int("max_candidates", self.max_candidates, 1)
        if self.seed is not None:
            check_int("seed", self.seed)
        for name in ("exclude_evaluated", "exclude_pending"):
            check_bool(name, getattr(self, name))
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
    if spec.candidates is not None:
        rows = _validate_table(search_space, spec.candidates)
    elif all(
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


def _validate_table(search_space: SearchSpace, table: list[dict]) -> list[dict]:
    """Ax's own membership check (names, domains, constraints) and casting."""
    rows = []
    for i, given in enumerate(table):
        try:
            row = _complete(search_space, dict(given))
            search_space.check_membership(row, raise_error=True)
        except (ValueError, KeyError) as e:
            msg = f"`candidates[{i}]` = {given} is not in the search space: {e}"
            raise ValueError(msg) from e
        rows.append(search_space.cast_arm(Arm(parameters=row)).parameters)
    return rows


def row_key(row: Mapping[str, TParamValue], names: Sequence[str]) -> tuple:
    """A hashable key of a parameterization; floats rounded to 9 decimals, since
    Ax's arms and the table's rows may differ in int/float type and last bits."""
    return tuple(
        v if v is None or isinstance(v, bool | str) else round(float(v), 9)
        for v in (row.get(n) for n in names)
    )
