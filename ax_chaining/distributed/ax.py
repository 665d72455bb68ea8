r"""Sharded candidate sets in Ax, and trials evaluated on the same cluster.

* :func:`sharded_candidate_set_strategy` (what
  ``chaining_generation_strategy(..., candidates=sharded)`` builds): uniform
  initialization over the items, then Chaining-UCB whose step runs on the
  shards (:class:`ShardedCandidateSetNode`, :class:`ShardedCandidateSetAcquisition`).
  The search space is the library's item index (one integer parameter
  ``0 .. N - 1``, :func:`~ax_chaining.ax.candidate_index_parameter`) and the
  surrogate a library-mode Tanimoto kernel over the same library
  (:func:`~ax_chaining.ax.fingerprint_kernel_surrogate_spec`); the ``N``
  candidates are never listed on the client, only the items in trials.
* :class:`DaskRunner` and :class:`DaskMetric`: an Ax runner that submits each
  trial's evaluation to the cluster and a metric that fetches its result
  (Ax's ``IRunner`` and ``IMetric``), so that ``Client.run_trials`` (Ax's
  ``Orchestrator``) runs trials in parallel there.

The experiment (its trials, data and step records) is stored in Ax's JSON as
usual; a strategy holding a sharded node is not (it holds a live cluster
handle): saving it raises, naming the route (``certificate_history(gs)`` and
``best_certificate(gs)`` read the experiment directly).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from ax.adapter.base import Adapter
from ax.adapter.registry import Generators
from ax.api.protocols.metric import IMetric
from ax.api.protocols.runner import IRunner
from ax.core import Data, Experiment, GeneratorRun, ObservationFeatures
from ax.core.base_trial import TrialStatus
from ax.core.parameter import ParameterType
from ax.core.types import TParameterization
from ax.exceptions.core import (
    SearchSpaceExhausted,
    UnsupportedError,
)
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generation_strategy.transition_criterion import MinTrials
from ax.generators.torch.botorch_modular.acquisition import Acquisition
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from ax.storage.botorch_modular_registry import register_acquisition
from ax.storage.json_store.registry import CORE_ENCODER_REGISTRY

from ax_chaining.acquisition import ChainingUCB
from ax_chaining.ax.candidates import CandidateSetSpec
from ax_chaining.ax.metadata import objective_scale
from ax_chaining.ax.nodes import CandidateSetNode, UniformCandidateNode
from ax_chaining.ax.options import (
    checked_calibration,
    checked_min_observations,
    checked_options,
    checked_scale_level,
    stop_rule_of,
)
from ax_chaining.ax.selection import DROPPED, SelectableCandidates
from ax_chaining.ax.stopping import RegretBoundCriterion
from ax_chaining.certificate.certify import (
    DEFAULT_SCALE_LEVEL,
    LOO_MIN_OBSERVATIONS,
)
from ax_chaining.certificate.schedule import EVERY_STEP, CheckSchedule
from ax_chaining.certificate.tails import Calibration
from ax_chaining.checks import check_choice, check_int
from ax_chaining.distributed.candidates import ShardedCandidates, check_sharded

__all__ = [
    "DaskMetric",
    "DaskRunner",
    "ShardedCandidateSetAcquisition",
    "ShardedCandidateSetNode",
    "ShardedUniformNode",
    "sharded_candidate_set_strategy",
]


class ShardedCandidateSetAcquisition(Acquisition):
    """Ax ``Acquisition`` over sharded candidates: the acquisition function is
    a :class:`~ax_chaining.ChainingUCB` built with
    ``candidates`` the :class:`ShardedCandidates`, and ``optimize``
    selects with :meth:`ShardedCandidates.optimize` (sequential greedy with
    pending points for a batch). ``options`` carry ``candidates``,
    ``excluded`` (global indices that may not be proposed) and ``record``
    (called with this object once it has selected), as the node gives them.
    """

    def __init__(
        self,
        *,
        botorch_acqf_options: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        options, acqf_options = dict(options or {}), dict(botorch_acqf_options or {})
        sharded = check_sharded("candidates", options.pop("candidates", None))
        self.sharded = sharded
        self._arm_names = None  # no table: arms keep Ax's names
        self.excluded = [int(i) for i in options.pop("excluded", ())]
        self.record: Callable[..., Any] | None = options.pop("record", None)
        acqf_options["candidates"] = sharded
        super().__init__(botorch_acqf_options=acqf_options, options=options, **kwargs)

    def optimize(
        self,
        n: int,
        search_space_digest: Any,
        *,
        fixed_features: dict[int, float] | None = None,
        candidate_set: torch.Tensor | None = None,
        sampling_strategy: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Select ``n`` candidates on the shards (points, values, weights)."""
        if fixed_features or candidate_set is not None:
            raise UnsupportedError(
                "Sharded candidate sets take neither fixed features nor an Ax "
                "candidate_set: the search space is the library's item index."
            )
        X, values = self.sharded.optimize(self.acqf, q=int(n), exclude=self.excluded)
        if self.record is not None:
            self.record(self)
        return (
            X.to(device=self.device, dtype=self.dtype),
            values,
            torch.ones_like(values),
        )


