"""Generation nodes and strategies over a finite candidate set: one builder,
:func:`candidate_set_strategy`, and thin wrappers for Chaining-UCB, GP-UCB and
BoTorch's stock UCB, so that a comparison is one line each."""

import inspect
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from ax.adapter.registry import Generators
from ax.core.trial_status import TrialStatus
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generation_strategy.transition_criterion import MinTrials, TransitionCriterion
from ax.generators.torch.botorch_modular.surrogate import SurrogateSpec
from botorch.acquisition.acquisition import AcquisitionFunction
from botorch.acquisition.logei import qLogNoisyExpectedImprovement

from ax_chaining.acquisition import GPUCB, UCB, ChainingUCB
from ax_chaining.ax.candidates import (
    CandidateSetSpec,
    CandidateTable,
)
from ax_chaining.ax.nodes import (
    DROPPED,
    CandidateSetAcquisition,
    CandidateSetNode,
    SobolCandidateNode,
    UniformCandidateNode,
    takes_candidates,
)
from ax_chaining.ax.options import (
    checked_calibration,
    checked_min_observations,
    checked_options,
    checked_scale_level,
    stop_rule_of,
)
from ax_chaining.certificate.certify import (
    DEFAULT_SCALE_LEVEL,
    LOO_MIN_OBSERVATIONS,
)
from ax_chaining.certificate.schedule import EVERY_STEP, CheckSchedule
from ax_chaining.certificate.tails import Calibration
from ax_chaining.chaining import BonusShape
from ax_chaining.checks import check_choice, check_int, type_error
from ax_chaining.kernels import registered_fingerprints, registered_gram

# Acquisition arguments the node sets itself (or Ax supplies).
_RESERVED = {"self", "model", "candidates", "t", "X_pending"}
_RESERVED |= {"posterior_transform", "maximize"}


def _is_sharded(candidates: Any) -> bool:
    """Whether ``candidates`` are :class:`~ax_chaining.distributed.ShardedCandidates`.

    Sharded candidates exist only once their module is imported, so the test
    reads it from ``sys.modules``: this layer imports Dask only for them (the
    distributed package is an optional extra).
    """
    module = sys.modules.get("ax_chaining.distributed.candidates")
    return module is not None and isinstance(candidates, module.ShardedCandidates)


def _pop_spec(kwargs: dict[str, Any], candidates: Any = None) -> CandidateSetSpec:
    """A spec of the ``CandidateSetSpec`` fields popped from ``kwargs``, seed None."""
    fields = CandidateSetSpec.__dataclass_fields__.keys() & kwargs.keys()
    given = {k: kwargs.pop(k) for k in fields}
    return CandidateSetSpec(**{"candidates": candidates, "seed": None, **given})


def _num_items(surrogate_spec: SurrogateSpec | None) -> int | None:
    """The item count of an item-index kernel in ``surrogate_spec``, if any."""
    for config in surrogate_spec.model_configs if surrogate_spec else []:
        options = config.covar_module_options or {}
        if (gram := options.get("gram")) is not None:
            found = registered_gram(gram) if isinstance(gram, str) else gram
            return int(found.shape[0])
        if (library := options.get("library")) is not None:
            found = (
                registered_fingerprints(library)
                if isinstance(library, str)
                else library
            )
            return len(found)
    return None


