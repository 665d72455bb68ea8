r"""Chaining-UCB in Ax: generation nodes, generation strategies and storage.

An Ax user picks Chaining-UCB the way they pick any Ax method::

    client.set_generation_strategy(chaining_generation_strategy(init_trials=10))

and compares it with the stock BoTorch UCB or GP-UCB by swapping that one line for
:func:`ucb_generation_strategy` or :func:`gp_ucb_generation_strategy`.

How the pieces fit (everything but the candidate set is Ax's own machinery):

* **The candidate set** :math:`X` is finite, as in the paper. It is defined in the
  user's parameter space by a :class:`CandidateSetSpec` (see
  :func:`candidate_parameterizations`): every combination of a fully discrete
  search space, a fixed scrambled Sobol design of ``num_candidates`` points of a
  continuous or mixed one (same seed, hence same design, at every iteration), or
  a user-given table of parameterizations.
* **Initialization** (:class:`UniformCandidateNode`) draws uniformly from
  :math:`X`, without replacement, as in the paper's experiments (or uses Ax's
  Sobol generator with ``init="sobol"``).
* **Model-based node** (:class:`CandidateSetNode`) is a ``GenerationNode`` over
  ``Generators.BOTORCH_MODULAR``: Ax applies its transforms, fits the surrogate
  and learns hyperparameters. At generation time the node maps :math:`X`
  through the fitted adapter's own transforms into Ax's transformed (model)
  space and hands it to :class:`CandidateSetAcquisition`, which builds the
  BoTorch acquisition function (:class:`~ax_chaining.acquisition.ChainingUCB`,
  :class:`~ax_chaining.acquisition.GPUCB` or ``UpperConfidenceBound``) and
  maximizes it over :math:`X`.
* **Pending points** (running trials, and earlier arms of the same
  ``get_next_trials`` call) reach the acquisition function as ``X_pending``;
  Chaining-UCB conditions on them with their posterior mean as hallucinated
  observations (GP-BUCB) and rebuilds its covers, so ``get_next_trials(k)`` is a
  sequential greedy batch.
* **The certificate** :meth:`ChainingUCB.regret_bound` at each query is stored in
  the generator run's ``gen_metadata[GEN_METADATA_KEY]``, where
  :class:`ax_chaining.stopping.RegretBoundGlobalStoppingStrategy` reads it.
* **JSON storage** works through Ax's registries; :func:`register_storage` runs
  at import of this module.
"""

from __future__ import annotations

import inspect
import itertools
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from ax.adapter.adapter_utils import extract_objective_weight_matrix
from ax.adapter.base import Adapter
from ax.adapter.registry import Generators
from ax.api.configs import RangeParameterConfig
from ax.core.data import Data
from ax.core.experiment import Experiment
from ax.core.generator_run import GeneratorRun
from ax.core.observation import ObservationFeatures
from ax.core.optimization_config import MultiObjectiveOptimizationConfig
from ax.core.parameter import (
    ChoiceParameter,
    DerivedParameter,
    FixedParameter,
    Parameter,
    ParameterType,
    RangeParameter,
)
from ax.core.search_space import SearchSpace, SearchSpaceDigest
from ax.core.trial_status import TrialStatus
from ax.core.types import TParameterization, TParamValue
from ax.exceptions.core import SearchSpaceExhausted, UnsupportedError
from ax.generation_strategy.external_generation_node import ExternalGenerationNode
from ax.generation_strategy.generation_node import GenerationNode
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generation_strategy.transition_criterion import MinTrials, TransitionCriterion
from ax.generators.torch.botorch_modular.acquisition import Acquisition
from ax.generators.torch.botorch_modular.surrogate import Surrogate, SurrogateSpec
from ax.generators.torch.botorch_modular.utils import ModelConfig
from ax.generators.torch_base import TorchOptConfig
from ax.storage.botorch_modular_registry import (
    register_acquisition,
    register_acquisition_function,
    register_kernel,
)
from ax.storage.json_store.decoder import generation_node_from_json, object_from_json
from ax.storage.json_store.encoders import generation_node_to_dict
from ax.storage.json_store.registry import (
    CORE_CLASS_DECODER_REGISTRY,
    CORE_DECODER_REGISTRY,
    CORE_ENCODER_REGISTRY,
)
from ax.utils.common.constants import Keys
from botorch.acquisition.acquisition import AcquisitionFunction
from botorch.acquisition.analytic import (
    AnalyticAcquisitionFunction,
    UpperConfidenceBound,
)
from botorch.optim.optimize import optimize_acqf_discrete
from torch import Tensor

from ax_chaining.acquisition import GPUCB, ChainingUCB

__all__ = [
    "DEFAULT_MAX_CANDIDATES",
    "DEFAULT_NUM_CANDIDATES",
    "GEN_METADATA_KEY",
    "CandidateSetAcquisition",
    "CandidateSetNode",
    "CandidateSetSpec",
    "UniformCandidateNode",
    "candidate_index_parameter",
    "candidate_parameterizations",
    "chaining_generation_strategy",
    "chaining_ucb_node",
    "gp_ucb_generation_strategy",
    "gp_ucb_node",
    "precomputed_kernel_surrogate_spec",
    "register_storage",
    "ucb_generation_strategy",
    "ucb_node",
]

#: Default size of the fixed Sobol design for continuous or mixed search spaces.
DEFAULT_NUM_CANDIDATES: int = 1024
#: Default cap on the size of the candidate set. It is materialized as Python
#: parameterizations and an ``N x d`` tensor, and the engine's pseudo-distance
#: work grows like ``N^2``; past this size the user must opt in explicitly.
DEFAULT_MAX_CANDIDATES: int = 100_000
#: Key of the Chaining-UCB entry in ``GeneratorRun.gen_metadata``.
GEN_METADATA_KEY: str = "chaining_ucb"

#: A table of parameterizations: a ``pandas.DataFrame`` with one column per
#: parameter, or a sequence of ``{parameter name: value}`` mappings.
CandidateTable = pd.DataFrame | Sequence[Mapping[str, TParamValue]]

_AX_ACQ_KWARGS: str = Keys.AX_ACQUISITION_KWARGS.value
_EVALUATED_STATUSES = (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED)
# Cap on Sobol draws when parameter constraints reject most of the design.
_MAX_DESIGN_DRAW_FACTOR = 64


# ---------------------------------------------------------------------------
# The candidate set, in the user's parameter space.
# ---------------------------------------------------------------------------


