r"""Generation nodes and strategies over a finite candidate set.

:class:`UniformCandidateNode` draws the initial design from :math:`X`;
:class:`CandidateSetNode` maps :math:`X` into Ax's model space with
``Adapter.transform_observation_features`` and passes it through
``model_gen_options`` (``Keys.ACQF_KWARGS`` to the input constructor,
``Keys.AX_ACQUISITION_KWARGS`` with the evaluated / pending mask to
:class:`~ax_chaining.ax.selection.CandidateSetAcquisition`), then records the
seed and the certificate in ``gen_metadata``. Both override Ax's public
``GenerationNode.gen`` only. :func:`candidate_set_strategy` builds any strategy;
the named factories are thin wrappers.
"""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
from ax.adapter.adapter_utils import extract_objective_weight_matrix
from ax.adapter.base import Adapter
from ax.adapter.registry import Generators
from ax.core.data import Data
from ax.core.experiment import Experiment
from ax.core.generator_run import GeneratorRun
from ax.core.observation import ObservationFeatures
from ax.core.trial_status import TrialStatus
from ax.core.types import TParameterization
from ax.exceptions.core import SearchSpaceExhausted, UnsupportedError
from ax.generation_strategy.external_generation_node import ExternalGenerationNode
from ax.generation_strategy.generation_node import GenerationNode
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generation_strategy.transition_criterion import MinTrials, TransitionCriterion
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from ax.storage.json_store.decoder import generation_node_from_json, object_from_json
from ax.utils.common.constants import Keys
from botorch.acquisition.acquisition import AcquisitionFunction

from ax_chaining.acquisition import GPUCB, ChainingUCB
from ax_chaining.ax.candidates import (
    CandidateSetSpec,
    CandidateTable,
    candidate_parameterizations,
    check_int,
    row_key,
)
from ax_chaining.ax.selection import UCB, CandidateSetAcquisition, GenerationRecord
from ax_chaining.chaining import CoverMethod, HRadius
from ax_chaining.posterior import Path

#: Key of this package's entry in ``GeneratorRun.gen_metadata``.
GEN_METADATA_KEY: str = "chaining_ucb"
_EVALUATED = (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED)
_DROPPED = (TrialStatus.FAILED, TrialStatus.ABANDONED)


def recorded(experiment: Experiment) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(trial index, metadata)`` of this package's generator runs, in order."""
    for index in sorted(experiment.trials):
        for gr in experiment.trials[index].generator_runs:
            meta = (gr.gen_metadata or {}).get(GEN_METADATA_KEY)
            if isinstance(meta, dict):
                yield index, meta


def _check_experiment(experiment: Experiment) -> None:
    """One objective, no outcome constraints: what the certificate covers."""
    opt = experiment.optimization_config
    if opt is None:
        return  # the Client reports this itself
    if opt.objective.is_multi_objective:
        raise UnsupportedError(
            "Chaining-UCB supports a single objective, got "
            f"{opt.objective.metric_names}. Scalarize, e.g. "
            "`configure_optimization(objective='a + 0.5 * b')`."
        )
    if opt.outcome_constraints:
        raise UnsupportedError(
            "Chaining-UCB does not support outcome constraints (its certificate is "
            f"unconstrained), got {[str(c) for c in opt.outcome_constraints]}."
        )


class _SpecNode:
    """The candidate set of one search space, and JSON storage of the spec."""

    candidate_spec: CandidateSetSpec

    def _candidate_rows(self, experiment: Experiment) -> list[TParameterization]:
        _check_experiment(experiment)
        spec = self.candidate_spec
        if spec.seed is None:
            # The nodes of a reloaded strategy hold separate copies of the spec:
            # take a sibling's seed first, so both nodes use the same design.
            try:
                siblings = self.generation_strategy.nodes_by_name.values()  # type: ignore[attr-defined]
            except Exception:  # not attached to a strategy
                siblings = []
            seeds = [getattr(n, "candidate_spec", spec).seed for n in siblings]
            spec.seed = next((s for s in seeds if s is not None), None)
            spec.resolve_seed(m for _, m in recorded(experiment))
        key = (repr(experiment.search_space), spec.seed)
        if getattr(self, "_rows_key", None) != key:
            self._rows = candidate_parameterizations(experiment.search_space, spec)
            self._rows_key = key
        return self._rows

    @classmethod
    def deserialize_init_args(
        cls,
        args: dict[str, Any],
        decoder_registry: Any = None,
        class_decoder_registry: Any = None,
    ) -> dict[str, Any]:
        registries = {
            k: v
            for k, v in (
                ("decoder_registry", decoder_registry),
                ("class_decoder_registry", class_decoder_registry),
            )
            if v is not None
        }
        args = dict(args)
        spec = object_from_json(args.pop("candidate_spec"), **registries)
        # Ax's own GenerationNode decoding, re-wrapped in this class.
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
                should_deduplicate=node.should_deduplicate,
                previous_node_name=args.get("previous_node_name"),
            )
        return kwargs