def _item_parameter(experiment: Experiment, n: int) -> str:
    """The search space's one integer parameter ``0 .. n - 1`` (its name)."""
    free = list(experiment.search_space.tunable_parameters.values())
    p = free[0] if len(free) == 1 else None
    ok = p is not None and p.parameter_type == ParameterType.INT
    ok = ok and (int(p.lower), int(p.upper)) == (0, n - 1)  # type: ignore[union-attr]
    if not ok:
        got = ", ".join(str(q) for q in free)
        raise ValueError(
            f"Sharded candidates hold {n} items, but the search space is [{got}]; "
            f"expected one integer parameter 0..{n - 1}, e.g. "
            f"`candidate_index_parameter({n})`."
        )
    return p.name  # type: ignore[union-attr]


def _items(experiment: Experiment, name: str, statuses, within: bool = True):
    """Counts of the items in trials whose status is (or, if not ``within``,
    is not) one of ``statuses``."""
    trials = [t for t in experiment.trials.values() if (t.status in statuses) == within]
    return Counter(int(a.parameters[name]) for t in trials for a in t.arms)


class ShardedUniformNode(UniformCandidateNode):
    """Initialization over a sharded library's items: the next item of a
    seeded permutation not yet in a trial (the items the single-machine
    :class:`~ax_chaining.ax.UniformCandidateNode` proposes for the same seed),
    without listing the ``N`` candidates."""

    def __init__(
        self,
        name: str,
        candidate_spec: CandidateSetSpec,
        sharded: ShardedCandidates,
        transition_criteria: Any = None,
    ) -> None:
        super().__init__(name, candidate_spec, transition_criteria)
        self.sharded = sharded
        self._arm_names = None  # no table: arms keep Ax's names

    def update_generator_state(self, experiment: Experiment, data: Data) -> None:
        n = self.sharded.n
        self._param = _item_parameter(experiment, n)
        rng = np.random.default_rng([self._resolve_seed(experiment), 1])
        self._order = rng.permutation(n)
        self._used = _items(experiment, self._param, DROPPED, within=False)
        self._failed: set[int] = set()
        if not self.candidate_spec.retry_failed:
            failed = _items(experiment, self._param, [TrialStatus.FAILED])
            self._failed = set(failed)

    def get_next_candidate(
        self, pending_parameters: list[TParameterization]
    ) -> TParameterization:
        if self._fixed is not None and self._fixed.parameters:
            raise UnsupportedError("Sharded candidate sets take no fixed features.")
        use = Counter(self._used)
        use.update(int(p[self._param]) for p in pending_parameters)
        best = None
        for i in self._order.tolist():  # the first unused in the order
            if i in self._failed:
                continue
            if use[i] == 0:
                best = i
                break
            if best is None or use[i] < use[best]:
                best = i
        if best is None:
            raise SearchSpaceExhausted(
                "Every candidate left failed before (`retry_failed=False`)."
            )
        if use[best] > 0 and self.candidate_spec.exclude_evaluated:
            raise SearchSpaceExhausted(
                f"All {self.sharded.n} candidates are used, `exclude_evaluated=True`"
                ": init_trials exceeds the candidate set."
            )
        return {self._param: int(best)}