@dataclass
class CandidateSetSpec:
    """Definition of the finite candidate set :math:`X` of an Ax experiment.

    The set itself depends on the experiment's search space and is computed by
    :func:`candidate_parameterizations`; this spec holds only what is needed to
    recompute it identically (it is stored in JSON with the generation strategy).

    Args:
        candidates: Optional table of parameterizations (normalized to a list of
            dicts). If given, it is the candidate set.
        num_candidates: Size of the fixed scrambled Sobol design used for
            continuous or mixed search spaces.
        seed: Seed of the Sobol design and of the uniform initialization. None
            (what the strategy factories pass by default) means: draw it from the
            global torch RNG at the experiment's first generation (Ax's ``Client``
            and ``ax.benchmark`` seed that RNG with their ``random_seed``), and
            record it in every generator run's ``gen_metadata`` so that a reloaded
            experiment continues with the same one.
        max_candidates: Largest allowed candidate set (memory guard).
        exclude_evaluated: Never propose a candidate that was already evaluated
            (for noise-free problems). By default re-evaluation is allowed, as in
            the paper's noisy setting.
        exclude_pending: Do not propose a candidate that is pending (running, or
            chosen earlier in the same ``get_next_trials`` call), unless nothing
            else is left.
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
            _check_positive_int(name, getattr(self, name))
        if self.seed is not None:
            _check_int(name="seed", value=self.seed)
        for name in ("exclude_evaluated", "exclude_pending"):
            if not isinstance(getattr(self, name), bool):
                got = type(getattr(self, name)).__name__
                raise TypeError(f"`{name}` must be a bool, got {got}.")
        if self.candidates is None and self.num_candidates > self.max_candidates:
            raise ValueError(
                f"`num_candidates`={self.num_candidates} exceeds "
                f"`max_candidates`={self.max_candidates}; lower num_candidates or "
                "raise max_candidates."
            )


def candidate_parameterizations(
    search_space: SearchSpace, spec: CandidateSetSpec | None = None
) -> list[TParameterization]:
    r"""The finite candidate set :math:`X` of ``search_space``, as parameterizations.

    * With ``spec.candidates``: the user's table, validated against the search
      space (names, domains, parameter constraints), with fixed and derived
      parameters filled in, values cast to the parameter types, duplicates
      dropped.
    * Fully discrete search space (choice parameters, integer ranges, fixed and
      derived parameters): every combination that satisfies the parameter
      constraints.
    * Otherwise: ``spec.num_candidates`` points of a scrambled Sobol sequence
      seeded with ``spec.seed`` (uniform in the log / logit scale of such
      parameters, uniform over the values of choice parameters), skipping
      points that violate the parameter constraints. The same spec gives the
      same design, so the candidate set is fixed across iterations.

    Args:
        search_space: The experiment's search space (not hierarchical).
        spec: The candidate set definition; default ``CandidateSetSpec()``.

    Returns:
        A list of ``N >= 1`` parameterizations, in a fixed order.

    Raises:
        ValueError: Bad table entries, a set larger than ``max_candidates``, or
            parameter constraints that leave no candidate.
        UnsupportedError: Hierarchical search spaces.

    Example:
        >>> from ax.core.parameter import ChoiceParameter, ParameterType
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
        rows = _validate_table(search_space, spec.candidates, spec.max_candidates)
    elif all(_is_discrete(p) for p in _free_parameters(search_space)):
        rows = _enumerate_discrete(search_space, spec.max_candidates)
    else:
        seed = spec.seed if spec.seed is not None else _draw_seed()
        rows = _sobol_design(search_space, spec.num_candidates, seed)
    return _dedupe(rows, search_space)


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


def _discrete_values(p: Parameter) -> list[TParamValue]:
    if isinstance(p, ChoiceParameter):
        return list(p.values)
    assert isinstance(p, RangeParameter)
    return list(range(int(p.lower), int(p.upper) + 1))


def _complete(search_space: SearchSpace, row: dict[str, TParamValue]) -> None:
    """Fill in fixed and derived parameters, in place."""
    for p in search_space.parameters.values():
        if isinstance(p, FixedParameter) and p.name not in row:
            row[p.name] = p.value
    for p in search_space.parameters.values():
        if isinstance(p, DerivedParameter) and p.name not in row:
            row[p.name] = p.compute(row)


def _feasible_mask(search_space: SearchSpace, rows: list[dict]) -> np.ndarray:
    """Vectorized membership (domains and parameter constraints) of ``rows``."""
    if not rows:
        return np.zeros(0, dtype=bool)
    df = pd.DataFrame(rows, columns=list(search_space.parameters))
    return np.asarray(search_space.check_membership_df(df), dtype=bool)


def _constraints_repr(search_space: SearchSpace) -> str:
    return ", ".join(str(c) for c in search_space.parameter_constraints) or "none"


def _enumerate_discrete(search_space: SearchSpace, max_candidates: int) -> list[dict]:
    free = _free_parameters(search_space)
    values = [_discrete_values(p) for p in free]
    total = math.prod(len(v) for v in values)
    if total > max_candidates:
        sizes = " x ".join(
            f"{p.name}:{len(v)}" for p, v in zip(free, values, strict=True)
        )
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
    mask = _feasible_mask(search_space, rows)
    if not mask.any():
        raise ValueError(
            f"The parameter constraints ({_constraints_repr(search_space)}) leave no "
            f"candidate: none of the {total:,} combinations of the search space "
            "satisfies them. Expected constraints with at least one feasible "
            "combination."
        )
    return [row for row, ok in zip(rows, mask, strict=True) if ok]


def _from_unit(p: Parameter, u: np.ndarray) -> list[TParamValue]:
    """Map ``u`` in ``[0, 1)`` to values of ``p``, uniform in its scale."""
    if isinstance(p, ChoiceParameter):
        idx = np.minimum((u * len(p.values)).astype(int), len(p.values) - 1)
        return [p.values[i] for i in idx]
    assert isinstance(p, RangeParameter)
    lo, hi = float(p.lower), float(p.upper)
    is_int = p.parameter_type == ParameterType.INT
    if is_int:
        # Cells of width 1 around each integer, so every integer is as likely.
        lo, hi = lo - 0.5, hi + 0.5
    if p.log_scale:
        lo_, hi_ = math.log(max(lo, 1e-300)), math.log(hi)
        x = np.exp(lo_ + u * (hi_ - lo_))
    elif p.logit_scale:
        lo_, hi_ = math.log(lo / (1 - lo)), math.log(hi / (1 - hi))
        x = 1.0 / (1.0 + np.exp(-(lo_ + u * (hi_ - lo_))))
    else:
        x = lo + u * (hi - lo)
    if is_int:
        x = np.clip(np.rint(x), p.lower, p.upper)
        return [int(v) for v in x]
    return [p.cast(float(np.clip(v, p.lower, p.upper))) for v in x]


def _sobol_design(search_space: SearchSpace, num: int, seed: int) -> list[dict]:
    free = _free_parameters(search_space)
    if not free:
        row: dict[str, TParamValue] = {}
        _complete(search_space, row)
        return [row]
    engine = torch.quasirandom.SobolEngine(len(free), scramble=True, seed=seed)
    rows: list[dict] = []
    drawn = 0
    # Constraints reject part of the design: keep drawing from the same sequence
    # (deterministic for a given seed) until ``num`` feasible points are found.
    while len(rows) < num and drawn < _MAX_DESIGN_DRAW_FACTOR * num:
        batch = max(num - len(rows), 64) if drawn else num
        u = engine.draw(batch, dtype=torch.float64).numpy()
        drawn += batch
        cols = [_from_unit(p, u[:, j]) for j, p in enumerate(free)]
        new = []
        for i in range(batch):
            r = {p.name: cols[j][i] for j, p in enumerate(free)}
            _complete(search_space, r)
            new.append(r)
        mask = _feasible_mask(search_space, new)
        rows.extend(r for r, ok in zip(new, mask, strict=True) if ok)
    if not rows:
        raise ValueError(
            f"The parameter constraints ({_constraints_repr(search_space)}) leave no "
            f"candidate: none of {drawn:,} Sobol points of the search space satisfies "
            "them. Expected constraints with a feasible region of positive volume, "
            "or pass `candidates=`."
        )
    if len(rows) < num:
        warnings.warn(
            f"Only {len(rows)} of {drawn:,} Sobol points satisfy the parameter "
            f"constraints; the candidate set has {len(rows)} < num_candidates={num} "
            "points.",
            stacklevel=3,
        )
    return rows[:num]


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
            if not isinstance(k, str):
                raise TypeError(
                    f"`candidates[{i}]` has a non-string key {k!r}; expected "
                    "parameter names."
                )
            if isinstance(v, np.generic):
                v = v.item()  # numpy scalars from DataFrames; JSON needs Python
            if not isinstance(v, bool | int | float | str):
                raise TypeError(
                    f"`candidates[{i}][{k!r}]` has type {type(v).__name__}; "
                    "expected int, float, str or bool."
                )
            row[k] = v
        rows.append(row)
    if not rows:
        raise ValueError("`candidates` is empty; expected at least one candidate.")
    return rows