class UniformCandidateNode(_SpecNode, ExternalGenerationNode):
    """Initialization node: uniform draws from the candidate set.

    Each draw takes the next candidate of a fixed random permutation of
    :math:`X` (seeded by ``candidate_spec.seed``) not yet used by a trial (failed
    and abandoned trials do not count), so an initial design has no repeats while
    :math:`X` lasts and a reloaded experiment continues the same sequence. When
    every candidate is used, the least used ones are repeated, or
    ``SearchSpaceExhausted`` is raised with ``exclude_evaluated=True``.

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
            name=name, should_deduplicate=False, transition_criteria=transition_criteria
        )
        self.candidate_spec = candidate_spec
        self._counts: dict[tuple, int] = {}
        self._fixed: ObservationFeatures | None = None

    def gen(self, *, experiment: Experiment, **kwargs: Any) -> GeneratorRun | None:
        """Ax's ``gen``, keeping ``fixed_features`` for :meth:`get_next_candidate`."""
        self._fixed = kwargs.get("fixed_features")
        try:
            return super().gen(experiment=experiment, **kwargs)
        finally:
            self._fixed = None

    def update_generator_state(self, experiment: Experiment, data: Data) -> None:
        """Compute the candidate set and count how often each is already used."""
        rows = self._candidate_rows(experiment)
        seed = self.candidate_spec.seed
        self._order = np.random.default_rng([seed, 1]).permutation(len(rows))
        self._names = list(experiment.search_space.parameters)
        self._counts = {}
        for trial in experiment.trials.values():
            if trial.status not in _DROPPED:
                for arm in trial.arms:
                    k = row_key(arm.parameters, self._names)
                    self._counts[k] = self._counts.get(k, 0) + 1

    def get_next_candidate(
        self, pending_parameters: list[TParameterization]
    ) -> TParameterization:
        """The next unused candidate of the permutation (least used if none)."""
        counts = dict(self._counts)
        for p in pending_parameters:
            k = row_key(p, self._names)
            counts[k] = counts.get(k, 0) + 1
        allowed = _matches_fixed(self._rows, self._fixed)
        use = [
            (counts.get(row_key(self._rows[i], self._names), 0), int(i))
            for i in self._order
            if allowed[i]
        ]
        count, best = min(use, key=lambda cu: cu[0])
        if count > 0 and self.candidate_spec.exclude_evaluated:
            raise SearchSpaceExhausted(
                f"All {len(use)} candidates (matching the fixed parameters) are used "
                "and `exclude_evaluated=True`: init_trials is larger than the "
                "candidate set."
            )
        return dict(self._rows[best])


