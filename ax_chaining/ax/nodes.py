r"""Generation nodes and strategies over a finite candidate set :math:`X`, and
selection over it in Ax's modular BoTorch generator. Only Ax's public
``GenerationNode.gen`` and ``Acquisition.optimize`` are overridden."""

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from ax.adapter.base import Adapter
from ax.adapter.registry import Generators
from ax.core import Data, Experiment, GeneratorRun, ObservationFeatures
from ax.core.search_space import SearchSpaceDigest
from ax.core.trial_status import TrialStatus
from ax.core.types import TParameterization
from ax.exceptions.core import (
    DataRequiredError,
    SearchSpaceExhausted,
    UnsupportedError,
)
from ax.generation_strategy.external_generation_node import ExternalGenerationNode
from ax.generation_strategy.generation_node import GenerationNode
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generation_strategy.transition_criterion import TransitionCriterion
from ax.generators.torch.botorch_modular.acquisition import Acquisition
from ax.storage.json_store.decoder import generation_node_from_json, object_from_json
from ax.utils.common.constants import Keys
from botorch.acquisition.acquisition import (
    AcquisitionFunction,
    OneShotAcquisitionFunction,
)
from botorch.acquisition.analytic import AnalyticAcquisitionFunction
from botorch.acquisition.input_constructors import get_acqf_input_constructor
from botorch.acquisition.multi_objective.base import (
    MultiObjectiveAnalyticAcquisitionFunction,
    MultiObjectiveMCAcquisitionFunction,
)

from ax_chaining.ax.candidates import (
    CandidateSetSpec,
    arm_names,
    candidate_parameterizations,
    row_key,
    row_metadata,
)
from ax_chaining.ax.forecasts import forecast_record, residual_calibration
from ax_chaining.ax.metadata import (
    GEN_METADATA_KEY,
    objective_scale,
    recorded,
    step_certificate,
)
from ax_chaining.ax.selection import (
    DROPPED,
    SelectableCandidates,
    selectable_candidates,
)
from ax_chaining.ax.stopping import RegretBoundCriterion
from ax_chaining.certificate.certify import (
    DEFAULT_SCALE_LEVEL,
    LOO_MIN_OBSERVATIONS,
    CertificateOptions,
)
from ax_chaining.certificate.schedule import EVERY_STEP, CheckSchedule
from ax_chaining.certificate.tails import Calibration, CalibrationChoice
from ax_chaining.checks import type_error


def takes_candidates(acqf_class: type) -> bool:
    """Whether the input constructor of ``acqf_class`` takes the candidate set
    (``candidates``): a class declares it with a class attribute
    ``takes_candidates = True``, as this package's do; BoTorch's own take none.

    Raises:
        TypeError: ``acqf_class`` is not an ``AcquisitionFunction`` subclass.
        ValueError: It is a one-shot or multi-objective class, or has no
            registered input constructor, which Ax needs.
    """
    if not isinstance(acqf_class, type) or not issubclass(
        acqf_class, AcquisitionFunction
    ):
        what = "an AcquisitionFunction class"
        raise type_error("botorch_acqf_class", what, acqf_class)
    if why := _not_selectable(acqf_class):
        raise ValueError(
            f"`botorch_acqf_class`={acqf_class.__name__} is {why}; expected a "
            "single-objective acquisition function that scores a set of points "
            "(ChainingUCB, GPUCB, UCB, LogExpectedImprovement, "
            "qLogNoisyExpectedImprovement, qUpperConfidenceBound, ...)."
        )
    try:
        get_acqf_input_constructor(acqf_class)
    except RuntimeError as e:
        raise ValueError(
            f"`botorch_acqf_class`={acqf_class.__name__} has no BoTorch input "
            "constructor, which Ax needs to build it; register one with "
            "`botorch.acquisition.input_constructors.acqf_input_constructor`."
        ) from e
    return bool(getattr(acqf_class, "takes_candidates", False))