class ShardedCandidateSetNode(CandidateSetNode):
    """A :class:`~ax_chaining.ax.CandidateSetNode` over sharded candidates:
    the same rules (failed, evaluated and pending candidates, the stopping
    rule, the step record with its certificate among the evaluated ones),
    applied to the items in trials, and the step on the shards."""

    def __init__(
        self,
        name: str,
        generator_specs: list[GeneratorSpec],
        candidate_spec: CandidateSetSpec,
        sharded: ShardedCandidates,
        transition_criteria: Any = None,
        stop_rule: RegretBoundCriterion | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            name,
            generator_specs,
            candidate_spec,
            transition_criteria,
            stop_rule,
            **kwargs,
        )
        self.sharded = sharded
        self._arm_names = None  # no table: arms keep Ax's names

    def _num_candidates(self, experiment: Experiment) -> int:
        """``N``, once the search space is the item index (its seed resolved)."""
        self._param = _item_parameter(experiment, self.sharded.n)
        self._resolve_seed(experiment)
        return self.sharded.n

    def _index_of(self, parameters: Mapping[str, Any]) -> int | None:
        return int(parameters[self._param])

    def _allowed(self, fixed: ObservationFeatures | None) -> None:
        if fixed is not None and fixed.parameters:
            raise UnsupportedError("Sharded candidate sets take no fixed features.")
        return None

    def _acquisition_options(
        self, adapter: Adapter, selection: SelectableCandidates
    ) -> dict[str, Any]:
        """What :class:`ShardedCandidateSetAcquisition` takes: the sharded
        candidates and the items that may not be proposed."""
        return {"candidates": self.sharded, "excluded": selection.excluded.tolist()}

    def _step_record(
        self,
        chosen: list,
        adapter: Adapter,
        experiment: Experiment,
        selection: SelectableCandidates,
        gr: GeneratorRun,
    ) -> dict[str, Any]:
        """The shards, the acquisition's facts, and the certificate among the
        evaluated items."""
        meta: dict[str, Any] = {"shards": self.sharded.num_shards}
        if not chosen:
            return meta
        acquisition = chosen[-1]
        acqf = acquisition.acqf
        meta["acquisition_function"] = type(acqf).__name__
        meta.update(t=int(acqf.t), delta=float(acqf.delta))
        if not len(selection.evaluated):
            return meta
        scale = objective_scale(adapter, experiment, acquisition.objective_weights)
        among = torch.as_tensor(selection.evaluated, dtype=torch.long)
        cert = self._certificate(acquisition, among, scale, experiment)
        if cert is not None:
            cert["parameters"] = {self._param: int(cert["index"])}
            meta["certificate"] = cert
        return meta