class CandidateSetNode(_SpecNode, GenerationNode):
    """A ``GenerationNode`` that optimizes over a finite candidate set.

    Build one with :func:`candidate_set_node` or :func:`chaining_ucb_node`.

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
        self._tensor_key: tuple | None = None

    def gen(  # type: ignore[override]
        self,
        *,
        experiment: Experiment,
        pending_observations: dict[str, list[ObservationFeatures]] | None,
        skip_fit: bool = False,
        data: Data | None = None,
        n: int | None = None,
        **gs_gen_kwargs: Any,
    ) -> GeneratorRun | None:
        """Fit, pass the candidate set on through ``model_gen_options``, record.

        Arguments are those of Ax's ``GenerationNode.gen``. The node fits its one
        ``GeneratorSpec`` itself (Ax's public ``GeneratorSpec.fit``) because the
        candidate set is mapped through the fitted adapter's transforms before
        Ax generates.
        """
        rows = self._candidate_rows(experiment)
        spec, generator_spec = self.candidate_spec, self.generator_spec
        if not skip_fit:
            generator_spec.fit(experiment=experiment, data=data)
        adapter = generator_spec.fitted_adapter
        X = self.model_space_candidates(adapter, rows)
        names = list(experiment.search_space.parameters)
        keys = [row_key(r, names) for r in rows]
        mask = _matches_fixed(rows, gs_gen_kwargs.get("fixed_features"))
        done = {
            row_key(arm.parameters, names)
            for trial in experiment.trials.values()
            if trial.status in _EVALUATED
            for arm in trial.arms
        }
        evaluated = np.array([k in done for k in keys], dtype=bool)
        if spec.exclude_evaluated:
            mask &= ~evaluated
            if not mask.any():
                raise SearchSpaceExhausted(
                    f"All {len(rows)} candidates (matching the fixed parameters) are "
                    "evaluated and `exclude_evaluated=True`: the set is exhausted."
                )
        if spec.exclude_pending:
            pend = {
                row_key(of.parameters, names)
                for feats in (pending_observations or {}).values()
                for of in feats
            }
            keep = mask & np.array([k not in pend for k in keys], dtype=bool)
            # Pending points are conditioned on anyway (GP-BUCB); excluding them
            # is a convenience that must not make generation fail.
            mask = keep if keep.any() else mask
        record = GenerationRecord()
        options = dict(
            gs_gen_kwargs.pop("model_gen_options", None)
            or generator_spec.generator_gen_kwargs.get("model_gen_options")
            or {}
        )
        for key, extra in (
            (Keys.ACQF_KWARGS.value, {"candidates": X}),
            (
                Keys.AX_ACQUISITION_KWARGS.value,
                {"selectable": torch.as_tensor(mask), "record": record},
            ),
        ):
            options[key] = {**options.get(key, {}), **extra}
        gr = super().gen(
            experiment=experiment,
            pending_observations=pending_observations,
            skip_fit=True,
            data=data,
            n=n,
            model_gen_options=options,
            **gs_gen_kwargs,
        )
        if gr is not None:
            meta = {"seed": spec.seed, "num_candidates": len(rows)}
            meta["num_selectable"] = int(mask.sum())
            meta.update(_acqf_metadata(record, adapter, experiment, rows, evaluated))
            # `gen_metadata` is the run's own dict (Ax adds "trial_type" the same
            # way); pinned in tests/test_ax_contract.py.
            gr.gen_metadata[GEN_METADATA_KEY] = meta  # type: ignore[index]
        return gr

    def model_space_candidates(
        self, adapter: Adapter, rows: list[TParameterization]
    ) -> torch.Tensor:
        """The candidate rows in the adapter's model space (cached per adapter)."""
        key = (id(adapter), id(rows), tuple(adapter.parameters))
        key += tuple(id(t) for t in adapter.transforms.values())
        if key != self._tensor_key:
            feats = [ObservationFeatures(parameters=dict(r)) for r in rows]
            self._tensor = adapter.transform_observation_features(feats)
            self._tensor_key = key
        return self._tensor


def _matches_fixed(rows: list[dict], fixed: ObservationFeatures | None) -> np.ndarray:
    mask = np.ones(len(rows), dtype=bool)
    if fixed is None or not fixed.parameters:
        return mask
    names = list(fixed.parameters)
    want = row_key(fixed.parameters, names)
    mask[:] = [row_key(r, names) == want for r in rows]
    if not mask.any():
        raise ValueError(
            f"No candidate matches the fixed parameters {fixed.parameters} "
            "(`fixed_parameters` of get_next_trials); expected values that occur "
            "in the candidate set."
        )
    return mask


def _acqf_metadata(
    record: GenerationRecord,
    adapter: Adapter,
    experiment: Experiment,
    rows: list[TParameterization],
    evaluated: np.ndarray,
) -> dict[str, Any]:
    """JSON-safe facts of the step: acquisition, t, delta, and the certificate
    among the evaluated candidates (none before one is evaluated)."""
    acq = record.acquisition
    if acq is None:
        return {}
    acqf = acq.acqf
    meta: dict[str, Any] = {"acquisition_function": type(acqf).__name__}
    if hasattr(acqf, "t"):
        meta["t"] = int(acqf.t)
    if hasattr(acqf, "delta"):
        meta["delta"] = float(acqf.delta)
    if isinstance(acqf, ChainingUCB) and evaluated.any():
        cert = acqf.certificate(among=torch.as_tensor(evaluated))
        factor = _objective_scale(adapter, experiment, acq.objective_weights)
        # Ax's model units, except "bound" (the objective's units, None if Ax's
        # transforms give no single scale) and "parameters" (the user's space).
        meta["certificate"] = {
            **cert.as_dict(),
            "bound_model_units": float(cert.bound),
            "bound": None if factor is None else float(cert.bound) * factor,
            "objective_scale": factor,
            "parameters": dict(rows[int(cert.index)]),
        }
    return meta


def _objective_scale(
    adapter: Adapter, experiment: Experiment, weights: torch.Tensor | None
) -> float | None:
    """Factor from the model's objective units to the user's.

    The model sees ``sum_i w_i y_i`` with ``y_i`` standardized by Ax's
    ``StandardizeY`` (scales ``s_i``) and ``w`` the transformed weights; the user's
    objective is ``sum_i c_i (s_i y_i + m_i)``, so differences scale by
    ``c_i s_i / w_i``, the same for every outcome (else None).
    """
    opt = experiment.optimization_config
    if opt is None or weights is None:
        return None
    outcomes = list(adapter.outcomes)
    raw = np.asarray(extract_objective_weight_matrix(opt.objective, outcomes))
    raw = raw.reshape(-1, len(outcomes)).sum(axis=0)
    model = weights.detach().cpu().double().numpy().reshape(-1, len(outcomes)).sum(0)
    st = adapter.transforms.get("StandardizeY")
    ystd = getattr(st, "Ystd", {}) if st is not None else {}
    scales = np.array([float(ystd.get(o, 1.0)) for o in outcomes])
    used = model != 0
    ratios = np.abs(raw[used] * scales[used] / model[used])
    if not used.any() or not np.allclose(ratios, ratios[0], rtol=1e-6, atol=0.0):
        return None
    return float(ratios[0])


# ---------------------------------------------------------------------------
# Builders.
# ---------------------------------------------------------------------------

# ChainingUCB arguments the node sets itself (or Ax supplies).
_RESERVED = {"self", "model", "candidates", "t", "posterior_transform", "maximize"}
_RESERVED |= {"X_pending"}
_CHOICES = {"h_radius": HRadius, "path": Path, "cover": CoverMethod}


def check_acqf_options(
    botorch_acqf_class: type[AcquisitionFunction], options: Mapping[str, Any]
) -> dict[str, Any]:
    """Validate acquisition options at build time, not at the first model step."""
    if not isinstance(options, Mapping):
        raise TypeError(
            f"Acquisition options must be a mapping, got {type(options).__name__}."
        )
    allowed = set(inspect.signature(botorch_acqf_class.__init__).parameters)
    unknown = sorted(set(options) - (allowed - _RESERVED))
    if unknown:
        raise TypeError(
            f"Unknown {botorch_acqf_class.__name__} option(s) {unknown}; expected "
            f"keyword arguments among {sorted(allowed - _RESERVED)}."
        )
    out = dict(options)
    for name, value in out.items():
        if name in _CHOICES:
            choices = typing.get_args(_CHOICES[name])
            if value not in choices and not (name == "cover" and value is None):
                raise ValueError(f"`{name}` must be one of {choices}, got {value!r}.")
            continue
        if name in ("max_cover_size", "memory_budget") and value is not None:
            if check_int(name, value) < 1:
                raise ValueError(f"`{name}` must be a positive int, got {value}.")
            continue
        if name not in ("delta", "scale", "beta", "sigma_floor") or value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"`{name}` must be a float, got {type(value).__name__}.")
        lo, hi = {"delta": (0, 1), "sigma_floor": (0, 1)}.get(name, (0, math.inf))
        ok = (lo < value < hi) if name in ("delta", "scale") else (lo <= value < hi)
        if not ok or not math.isfinite(value):
            interval = {"delta": "(0, 1)", "sigma_floor": "[0, 1)", "beta": ">= 0"}
            raise ValueError(
                f"`{name}` must be {interval.get(name, 'finite and > 0')}, got {value}."
            )
        out[name] = float(value)
    return out


