r"""Generation nodes over a finite candidate set :math:`X`, and selection over
it in Ax's modular BoTorch generator."""

import time
from collections.abc import Callable, Sequence
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
from ax.exceptions.core import DataRequiredError, SearchSpaceExhausted, UnsupportedError
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
from torch import Tensor

from ax_chaining.ax.candidates import (
    DROPPED,
    CandidateSet,
    CandidateSetSpec,
    SelectableCandidates,
    selectable_candidates,
)
from ax_chaining.ax.certificates import (
    GEN_METADATA_KEY,
    calibrated,
    certificate_record,
    forecast_record,
    objective_scale,
    recorded,
)
from ax_chaining.ax.stopping import RegretBoundGlobalStoppingStrategy
from ax_chaining.certificate.certify import CertificateOptions
from ax_chaining.checks import type_error


def takes_candidates(acqf_class: type) -> bool:
    """Whether the input constructor of ``acqf_class`` takes the candidate set
    (its class attribute ``takes_candidates``); raises for a class that cannot
    select over a table (one-shot, multi-objective, no input constructor)."""
    if not isinstance(acqf_class, type) or not issubclass(
        acqf_class, AcquisitionFunction
    ):
        what = "an AcquisitionFunction class"
        raise type_error("botorch_acqf_class", what, acqf_class)
    why = None
    if issubclass(acqf_class, OneShotAcquisitionFunction):
        why = "a one-shot acquisition, which cannot be selected over a table"
    # Some of BoTorch's multi-objective classes derive from AcquisitionFunction.
    multi = (
        MultiObjectiveMCAcquisitionFunction,
        MultiObjectiveAnalyticAcquisitionFunction,
    )
    if issubclass(acqf_class, multi) or acqf_class.__module__.startswith(
        "botorch.acquisition.multi_objective."
    ):
        why = (
            "multi-objective, and candidate-set strategies are single-objective "
            "(scalarize, e.g. `configure_optimization(objective='a + 0.5 * b')`)"
        )
    if why:
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