def candidate_set_node(
    botorch_acqf_class: type[AcquisitionFunction],
    botorch_acqf_options: Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
    candidate_spec: CandidateSetSpec | None = None,
    surrogate_spec: SurrogateSpec | None = None,
    torch_device: str | torch.device | None = None,
    transition_criteria: Sequence[TransitionCriterion] | None = None,
    stop_tolerance: float | None = None,
    certificate_schedule: CheckSchedule | None = EVERY_STEP,
    certificate_calibration: Calibration = "loo",
    certificate_min_observations: int = LOO_MIN_OBSERVATIONS,
    certificate_scale_level: float | None = DEFAULT_SCALE_LEVEL,
) -> CandidateSetNode:
    """A :class:`CandidateSetNode` running ``botorch_acqf_class`` over :math:`X`.

    Args:
        botorch_acqf_class: A single-objective BoTorch acquisition function
            class that scores a set of points, with a registered input
            constructor: ``ChainingUCB``, ``GPUCB``, ``UCB``, or BoTorch's own,
            analytic or Monte Carlo (``LogExpectedImprovement``,
            ``qLogNoisyExpectedImprovement``, ``qUpperConfidenceBound``, ...).
            One-shot (``qKnowledgeGradient``) and multi-objective classes are
            refused here.
        botorch_acqf_options: Its options, validated here.
        name: Default the class name.
        candidate_spec: Default ``CandidateSetSpec(seed=None)``.
        surrogate_spec: Ax's (default: its GP).
        torch_device: Ax's.
        transition_criteria: Ax's.
        stop_tolerance: Stop (:class:`~ax_chaining.ax.stopping.CertifiedStop`)
            once the current certified regret bound, in the objective's units,
            is at most this.
        certificate_schedule: The steps at which the certificate is checked
            and recorded, delta being spent on those alone
            (:class:`~ax_chaining.certificate.schedule.CheckSchedule`; default every
            step; e.g. ``CheckSchedule("geometric", start=10)`` checks after
            10, 20, 40, ... observations, each with a larger share). None
            records no certificate (no stopping on it; a step then costs the
            acquisition alone).
        certificate_calibration: The calibration of the recorded certificates
            (and so of ``stop_tolerance``'s rule): ``"loo"`` (default: the
            fitted model's leave-one-out check, Student-t tails), ``"none"``
            (the fitted model taken as true), ``"forecast"`` (a scale and
            tails fitted to the residuals of every forecast the loop recorded
            before the step) or ``"audit"`` (of the audit queries' forecasts
            alone: ``CandidateSetSpec.audit_every``); with too few residuals
            the last two act as ``"loo"``
            (:mod:`ax_chaining.certificate.residuals`; what each guarantees:
            the certificate page of the docs). The trials do not depend on it.
        certificate_min_observations: The fewest observations from which the
            ``"loo"`` check certifies (default
            :data:`~ax_chaining.certificate.calibration.LOO_MIN_OBSERVATIONS`;
            before, the recorded certificate is refused and says why).
        certificate_scale_level: The ``"loo"`` check's scale: a level (its
            upper confidence limit; default 0.05, chosen on the documentation
            page "Certificate validity") or None (its point estimate: narrower,
            the default before, violated more often on FreeSolv).

    Example:
        >>> node = candidate_set_node(ChainingUCB, {"delta": 0.1})
    """
    takes_candidates(botorch_acqf_class)  # a class Ax can build, or a clear error
    if surrogate_spec is not None and not isinstance(surrogate_spec, SurrogateSpec):
        raise type_error("surrogate_spec", "an ax SurrogateSpec", surrogate_spec)
    options = botorch_acqf_options if botorch_acqf_options is not None else {}
    if not isinstance(options, Mapping):
        raise type_error("botorch_acqf_options", "a mapping", options)
    allowed = set(inspect.signature(botorch_acqf_class.__init__).parameters)
    if unknown := sorted(set(options) - (allowed := allowed - _RESERVED)):
        msg = f"option(s) {unknown}; expected some of {sorted(allowed)}."
        raise TypeError(f"Unknown {botorch_acqf_class.__name__} {msg}")
    kwargs = {
        "botorch_acqf_class": botorch_acqf_class,
        "botorch_acqf_options": checked_options(botorch_acqf_class, options),
        "acquisition_class": CandidateSetAcquisition,
        # Refit from scratch: a suggestion is then a function of the data and
        # seeds alone, so a reloaded client suggests the same. Ax 1.3 builds a
        # new surrogate at every step anyway (a loop gave the same trials and
        # seconds with True, ESOL, 2 runs x 15 queries); this keeps Ax's
        # cross-validation, which would start from the fitted state, from
        # scratch too.
        "warm_start_refit": False,
        "surrogate_spec": surrogate_spec,
        "torch_device": None if torch_device is None else torch.device(torch_device),
    }
    name = name or botorch_acqf_class.__name__
    spec = candidate_spec or CandidateSetSpec(seed=None)
    if (items := _num_items(surrogate_spec)) is not None:
        spec.num_items = items
    stop_rule = stop_rule_of(name, stop_tolerance, certificate_schedule)
    return CandidateSetNode(
        name=name,
        generator_specs=[GeneratorSpec(Generators.BOTORCH_MODULAR, kwargs)],
        candidate_spec=spec,
        transition_criteria=transition_criteria,
        stop_rule=stop_rule,
        certificate_schedule=certificate_schedule,
        certificate_calibration=checked_calibration(certificate_calibration),
        certificate_min_observations=checked_min_observations(
            certificate_min_observations
        ),
        certificate_scale_level=checked_scale_level(certificate_scale_level),
    )