def candidate_set_node(
    botorch_acqf_class: type[AcquisitionFunction],
    botorch_acqf_options: Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
    candidate_spec: CandidateSetSpec | None = None,
    surrogate_spec: SurrogateSpec | None = None,
    torch_device: str | torch.device | None = None,
    transition_criteria: Sequence[TransitionCriterion] | None = None,
) -> CandidateSetNode:
    """A :class:`CandidateSetNode` running ``botorch_acqf_class`` over :math:`X`.

    Args:
        botorch_acqf_class: A BoTorch acquisition function class whose input
            constructor accepts ``candidates`` and ``X_pending``
            (:class:`~ax_chaining.acquisition.ChainingUCB`,
            :class:`~ax_chaining.acquisition.GPUCB`,
            :class:`~ax_chaining.ax.selection.UCB`).
        botorch_acqf_options: Its options, validated here.
        name: Node name; default the class name.
        candidate_spec: The candidate set; default ``CandidateSetSpec(seed=None)``.
        surrogate_spec: Ax ``SurrogateSpec``; default Ax's GP.
        torch_device: Device of the model and the candidate set (e.g. ``"cuda"``).
        transition_criteria: Ax transition criteria out of this node.

    Returns:
        A :class:`CandidateSetNode`.

    Example:
        >>> node = candidate_set_node(ChainingUCB, {"delta": 0.1})
    """
    if surrogate_spec is not None and not isinstance(surrogate_spec, SurrogateSpec):
        raise TypeError(
            "`surrogate_spec` must be an ax SurrogateSpec, got "
            f"{type(surrogate_spec).__name__}."
        )
    kwargs: dict[str, Any] = {
        "botorch_acqf_class": botorch_acqf_class,
        "botorch_acqf_options": check_acqf_options(
            botorch_acqf_class, botorch_acqf_options or {}
        ),
        "acquisition_class": CandidateSetAcquisition,
        # Refit from scratch at every step: a suggestion is then a function of
        # the data and seeds alone, so a reloaded client suggests the same.
        "warm_start_refit": False,
    }
    if surrogate_spec is not None:
        kwargs["surrogate_spec"] = surrogate_spec
    if torch_device is not None:
        kwargs["torch_device"] = torch.device(torch_device)
    return CandidateSetNode(
        name=name or botorch_acqf_class.__name__,
        generator_specs=[
            GeneratorSpec(
                generator_enum=Generators.BOTORCH_MODULAR, generator_kwargs=kwargs
            )
        ],
        candidate_spec=candidate_spec or CandidateSetSpec(seed=None),
        transition_criteria=transition_criteria,
    )