class CandidateSetAcquisition(Acquisition):
    """Ax ``Acquisition`` over a finite candidate set, for any BoTorch
    acquisition function, selecting with Ax's ``select_from_candidate_set`` or
    on the shards. ``options`` carry ``candidates`` (``N x d`` in Ax's model
    space, or ``ShardedCandidates``), ``selectable`` (a boolean mask) and
    ``record`` (called with this object once it has selected)."""

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
        self.sharded = hasattr(candidates, "chaining_store")
        self.candidates = candidates if self.sharded else torch.as_tensor(candidates)
        acqf_class = kwargs["botorch_acqf_class"]
        takes = takes_candidates(acqf_class)
        if issubclass(acqf_class, AnalyticAcquisitionFunction) and not takes:
            # Analytic functions refuse pending points; the set excludes them.
            config = kwargs["torch_opt_config"]
            kwargs["torch_opt_config"] = replace(config, pending_observations=None)
        if takes:
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
        candidate_set: Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Select ``min(n, #selectable)`` candidates (points, values, weights);
        ``fixed_features`` narrow the mask, an Ax ``candidate_set`` replaces it."""
        if self.sharded:
            if fixed_features or candidate_set is not None:
                raise UnsupportedError(
                    "Sharded candidates take neither fixed features nor an Ax "
                    "candidate_set: the search space is the library's item index."
                )
            exclude = (~self.selectable).nonzero().squeeze(-1).tolist()
            selected, values = self.candidates.optimize(self.acqf, int(n), exclude)
            selected = selected.to(device=self.device, dtype=self.dtype)
            weights = torch.ones_like(values)
        elif candidate_set is None:  # the selectable rows that take fixed_features
            X = self.candidates.to(device=self.device, dtype=self.dtype)
            mask = self.selectable.to(X.device).clone()
            for i, v in (fixed_features or {}).items():
                mask &= torch.isclose(X[:, i], X.new_tensor(v), rtol=0.0, atol=1e-9)
            if not mask.any():
                msg = "after excluding evaluated or pending ones and fixed features"
                raise SearchSpaceExhausted(f"No selectable candidate is left ({msg}).")
            candidate_set = X[mask]
        if not self.sharded:
            n = min(int(n), len(candidate_set))
            if n > 1 and isinstance(self.acqf, AnalyticAcquisitionFunction):
                # Analytic functions cannot condition on X_pending: the n best.
                with torch.no_grad():
                    values, best = torch.topk(self.acqf(candidate_set[:, None]), n)
                selected, weights = candidate_set[best], torch.ones_like(values)
            else:
                selected, values, weights = self.select_from_candidate_set(
                    n=n, candidate_set=candidate_set
                )
        if self.record is not None:
            self.record(self)
        return selected, values, weights


#: Rows transformed again at each step to check the cached model-space rows.
PROBE_ROWS = 256


def _transform(adapter: Adapter, rows: list[TParameterization]) -> Tensor:
    """Parameterizations in the adapter's model space."""
    feats = [ObservationFeatures(parameters=dict(r)) for r in rows]
    return adapter.transform_observation_features(feats)


#: The fields this package adds to Ax's JSON of its nodes.
NODE_FIELDS = ("candidate_spec", "stop_tolerance", "certificate")


class _CandidateNode:
    """A node over the candidate set of its experiment's search space."""

    candidate_spec: CandidateSetSpec

    def _candidates(self, experiment: Experiment) -> CandidateSet:
        opt = experiment.optimization_config  # None: the Client reports it itself
        if opt is not None and (opt.is_moo_problem or opt.outcome_constraints):
            raise UnsupportedError(
                "Candidate-set strategies support a single objective without outcome "
                f"constraints (the certificate is unconstrained), got {opt.objective} "
                f"with {[str(c) for c in opt.outcome_constraints]}. Scalarize, e.g. "
                "`configure_optimization(objective='a + 0.5 * b')`."
            )
        spec = self.candidate_spec
        if spec.seed is None:
            # A reloaded strategy's nodes hold copies of the spec: a sibling's
            # seed first, then a recorded one.
            try:
                nodes = self.generation_strategy.nodes_by_name.values()  # type: ignore[attr-defined]
            except ValueError:  # not attached to a strategy
                nodes = []
            seeds = [getattr(n, "candidate_spec", spec).seed for n in nodes]
            spec.resolve_seed(seeds + [m.get("seed") for _, m in recorded(experiment)])
        key = (repr(experiment.search_space), int(spec.seed))  # type: ignore[arg-type]
        if getattr(self, "_set_key", None) != key:
            self._set = CandidateSet(experiment.search_space, spec)
            self._set_key = key
        return self._set

    def _name_arms(self, experiment: Experiment, gr: GeneratorRun | None) -> None:
        """Name a table's arms after their rows (``id_column`` or ``row_<i>``);
        an arm already on the experiment keeps its name."""
        names = self._set.arm_names
        if gr is None or names is None:
            return
        known = experiment.arms_by_signature
        for arm in gr.arms:
            i = self._set.index_of(arm.parameters)
            if i is not None and arm.signature not in known and not arm.has_name:
                arm.name = names[i]

    @classmethod
    def deserialize_init_args(
        cls, args: dict[str, Any], **registries: Any
    ) -> dict[str, Any]:
        # Ax's own GenerationNode decoding, re-wrapped in this class.
        args = dict(args)
        fields = [k for k in NODE_FIELDS if k in args]
        extra = {k: object_from_json(args.pop(k), **registries) for k in fields}
        node = generation_node_from_json(generation_node_json=args, **registries)
        kwargs = {"name": node.name, "transition_criteria": node.transition_criteria}
        if cls is not UniformCandidateNode:  # its generator is itself
            keys = ("generator_specs", "pausing_criteria", "should_deduplicate")
            kwargs |= {k: getattr(node, k) for k in keys}
            kwargs["previous_node_name"] = args.get("previous_node_name")
        return {**kwargs, **extra}


class UniformCandidateNode(_CandidateNode, ExternalGenerationNode):
    """Initialization: the next candidate of a seeded permutation of :math:`X`
    not yet in a trial, then the least used. A candidate whose trial failed is
    not proposed again unless ``retry_failed``."""

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
        """Ax's ``gen``, keeping ``fixed_features``; arms named after rows."""
        self._fixed = kwargs.get("fixed_features")
        # Ax resets this counter to the int 0 after each generation; an int fit
        # time then fails Ax's SQL storage's copy of database ids.
        self.fit_time_since_gen = float(self.fit_time_since_gen)
        gr = super().gen(experiment=experiment, **kwargs)
        self._name_arms(experiment, gr)
        return gr

    def update_generator_state(self, experiment: Experiment, data: Data) -> None:
        cset = self._candidates(experiment)  # first: it may resolve the seed
        rng = np.random.default_rng([self.candidate_spec.seed, 1])
        self._order = rng.permutation(cset.n)
        self._used = cset.counts(cset.in_trials(experiment, DROPPED, within=False))
        failed = [] if self.candidate_spec.retry_failed else [TrialStatus.FAILED]
        self._failed = set(cset.indices(cset.in_trials(experiment, failed)).tolist())

    def get_next_candidate(
        self, pending_parameters: list[TParameterization]
    ) -> TParameterization:
        cset = self._set
        use = self._used + cset.counts(pending_parameters)
        allowed = cset.matches(self._fixed)
        best = None
        for i in map(int, self._order):  # the first unused, else the least used
            if i in self._failed or (allowed is not None and not allowed[i]):
                continue
            if best is None or use[i] < use[best]:
                best = i
            if use[i] == 0:
                break
        if best is None:
            raise SearchSpaceExhausted(
                "Every candidate left failed before (`retry_failed=False`)."
            )
        if use[best] > 0 and self.candidate_spec.exclude_evaluated:
            raise SearchSpaceExhausted(
                f"All {cset.n} candidates are used, `exclude_evaluated=True`: "
                "init_trials exceeds the candidate set."
            )
        return cset.row(best)


class SobolCandidateNode(_CandidateNode, GenerationNode):
    """Initialization with Ax's Sobol generator (``init="sobol"``), after
    checking the experiment against the candidate set.

    Args:
        name, transition_criteria, kwargs: ``GenerationNode``'s (default
            ``should_deduplicate=True``).
        candidate_spec: The candidate set of the nodes that follow.
        generator_specs: Default Ax's Sobol generator with the spec's seed.
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
        """Ax's ``gen``, once the experiment fits the candidate set."""
        self._candidates(experiment)
        return super().gen(experiment=experiment, **kwargs)


class CandidateSetNode(_CandidateNode, GenerationNode):
    """A ``GenerationNode`` that optimizes a BoTorch acquisition function over a finite
    candidate set and records each step under ``gen_metadata[GEN_METADATA_KEY]``; built
    by :func:`~ax_chaining.ax.strategies.candidate_set_node`.

    Args:
        name, generator_specs, transition_criteria, kwargs: ``GenerationNode``'s.
        candidate_spec: The candidate set.
        stop_tolerance: Stop (:class:`~ax_chaining.ax.stopping.CertifiedStop`)
            before a step once the current certified bound is at most this.
        certificate: The recorded certificates' options (None records none).
        sharded: Candidates sharded over a Dask cluster (not stored in JSON).
    """

    def __init__(
        self,
        name: str,
        generator_specs: list[GeneratorSpec],
        candidate_spec: CandidateSetSpec,
        transition_criteria: Sequence[TransitionCriterion] | None = None,
        stop_tolerance: float | None = None,
        certificate: CertificateOptions | None = None,
        sharded: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, generator_specs, transition_criteria, **kwargs)
        self.candidate_spec = candidate_spec
        self.stop_tolerance = stop_tolerance
        self.certificate = certificate
        self.sharded = sharded
        # The last step's candidates in the model space (a cache, not state).
        self._model_space: tuple[list, Tensor] | None = None

    def gen(  # type: ignore[override]
        self, *, experiment: Experiment, skip_fit: bool = False, **kwargs: Any
    ) -> GeneratorRun | None:
        """Ax's ``gen`` over the selectable candidates; records the step.

        Raises:
            CertifiedStop: The bound reached ``stop_tolerance``.
            DataRequiredError: No trial has data yet.
        """
        cset = self._candidates(experiment)
        if self.stop_tolerance is not None:
            rule = RegretBoundGlobalStoppingStrategy(self.stop_tolerance, 0, False)
            rule.stop_if_met(experiment)
        if experiment.lookup_data().df.empty:
            raise DataRequiredError(
                f"{self.name} needs data, and no trial has any yet: run initial "
                "trials (`init_trials >= 1`), or attach and complete trials first "
                "(`client.attach_trial(...)`, `client.complete_trial(...)`)."
            )
        selection = selectable_candidates(
            experiment,
            cset,
            pending_observations=kwargs.get("pending_observations"),
            allowed=cset.matches(kwargs.get("fixed_features")),
            audit_step=1 + sum(1 for _ in recorded(experiment)),
        )
        started = time.perf_counter()
        if not skip_fit:
            self.generator_spec.fit(experiment=experiment, data=kwargs.get("data"))
        fitted = time.perf_counter()
        adapter = self.generator_spec.fitted_adapter
        chosen: list = []
        X = self.sharded or self.model_space_candidates(adapter, cset.rows)
        given = {"candidates": X, "selectable": torch.tensor(selection.selectable)}
        # Ax deep-copies options; `deepcopy` keeps a function (list.append).
        own = self.generator_spec.generator_gen_kwargs.get("model_gen_options")
        options = dict(kwargs.pop("model_gen_options", None) or own or {})
        acq = Keys.AX_ACQUISITION_KWARGS.value
        options[acq] = {**options.get(acq, {}), **given, "record": chosen.append}
        gr = super().gen(
            experiment=experiment, skip_fit=True, model_gen_options=options, **kwargs
        )
        seconds = {"fit": fitted - started, "acquisition": time.perf_counter() - fitted}
        if gr is not None:
            self._name_arms(experiment, gr)
            meta = self._record(chosen, adapter, experiment, selection, gr, seconds)
            # As Ax adds "trial_type"; pinned in tests/test_ax_contract.py.
            gr.gen_metadata[GEN_METADATA_KEY] = meta  # type: ignore[index]
        return gr

    def model_space_candidates(
        self, adapter: Adapter, rows: list[TParameterization]
    ) -> Tensor:
        """The candidate rows in the adapter's model space; the last step's
        tensor is reused when :data:`PROBE_ROWS` rows spread over the set
        transform to the same values now (Ax transforms row by row)."""
        if self._model_space is not None and self._model_space[0] is rows:
            X = self._model_space[1]
            probe = torch.linspace(0, len(rows) - 1, min(len(rows), PROBE_ROWS))
            probe = probe.round().long().unique()
            fresh = _transform(adapter, [rows[i] for i in probe.tolist()])
            if fresh.shape[-1] == X.shape[-1] and torch.equal(fresh, X[probe]):
                return X
        X = _transform(adapter, rows)
        self._model_space = (rows, X)
        return X

    def _record(
        self,
        chosen: list,
        adapter: Adapter,
        experiment: Experiment,
        selection: SelectableCandidates,
        gr: GeneratorRun,
        seconds: dict[str, float],
    ) -> dict[str, Any]:
        """JSON-safe facts of the step, its certificate among the evaluated
        candidates, and the seconds of its parts."""
        cset = self._set
        meta: dict[str, Any] = {"seed": self.candidate_spec.seed}
        meta["num_candidates"] = cset.n
        meta["num_selectable"] = int(selection.selectable.sum())
        meta["audit"] = selection.audit is not None
        meta["forecast"] = forecast_record(adapter, experiment, gr.arms)
        if self.sharded is not None:
            meta["shards"] = self.sharded.num_shards
        started = time.perf_counter()
        if chosen:
            acquisition = chosen[-1]
            acqf, weights = acquisition.acqf, acquisition.objective_weights
            meta["acquisition_function"] = type(acqf).__name__
            for k, cast in (("t", int), ("delta", float)):
                if hasattr(acqf, k):
                    meta[k] = cast(getattr(acqf, k))
            if cset.metadata:
                picked = [cset.index_of(a.parameters) for a in gr.arms]
                meta["rows"] = [
                    {"row": i, **cset.metadata[i]} for i in picked if i is not None
                ]
            if len(selection.evaluated):
                scale = objective_scale(adapter, experiment, weights)
                options = self.certificate and calibrated(self.certificate, experiment)
                among = torch.as_tensor(selection.evaluated, dtype=torch.long)
                cert = certificate_record(acquisition, among, scale, options)
                if cert is not None:
                    cert["parameters"] = cset.row(int(cert["index"]))
                    meta["certificate"] = cert
        meta["seconds"] = {**seconds, "certificate": time.perf_counter() - started}
        return meta