def candidate_set_strategy(
    botorch_acqf_class: type[AcquisitionFunction],
    botorch_acqf_options: Mapping[str, Any] | None = None,
    init_trials: int = 10,
    candidates: CandidateTable | None = None,
    *,
    init: Literal["uniform", "sobol"] = "uniform",
    name: str | None = None,
    **kwargs: Any,
) -> GenerationStrategy:
    r"""Initialization, then ``botorch_acqf_class`` over :math:`X`, as a strategy
    (every argument is checked here, before any trial).

    Initialization leaves after ``init_trials`` trials, once one of them has
    data; failed and abandoned trials do not count (as in Ax's default
    strategy).

    Args:
        botorch_acqf_class, botorch_acqf_options: As in :func:`candidate_set_node`.
        init_trials: Initial trials, uniform over :math:`X` (at most one per row
            of a table) or Ax's Sobol; 0 for none (e.g. with ``attach_trial``).
        candidates: Optional table (DataFrame or list of dicts); default the
            whole discrete space or a fixed Sobol design. Or a fingerprint
            library sharded over a Dask cluster
            (:class:`~ax_chaining.distributed.ShardedCandidates`): then
            :func:`~ax_chaining.distributed.ax.sharded_candidate_set_strategy`.
        init, name: ``"uniform"`` or ``"sobol"``; default name: the class name.
        kwargs: :class:`CandidateSetSpec` fields (``seed`` defaults to None: the
            caller's seed), and :func:`candidate_set_node` arguments.

    Example:
        >>> gs = candidate_set_strategy(GPUCB, {"delta": 0.1}, init_trials=5)
    """
    if _is_sharded(candidates):
        from ax_chaining.distributed.ax import sharded_candidate_set_strategy

        return sharded_candidate_set_strategy(
            candidates,
            botorch_acqf_class,
            botorch_acqf_options,
            init_trials,
            init=init,
            name=name,
            **kwargs,
        )
    spec = _pop_spec(kwargs, candidates)
    check_int("init_trials", init_trials, 0)
    if spec.candidates is not None and init_trials > len(spec.candidates):
        rows = f"the {len(spec.candidates)} rows of `candidates`"
        raise ValueError(f"`init_trials`={init_trials} exceeds {rows}.")
    if check_choice("init", init, ("uniform", "sobol")) == "sobol" and spec.candidates:
        raise ValueError("`init='sobol'` ignores `candidates`; use init='uniform'.")
    main = candidate_set_node(
        botorch_acqf_class, botorch_acqf_options, candidate_spec=spec, **kwargs
    )
    name = name or botorch_acqf_class.__name__
    if init_trials == 0:
        return GenerationStrategy(name=name, nodes=[main])
    # As Ax's default strategy: leave the initialization after `init_trials`
    # trials (failed/abandoned not counted) once one of them has data.
    common = {"transition_to": main.name, "use_all_trials_in_exp": True}
    with_data = {"only_in_statuses": [TrialStatus.COMPLETED], **common}
    criteria = [
        MinTrials(threshold=init_trials, not_in_statuses=[*DROPPED], **common),
        MinTrials(threshold=1, count_only_trials_with_data=True, **with_data),
    ]
    # Either node checks the experiment against `spec` (the objective, the
    # item-index parameter, the candidate set) before its first trial.
    if init == "uniform":
        first = UniformCandidateNode("UniformCandidates", spec, criteria)
    else:
        first = SobolCandidateNode("Sobol", spec, criteria)
    return GenerationStrategy(name=name, nodes=[first, main])


def _chaining_options(
    delta: float,
    scale: float | None,
    bonus: BonusShape,
    engine_options: Mapping[str, Any] | None,
) -> dict[str, Any]:
    if engine_options is not None and not isinstance(engine_options, Mapping):
        raise type_error("engine_options", "a mapping", engine_options)
    if both := sorted({"delta", "scale", "bonus"} & set(engine_options or {})):
        raise TypeError(f"Pass {both} as arguments, not in `engine_options`.")
    given = {"delta": delta, "scale": scale, "bonus": bonus, **(engine_options or {})}
    return {k: v for k, v in given.items() if v is not None}


