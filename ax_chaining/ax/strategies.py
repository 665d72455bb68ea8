"""Generation nodes and strategies over a finite candidate set: one builder,
:func:`candidate_set_strategy`, and wrappers for Chaining-UCB, GP-UCB, UCB and
qLogNEI. Every argument is checked here, before any trial."""

import inspect
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

from ax_chaining.acquisition import GPUCB, UCB, ChainingOptions, ChainingUCB
from ax_chaining.ax.candidates import DROPPED, CandidateSetSpec, CandidateTable
from ax_chaining.ax.nodes import (
    CandidateSetAcquisition,
    CandidateSetNode,
    SobolCandidateNode,
    UniformCandidateNode,
    takes_candidates,
)
from ax_chaining.certificate.certify import CertificateOptions
from ax_chaining.certificate.schedule import DEFAULT_DELTA
from ax_chaining.chaining import BonusShape
from ax_chaining.checks import (
    check_choice,
    check_delta,
    check_float,
    check_int,
    type_error,
)
from ax_chaining.kernels import registered_fingerprints, registered_gram

# Acquisition arguments the node sets itself (or Ax supplies).
_RESERVED = {"self", "model", "candidates", "t", "X_pending"}
_RESERVED |= {"posterior_transform", "maximize"}


def _checked_options(
    acqf_class: type[AcquisitionFunction], options: Any
) -> dict[str, Any]:
    """``options`` of ``acqf_class``, names and this package's values checked."""
    options = {} if options is None else options
    if not isinstance(options, Mapping):
        raise type_error("botorch_acqf_options", "a mapping", options)
    allowed = set(inspect.signature(acqf_class.__init__).parameters) - _RESERVED
    if unknown := sorted(set(options) - allowed):
        msg = f"option(s) {unknown}; expected some of {sorted(allowed)}."
        raise TypeError(f"Unknown {acqf_class.__name__} {msg}")
    out = dict(options)
    if issubclass(acqf_class, ChainingUCB):
        checked = ChainingOptions(**out).as_dict()  # raises on a bad value, naming it
        return {k: checked[k] for k in out}
    if "delta" in out:
        out["delta"] = check_delta(out["delta"])
    if "beta" in out:
        out["beta"] = check_float("beta", out["beta"], (lambda v: v >= 0, ">= 0"))
    return out