def _validate_table(
    search_space: SearchSpace, table: list[dict], max_candidates: int
) -> list[dict]:
    if len(table) > max_candidates:
        raise ValueError(
            f"`candidates` has {len(table):,} rows, more than "
            f"`max_candidates`={max_candidates:,}, the memory budget of the "
            "candidate set. Pass fewer candidates or raise `max_candidates`."
        )
    params = search_space.parameters
    required = {p.name for p in _free_parameters(search_space)}
    rows = []
    for i, given in enumerate(table):
        unknown = sorted(set(given) - set(params))
        if unknown:
            raise ValueError(
                f"`candidates[{i}]` has unknown parameter name(s) {unknown}; "
                f"expected names from the search space: {sorted(params)}."
            )
        missing = sorted(required - set(given))
        if missing:
            raise ValueError(
                f"`candidates[{i}]` is missing parameter(s) {missing}; expected a "
                f"value for each of {sorted(required)}."
            )
        row = dict(given)
        _complete(search_space, row)
        for name, value in row.items():
            p = params[name]
            kwargs = {"parameters": row} if isinstance(p, DerivedParameter) else {}
            if not p.validate(value, **kwargs):
                kind = p.parameter_type.name.lower()
                raise ValueError(
                    f"`candidates[{i}][{name!r}]` = {value!r} is outside the search "
                    f"space: expected {p.domain_repr} ({kind})."
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


def _row_key(row: Mapping[str, TParamValue], names: Sequence[str]) -> tuple:
    return tuple(_canon(row.get(n)) for n in names)


def _dedupe(rows: list[dict], search_space: SearchSpace) -> list[dict]:
    names = list(search_space.parameters)
    seen: set[tuple] = set()
    out = []
    for r in rows:
        k = _row_key(r, names)
        if k not in seen:
            seen.add(k)
            out.append(r)
    return out


def _check_positive_int(name: str, value: Any) -> int:
    _check_int(name, value)
    if value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value}.")
    return int(value)


def _check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__}.")
    return int(value)


def _check_experiment(experiment: Experiment) -> None:
    """Chaining-UCB optimizes one objective without outcome constraints."""
    opt = experiment.optimization_config
    if opt is None:
        return  # the Client reports this itself
    if (
        isinstance(opt, MultiObjectiveOptimizationConfig)
        or opt.objective.is_multi_objective
    ):
        raise UnsupportedError(
            "Chaining-UCB supports a single objective; the experiment's optimization "
            f"config has objectives {opt.objective.metric_names} "
            "(multi-objective). Scalarize them instead, e.g. "
            "`client.configure_optimization(objective='a + 0.5 * b')`, or use "
            "Ax's default multi-objective strategy."
        )
    if opt.outcome_constraints:
        raise UnsupportedError(
            "Chaining-UCB does not support outcome constraints (its regret "
            "certificate is for the unconstrained objective); got "
            f"{[str(c) for c in opt.outcome_constraints]}. Remove them or fold them "
            "into the objective."
        )


class _CandidateCache:
    """Candidate rows of one search space (recomputed if the space changes)."""

    def __init__(self) -> None:
        self._key: str | None = None
        self._rows: list[TParameterization] = []

    def get(self, search_space: SearchSpace, spec: CandidateSetSpec) -> list[dict]:
        key = repr(search_space)
        if key != self._key:
            self._rows = candidate_parameterizations(search_space, spec)
            self._key = key
        return self._rows


def _arm_keys(
    experiment: Experiment, statuses: Sequence[TrialStatus] | None, names: list[str]
) -> set[tuple]:
    keys = set()
    for trial in experiment.trials.values():
        if statuses is not None and trial.status not in statuses:
            continue
        for arm in trial.arms:
            keys.add(_row_key(arm.parameters, names))
    return keys


def _pending_keys(
    pending: Mapping[str, Sequence[ObservationFeatures]] | None, names: list[str]
) -> set[tuple]:
    return {
        _row_key(of.parameters, names)
        for feats in (pending or {}).values()
        for of in feats
    }


def _matches_fixed(rows: list[dict], fixed: ObservationFeatures | None) -> np.ndarray:
    mask = np.ones(len(rows), dtype=bool)
    if fixed is None or not fixed.parameters:
        return mask
    want = {k: _canon(v) for k, v in fixed.parameters.items()}
    for i, r in enumerate(rows):
        mask[i] = all(_canon(r.get(k)) == v for k, v in want.items())
    if not mask.any():
        raise ValueError(
            f"No candidate matches the fixed parameters {fixed.parameters} "
            "(`fixed_parameters` of get_next_trials); expected values that occur "
            "in the candidate set."
        )
    return mask


# ---------------------------------------------------------------------------
# Generation nodes.
# ---------------------------------------------------------------------------


class _SpecNodeStorage:
    """JSON (de)serialization shared by the candidate-set nodes."""

    candidate_spec: CandidateSetSpec

    @classmethod
    def deserialize_init_args(
        cls,
        args: dict[str, Any],
        decoder_registry: Any = None,
        class_decoder_registry: Any = None,
    ) -> dict[str, Any]:
        registries = {
            "decoder_registry": decoder_registry or CORE_DECODER_REGISTRY,
            "class_decoder_registry": class_decoder_registry
            or CORE_CLASS_DECODER_REGISTRY,
        }
        args = dict(args)
        spec = object_from_json(args.pop("candidate_spec"), **registries)
        # Reuse Ax's GenerationNode decoding (input constructors, criteria) and
        # re-wrap the result in this class.
        node = generation_node_from_json(generation_node_json=args, **registries)
        kwargs = {
            "name": node.name,
            "candidate_spec": spec,
            "transition_criteria": node.transition_criteria,
        }
        if cls is CandidateSetNode:
            kwargs.update(
                generator_specs=node.generator_specs,
                pausing_criteria=node.pausing_criteria,
                best_model_selector=node.best_model_selector,
                should_deduplicate=node.should_deduplicate,
                input_constructors=node.input_constructors,
                previous_node_name=node._previous_node_name,
                trial_type=node._trial_type,
                suggested_experiment_status=node.suggested_experiment_status,
            )
        return kwargs


def _node_to_dict(node: GenerationNode) -> dict[str, Any]:
    return {
        **generation_node_to_dict(node),
        "candidate_spec": node.candidate_spec,  # type: ignore[attr-defined]
    }


class UniformCandidateNode(_SpecNodeStorage, ExternalGenerationNode):
    """Initialization node: uniform draws from the candidate set.

    Each draw takes the next candidate of a fixed random permutation of
    :math:`X` (seeded by ``candidate_spec.seed``) that is not yet used by a trial
    of the experiment, so an initial design has no repeats while :math:`X` lasts
    and a reloaded experiment continues the same sequence. Once every candidate
    is used, the least used ones are repeated (or ``SearchSpaceExhausted`` is
    raised if ``candidate_spec.exclude_evaluated``).

    Args:
        name: Node name.
        candidate_spec: Definition of the candidate set.
        transition_criteria: Ax transition criteria (e.g. ``MinTrials``).
    """

    def __init__(
        self,
        name: str,
        candidate_spec: CandidateSetSpec,
        transition_criteria: Sequence[TransitionCriterion] | None = None,
    ) -> None:
        super().__init__(
            name=name,
            should_deduplicate=False,  # repeats are handled in get_next_candidate
            transition_criteria=transition_criteria,
        )
        self.candidate_spec = candidate_spec
        self._cache = _CandidateCache()
        self._rows: list[dict] = []
        self._order: np.ndarray = np.zeros(0, dtype=int)
        self._used: dict[tuple, int] = {}
        self._names: list[str] = []
        self._fixed: ObservationFeatures | None = None

    def update_generator_state(self, experiment: Experiment, data: Data) -> None:
        """Compute the candidate set and count how often each is already used."""
        _check_experiment(experiment)
        seed = _experiment_seed(self.candidate_spec, experiment)
        rows = self._cache.get(experiment.search_space, self.candidate_spec)
        if rows is not self._rows:
            self._rows = rows
            rng = np.random.default_rng([seed, 1])
            self._order = rng.permutation(len(rows))
        self._names = list(experiment.search_space.parameters)
        self._used = {}
        for trial in experiment.trials.values():
            if trial.status in (TrialStatus.FAILED, TrialStatus.ABANDONED):
                continue
            for arm in trial.arms:
                k = _row_key(arm.parameters, self._names)
                self._used[k] = self._used.get(k, 0) + 1

    def get_next_candidate(
        self, pending_parameters: list[TParameterization]
    ) -> TParameterization:
        """The next unused candidate of the permutation (least used if none)."""
        counts = dict(self._used)
        for p in pending_parameters:
            k = _row_key(p, self._names)
            counts[k] = counts.get(k, 0) + 1
        allowed = _matches_fixed(self._rows, self._fixed)
        best, best_count = -1, math.inf
        for i in self._order:
            if not allowed[i]:
                continue
            c = counts.get(_row_key(self._rows[i], self._names), 0)
            if c < best_count:
                best, best_count = int(i), c
                if c == 0:
                    break
        if best_count > 0 and self.candidate_spec.exclude_evaluated:
            raise SearchSpaceExhausted(
                f"All {int(allowed.sum())} candidates (matching the fixed parameters) "
                "are already used and `exclude_evaluated=True`; the candidate set is "
                "exhausted during the initialization (init_trials is larger than "
                "the candidate set)."
            )
        return dict(self._rows[best])

    def _gen(
        self,
        experiment: Experiment,
        data: Data | None = None,
        n: int | None = None,
        pending_observations: dict[str, list[ObservationFeatures]] | None = None,
        **generator_gen_kwargs: Any,
    ) -> GeneratorRun:
        # ``fixed_parameters`` of get_next_trials arrive here; the base class
        # drops them, so keep them for get_next_candidate.
        self._fixed = generator_gen_kwargs.get("fixed_features")
        try:
            gr = super()._gen(
                experiment=experiment,
                data=data,
                n=n,
                pending_observations=pending_observations,
                **generator_gen_kwargs,
            )
        finally:
            self._fixed = None
        gr._gen_metadata = {
            **(gr.gen_metadata or {}),
            GEN_METADATA_KEY: {
                "num_candidates": len(self._rows),
                "seed": self.candidate_spec.seed,
            },
        }
        return gr