def candidate_set_strategy(
    botorch_acqf_class: type[AcquisitionFunction],
    botorch_acqf_options: Mapping[str, Any] | None = None,
    init_trials: int = 10,
    candidates: CandidateTable | None = None,
    *,
    num_candidates: int = 1024,
    seed: int | None = None,
    exclude_evaluated: bool = False,
    exclude_pending: bool = True,
    max_candidates: int = 100_000,
    init: Literal["uniform", "sobol"] = "uniform",
    surrogate_spec: SurrogateSpec | None = None,
    torch_device: str | torch.device | None = None,
    transition_criteria: Sequence[TransitionCriterion] | None = None,
    name: str | None = None,
) -> GenerationStrategy:
    r"""Initialization, then ``botorch_acqf_class`` over :math:`X`, as a strategy.

    Every argument is checked here, before any trial.

    Args:
        botorch_acqf_class: See :func:`candidate_set_node`.
        botorch_acqf_options: Its options.
        init_trials: Initial trials (uniform over :math:`X`, or Ax's Sobol with
            ``init="sobol"``); 0 for none (data attached with ``attach_trial``).
            With a table, at most its number of rows.
        candidates: Optional table of parameterizations (DataFrame or list of
            dicts); default the whole discrete space or a fixed Sobol design.
        num_candidates: Size of the Sobol design for continuous / mixed spaces.
        seed: Seed of the design and of the initialization; None follows the
            caller's seed (drawn from the global torch RNG at the first
            generation, e.g. under ``Client(random_seed=...)``, then stored).
        exclude_evaluated: Never re-propose an evaluated candidate.
        exclude_pending: Avoid proposing pending candidates while others remain.
        max_candidates: Largest allowed candidate set (memory guard).
        init: ``"uniform"`` (draws from :math:`X`) or ``"sobol"``.
        surrogate_spec: Ax ``SurrogateSpec``; default Ax's GP.
        torch_device: Device of the model and the candidate set.
        transition_criteria: Criteria out of the model-based node (e.g. the
            certificate's :class:`~ax_chaining.stopping.RegretBoundCriterion`).
        name: Strategy name; default the class name.

    Returns:
        A ``GenerationStrategy`` for ``Client.set_generation_strategy``.
    """
    from ax_chaining.ax.storage import register_storage

    register_storage()  # so that the strategy can be saved; idempotent
    spec = CandidateSetSpec(
        candidates=candidates,  # type: ignore[arg-type]  # normalized in the spec
        num_candidates=num_candidates,
        seed=None if seed is None else check_int("seed", seed),
        max_candidates=max_candidates,
        exclude_evaluated=exclude_evaluated,
        exclude_pending=exclude_pending,
    )
    if check_int("init_trials", init_trials) < 0:
        raise ValueError(f"`init_trials` must be >= 0, got {init_trials}.")
    if spec.candidates is not None and init_trials > len(spec.candidates):
        raise ValueError(
            f"`init_trials`={init_trials} exceeds the {len(spec.candidates)} rows of "
            "`candidates`; expected at most one initial trial per candidate."
        )
    if init not in ("uniform", "sobol"):
        raise ValueError(f"`init` must be 'uniform' or 'sobol', got {init!r}.")
    if init == "sobol" and spec.candidates is not None:
        raise ValueError(
            "`init='sobol'` samples the whole search space, but `candidates` "
            "restricts it to a table; use `init='uniform'` with `candidates`."
        )
    main = candidate_set_node(
        botorch_acqf_class,
        botorch_acqf_options,
        candidate_spec=spec,
        surrogate_spec=surrogate_spec,
        torch_device=torch_device,
        transition_criteria=transition_criteria,
    )
    name = name or botorch_acqf_class.__name__
    if init_trials == 0:
        return GenerationStrategy(name=name, nodes=[main])
    # As Ax's default strategy: leave the initialization after `init_trials`
    # trials (failed/abandoned not counted) once one of them has data.
    criteria = [
        MinTrials(
            threshold=init_trials,
            transition_to=main.name,
            use_all_trials_in_exp=True,
            not_in_statuses=list(_DROPPED),
        ),
        MinTrials(
            threshold=1,
            transition_to=main.name,
            use_all_trials_in_exp=True,
            only_in_statuses=[TrialStatus.COMPLETED],
            count_only_trials_with_data=True,
        ),
    ]
    if init == "uniform":
        first: GenerationNode = UniformCandidateNode(
            name="UniformCandidates", candidate_spec=spec, transition_criteria=criteria
        )
    else:
        # Ax's Sobol generator draws its own seed from the seeded global RNG
        # when `spec.seed` is None, and stores it in its generator runs.
        first = GenerationNode(
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
    return GenerationStrategy(name=name, nodes=[first, main])


def _options(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}


def chaining_generation_strategy(
    init_trials: int = 10,
    delta: float = 0.05,
    candidates: CandidateTable | None = None,
    *,
    scale: float | None = None,
    engine_options: Mapping[str, Any] | None = None,
    stop_tolerance: float | None = None,
    name: str = "Chaining-UCB",
    **kwargs: Any,
) -> GenerationStrategy:
    r"""Initialization, then Chaining-UCB, as an Ax ``GenerationStrategy``.

    Args:
        init_trials: Number of initial trials (0: none).
        delta: Confidence parameter :math:`\delta \in (0, 1)`.
        candidates: Optional table of parameterizations.
        scale: Radius of the first chaining level (see ``ChainingUCB``).
        engine_options: Further ``ChainingUCB`` keyword arguments (e.g.
            ``sigma_floor``, ``h_radius``, ``path``, ``cover``), checked here.
        stop_tolerance: If given, the strategy completes (Ax raises
            ``GenerationStrategyCompleted`` from ``get_next_trials``) once the
            running minimum of the certified regret bound, in objective units,
            is at most this (:class:`~ax_chaining.stopping.RegretBoundCriterion`).
        name: Strategy name.
        kwargs: Further :func:`candidate_set_strategy` arguments
            (``num_candidates``, ``seed``, ``exclude_evaluated``,
            ``exclude_pending``, ``max_candidates``, ``init``,
            ``surrogate_spec``, ``torch_device``).

    Returns:
        A ``GenerationStrategy`` for ``Client.set_generation_strategy``.

    Example:
        >>> client.set_generation_strategy(chaining_generation_strategy(init_trials=10))
        >>> for _ in range(20):
        ...     for index, params in client.get_next_trials(max_trials=1).items():
        ...         client.complete_trial(index, raw_data={"y": f(params)})
    """
    criteria = list(kwargs.pop("transition_criteria", None) or [])
    if stop_tolerance is not None:
        from ax_chaining.stopping import RegretBoundCriterion

        criteria.append(
            RegretBoundCriterion(tolerance=stop_tolerance, transition_to="ChainingUCB")
        )
    options = _options(delta=delta, scale=scale, **dict(engine_options or {}))
    return candidate_set_strategy(
        ChainingUCB,
        options,
        init_trials,
        candidates,
        transition_criteria=criteria,
        name=name,
        **kwargs,
    )


def ucb_generation_strategy(
    init_trials: int = 10,
    beta: float = 0.2,
    candidates: CandidateTable | None = None,
    *,
    name: str = "UCB",
    **kwargs: Any,
) -> GenerationStrategy:
    """Initialization, then BoTorch's ``UpperConfidenceBound`` over the same set.

    Same shape as :func:`chaining_generation_strategy`, with ``beta`` (BoTorch's
    default 0.2) in place of ``delta``.

    Example:
        >>> client.set_generation_strategy(ucb_generation_strategy(seed=0))
    """
    return candidate_set_strategy(
        UCB, {"beta": beta}, init_trials, candidates, name=name, **kwargs
    )


def gp_ucb_generation_strategy(
    init_trials: int = 10,
    delta: float = 0.05,
    candidates: CandidateTable | None = None,
    *,
    name: str = "GP-UCB",
    **kwargs: Any,
) -> GenerationStrategy:
    r"""Initialization, then GP-UCB (:math:`\beta_t` of Srinivas et al.) over the set.

    Same shape as :func:`chaining_generation_strategy`.

    Example:
        >>> client.set_generation_strategy(gp_ucb_generation_strategy(seed=0))
    """
    return candidate_set_strategy(
        GPUCB, {"delta": delta}, init_trials, candidates, name=name, **kwargs
    )


def chaining_ucb_node(
    name: str = "ChainingUCB",
    *,
    delta: float = 0.05,
    scale: float | None = None,
    engine_options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> CandidateSetNode:
    r"""A node running Chaining-UCB over a finite candidate set.

    Args:
        name: Node name (unique within a strategy).
        delta: Confidence parameter :math:`\delta \in (0, 1)`.
        scale: Radius of the first chaining level.
        engine_options: Further ``ChainingUCB`` keyword arguments.
        kwargs: :func:`candidate_set_node` arguments, or :class:`CandidateSetSpec`
            fields (``candidates``, ``seed``, ...) when no ``candidate_spec``.

    Example:
        >>> node = chaining_ucb_node(delta=0.05, num_candidates=2048, seed=0)
    """
    fields = set(CandidateSetSpec.__dataclass_fields__)
    spec = {k: kwargs.pop(k) for k in list(kwargs) if k in fields}
    kwargs.setdefault("candidate_spec", CandidateSetSpec(**{"seed": None, **spec}))
    options = _options(delta=delta, scale=scale, **dict(engine_options or {}))
    return candidate_set_node(ChainingUCB, options, name=name, **kwargs)