def _num_items(surrogate_spec: SurrogateSpec | None, sharded: Any) -> int | None:
    """The item count of an item-index kernel or of sharded candidates."""
    if sharded is not None:
        if sharded.library is None or sharded.normalized_inputs:
            raise ValueError(
                "Ax's sharded strategy needs `candidates` = ShardedCandidates of a "
                "fingerprint library with normalized_inputs=False: Ax gives the "
                "model the item index itself, which its input transform normalizes."
            )
        return sharded.n
    for config in surrogate_spec.model_configs if surrogate_spec else []:
        options = config.covar_module_options or {}
        if (gram := options.get("gram")) is not None:
            found = registered_gram(gram) if isinstance(gram, str) else gram
            return int(found.shape[0])
        if (library := options.get("library")) is not None:
            if isinstance(library, str):
                library = registered_fingerprints(library)
            return len(library)
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
    certificate: CertificateOptions | None = CertificateOptions(),  # noqa: B008
    sharded: Any = None,
) -> CandidateSetNode:
    """A :class:`~ax_chaining.ax.nodes.CandidateSetNode` running ``botorch_acqf_class``.

    Example:
        >>> node = candidate_set_node(ChainingUCB, {"delta": 0.1})

    Args:
        botorch_acqf_class: A single-objective BoTorch acquisition function
            class with a registered input constructor (``ChainingUCB``,
            ``GPUCB``, ``qLogNoisyExpectedImprovement``, ...).
        botorch_acqf_options: Its options, checked here.
        name: Default the class name.
        candidate_spec: Default ``CandidateSetSpec(seed=None)``.
        surrogate_spec, torch_device, transition_criteria: Ax's.
        stop_tolerance: Stop (:class:`~ax_chaining.ax.stopping.CertifiedStop`)
            once the certified regret bound (objective's units) is at most this.
        certificate: Options of the certificate each step records among the
            evaluated candidates (``CertificateOptions``); None records none.
        sharded: :class:`~ax_chaining.distributed.ShardedCandidates` of a
            fingerprint library (``ChainingUCB`` only): the step runs on them.
    """
    takes_candidates(botorch_acqf_class)  # a class Ax can build, or a clear error
    if surrogate_spec is not None and not isinstance(surrogate_spec, SurrogateSpec):
        raise type_error("surrogate_spec", "an ax SurrogateSpec", surrogate_spec)
    if certificate is not None and not isinstance(certificate, CertificateOptions):
        raise type_error("certificate", "a CertificateOptions or None", certificate)
    if stop_tolerance is not None:
        rule = (lambda v: v > 0, "a finite positive float")
        stop_tolerance = check_float(
            "stop_tolerance", stop_tolerance, rule, "a positive float"
        )
        if certificate is None:
            raise ValueError(
                "`stop_tolerance` stops on the recorded certificate, and "
                "`certificate=None` records none; pass CertificateOptions()."
            )
    if sharded is not None and not issubclass(botorch_acqf_class, ChainingUCB):
        raise ValueError(
            "`botorch_acqf_class` must be ChainingUCB over sharded candidates (the "
            f"one acquisition whose step is distributed), got "
            f"{botorch_acqf_class.__name__}."
        )
    options = _checked_options(botorch_acqf_class, botorch_acqf_options)
    kwargs = {
        "botorch_acqf_class": botorch_acqf_class,
        "botorch_acqf_options": options,
        "acquisition_class": CandidateSetAcquisition,
        # Refit from scratch, so that a reloaded client suggests the same.
        "warm_start_refit": False,
        "surrogate_spec": surrogate_spec,
        "torch_device": None if torch_device is None else torch.device(torch_device),
    }
    spec = candidate_spec or CandidateSetSpec(seed=None)
    if (items := _num_items(surrogate_spec, sharded)) is not None:
        spec.num_items = items
    return CandidateSetNode(
        name=name or botorch_acqf_class.__name__,
        generator_specs=[GeneratorSpec(Generators.BOTORCH_MODULAR, kwargs)],
        candidate_spec=spec,
        transition_criteria=transition_criteria,
        stop_tolerance=stop_tolerance,
        certificate=certificate,
        sharded=sharded,
    )


def candidate_set_strategy(
    botorch_acqf_class: type[AcquisitionFunction],
    botorch_acqf_options: Mapping[str, Any] | None = None,
    init_trials: int = 10,
    candidates: CandidateTable | Any = None,
    *,
    init: Literal["uniform", "sobol"] = "uniform",
    name: str | None = None,
    **kwargs: Any,
) -> GenerationStrategy:
    r"""Initialization, then ``botorch_acqf_class`` over the candidate set, as
    a strategy. Initialization leaves after ``init_trials`` trials (failed and
    abandoned ones not counted) once one of them has data.

    Example:
        >>> gs = candidate_set_strategy(GPUCB, {"delta": 0.1}, init_trials=5)

    Args:
        botorch_acqf_class, botorch_acqf_options: As in :func:`candidate_set_node`.
        init_trials: Initial trials, uniform over the candidates or Ax's Sobol;
            0 for none (e.g. with ``attach_trial``).
        candidates: A table (DataFrame or list of dicts; default the whole
            discrete space or a fixed Sobol design), or
            :class:`~ax_chaining.distributed.ShardedCandidates`.
        name: Default the class name.
        kwargs: :class:`~ax_chaining.ax.candidates.CandidateSetSpec` fields
            (``seed`` defaults to None: the caller's seed), and
            :func:`candidate_set_node` arguments.
    """
    sharded = candidates if hasattr(candidates, "chaining_store") else None
    fields = CandidateSetSpec.__dataclass_fields__.keys() & kwargs.keys()
    spec_args = {k: kwargs.pop(k) for k in fields}
    table = None if sharded is not None else candidates
    spec = CandidateSetSpec(**{"candidates": table, "seed": None, **spec_args})
    check_int("init_trials", init_trials, 0)
    rows = sharded.n if sharded is not None else len(spec.candidates or ())
    if (sharded is not None or spec.candidates is not None) and init_trials > rows:
        what = "sharded candidates" if sharded is not None else "rows of `candidates`"
        raise ValueError(f"`init_trials`={init_trials} exceeds the {rows} {what}.")
    check_choice("init", init, ("uniform", "sobol"))
    if init == "sobol" and (spec.candidates or sharded is not None):
        raise ValueError("`init='sobol'` ignores `candidates`; use init='uniform'.")
    main = candidate_set_node(
        botorch_acqf_class,
        botorch_acqf_options,
        candidate_spec=spec,
        sharded=sharded,
        **kwargs,
    )
    name = name or botorch_acqf_class.__name__
    if init_trials == 0:
        return GenerationStrategy(name=name, nodes=[main])
    common = {"transition_to": main.name, "use_all_trials_in_exp": True}
    with_data = {"only_in_statuses": [TrialStatus.COMPLETED], **common}
    criteria = [
        MinTrials(threshold=init_trials, not_in_statuses=[*DROPPED], **common),
        MinTrials(threshold=1, count_only_trials_with_data=True, **with_data),
    ]
    # Either node checks the experiment against `spec` before its first trial.
    if init == "uniform":
        first: Any = UniformCandidateNode("UniformCandidates", spec, criteria)
    else:
        first = SobolCandidateNode("Sobol", spec, criteria)
    return GenerationStrategy(name=name, nodes=[first, main])