class CandidateSetNode(_SpecNodeStorage, GenerationNode):
    """A ``GenerationNode`` that optimizes over a finite candidate set.

    It wraps Ax's ``Generators.BOTORCH_MODULAR`` generator (built with
    :class:`CandidateSetAcquisition`): Ax fits the surrogate as usual; before
    each generation the node computes the candidate set in the user's parameter
    space, maps it through the fitted adapter's transforms into the model space,
    marks which candidates may be proposed (``exclude_evaluated``,
    ``exclude_pending``, ``fixed_parameters``) and passes both to the
    acquisition through ``model_gen_options``. After generation it records the
    Chaining-UCB certificate in the generator run's ``gen_metadata``.

    Use :func:`chaining_ucb_node`, :func:`ucb_node` or :func:`gp_ucb_node` to
    build one.

    Args:
        name: Node name.
        generator_specs: One ``GeneratorSpec`` for ``Generators.BOTORCH_MODULAR``
            with ``acquisition_class=CandidateSetAcquisition``.
        candidate_spec: Definition of the candidate set.
        transition_criteria: Ax transition criteria.
        kwargs: Further ``GenerationNode`` arguments.
    """

    def __init__(
        self,
        name: str,
        generator_specs: list[GeneratorSpec],
        candidate_spec: CandidateSetSpec,
        transition_criteria: Sequence[TransitionCriterion] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            name=name,
            generator_specs=generator_specs,
            transition_criteria=transition_criteria,
            **kwargs,
        )
        self.candidate_spec = candidate_spec
        self._cache = _CandidateCache()
        self._tensor_key: tuple | None = None
        self._tensor: Tensor | None = None

    def _gen(
        self,
        experiment: Experiment,
        pending_observations: dict[str, list[ObservationFeatures]] | None,
        data: Data | None,
        n: int | None,
        **generator_gen_kwargs: Any,
    ) -> GeneratorRun:
        _check_experiment(experiment)
        spec = self.candidate_spec
        _experiment_seed(spec, experiment)
        generator_spec = self.generator_spec_to_gen_from
        adapter = generator_spec.fitted_adapter
        rows = self._cache.get(experiment.search_space, spec)
        X = self._model_space(adapter, rows)

        names = list(experiment.search_space.parameters)
        keys = [_row_key(r, names) for r in rows]
        selectable = _matches_fixed(rows, generator_gen_kwargs.get("fixed_features"))
        if spec.exclude_evaluated:
            done = _arm_keys(experiment, _EVALUATED_STATUSES, names)
            selectable &= np.array([k not in done for k in keys], dtype=bool)
            if not selectable.any():
                raise SearchSpaceExhausted(
                    f"All {len(rows)} candidates (matching the fixed parameters) are "
                    "already evaluated and `exclude_evaluated=True`; the candidate "
                    "set is exhausted."
                )
        if spec.exclude_pending:
            pend = _pending_keys(pending_observations, names)
            keep = selectable & np.array([k not in pend for k in keys], dtype=bool)
            # Pending points are still conditioned on (GP-BUCB); excluding them is
            # a convenience that must not make generation fail.
            if keep.any():
                selectable = keep

        model_gen_options = dict(
            generator_gen_kwargs.pop("model_gen_options", None)
            or generator_spec.generator_gen_kwargs.get("model_gen_options")
            or {}
        )
        model_gen_options[_AX_ACQ_KWARGS] = {
            **model_gen_options.get(_AX_ACQ_KWARGS, {}),
            "candidates": X,
            "selectable": torch.as_tensor(selectable, device=X.device),
        }
        gr = super()._gen(
            experiment=experiment,
            pending_observations=pending_observations,
            data=data,
            n=n,
            model_gen_options=model_gen_options,
            **generator_gen_kwargs,
        )
        self._record(gr, adapter, experiment, len(rows), int(selectable.sum()))
        return gr

    def _model_space(self, adapter: Adapter, rows: list[dict]) -> Tensor:
        """Map the candidate rows through the adapter's transforms (cached)."""
        key = (id(adapter), id(rows), tuple(adapter.parameters))
        key += tuple(id(t) for t in adapter.transforms.values())
        if key != self._tensor_key or self._tensor is None:
            feats = [ObservationFeatures(parameters=dict(r)) for r in rows]
            # Ax's transforms map arms to the model space; applying them to the
            # candidates puts both in exactly the same coordinates.
            for t in adapter.transforms.values():
                feats = t.transform_observation_features(feats)
            names = adapter.parameters
            values = [[float(f.parameters[nm]) for nm in names] for f in feats]
            device = getattr(adapter, "device", None)
            self._tensor = torch.tensor(values, dtype=torch.double, device=device)
            self._tensor_key = key
        return self._tensor

    def _record(
        self,
        gr: GeneratorRun,
        adapter: Adapter,
        experiment: Experiment,
        num_candidates: int,
        num_selectable: int,
    ) -> None:
        meta: dict[str, Any] = {
            "num_candidates": num_candidates,
            "num_selectable": num_selectable,
            "seed": self.candidate_spec.seed,
        }
        # The BoTorch generator keeps the Acquisition of its last gen call.
        acq = getattr(adapter.generator, "_acquisition", None)
        if isinstance(acq, CandidateSetAcquisition):
            acqf = acq.acqf
            meta["acquisition_function"] = type(acqf).__name__
            # Plain Python numbers: gen_metadata is stored in JSON.
            if hasattr(acqf, "t"):
                meta["t"] = int(acqf.t)
            if hasattr(acqf, "delta"):
                meta["delta"] = float(acqf.delta)
            if isinstance(acqf, ChainingUCB):
                meta["cover_sizes"] = [int(s) for s in acqf.chaining.cover_sizes]
                meta["scale"] = float(acqf.chaining.scale)
            if acq.last_regret_bound is not None:
                bound = [float(b) for b in acq.last_regret_bound.reshape(-1)]
                factor = _objective_scale(adapter, experiment, acq)
                meta["regret_bound_model_units"] = bound
                meta["objective_scale"] = factor
                meta["regret_bound"] = (
                    [b * factor for b in bound] if factor is not None else None
                )
        gr._gen_metadata = {**(gr.gen_metadata or {}), GEN_METADATA_KEY: meta}