def sharded_candidate_set_strategy(
    sharded: ShardedCandidates,
    botorch_acqf_class: type = ChainingUCB,
    botorch_acqf_options: Mapping[str, Any] | None = None,
    init_trials: int = 10,
    *,
    init: str = "uniform",
    name: str | None = None,
    surrogate_spec: SurrogateSpec | None = None,
    stop_tolerance: float | None = None,
    torch_device: Any = None,
    certificate_schedule: CheckSchedule | None = EVERY_STEP,
    certificate_calibration: Calibration = "loo",
    certificate_min_observations: int = LOO_MIN_OBSERVATIONS,
    certificate_scale_level: float | None = DEFAULT_SCALE_LEVEL,
    **spec_fields: Any,
) -> GenerationStrategy:
    r"""Initialization, then Chaining-UCB on the shards, as an Ax strategy.

    What ``chaining_generation_strategy(..., candidates=sharded)`` (and
    ``candidate_set_strategy(ChainingUCB, ..., candidates=sharded)``)
    returns. The rest of a candidate-set strategy is unchanged: its options
    (checked here), ``init_trials`` uniform initial trials (failed and
    abandoned ones not counted), the spec's ``seed``, ``exclude_evaluated``,
    ``exclude_pending`` and ``retry_failed``, and ``stop_tolerance``.

    Example:
        >>> sharded = ShardedCandidates(client, library)
        >>> gs = chaining_generation_strategy(
        ...     init_trials=8,
        ...     candidates=sharded,
        ...     surrogate_spec=fingerprint_kernel_surrogate_spec(library),
        ... )

    Args:
        sharded: A :class:`ShardedCandidates` of a fingerprint library
            (candidate ``i`` the item index ``i``, as Ax gives it to the model).
        botorch_acqf_class: ``ChainingUCB`` (the one acquisition whose step
            is distributed).
        botorch_acqf_options, init_trials, name, stop_tolerance, torch_device: As
            :func:`~ax_chaining.ax.candidate_set_strategy`.
        certificate_schedule, certificate_calibration, certificate_min_observations: As
            :func:`~ax_chaining.ax.candidate_set_node`.
        certificate_scale_level: As :func:`~ax_chaining.ax.candidate_set_node`.
        init: ``"uniform"`` (the one initialization over items).
        surrogate_spec: Ax's, with a library-mode Tanimoto kernel over the
            same library (:func:`~ax_chaining.ax.fingerprint_kernel_surrogate_spec`).
        spec_fields: :class:`~ax_chaining.ax.CandidateSetSpec` fields
            (``seed`` defaults to None: the caller's seed).
    """
    check_sharded("candidates", sharded)
    if not (
        isinstance(botorch_acqf_class, type)
        and issubclass(botorch_acqf_class, ChainingUCB)
    ):
        got = getattr(botorch_acqf_class, "__name__", botorch_acqf_class)
        raise ValueError(
            "`botorch_acqf_class` must be ChainingUCB over sharded candidates (the "
            f"one acquisition whose step is distributed), got {got}."
        )
    if sharded.library is None or sharded.normalized_inputs:
        raise ValueError(
            "Ax's sharded strategy needs `candidates` = ShardedCandidates of a "
            "fingerprint library with normalized_inputs=False: Ax gives the model "
            "the item index itself, which the model's input transform normalizes."
        )
    check_choice("init", init, ("uniform",))
    init_trials = check_int("init_trials", init_trials, 0)
    if init_trials > sharded.n:
        raise ValueError(
            f"`init_trials`={init_trials} exceeds the {sharded.n} candidates."
        )
    options = checked_options(ChainingUCB, dict(botorch_acqf_options or {}))
    spec = CandidateSetSpec(**{"seed": None, **spec_fields, "num_items": sharded.n})
    name = name or botorch_acqf_class.__name__
    kwargs = {
        "botorch_acqf_class": ChainingUCB,
        "botorch_acqf_options": options,
        "acquisition_class": ShardedCandidateSetAcquisition,
        "warm_start_refit": False,
        "surrogate_spec": surrogate_spec,
        "torch_device": None if torch_device is None else torch.device(torch_device),
    }
    main = ShardedCandidateSetNode(
        name=name,
        generator_specs=[GeneratorSpec(Generators.BOTORCH_MODULAR, kwargs)],
        candidate_spec=spec,
        sharded=sharded,
        stop_rule=stop_rule_of(name, stop_tolerance, certificate_schedule),
        certificate_schedule=certificate_schedule,
        certificate_calibration=checked_calibration(certificate_calibration),
        certificate_min_observations=checked_min_observations(
            certificate_min_observations
        ),
        certificate_scale_level=checked_scale_level(certificate_scale_level),
    )
    if init_trials == 0:
        return GenerationStrategy(name=name, nodes=[main])
    common = {"transition_to": main.name, "use_all_trials_in_exp": True}
    with_data = {"only_in_statuses": [TrialStatus.COMPLETED], **common}
    criteria = [
        MinTrials(threshold=init_trials, not_in_statuses=[*DROPPED], **common),
        MinTrials(threshold=1, count_only_trials_with_data=True, **with_data),
    ]
    first = ShardedUniformNode("UniformCandidates", spec, sharded, criteria)
    return GenerationStrategy(name=name, nodes=[first, main])