def chaining_generation_strategy(
    init_trials: int = 10,
    delta: float = DEFAULT_DELTA,
    candidates: CandidateTable | Any = None,
    *,
    scale: float | None = None,
    bonus: BonusShape = "paper",
    engine_options: Mapping[str, Any] | None = None,
    name: str = "Chaining-UCB",
    **kwargs: Any,
) -> GenerationStrategy:
    r"""Initialization, then Chaining-UCB, as an Ax ``GenerationStrategy``.

    Example:
        >>> client.set_generation_strategy(chaining_generation_strategy(init_trials=10))

    Args:
        init_trials, candidates, name, kwargs: See :func:`candidate_set_strategy`.
        delta: Confidence parameter :math:`\delta \in (0, 1)`.
        scale, bonus: ``ChainingUCB``'s.
        engine_options: Further ``ChainingUCB`` keyword arguments.
    """
    if engine_options is not None and not isinstance(engine_options, Mapping):
        raise type_error("engine_options", "a mapping", engine_options)
    if both := sorted({"delta", "scale", "bonus"} & set(engine_options or {})):
        raise TypeError(f"Pass {both} as arguments, not in `engine_options`.")
    given = {"delta": delta, "scale": scale, "bonus": bonus, **(engine_options or {})}
    options = {k: v for k, v in given.items() if v is not None}
    return candidate_set_strategy(
        ChainingUCB, options, init_trials, candidates, name=name, **kwargs
    )


def ucb_generation_strategy(
    init_trials: int = 10,
    beta: float = 0.2,
    candidates: CandidateTable | None = None,
    *,
    name: str = "UCB",
    **kwargs: Any,
) -> GenerationStrategy:
    """As :func:`chaining_generation_strategy`, with BoTorch's stock
    ``UpperConfidenceBound`` and its ``beta`` (default 0.2).

    Example:
        >>> client.set_generation_strategy(ucb_generation_strategy(seed=0))
    """
    return candidate_set_strategy(
        UCB, {"beta": beta}, init_trials, candidates, name=name, **kwargs
    )


def gp_ucb_generation_strategy(
    init_trials: int = 10,
    delta: float = DEFAULT_DELTA,
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
    """As :func:`chaining_generation_strategy`, with Ax's default acquisition,
    BoTorch's ``qLogNoisyExpectedImprovement``.

    Example:
        >>> client.set_generation_strategy(qlognei_generation_strategy(5, table))
    """
    return candidate_set_strategy(
        qLogNoisyExpectedImprovement, None, init_trials, candidates, name=name, **kwargs
    )