def _objective_scale(
    adapter: Adapter, experiment: Experiment, acq: CandidateSetAcquisition
) -> float | None:
    """Factor from the model's objective units to the user's objective units.

    The acquisition function sees ``sum_i w_i y_i`` with ``y_i`` standardized by
    Ax's ``StandardizeY`` and ``w`` the transformed objective weights (Ax scales
    the weights of a scalarized objective by the outcome scales, not those of a
    single metric). In user units the objective is ``sum_i c_i (s_i y_i + m_i)``
    with ``c`` the user's weights and ``s`` the scales, so differences scale by
    ``c_i s_i / w_i``, the same for every outcome.
    """
    opt = experiment.optimization_config
    if opt is None or opt.objective.is_multi_objective:
        return None
    outcomes = list(adapter.outcomes)
    raw = np.asarray(extract_objective_weight_matrix(opt.objective, outcomes))
    raw = raw.reshape(-1, len(outcomes)).sum(axis=0)
    model = acq.objective_weights
    if model is None:
        return None
    model = model.detach().cpu().double().numpy().reshape(-1, len(outcomes)).sum(0)
    st = adapter.transforms.get("StandardizeY")
    ystd = getattr(st, "Ystd", {}) if st is not None else {}
    scales = np.array([float(ystd.get(o, 1.0)) for o in outcomes])
    used = model != 0
    if not used.any():
        return None
    ratios = np.abs(raw[used] * scales[used] / model[used])
    if not np.allclose(ratios, ratios[0], rtol=1e-6, atol=0.0):
        return None
    return float(ratios[0])


# ---------------------------------------------------------------------------
# The Ax Acquisition.
# ---------------------------------------------------------------------------