def chaining_generation_strategy(
    init_trials: int = 10,
    delta: float = 0.05,
    candidates: CandidateTable | None = None,
    *,
    scale: float | None = None,
    bonus: BonusShape = "paper",
    engine_options: Mapping[str, Any] | None = None,
    stop_tolerance: float | None = None,
    name: str = "Chaining-UCB",
    **kwargs: Any,
) -> GenerationStrategy:
    r"""Initialization, then Chaining-UCB, as an Ax ``GenerationStrategy``.

    Args:
        init_trials, candidates, name, kwargs: See :func:`candidate_set_strategy`
            (``candidates`` may be sharded over a Dask cluster).
        delta: Confidence parameter :math:`\delta \in (0, 1)`.
        scale: Radius of the first chaining level (see ``ChainingUCB``).
        bonus: ``"paper"`` (Algorithm 1's staircase, default) or
            ``"continuous"`` (its continuous envelope; see ``ChainingUCB``),
            stored with the node.
        engine_options: Further ``ChainingUCB`` keyword arguments, checked here.
        stop_tolerance: Stop once the current certified regret bound (objective
            units) is at most this (:class:`~ax_chaining.ax.stopping.CertifiedStop`).

    Example:
        >>> client.set_generation_strategy(chaining_generation_strategy(init_trials=10))
    """
    opts = _chaining_options(delta, scale, bonus, engine_options)
    kwargs.update(name=name, stop_tolerance=stop_tolerance)
    return candidate_set_strategy(ChainingUCB, opts, init_trials, candidates, **kwargs)


def ucb_generation_strategy(
    init_trials: int = 10,
    beta: float = 0.2,
    candidates: CandidateTable | None = None,
    *,
    name: str = "UCB",
    **kwargs: Any,
) -> GenerationStrategy:
    """As :func:`chaining_generation_strategy`, with BoTorch's stock
    ``UpperConfidenceBound`` and its ``beta`` (default 0.2) in place of ``delta``.

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
    r"""As :func:`chaining_generation_strategy`, with GP-UCB (:math:`\beta_t` of
    Srinivas et al.).

    Example:
        >>> client.set_generation_strategy(gp_ucb_generation_strategy(seed=0))
    """
    return candidate_set_strategy(
        GPUCB, {"delta": delta}, init_trials, candidates, name=name, **kwargs
    )


def qlognei_generation_strategy(
    init_trials: int = 10,
    candidates: CandidateTable | None = None,
    *,
    name: str = "qLogNEI",
    **kwargs: Any,
) -> GenerationStrategy:
    """Ax's default acquisition over the candidate set: initialization, then
    BoTorch's ``qLogNoisyExpectedImprovement`` on Ax's default GP, proposing
    only candidates (Ax's own default strategy proposes points off a table).

    ``init="sobol"`` starts with Ax's Sobol as Ax's default does (for search
    spaces without a table); every step records a certificate, as for
    Chaining-UCB.

    Example:
        >>> client.set_generation_strategy(qlognei_generation_strategy(5, table))
    """
    return candidate_set_strategy(
        qLogNoisyExpectedImprovement, None, init_trials, candidates, name=name, **kwargs
    )


def chaining_ucb_node(
    name: str = "ChainingUCB",
    *,
    delta: float = 0.05,
    scale: float | None = None,
    bonus: BonusShape = "paper",
    engine_options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> CandidateSetNode:
    r"""A node running Chaining-UCB over a finite candidate set.

    Args:
        name, kwargs: As in :func:`candidate_set_node` (or spec fields).
        delta, scale, bonus, engine_options: As in
            :func:`chaining_generation_strategy`.

    Example:
        >>> node = chaining_ucb_node(delta=0.05, num_candidates=2048, seed=0)
    """
    if "candidate_spec" not in kwargs:
        kwargs["candidate_spec"] = _pop_spec(kwargs, kwargs.pop("candidates", None))
    options = _chaining_options(delta, scale, bonus, engine_options)
    return candidate_set_node(ChainingUCB, options, name=name, **kwargs)