def _not_selectable(acqf_class: type[AcquisitionFunction]) -> str | None:
    """Why ``acqf_class`` cannot select from a finite candidate set, if so."""
    if issubclass(acqf_class, OneShotAcquisitionFunction):
        # Its points carry fantasy solutions (q + num_fantasies per batch)
        # that are optimized jointly with them; rows of a table have none.
        return (
            "a one-shot acquisition (it optimizes fantasy points jointly with "
            "the batch), which cannot be selected over a candidate table"
        )
    multi = (
        MultiObjectiveMCAcquisitionFunction,
        MultiObjectiveAnalyticAcquisitionFunction,
    )
    # BoTorch's multi-objective package also holds classes that derive from
    # AcquisitionFunction directly (its entropy searches).
    if issubclass(acqf_class, multi) or acqf_class.__module__.startswith(
        "botorch.acquisition.multi_objective."
    ):
        return (
            "multi-objective, and candidate-set strategies are single-objective "
            "(scalarize the objectives, e.g. `configure_optimization("
            "objective='a + 0.5 * b')`)"
        )
    return None


class CandidateSetAcquisition(Acquisition):
    """Ax ``Acquisition`` over a finite candidate set, for any BoTorch
    acquisition function: Ax's input constructor builds the function (and gets
    the candidates where it takes them, :func:`takes_candidates`); ``optimize``
    selects with Ax's ``select_from_candidate_set`` (sequential greedy with
    pending points for a batch). Ax's arguments, by keyword; ``options`` may add
    ``selectable`` (a boolean mask of the proposable candidates), ``record``
    (called with this object once it has selected) and ``candidates`` (``N x d``,
    in Ax's model space), as a node supplies them.
    """

    def __init__(
        self,
        *,
        botorch_acqf_options: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        options, acqf_options = dict(options or {}), dict(botorch_acqf_options or {})
        candidates = acqf_options.get("candidates", options.pop("candidates", None))
        if candidates is None:
            how = "e.g. acq_options={'candidates': X} of evaluate_acquisition_function"
            msg = f"`candidates` (N x d, in Ax's model space), {how}"
            raise ValueError(f"CandidateSetAcquisition needs {msg}.")
        self.candidates = torch.as_tensor(candidates)
        acqf_class = kwargs["botorch_acqf_class"]
        if issubclass(acqf_class, AnalyticAcquisitionFunction) and not getattr(
            acqf_class, "takes_candidates", False
        ):
            # BoTorch's analytic functions refuse pending points (their batch is
            # the n best values); pending candidates are excluded from the set.
            config = kwargs["torch_opt_config"]
            kwargs["torch_opt_config"] = replace(config, pending_observations=None)
        if takes_candidates(acqf_class):
            acqf_options["candidates"] = self.candidates
        else:  # e.g. qLogNoisyExpectedImprovement: selection alone uses the set
            acqf_options.pop("candidates", None)
        self.record: Callable[..., Any] | None = options.pop("record", None)
        n = len(self.candidates)
        self.selectable = torch.as_tensor(options.pop("selectable", [True] * n))
        if self.selectable.shape != (n,) or self.selectable.dtype != torch.bool:
            raise ValueError(
                f"`selectable` must be a boolean mask of shape ({n},), got "
                f"{self.selectable.dtype} of shape {tuple(self.selectable.shape)}."
            )
        super().__init__(botorch_acqf_options=acqf_options, options=options, **kwargs)

    def optimize(
        self,
        n: int,
        search_space_digest: SearchSpaceDigest,
        *,
        fixed_features: dict[int, float] | None = None,
        candidate_set: torch.Tensor | None = None,
        sampling_strategy: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Select ``min(n, #selectable)`` candidates (points, values, weights);
        ``fixed_features`` narrow the mask, an Ax ``candidate_set`` replaces it
        (parameter constraints hold for every candidate already)."""
        X = self.candidates.to(device=self.device, dtype=self.dtype)
        if candidate_set is None:
            mask = self.selectable.to(X.device).clone()
            for i, v in (fixed_features or {}).items():
                mask &= torch.isclose(X[:, i], X.new_tensor(v), rtol=0.0, atol=1e-9)
            if not mask.any():
                msg = "after excluding evaluated or pending ones and fixed features"
                raise SearchSpaceExhausted(f"No selectable candidate is left ({msg}).")
            candidate_set = X[mask]
        n = min(int(n), len(candidate_set))
        if n > 1 and isinstance(self.acqf, AnalyticAcquisitionFunction):
            # Analytic functions cannot condition on the batch's own picks (Ax's
            # greedy path needs X_pending): the batch is the n best values.
            with torch.no_grad():
                values, best = torch.topk(self.acqf(candidate_set.unsqueeze(-2)), n)
            selected, weights = candidate_set[best], torch.ones_like(values)
        else:
            selected, values, weights = self.select_from_candidate_set(
                n=n, candidate_set=candidate_set, sampling_strategy=sampling_strategy
            )
        if self.record is not None:
            self.record(self)
        return selected, values, weights


#: Rows transformed again at each step to check that the cached model-space
#: candidates still hold (:meth:`CandidateSetNode.model_space_candidates`).
PROBE_ROWS = 256


def _transform(adapter: Adapter, rows: list[TParameterization]) -> torch.Tensor:
    """Parameterizations in the adapter's model space (Ax's public route)."""
    feats = [ObservationFeatures(parameters=dict(r)) for r in rows]
    return adapter.transform_observation_features(feats)


class _SpecNode:
    """The candidate set of one search space, its arms' names and metadata, the
    candidates' use by trial status, and JSON storage of the spec."""

    candidate_spec: CandidateSetSpec

    def _candidate_rows(self, experiment: Experiment) -> list[TParameterization]:
        opt = experiment.optimization_config  # None: the Client reports it itself
        if opt is not None and (opt.is_moo_problem or opt.outcome_constraints):
            raise UnsupportedError(
                "Candidate-set strategies support a single objective without outcome "
                f"constraints (the certificate is unconstrained), got {opt.objective} "
                f"with {[str(c) for c in opt.outcome_constraints]}. Scalarize, e.g. "
                "`configure_optimization(objective='a + 0.5 * b')`."
            )
        spec = self.candidate_spec
        key = (repr(experiment.search_space), self._resolve_seed(experiment))
        if getattr(self, "_rows_key", None) != key:
            ss = experiment.search_space
            self._rows = candidate_parameterizations(ss, spec)
            self._names = list(ss.parameters)
            self._keys = [row_key(r, self._names) for r in self._rows]
            self._index = {k: i for i, k in enumerate(self._keys)}
            self._arm_names = arm_names(spec)
            self._metadata = row_metadata(ss, spec)
            self._rows_key = key
        return self._rows

    def _resolve_seed(self, experiment: Experiment) -> int:
        """The spec's seed; if None, a sibling node's, a recorded one, or a draw."""
        spec = self.candidate_spec
        if spec.seed is None:
            # A reloaded strategy's nodes hold copies of the spec: a sibling's
            # seed first, so that all use one design; then a recorded one.
            try:
                nodes = self.generation_strategy.nodes_by_name.values()  # type: ignore[attr-defined]
            except ValueError:  # not attached to a strategy
                nodes = []
            seeds = [getattr(n, "candidate_spec", spec).seed for n in nodes]
            spec.resolve_seed(seeds + [m.get("seed") for _, m in recorded(experiment)])
        return int(spec.seed)  # type: ignore[arg-type]

    def _count(self, parameterizations: Iterable[Mapping[str, Any]]) -> np.ndarray:
        """How often each candidate occurs in ``parameterizations``."""
        counts = Counter(row_key(p, self._names) for p in parameterizations)
        return np.array([counts[k] for k in self._keys], dtype=np.int64)

    def _in_trials(self, experiment: Experiment, statuses: Sequence[TrialStatus]):
        """Boolean mask of the candidates in a trial of one of ``statuses``."""
        trials = [t for t in experiment.trials.values() if t.status in statuses]
        return self._count(a.parameters for t in trials for a in t.arms) > 0

    def _matches(self, fixed: ObservationFeatures | None) -> np.ndarray:
        """Mask of the candidates that take the ``fixed_features``' values."""
        if fixed is None or not fixed.parameters:
            return np.ones(len(self._rows), dtype=bool)
        names = list(fixed.parameters)
        want = row_key(fixed.parameters, names)
        mask = np.array([row_key(r, names) == want for r in self._rows], dtype=bool)
        if not mask.any():
            msg = f"values in the candidate set, got {fixed.parameters}"
            raise ValueError(f"`fixed_parameters` must take {msg}.")
        return mask

    def _name_arms(self, experiment: Experiment, gr: GeneratorRun | None) -> None:
        """Name a table's arms after their rows (``id_column`` or ``row_<i>``), so
        that ``Client.get_best_parameterization`` and the trials lead back to the
        row; an arm already on the experiment keeps its name."""
        if gr is None or self._arm_names is None:
            return
        known = experiment.arms_by_signature
        for arm in gr.arms:
            i = self._index.get(row_key(arm.parameters, self._names))
            if i is not None and arm.signature not in known and not arm.has_name:
                arm.name = self._arm_names[i]

    @classmethod
    def deserialize_init_args(
        cls, args: dict[str, Any], **registries: Any
    ) -> dict[str, Any]:
        # Ax's own GenerationNode decoding, re-wrapped in this class.
        args = dict(args)
        spec = object_from_json(args.pop("candidate_spec"), **registries)
        stop_rule = object_from_json(args.pop("stop_rule", None), **registries)
        # Absent in snapshots from before the option: every step, as then.
        schedule = EVERY_STEP
        if "certificate_schedule" in args:
            raw = args.pop("certificate_schedule")
            schedule = object_from_json(raw, **registries)
        calibration = args.pop("certificate_calibration", "loo")
        # Absent in snapshots from before the option: today's default.
        least = args.pop("certificate_min_observations", LOO_MIN_OBSERVATIONS)
        # Absent in snapshots from before the option: the point estimate, as
        # then (not today's default).
        level = args.pop("certificate_scale_level", None)
        node = generation_node_from_json(generation_node_json=args, **registries)
        kwargs = {"name": node.name, "transition_criteria": node.transition_criteria}
        if cls is not UniformCandidateNode:  # its generator is itself
            keys = ("generator_specs", "pausing_criteria", "should_deduplicate")
            kwargs |= {k: getattr(node, k) for k in keys}
            kwargs["previous_node_name"] = args.get("previous_node_name")
        if cls is CandidateSetNode:
            kwargs["stop_rule"] = stop_rule
            kwargs["certificate_schedule"] = schedule
            kwargs["certificate_calibration"] = calibration
            kwargs["certificate_min_observations"] = least
            kwargs["certificate_scale_level"] = level
        return {**kwargs, "candidate_spec": spec}


class UniformCandidateNode(_SpecNode, ExternalGenerationNode):
    """Initialization: the next candidate of a seeded permutation of :math:`X`
    not yet in a trial, then the least used (or ``SearchSpaceExhausted`` with
    ``exclude_evaluated=True``). A candidate whose trial failed is not proposed
    again unless ``retry_failed``; an abandoned trial frees its candidate.
    Failed and abandoned trials do not count towards ``init_trials``."""

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
        self._fixed: ObservationFeatures | None = None

    def gen(self, *, experiment: Experiment, **kwargs: Any) -> GeneratorRun | None:
        """Ax's ``gen``, keeping ``fixed_features`` for :meth:`get_next_candidate`;
        a table's arms are named after their rows."""
        self._fixed = kwargs.get("fixed_features")
        # Ax resets this public counter to the int 0 after each generation; a
        # generator run with an int fit time then fails Ax's SQL storage's copy
        # of database ids (float 0.0 read back), and its arms are lost when the
        # experiment is saved again (the second trial of a batch).
        self.fit_time_since_gen = float(self.fit_time_since_gen)
        gr = super().gen(experiment=experiment, **kwargs)
        self._name_arms(experiment, gr)
        return gr

    def update_generator_state(self, experiment: Experiment, data: Data) -> None:
        rows = self._candidate_rows(experiment)  # first: it may resolve the seed
        rng = np.random.default_rng([self.candidate_spec.seed, 1])
        self._order = rng.permutation(len(rows))
        trials = [t for t in experiment.trials.values() if t.status not in DROPPED]
        self._used = self._count(a.parameters for t in trials for a in t.arms)
        self._failed = np.zeros(len(rows), dtype=bool)
        if not self.candidate_spec.retry_failed:
            self._failed = self._in_trials(experiment, [TrialStatus.FAILED])

    def get_next_candidate(
        self, pending_parameters: list[TParameterization]
    ) -> TParameterization:
        use = self._used + self._count(pending_parameters)
        allowed = self._matches(self._fixed) & ~self._failed
        if not allowed.any():
            raise SearchSpaceExhausted(
                "Every candidate left failed before (`retry_failed=False`)."
            )
        best = min((int(i) for i in self._order if allowed[i]), key=lambda i: use[i])
        if use[best] > 0 and self.candidate_spec.exclude_evaluated:
            msg = f"All {allowed.sum()} candidates are used, `exclude_evaluated=True`"
            raise SearchSpaceExhausted(f"{msg}: init_trials exceeds the candidate set.")
        return dict(self._rows[best])


class SobolCandidateNode(_SpecNode, GenerationNode):
    """Initialization with Ax's Sobol generator over the search space
    (``init="sobol"``), after the checks of the candidate set's first
    generation: one objective without outcome constraints, the item-index
    parameter against the kernel's items, the candidate set itself (size,
    constraints). A mismatch then fails before any trial, as with
    :class:`UniformCandidateNode`, rather than once the initial trials are
    spent.

    Args:
        name: The node's name.
        candidate_spec: The candidate set of the nodes that follow.
        transition_criteria: Ax's.
        generator_specs: Default Ax's Sobol generator with the spec's seed (None:
            Ax draws it from the global RNG, which the ``Client`` seeds).
        kwargs: ``GenerationNode``'s (default ``should_deduplicate=True``).
    """

    def __init__(
        self,
        name: str,
        candidate_spec: CandidateSetSpec,
        transition_criteria: Sequence[TransitionCriterion] | None = None,
        generator_specs: list[GeneratorSpec] | None = None,
        **kwargs: Any,
    ) -> None:
        if generator_specs is None:
            seed = {"seed": candidate_spec.seed}
            generator_specs = [GeneratorSpec(Generators.SOBOL, generator_kwargs=seed)]
        kwargs.setdefault("should_deduplicate", True)
        super().__init__(name, generator_specs, transition_criteria, **kwargs)
        self.candidate_spec = candidate_spec

    def gen(self, *, experiment: Experiment, **kwargs: Any) -> GeneratorRun | None:
        """Ax's ``gen``, once the experiment fits the candidate set.

        Raises:
            ValueError, UnsupportedError: As the model's node would, naming what
                to change.
        """
        self._candidate_rows(experiment)
        return super().gen(experiment=experiment, **kwargs)


class CandidateSetNode(_SpecNode, GenerationNode):
    """A ``GenerationNode`` that optimizes any BoTorch acquisition function over a
    finite candidate set and records the step (:mod:`ax_chaining.ax.metadata`),
    built by :func:`~ax_chaining.ax.strategies.candidate_set_node`:
    ``GenerationNode``'s arguments, the spec, optionally a stopping rule
    checked before each generation, the schedule of the certificate's
    checks (``certificate_schedule``: every step by default; None records no
    certificate) and the recorded certificates' calibration
    (``certificate_calibration``: ``"loo"`` by default, ``"none"``,
    ``"forecast"`` or ``"audit"``, the last two on the residuals of the
    forecasts the loop recorded before this step), and the fewest
    observations from which the ``"loo"`` check certifies
    (``certificate_min_observations``,
    :data:`~ax_chaining.certificate.calibration.LOO_MIN_OBSERVATIONS` by
    default) and its scale (``certificate_scale_level``: the upper
    confidence limit at
    :data:`~ax_chaining.certificate.calibration.DEFAULT_SCALE_LEVEL` by
    default; None, the point estimate)."""

    def __init__(
        self,
        name: str,
        generator_specs: list[GeneratorSpec],
        candidate_spec: CandidateSetSpec,
        transition_criteria: Sequence[TransitionCriterion] | None = None,
        stop_rule: RegretBoundCriterion | None = None,
        certificate_schedule: CheckSchedule | None = EVERY_STEP,
        certificate_calibration: Calibration = "loo",
        certificate_min_observations: int = LOO_MIN_OBSERVATIONS,
        certificate_scale_level: float | None = DEFAULT_SCALE_LEVEL,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, generator_specs, transition_criteria, **kwargs)
        self.candidate_spec = candidate_spec
        self.stop_rule = stop_rule
        self.certificate_schedule = certificate_schedule
        self.certificate_calibration = certificate_calibration
        self.certificate_min_observations = certificate_min_observations
        self.certificate_scale_level = certificate_scale_level
        # The last step's candidates in the model space (a cache, not state:
        # never stored, rebuilt when missing or stale).
        self._model_space: tuple[list, torch.Tensor] | None = None

    def gen(  # type: ignore[override]
        self, *, experiment: Experiment, skip_fit: bool = False, **kwargs: Any
    ) -> GeneratorRun | None:
        """Ax's ``gen`` over the selectable candidates
        (:func:`~ax_chaining.ax.selection.selectable_candidates`), given to the
        acquisition in ``model_gen_options``; records the step.

        Raises:
            CertifiedStop: The stopping rule is met (its message names the bound).
        """
        n = self._num_candidates(experiment)
        self._check_ready(experiment)
        selection = selectable_candidates(
            experiment,
            self.candidate_spec,
            n,
            self._index_of,
            pending_observations=kwargs.get("pending_observations"),
            allowed=self._allowed(kwargs.get("fixed_features")),
            audit_step=1 + sum(1 for _ in recorded(experiment)),
        )
        started = time.perf_counter()
        if not skip_fit:
            self.generator_spec.fit(experiment=experiment, data=kwargs.get("data"))
        fitted = time.perf_counter()
        adapter = self.generator_spec.fitted_adapter
        chosen: list = []
        given = self._acquisition_options(adapter, selection)
        # Ax deep-copies options; `deepcopy` keeps a function (here list.append).
        options = self._model_gen_options(kwargs, {**given, "record": chosen.append})
        gr = GenerationNode.gen(
            self,
            experiment=experiment,
            skip_fit=True,
            model_gen_options=options,
            **kwargs,
        )
        seconds = {"fit": fitted - started, "acquisition": time.perf_counter() - fitted}
        if gr is not None:
            self._name_arms(experiment, gr)
            meta = self._metadata_of(
                chosen, adapter, experiment, selection, gr, seconds
            )
            # `gen_metadata` is the run's own dict (Ax adds "trial_type" the
            # same way); pinned in tests/test_ax_contract.py.
            gr.gen_metadata[GEN_METADATA_KEY] = meta  # type: ignore[index]
        return gr

    def _metadata_of(
        self,
        chosen: list,
        adapter: Adapter,
        experiment: Experiment,
        selection: SelectableCandidates,
        gr: GeneratorRun,
        seconds: dict[str, float],
    ) -> dict[str, Any]:
        """The step's record: the candidate set, :meth:`_step_record`, and the
        wall-clock seconds of the step's parts (the model fit, the acquisition
        over the candidates with Ax's own work around it, and the certificate
        among the evaluated candidates)."""
        started = time.perf_counter()
        meta: dict[str, Any] = {"seed": self.candidate_spec.seed}
        meta["num_candidates"] = selection.num_candidates
        meta["num_selectable"] = selection.num_selectable
        meta["audit"] = selection.audit is not None
        meta["forecast"] = forecast_record(adapter, experiment, gr.arms)
        meta.update(self._step_record(chosen, adapter, experiment, selection, gr))
        meta["seconds"] = {**seconds, "certificate": time.perf_counter() - started}
        return meta

    def _num_candidates(self, experiment: Experiment) -> int:
        """``N``, once the experiment fits the candidate set (and its seed is
        resolved)."""
        return len(self._candidate_rows(experiment))

    def _index_of(self, parameters: Mapping[str, Any]) -> int | None:
        """The candidate index of an arm's parameters (None: not a candidate)."""
        return self._index.get(row_key(parameters, self._names))

    def _allowed(self, fixed: ObservationFeatures | None) -> np.ndarray | None:
        """Mask of the candidates that take the fixed features' values."""
        return self._matches(fixed)

    def _check_ready(self, experiment: Experiment) -> None:
        """Stop if the stopping rule is met; refuse an experiment without data.

        Raises:
            CertifiedStop: The stopping rule is met.
            DataRequiredError: No trial has data yet.
        """
        if self.stop_rule is not None:
            self.stop_rule.stop_if_met(experiment)
        if experiment.lookup_data().df.empty:
            raise DataRequiredError(
                f"{self.name} needs data, and no trial has any yet: run initial "
                "trials (`init_trials >= 1`), or attach and complete trials first "
                "(`client.attach_trial(...)`, `client.complete_trial(...)`)."
            )

    def _model_gen_options(
        self, kwargs: dict[str, Any], acquisition_options: dict[str, Any]
    ) -> dict[str, Any]:
        """The step's ``model_gen_options`` (popped from ``kwargs``, else the
        generator's own), with ``acquisition_options`` for the acquisition."""
        own = self.generator_spec.generator_gen_kwargs.get("model_gen_options")
        options = dict(kwargs.pop("model_gen_options", None) or own or {})
        acq = Keys.AX_ACQUISITION_KWARGS.value
        options[acq] = {**options.get(acq, {}), **acquisition_options}
        return options

    def _acquisition_options(
        self, adapter: Adapter, selection: SelectableCandidates
    ) -> dict[str, Any]:
        """What :class:`CandidateSetAcquisition` takes: the candidates in the
        model space and the selectable mask."""
        X = self.model_space_candidates(adapter, self._rows)
        return {"candidates": X, "selectable": torch.tensor(selection.selectable)}

    def model_space_candidates(
        self, adapter: Adapter, rows: list[TParameterization]
    ) -> torch.Tensor:
        """The candidate rows in the adapter's model space.

        Ax's transforms run row by row in Python (about 0.2 ms a row, so
        seconds a step on tens of thousands of rows), and a refit adapter
        transforms the same rows the same way as long as its transforms do not
        change (those of the inputs follow the search space, which a node's
        candidate set is built for). So the last step's tensor is kept, and is
        reused when :data:`PROBE_ROWS` rows spread over the set transform to the
        same values now; otherwise every row is transformed again.
        """
        cached = self._model_space
        if cached is not None and cached[0] is rows:
            probe = torch.linspace(0, len(rows) - 1, min(len(rows), PROBE_ROWS))
            probe = probe.round().long().unique()
            fresh = _transform(adapter, [rows[i] for i in probe.tolist()])
            if fresh.shape[-1] == cached[1].shape[-1] and torch.equal(
                fresh, cached[1][probe]
            ):
                return cached[1]
        X = _transform(adapter, rows)
        self._model_space = (rows, X)
        return X

    def _certificate(
        self,
        acquisition: Any,
        among: torch.Tensor,
        scale: float | None,
        experiment: Experiment,
    ) -> dict[str, Any] | None:
        """This step's certificate record (:func:`step_certificate`) under the
        node's schedule and calibration: ``"forecast"`` and ``"audit"``
        resolved to the residuals of the experiment's completed forecasts
        (:func:`~ax_chaining.ax.forecasts.residual_calibration`; too few act
        as ``"loo"``), the others as named."""
        calibration: CalibrationChoice = self.certificate_calibration
        if calibration in ("forecast", "audit"):
            calibration = residual_calibration(experiment, calibration)
        if self.certificate_schedule is None:
            return None
        options = CertificateOptions(
            schedule=self.certificate_schedule,
            calibration=calibration,
            min_observations=self.certificate_min_observations,
            scale_level=self.certificate_scale_level,
        )
        return step_certificate(acquisition, among, scale, options)

    def _step_record(
        self,
        chosen: list,
        adapter: Adapter,
        experiment: Experiment,
        selection: SelectableCandidates,
        gr: GeneratorRun,
    ) -> dict[str, Any]:
        """JSON-safe facts of the step, and the certificate among the evaluated."""
        if not chosen:
            return {}
        acquisition = chosen[-1]
        acqf, weights = acquisition.acqf, acquisition.objective_weights
        meta: dict[str, Any] = {"acquisition_function": type(acqf).__name__}
        casts = {"t": int, "delta": float}
        meta |= {k: f(getattr(acqf, k)) for k, f in casts.items() if hasattr(acqf, k)}
        if self._metadata:
            picked = [self._index_of(a.parameters) for a in gr.arms]
            meta["rows"] = [
                {"row": i, **self._metadata[i]} for i in picked if i is not None
            ]
        if not len(selection.evaluated):
            return meta
        scale = objective_scale(adapter, experiment, weights)
        evaluated = torch.as_tensor(selection.evaluated_mask())
        cert = self._certificate(acquisition, evaluated, scale, experiment)
        if cert is None:
            return meta
        cert["parameters"] = dict(self._rows[int(cert["index"])])
        meta["certificate"] = cert
        return meta