class DaskRunner(IRunner):
    r"""An Ax runner (``IRunner``) that evaluates each trial on a Dask cluster.

    ``run_trial`` submits ``evaluate(parameters)`` (a task that may run on any
    worker, beside the shards) and returns its key as the trial's metadata;
    ``poll_trial`` reports the task's state (running, completed, or failed if
    it raised); :class:`DaskMetric` reads the result. With
    ``Client.configure_runner`` and ``Client.run_trials(max_trials,
    parallelism=k)``, Ax's ``Orchestrator`` keeps ``k`` trials running on the
    cluster while the strategy's steps run on the shards.

    Example:
        >>> client.configure_runner(DaskRunner(dask_client, evaluate))
        >>> client.configure_metrics([DaskMetric("score", dask_client)])
        >>> client.run_trials(max_trials=20, parallelism=4)

    Args:
        client: A ``distributed.Client``.
        evaluate: Maps a trial's parameters to ``{metric name: value}`` (or
            ``(mean, sem)`` values); picklable, as it runs on the workers.
    """

    def __init__(self, client: Any, evaluate: Callable[[dict], Mapping]) -> None:
        super().__init__()
        self.client, self.evaluate = client, evaluate
        # The futures keep the results on the cluster until fetched.
        self._futures: dict[int, Any] = {}

    def run_trial(
        self, trial_index: int, parameterization: TParameterization
    ) -> dict[str, Any]:
        future = self.client.submit(self.evaluate, dict(parameterization), pure=False)
        self._futures[trial_index] = future
        return {"dask_key": str(future.key)}

    def poll_trial(
        self, trial_index: int, trial_metadata: Mapping[str, Any]
    ) -> TrialStatus:
        future = self._futures.get(trial_index)
        if future is None:
            return TrialStatus.FAILED
        if future.status in ("error", "cancelled", "lost"):
            return TrialStatus.FAILED
        return TrialStatus.COMPLETED if future.done() else TrialStatus.RUNNING

    def stop_trial(
        self, trial_index: int, trial_metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        future = self._futures.pop(trial_index, None)
        if future is not None:
            future.cancel()
        return {}


class DaskMetric(IMetric):
    """An Ax metric (``IMetric``) read from :class:`DaskRunner`'s task of the
    trial: ``evaluate(parameters)[name]``, found by the key in the trial's
    metadata.

    Args:
        name: The metric's name (a key of ``evaluate``'s result).
        client: The ``distributed.Client`` the runner submits to.
    """

    def __init__(self, name: str, client: Any) -> None:
        super().__init__(name=name)
        self.client = client

    def fetch(
        self, trial_index: int, trial_metadata: Mapping[str, Any]
    ) -> tuple[int, float | tuple[float, float]]:
        from distributed import Future

        key = trial_metadata["dask_key"]
        result = Future(key, client=self.client).result()
        value = result[self.name]
        if isinstance(value, tuple | list):
            return 0, (float(value[0]), float(value[1]))
        return 0, float(value)


def _refuse_to_encode(node: Any) -> dict[str, Any]:
    raise TypeError(
        f"{type(node).__name__} holds sharded candidates (a live Dask cluster) and "
        "is not stored in Ax's JSON; save the experiment instead "
        "(ax.storage.json_store.save.save_experiment), and read certificates "
        "from the generation strategy (certificate_history(gs))."
    )


# The generator runs name the acquisition class: register it, so that the
# experiment is stored as usual (as ax_chaining.ax registers its own).
register_acquisition(ShardedCandidateSetAcquisition)
CORE_ENCODER_REGISTRY[ShardedCandidateSetNode] = _refuse_to_encode
CORE_ENCODER_REGISTRY[ShardedUniformNode] = _refuse_to_encode