class CandidateSetAcquisition(Acquisition):
    """Ax ``Acquisition`` that maximizes over a finite candidate set.

    It receives, through its options (set by :class:`CandidateSetNode` via
    ``model_gen_options``):

    * ``candidates``: the ``N x d`` candidate set in Ax's transformed space;
    * ``selectable``: optional boolean mask of the candidates that may be
      proposed (all by default).

    The full candidate set is passed to acquisition functions that take one
    (``candidates`` for :class:`~ax_chaining.acquisition.ChainingUCB`, whose
    covers are computed over all of :math:`X`; ``num_candidates`` for
    :class:`~ax_chaining.acquisition.GPUCB`). :meth:`optimize` maximizes over
    the selectable candidates: for ``n > 1`` by sequential greedy selection with
    the chosen points added to ``X_pending`` (GP-BUCB for Chaining-UCB), or by
    the ``n`` best values for analytic acquisition functions, which cannot
    condition on pending points.

    Pending points are passed as ``X_pending`` only to acquisition functions
    whose constructor accepts it (BoTorch's analytic ``UpperConfidenceBound``
    does not, and Ax 1.3.1 would otherwise fail when trials are running).

    Multi-objective configurations and outcome constraints raise
    ``UnsupportedError``.

    Example:
        >>> GeneratorSpec(
        ...     generator_enum=Generators.BOTORCH_MODULAR,
        ...     generator_kwargs={
        ...         "botorch_acqf_class": ChainingUCB,
        ...         "acquisition_class": CandidateSetAcquisition,
        ...     },
        ... )  # inside a CandidateSetNode, which supplies the candidates

    Args:
        surrogate: The fitted Ax ``Surrogate``.
        search_space_digest: Ax's transformed search space.
        torch_opt_config: Objective weights, pending points, fixed features.
        botorch_acqf_class: The BoTorch acquisition function class.
        botorch_acqf_options: Its keyword arguments (e.g. ``delta``, ``beta``).
        botorch_acqf_classes_with_options: Not supported (one class only).
        n: Number of candidates to generate.
        options: ``candidates`` (``N x d`` tensor, required) and ``selectable``
            (``N`` boolean mask), plus Ax ``Acquisition`` options.
    """

    def __init__(
        self,
        surrogate: Surrogate,
        search_space_digest: SearchSpaceDigest,
        torch_opt_config: TorchOptConfig,
        botorch_acqf_class: type[AcquisitionFunction] | None,
        botorch_acqf_options: dict[str, Any] | None = None,
        botorch_acqf_classes_with_options: list[
            tuple[type[AcquisitionFunction], dict[str, Any]]
        ]
        | None = None,
        n: int | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        options = dict(options or {})
        candidates = options.pop("candidates", None)
        selectable = options.pop("selectable", None)
        if torch_opt_config.is_moo:
            raise UnsupportedError(
                "CandidateSetAcquisition (Chaining-UCB, GP-UCB, UCB) supports a "
                "single objective; got a multi-objective optimization config. "
                "Scalarize the objectives instead."
            )
        if torch_opt_config.outcome_constraints is not None:
            raise UnsupportedError(
                "CandidateSetAcquisition does not support outcome constraints; got "
                f"{torch_opt_config.outcome_constraints[0].shape[0]} constraint(s)."
            )
        if candidates is None:
            raise ValueError(
                "CandidateSetAcquisition needs the candidate set in its options "
                "(`candidates`, an N x d tensor in Ax's transformed space); build "
                "the node with chaining_ucb_node / ucb_node / gp_ucb_node, which "
                "supply it at generation time."
            )
        candidates = torch.as_tensor(candidates)
        dtype = surrogate.dtype if surrogate.dtype is not None else candidates.dtype
        self.candidates: Tensor = candidates.to(device=surrogate.device, dtype=dtype)
        d = len(search_space_digest.feature_names)
        if self.candidates.ndim != 2 or self.candidates.shape[-1] != d:
            raise ValueError(
                f"`candidates` must have shape N x {d} (the transformed space has "
                f"features {search_space_digest.feature_names}), got "
                f"{tuple(self.candidates.shape)}."
            )
        if selectable is None:
            selectable = torch.ones(self.candidates.shape[0], dtype=torch.bool)
        self.selectable: Tensor = torch.as_tensor(selectable, dtype=torch.bool).to(
            self.candidates.device
        )
        if self.selectable.shape != self.candidates.shape[:1]:
            raise ValueError(
                f"`selectable` must be a boolean mask of shape "
                f"({self.candidates.shape[0]},), got {tuple(self.selectable.shape)}."
            )
        self.last_regret_bound: Tensor | None = None
        self.last_selected: Tensor | None = None
        super().__init__(
            surrogate=surrogate,
            search_space_digest=search_space_digest,
            torch_opt_config=torch_opt_config,
            botorch_acqf_class=botorch_acqf_class,
            botorch_acqf_options=botorch_acqf_options,
            botorch_acqf_classes_with_options=botorch_acqf_classes_with_options,
            n=n,
            options=options,
        )

    def _construct_botorch_acquisition(
        self,
        botorch_acqf_class: type[AcquisitionFunction],
        botorch_acqf_options: dict[str, Any],
        model: Any,
    ) -> AcquisitionFunction:
        params = inspect.signature(botorch_acqf_class.__init__).parameters
        options = dict(botorch_acqf_options)
        if "candidates" in params:
            options["candidates"] = self.candidates
        if "num_candidates" in params:
            options.setdefault("num_candidates", int(self.candidates.shape[0]))
        saved = self.X_pending
        if "X_pending" not in params:
            self.X_pending = None
        try:
            return super()._construct_botorch_acquisition(
                botorch_acqf_class=botorch_acqf_class,
                botorch_acqf_options=options,
                model=model,
            )
        finally:
            self.X_pending = saved

    def optimize(
        self,
        n: int,
        search_space_digest: SearchSpaceDigest,
        inequality_constraints: list[tuple[Tensor, Tensor, float]] | None = None,
        equality_constraints: list[tuple[Tensor, Tensor, float]] | None = None,
        fixed_features: dict[int, float] | None = None,
        rounding_func: Any = None,
        optimizer_options: dict[str, Any] | None = None,
        candidate_set: Tensor | None = None,
        sampling_strategy: Any = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Select ``n`` of the selectable candidates.

        Parameter constraints were applied when the candidate set was built (in
        the user's space), so ``inequality_constraints`` and
        ``equality_constraints`` hold for every candidate.

        Args:
            n: Number of candidates to select.
            search_space_digest: The transformed search space.
            inequality_constraints: Ignored (already satisfied).
            equality_constraints: Ignored (already satisfied).
            fixed_features: ``{feature index: value}`` the selected candidates
                must match.
            rounding_func: Unused: candidates are valid points already.
            optimizer_options: ``max_batch_size`` (default 2048) is honored.
            candidate_set: If given, Ax's own candidate-set selection is used
                (e.g. the ``in_sample`` option).
            sampling_strategy: Passed on with ``candidate_set``.

        Returns:
            The ``q x d`` selected candidates (``q = min(n, #selectable)``), their
            acquisition values, and unit arm weights.
        """
        if candidate_set is not None or sampling_strategy is not None:
            return super().optimize(
                n=n,
                search_space_digest=search_space_digest,
                candidate_set=candidate_set,
                sampling_strategy=sampling_strategy,
            )
        X = self.candidates
        mask = self.selectable.clone()
        for i, v in (fixed_features or {}).items():
            mask &= torch.isclose(X[:, i], X.new_tensor(v), rtol=0.0, atol=1e-9)
        idx = mask.nonzero().squeeze(-1)
        if idx.numel() == 0:
            raise SearchSpaceExhausted(
                "No selectable candidate is left (after excluding evaluated or "
                "pending candidates and matching the fixed features)."
            )
        choices = X[idx]
        q = min(int(n), idx.numel())
        max_batch_size = int((optimizer_options or {}).get("max_batch_size", 2048))
        if q > 1 and not isinstance(self.acqf, AnalyticAcquisitionFunction):
            # Sequential greedy: each pick is added to X_pending (GP-BUCB), which
            # makes ChainingUCB rebuild its covers before the next pick.
            selected, values = optimize_acqf_discrete(
                acq_function=self.acqf,
                q=q,
                choices=choices,
                max_batch_size=max_batch_size,
                unique=True,
            )
        else:
            with torch.no_grad():
                values_all = torch.cat(
                    [
                        self.acqf(chunk.unsqueeze(-2))
                        for chunk in choices.split(max_batch_size)
                    ]
                )
            values, best = torch.topk(values_all, q)
            selected = choices[best]
        self.last_selected = selected
        if hasattr(self.acqf, "regret_bound"):
            # The certificate of Eq. (ucb) at the chosen points, under the
            # posterior they were chosen with (before the batch's own pending).
            self.last_regret_bound = self.acqf.regret_bound(selected.unsqueeze(-2))
        weights = torch.ones(q, dtype=self.dtype)
        return selected, values.reshape(-1), weights


# ---------------------------------------------------------------------------
# Factories.
# ---------------------------------------------------------------------------


def _resolve_seed(seed: int | None) -> int | None:
    # None stays None until the first generation (see `_experiment_seed`): a seed
    # drawn here, at build time, would ignore the caller's seed.
    return None if seed is None else _check_int("seed", seed)


def _draw_seed() -> int:
    """A seed from the global torch RNG, which Ax seeds around generation."""
    return int(torch.randint(0, 2**31 - 1, (1,)).item())


def _experiment_seed(spec: CandidateSetSpec, experiment: Experiment) -> int:
    """Resolve ``spec.seed`` in place and return it.

    With ``seed=None`` the seed is the one recorded in the experiment's generator
    runs (a reloaded experiment, or the other node of the same strategy after a
    reload), else one drawn from the global torch RNG: Ax's ``Client`` and
    ``ax.benchmark`` run generation inside ``with_rng_seed(random_seed)``, so the
    draw follows the caller's seed. Storing it in ``spec`` puts it in the
    strategy's JSON as well.
    """
    if spec.seed is None:
        recorded = None
        for index in sorted(experiment.trials):
            for gr in experiment.trials[index].generator_runs:
                meta = (gr.gen_metadata or {}).get(GEN_METADATA_KEY) or {}
                if recorded is None and isinstance(meta.get("seed"), int):
                    recorded = int(meta["seed"])
        spec.seed = recorded if recorded is not None else _draw_seed()
    return spec.seed


def _spec(
    candidates: CandidateTable | None,
    num_candidates: int,
    seed: int | None,
    max_candidates: int,
    exclude_evaluated: bool,
    exclude_pending: bool,
) -> CandidateSetSpec:
    return CandidateSetSpec(
        candidates=candidates,  # type: ignore[arg-type]  # normalized in __post_init__
        num_candidates=num_candidates,
        seed=_resolve_seed(seed),
        max_candidates=max_candidates,
        exclude_evaluated=exclude_evaluated,
        exclude_pending=exclude_pending,
    )


def _model_node(
    name: str,
    botorch_acqf_class: type[AcquisitionFunction],
    botorch_acqf_options: dict[str, Any],
    candidate_spec: CandidateSetSpec,
    surrogate_spec: SurrogateSpec | None,
    transition_criteria: Sequence[TransitionCriterion] | None,
    torch_device: str | torch.device | None = None,
) -> CandidateSetNode:
    if surrogate_spec is not None and not isinstance(surrogate_spec, SurrogateSpec):
        raise TypeError(
            "`surrogate_spec` must be an ax SurrogateSpec, got "
            f"{type(surrogate_spec).__name__}."
        )
    generator_kwargs: dict[str, Any] = {
        "botorch_acqf_class": botorch_acqf_class,
        "botorch_acqf_options": botorch_acqf_options,
        "acquisition_class": CandidateSetAcquisition,
        # Refit hyperparameters from scratch at every iteration: a suggestion is
        # then a function of the data (and seeds) alone, so a client reloaded
        # from JSON makes the same suggestion as the original one.
        "warm_start_refit": False,
    }
    if surrogate_spec is not None:
        generator_kwargs["surrogate_spec"] = surrogate_spec
    if torch_device is not None:
        # Ax's TorchAdapter puts data, model and candidates on this device.
        generator_kwargs["torch_device"] = torch.device(torch_device)
    return CandidateSetNode(
        name=name,
        generator_specs=[
            GeneratorSpec(
                generator_enum=Generators.BOTORCH_MODULAR,
                generator_kwargs=generator_kwargs,
            )
        ],
        candidate_spec=candidate_spec,
        transition_criteria=transition_criteria,
    )


def _check_delta(delta: Any) -> float:
    if isinstance(delta, bool) or not isinstance(delta, int | float):
        raise TypeError(
            f"`delta` must be a float in (0, 1), got {type(delta).__name__}."
        )
    if not 0.0 < float(delta) < 1.0:
        raise ValueError(f"`delta` must be in (0, 1), got {delta}.")
    return float(delta)


# ChainingUCB arguments that the node sets itself (or Ax supplies).
_NOT_ENGINE_OPTIONS = frozenset(
    {"self", "model", "candidates", "delta", "t", "posterior_transform", "maximize"}
    | {"X_pending", "scale"}
)


def _check_engine_options(engine_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Fail at construction, not at the first model-based trial, on a typo."""
    if engine_options is None:
        return {}
    if not isinstance(engine_options, Mapping):
        raise TypeError(
            "`engine_options` must be a mapping of ChainingUCB keyword arguments, "
            f"got {type(engine_options).__name__}."
        )
    allowed = set(inspect.signature(ChainingUCB.__init__).parameters)
    allowed -= _NOT_ENGINE_OPTIONS
    unknown = sorted(set(engine_options) - allowed)
    if unknown:
        raise TypeError(
            f"`engine_options` has unknown key(s) {unknown}; expected ChainingUCB "
            f"keyword arguments among {sorted(allowed)} (delta and scale are "
            "arguments of their own)."
        )
    return dict(engine_options)


def chaining_ucb_node(
    name: str = "ChainingUCB",
    *,
    delta: float = 0.05,
    candidates: CandidateTable | None = None,
    num_candidates: int = DEFAULT_NUM_CANDIDATES,
    seed: int | None = None,
    exclude_evaluated: bool = False,
    exclude_pending: bool = True,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    surrogate_spec: SurrogateSpec | None = None,
    torch_device: str | torch.device | None = None,
    scale: float | None = None,
    engine_options: Mapping[str, Any] | None = None,
    transition_criteria: Sequence[TransitionCriterion] | None = None,
    candidate_spec: CandidateSetSpec | None = None,
) -> CandidateSetNode:
    r"""A generation node running Chaining-UCB over a finite candidate set.

    Ax's modular BoTorch generator (``Generators.BOTORCH_MODULAR``) fits the
    surrogate (``surrogate_spec``, Ax's default GP if None);
    :class:`~ax_chaining.acquisition.ChainingUCB` is built over the candidate set
    mapped into Ax's transformed space and maximized over it.

    Args:
        name: Node name (unique within a strategy).
        delta: Confidence parameter :math:`\delta \in (0, 1)`.
        candidates: Optional table of parameterizations to choose from (a
            DataFrame or a list of dicts). Default: all combinations of a fully
            discrete search space, else a fixed Sobol design.
        num_candidates: Size of the Sobol design (continuous / mixed spaces).
        seed: Seed of the design; None follows the caller's seed (drawn from the
            global torch RNG at the first generation, then stored).
        exclude_evaluated: Never re-propose an evaluated candidate (noise-free
            problems). Default False: re-evaluation is allowed (noisy setting).
        exclude_pending: Avoid proposing pending candidates while others remain.
        max_candidates: Largest allowed candidate set (memory guard).
        surrogate_spec: Ax ``SurrogateSpec`` (e.g. from
            :func:`precomputed_kernel_surrogate_spec`).
        torch_device: Device of the model and the candidate set (e.g.
            ``"cuda"``); default Ax's (CPU).
        scale: Radius of the first chaining level (default: the largest prior
            standard deviation over the candidates).
        engine_options: Further ``ChainingUCB`` keyword arguments
            (``sigma_floor``, ``h_radius``, ``path``, ``cover``,
            ``max_cover_size``, ``memory_budget``).
        transition_criteria: Ax transition criteria out of this node.
        candidate_spec: A ready :class:`CandidateSetSpec`, instead of
            ``candidates`` ... ``exclude_pending`` (used by the strategy
            factories to share one spec between nodes).

    Returns:
        A :class:`CandidateSetNode`.

    Example:
        >>> node = chaining_ucb_node(delta=0.05, num_candidates=2048, seed=0)
        >>> gs = GenerationStrategy(name="my", nodes=[sobol_node, node])
    """
    options: dict[str, Any] = {"delta": _check_delta(delta)}
    if scale is not None:
        options["scale"] = float(scale)
    options.update(_check_engine_options(engine_options))
    spec = candidate_spec or _spec(
        candidates,
        num_candidates,
        seed,
        max_candidates,
        exclude_evaluated,
        exclude_pending,
    )
    return _model_node(
        name,
        ChainingUCB,
        options,
        spec,
        surrogate_spec,
        transition_criteria,
        torch_device,
    )


def ucb_node(
    name: str = "UCB",
    *,
    beta: float = 0.2,
    candidates: CandidateTable | None = None,
    num_candidates: int = DEFAULT_NUM_CANDIDATES,
    seed: int | None = None,
    exclude_evaluated: bool = False,
    exclude_pending: bool = True,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    surrogate_spec: SurrogateSpec | None = None,
    torch_device: str | torch.device | None = None,
    transition_criteria: Sequence[TransitionCriterion] | None = None,
    candidate_spec: CandidateSetSpec | None = None,
) -> CandidateSetNode:
    r"""A node running BoTorch's stock ``UpperConfidenceBound`` over the same set.

    :math:`\mu(x) + \sqrt{\beta}\,\sigma(x)` with a constant ``beta`` (BoTorch's
    default 0.2), maximized over the same candidate set as
    :func:`chaining_ucb_node`, so the two differ only in the acquisition function.
    Arguments as in :func:`chaining_ucb_node`.
    """
    if isinstance(beta, bool) or not isinstance(beta, int | float) or beta < 0:
        raise ValueError(f"`beta` must be a non-negative float, got {beta!r}.")
    spec = candidate_spec or _spec(
        candidates,
        num_candidates,
        seed,
        max_candidates,
        exclude_evaluated,
        exclude_pending,
    )
    return _model_node(
        name,
        UpperConfidenceBound,
        {"beta": float(beta)},
        spec,
        surrogate_spec,
        transition_criteria,
        torch_device,
    )


def gp_ucb_node(
    name: str = "GPUCB",
    *,
    delta: float = 0.05,
    candidates: CandidateTable | None = None,
    num_candidates: int = DEFAULT_NUM_CANDIDATES,
    seed: int | None = None,
    exclude_evaluated: bool = False,
    exclude_pending: bool = True,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    surrogate_spec: SurrogateSpec | None = None,
    torch_device: str | torch.device | None = None,
    transition_criteria: Sequence[TransitionCriterion] | None = None,
    candidate_spec: CandidateSetSpec | None = None,
) -> CandidateSetNode:
    r"""A node running GP-UCB (Srinivas et al.) over the same candidate set.

    :math:`\beta_t = 2\log(|X| t^2 \pi^2 / (6\delta))` with :math:`|X|` the size
    of the candidate set (:class:`~ax_chaining.acquisition.GPUCB`), the baseline
    of the paper's experiments. Arguments as in :func:`chaining_ucb_node`.
    """
    spec = candidate_spec or _spec(
        candidates,
        num_candidates,
        seed,
        max_candidates,
        exclude_evaluated,
        exclude_pending,
    )
    return _model_node(
        name,
        GPUCB,
        {"delta": _check_delta(delta)},
        spec,
        surrogate_spec,
        transition_criteria,
        torch_device,
    )


def _strategy(
    gs_name: str,
    main: CandidateSetNode,
    spec: CandidateSetSpec,
    init_trials: int,
    init: str,
) -> GenerationStrategy:
    init_trials = _check_positive_int("init_trials", init_trials)
    if init not in ("uniform", "sobol"):
        raise ValueError(f"`init` must be 'uniform' or 'sobol', got {init!r}.")
    if init == "sobol" and spec.candidates is not None:
        raise ValueError(
            "`init='sobol'` samples the whole search space, but `candidates` "
            "restricts it to a table; use `init='uniform'` with `candidates`."
        )
    # Same pattern as Ax's default strategy: leave the initialization after
    # `init_trials` trials (failed/abandoned ones not counted) once at least one
    # of them has data, which the model-based node needs.
    criteria = [
        MinTrials(
            threshold=init_trials,
            transition_to=main.name,
            use_all_trials_in_exp=True,
            not_in_statuses=[TrialStatus.FAILED, TrialStatus.ABANDONED],
        ),
        MinTrials(
            threshold=1,
            transition_to=main.name,
            use_all_trials_in_exp=True,
            only_in_statuses=[TrialStatus.COMPLETED],
            count_only_trials_with_data=True,
        ),
    ]
    init_node: GenerationNode
    if init == "uniform":
        init_node = UniformCandidateNode(
            name="UniformCandidates", candidate_spec=spec, transition_criteria=criteria
        )
    else:
        init_node = GenerationNode(
            name="Sobol",
            generator_specs=[
                GeneratorSpec(
                    generator_enum=Generators.SOBOL,
                    generator_kwargs={"seed": spec.seed},
                )
            ],
            transition_criteria=criteria,
            should_deduplicate=True,
        )
    return GenerationStrategy(name=gs_name, nodes=[init_node, main])


def chaining_generation_strategy(
    init_trials: int = 10,
    delta: float = 0.05,
    candidates: CandidateTable | None = None,
    *,
    num_candidates: int = DEFAULT_NUM_CANDIDATES,
    seed: int | None = None,
    exclude_evaluated: bool = False,
    exclude_pending: bool = True,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    init: Literal["uniform", "sobol"] = "uniform",
    surrogate_spec: SurrogateSpec | None = None,
    torch_device: str | torch.device | None = None,
    scale: float | None = None,
    engine_options: Mapping[str, Any] | None = None,
    name: str = "Chaining-UCB",
) -> GenerationStrategy:
    r"""Initialization, then Chaining-UCB, as an Ax ``GenerationStrategy``.

    Args:
        init_trials: Number of initial trials (uniform over the candidate set,
            or Sobol with ``init="sobol"``).
        delta: Confidence parameter :math:`\delta \in (0, 1)`.
        candidates: Optional table of parameterizations (DataFrame or list of
            dicts); default the whole discrete space or a fixed Sobol design.
        num_candidates: Size of the Sobol design for continuous / mixed spaces.
        seed: Seed of the design and of the initialization; None follows the
            caller's seed (e.g. ``Client(random_seed=...)``): it is drawn from
            the global torch RNG at the first generation, then stored.
        exclude_evaluated: Never re-propose an evaluated candidate.
        exclude_pending: Avoid proposing pending candidates while others remain.
        max_candidates: Largest allowed candidate set (memory guard).
        init: ``"uniform"`` (default; draws from the candidate set) or
            ``"sobol"`` (Ax's Sobol over the search space).
        surrogate_spec: Ax ``SurrogateSpec``; default Ax's GP.
        torch_device: Device of the model and the candidate set (e.g.
            ``"cuda"``); default Ax's (CPU).
        scale: Radius of the first chaining level (see ``ChainingUCB``).
        engine_options: Further ``ChainingUCB`` keyword arguments.
        name: Strategy name.

    Returns:
        A ``GenerationStrategy`` for ``Client.set_generation_strategy``.

    Example:
        >>> client.set_generation_strategy(
        ...     chaining_generation_strategy(init_trials=10, delta=0.05, seed=0)
        ... )
        >>> for _ in range(20):
        ...     for index, params in client.get_next_trials(max_trials=1).items():
        ...         client.complete_trial(index, raw_data={"y": f(params)})
    """
    spec = _spec(
        candidates,
        num_candidates,
        seed,
        max_candidates,
        exclude_evaluated,
        exclude_pending,
    )
    main = chaining_ucb_node(
        delta=delta,
        surrogate_spec=surrogate_spec,
        torch_device=torch_device,
        scale=scale,
        engine_options=engine_options,
        candidate_spec=spec,
    )
    return _strategy(name, main, spec, init_trials, init)


def ucb_generation_strategy(
    init_trials: int = 10,
    beta: float = 0.2,
    candidates: CandidateTable | None = None,
    *,
    num_candidates: int = DEFAULT_NUM_CANDIDATES,
    seed: int | None = None,
    exclude_evaluated: bool = False,
    exclude_pending: bool = True,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    init: Literal["uniform", "sobol"] = "uniform",
    surrogate_spec: SurrogateSpec | None = None,
    torch_device: str | torch.device | None = None,
    name: str = "UCB",
) -> GenerationStrategy:
    """Initialization, then BoTorch's ``UpperConfidenceBound`` over the same set.

    Same shape as :func:`chaining_generation_strategy`, with ``beta`` (BoTorch's
    default 0.2) in place of ``delta``.

    Example:
        >>> client.set_generation_strategy(ucb_generation_strategy(seed=0))
    """
    spec = _spec(
        candidates,
        num_candidates,
        seed,
        max_candidates,
        exclude_evaluated,
        exclude_pending,
    )
    main = ucb_node(
        beta=beta,
        surrogate_spec=surrogate_spec,
        torch_device=torch_device,
        candidate_spec=spec,
    )
    return _strategy(name, main, spec, init_trials, init)


def gp_ucb_generation_strategy(
    init_trials: int = 10,
    delta: float = 0.05,
    candidates: CandidateTable | None = None,
    *,
    num_candidates: int = DEFAULT_NUM_CANDIDATES,
    seed: int | None = None,
    exclude_evaluated: bool = False,
    exclude_pending: bool = True,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    init: Literal["uniform", "sobol"] = "uniform",
    surrogate_spec: SurrogateSpec | None = None,
    torch_device: str | torch.device | None = None,
    name: str = "GP-UCB",
) -> GenerationStrategy:
    """Initialization, then GP-UCB (Srinivas et al.) over the same set.

    Same shape as :func:`chaining_generation_strategy`.

    Example:
        >>> client.set_generation_strategy(gp_ucb_generation_strategy(seed=0))
    """
    spec = _spec(
        candidates,
        num_candidates,
        seed,
        max_candidates,
        exclude_evaluated,
        exclude_pending,
    )
    main = gp_ucb_node(
        delta=delta,
        surrogate_spec=surrogate_spec,
        torch_device=torch_device,
        candidate_spec=spec,
    )
    return _strategy(name, main, spec, init_trials, init)


# ---------------------------------------------------------------------------
# Non-Euclidean spaces: an item index and a precomputed Gram matrix.
# ---------------------------------------------------------------------------


def candidate_index_parameter(
    num_items: int, name: str = "item"
) -> RangeParameterConfig:
    """An Ax parameter config for an item index ``0 .. num_items - 1``.

    With :func:`precomputed_kernel_surrogate_spec`, this optimizes over any
    finite set of objects (graphs, strings, molecules) given their Gram matrix.

    Args:
        num_items: Number of items ``n``.
        name: Parameter name.

    Returns:
        ``RangeParameterConfig(name, bounds=(0, n - 1), parameter_type="int")``.
    """
    num_items = _check_positive_int("num_items", num_items)
    if num_items < 2:
        raise ValueError(f"`num_items` must be at least 2, got {num_items}.")
    return RangeParameterConfig(
        name=name, bounds=(0, num_items - 1), parameter_type="int"
    )


def precomputed_kernel_surrogate_spec(gram: Tensor) -> SurrogateSpec:
    """An Ax ``SurrogateSpec`` whose GP covariance is a precomputed Gram matrix.

    For a search space with a single integer item-index parameter with bounds
    ``[0, n - 1]`` (:func:`candidate_index_parameter`): Ax's default ``Normalize``
    input transform maps the index to ``[0, 1]`` and
    :class:`~ax_chaining.kernels.PrecomputedKernel` (``normalized_inputs=True``)
    maps it back to a row of ``gram``. The Gram matrix is the prior covariance of
    the standardized objective, as in the paper (no learned output scale; an
    instance-valued ``ScaleKernel(base_kernel=...)`` option would not survive
    Ax's JSON storage).

    Note:
        Ax stores the generator's arguments, hence ``gram``, with every
        generator run in JSON; prefer modest ``n`` when saving to JSON.

    Args:
        gram: ``n x n`` symmetric PSD Gram matrix of the items (the paper
            normalizes it so that ``k(g, g) = 1``).

    Returns:
        A ``SurrogateSpec`` for ``chaining_generation_strategy(surrogate_spec=...)``.

    Example:
        >>> client.configure_experiment(parameters=[candidate_index_parameter(100)])
        >>> gs = chaining_generation_strategy(
        ...     surrogate_spec=precomputed_kernel_surrogate_spec(gram)
        ... )
    """
    from botorch.models import SingleTaskGP

    from ax_chaining.kernels import PrecomputedKernel

    if not isinstance(gram, Tensor):
        raise TypeError(f"`gram` must be a torch.Tensor, got {type(gram).__name__}.")
    # Validate now (shape, symmetry) rather than at the first model fit.
    PrecomputedKernel(gram, normalized_inputs=True)
    config = ModelConfig(
        botorch_model_class=SingleTaskGP,
        covar_module_class=PrecomputedKernel,
        covar_module_options={"gram": gram, "normalized_inputs": True},
    )
    return SurrogateSpec(model_configs=[config])


# ---------------------------------------------------------------------------
# Storage.
# ---------------------------------------------------------------------------


def register_storage() -> None:
    """Register this package's classes with Ax's JSON (and SQA) registries.

    Idempotent; runs at import of :mod:`ax_chaining.ax`. Registers
    :class:`CandidateSetAcquisition`, ``ChainingUCB``, ``GPUCB`` and BoTorch's
    ``UpperConfidenceBound`` (missing from Ax 1.3.1's registry),
    ``PrecomputedKernel``, :class:`CandidateSetSpec` and the two node classes.
    """
    register_acquisition(CandidateSetAcquisition)
    for acqf_class in (ChainingUCB, GPUCB, UpperConfidenceBound):
        register_acquisition_function(acqf_class)
    try:
        from ax_chaining.kernels import PrecomputedKernel
    except ImportError:  # pragma: no cover - kernels are part of the package
        pass
    else:
        register_kernel(PrecomputedKernel)
    CORE_DECODER_REGISTRY["CandidateSetSpec"] = CandidateSetSpec
    for node_class in (CandidateSetNode, UniformCandidateNode):
        CORE_ENCODER_REGISTRY[node_class] = _node_to_dict
        CORE_DECODER_REGISTRY[node_class.__name__] = node_class


register_storage()
