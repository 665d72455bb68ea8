r"""Generation nodes and strategies over a finite candidate set :math:`X`, and
selection over it in Ax's modular BoTorch generator. Only Ax's public
``GenerationNode.gen`` and ``Acquisition.optimize`` are overridden."""

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from ax.adapter.adapter_utils import extract_objective_weight_matrix
from ax.adapter.base import Adapter
from ax.core import Data, Experiment, GeneratorRun, ObservationFeatures
from ax.core.search_space import SearchSpaceDigest
from ax.core.trial_status import TrialStatus
from ax.core.types import TParameterization
from ax.exceptions.core import SearchSpaceExhausted, UnsupportedError
from ax.generation_strategy.external_generation_node import ExternalGenerationNode
from ax.generation_strategy.generation_node import GenerationNode
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generation_strategy.transition_criterion import TransitionCriterion
from ax.generators.torch.botorch_modular.acquisition import Acquisition
from ax.storage.json_store.decoder import generation_node_from_json, object_from_json
from ax.utils.common.constants import Keys
from botorch.acquisition.analytic import AnalyticAcquisitionFunction

from ax_chaining.acquisition import ChainingUCB
from ax_chaining.ax.candidates import (
    CandidateSetSpec,
    candidate_parameterizations,
    row_key,
)
from ax_chaining.ax.metadata import GEN_METADATA_KEY, recorded

_EVALUATED = (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED)
#: Trials whose arms are not evaluated and do not count as used.
DROPPED = (TrialStatus.FAILED, TrialStatus.ABANDONED)


def _arms(experiment: Experiment, keep: Callable[[TrialStatus], bool]) -> list:
    """The arms' parameters of the trials whose status ``keep`` accepts."""
    trials = [t for t in experiment.trials.values() if keep(t.status)]
    return [a.parameters for t in trials for a in t.arms]


class CandidateSetAcquisition(Acquisition):
    """Ax ``Acquisition`` over a finite candidate set: Ax's input constructor
    builds the function (and gets the candidates); ``optimize`` selects with Ax's
    ``select_from_candidate_set``. Ax's arguments, by keyword; ``options`` may add
    ``selectable`` (a boolean mask of the proposable candidates), ``record`` (called
    with this object once it has selected) and ``candidates`` (``N x d``, in Ax's
    model space) if ``botorch_acqf_options`` lacks them, as a node supplies them.
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
        self.candidates = acqf_options["candidates"] = torch.as_tensor(candidates)
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


class _SpecNode:
    """The candidate set of one search space, and JSON storage of the spec."""

    candidate_spec: CandidateSetSpec

    def _candidate_rows(self, experiment: Experiment) -> list[TParameterization]:
        opt = experiment.optimization_config  # None: the Client reports it itself
        if opt is not None and (opt.is_moo_problem or opt.outcome_constraints):
            raise UnsupportedError(
                "Chaining-UCB supports a single objective without outcome constraints "
                f"(its certificate is unconstrained), got {opt.objective} with "
                f"{[str(c) for c in opt.outcome_constraints]}. Scalarize, e.g. "
                "`configure_optimization(objective='a + 0.5 * b')`."
            )
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
        key = (repr(experiment.search_space), spec.seed)
        if getattr(self, "_rows_key", None) != key:
            self._rows = candidate_parameterizations(experiment.search_space, spec)
            self._names = list(experiment.search_space.parameters)
            self._keys = [row_key(r, self._names) for r in self._rows]
            self._rows_key = key
        return self._rows

    def _count(self, parameterizations: Iterable[Mapping[str, Any]]) -> np.ndarray:
        """How often each candidate occurs in ``parameterizations``."""
        counts = Counter(row_key(p, self._names) for p in parameterizations)
        return np.array([counts[k] for k in self._keys], dtype=np.int64)

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

    @classmethod
    def deserialize_init_args(
        cls, args: dict[str, Any], **registries: Any
    ) -> dict[str, Any]:
        # Ax's own GenerationNode decoding, re-wrapped in this class.
        args = dict(args)
        spec = object_from_json(args.pop("candidate_spec"), **registries)
        node = generation_node_from_json(generation_node_json=args, **registries)
        kwargs = {"name": node.name, "transition_criteria": node.transition_criteria}
        if cls is CandidateSetNode:
            keys = ("generator_specs", "pausing_criteria", "should_deduplicate")
            kwargs |= {k: getattr(node, k) for k in keys}
            kwargs["previous_node_name"] = args.get("previous_node_name")
        return {**kwargs, "candidate_spec": spec}


class UniformCandidateNode(_SpecNode, ExternalGenerationNode):
    """Initialization: the next candidate of a seeded permutation of :math:`X`
    not yet in a trial (failed or abandoned ones do not count), then the least
    used (or ``SearchSpaceExhausted`` with ``exclude_evaluated=True``)."""

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
        """Ax's ``gen``, keeping ``fixed_features`` for :meth:`get_next_candidate`."""
        self._fixed = kwargs.get("fixed_features")
        return super().gen(experiment=experiment, **kwargs)

    def update_generator_state(self, experiment: Experiment, data: Data) -> None:
        rows = self._candidate_rows(experiment)  # first: it may resolve the seed
        rng = np.random.default_rng([self.candidate_spec.seed, 1])
        self._order = rng.permutation(len(rows))
        self._used = self._count(_arms(experiment, lambda s: s not in DROPPED))

    def get_next_candidate(
        self, pending_parameters: list[TParameterization]
    ) -> TParameterization:
        use = self._used + self._count(pending_parameters)
        allowed = self._matches(self._fixed)
        best = min((int(i) for i in self._order if allowed[i]), key=lambda i: use[i])
        if use[best] > 0 and self.candidate_spec.exclude_evaluated:
            msg = f"All {allowed.sum()} candidates are used, `exclude_evaluated=True`"
            raise SearchSpaceExhausted(f"{msg}: init_trials exceeds the candidate set.")
        return dict(self._rows[best])


class CandidateSetNode(_SpecNode, GenerationNode):
    """A ``GenerationNode`` that optimizes over a finite candidate set, built by
    :func:`candidate_set_node`: ``GenerationNode``'s arguments and the spec."""

    def __init__(
        self,
        name: str,
        generator_specs: list[GeneratorSpec],
        candidate_spec: CandidateSetSpec,
        transition_criteria: Sequence[TransitionCriterion] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name, generator_specs, transition_criteria, **kwargs)
        self.candidate_spec = candidate_spec

    def gen(  # type: ignore[override]
        self, *, experiment: Experiment, skip_fit: bool = False, **kwargs: Any
    ) -> GeneratorRun | None:
        """Ax's ``gen``, the candidates and mask in ``model_gen_options``; records."""
        rows, spec = self._candidate_rows(experiment), self.candidate_spec
        if not skip_fit:
            self.generator_spec.fit(experiment=experiment, data=kwargs.get("data"))
        adapter = self.generator_spec.fitted_adapter
        evaluated = self._count(_arms(experiment, lambda s: s in _EVALUATED)) > 0
        mask = self._matches(kwargs.get("fixed_features"))
        if spec.exclude_evaluated and not (mask := mask & ~evaluated).any():
            msg = f"All {len(rows)} candidates are evaluated, `exclude_evaluated=True`."
            raise SearchSpaceExhausted(msg)
        if spec.exclude_pending:
            pending = (kwargs.get("pending_observations") or {}).values()
            keep = mask & (self._count(f.parameters for fs in pending for f in fs) == 0)
            # Pending points are conditioned on anyway (GP-BUCB); excluding them
            # is a convenience that must not make generation fail.
            mask = keep if keep.any() else mask
        own = self.generator_spec.generator_gen_kwargs.get("model_gen_options")
        options = dict(kwargs.pop("model_gen_options", None) or own or {})
        acqf, acq = Keys.ACQF_KWARGS.value, Keys.AX_ACQUISITION_KWARGS.value
        X, chosen = self.model_space_candidates(adapter, rows), []
        options[acqf] = {**options.get(acqf, {}), "candidates": X}
        # Ax deep-copies options; `deepcopy` keeps a function (here list.append).
        selectable = {"selectable": torch.tensor(mask), "record": chosen.append}
        options[acq] = {**options.get(acq, {}), **selectable}
        gr = super().gen(
            experiment=experiment, skip_fit=True, model_gen_options=options, **kwargs
        )
        if gr is not None:
            meta = {"seed": spec.seed, "num_candidates": len(rows)}
            meta["num_selectable"] = int(mask.sum())
            meta.update(self._step_record(chosen, adapter, experiment, evaluated))
            # `gen_metadata` is the run's own dict (Ax adds "trial_type" the same
            # way); pinned in tests/test_ax_contract.py.
            gr.gen_metadata[GEN_METADATA_KEY] = meta  # type: ignore[index]
        return gr

    def model_space_candidates(
        self, adapter: Adapter, rows: list[TParameterization]
    ) -> torch.Tensor:
        """The candidate rows in the adapter's model space."""
        feats = [ObservationFeatures(parameters=dict(r)) for r in rows]
        return adapter.transform_observation_features(feats)

    def _step_record(
        self, chosen: list, adapter: Adapter, experiment: Experiment, evaluated: Any
    ) -> dict[str, Any]:
        """JSON-safe facts of the step, and the certificate among the evaluated."""
        if not chosen:
            return {}
        acqf, weights = chosen[-1].acqf, chosen[-1].objective_weights
        meta: dict[str, Any] = {"acquisition_function": type(acqf).__name__}
        casts = {"t": int, "delta": float}
        meta |= {k: f(getattr(acqf, k)) for k, f in casts.items() if hasattr(acqf, k)}
        if not isinstance(acqf, ChainingUCB) or not evaluated.any():
            return meta
        cert, factor = acqf.certificate(among=torch.as_tensor(evaluated)), None
        opt = experiment.optimization_config
        if opt is not None and weights is not None:
            # Differences of the model's objective sum_i w_i y_i (y_i standardized
            # by Ax's StandardizeY, scales s_i) are the user's sum_i c_i (s_i y_i +
            # m_i) ones times |c_i s_i / w_i|, when that is one number for all i.
            outcomes = list(adapter.outcomes)
            c = np.ravel(extract_objective_weight_matrix(opt.objective, outcomes))
            w = weights.detach().cpu().double().numpy().ravel()
            ystd = getattr(adapter.transforms.get("StandardizeY"), "Ystd", {})
            s = np.array([float(ystd.get(o, 1.0)) for o in outcomes])
            r = np.abs(c[w != 0] * s[w != 0] / w[w != 0])
            if len(r) > 0 and np.allclose(r, r[0], rtol=1e-6, atol=0.0):
                factor = float(r[0])
        # Ax's model units, except "bound" (the objective's units, None without a
        # single scale) and "parameters" (the user's space).
        meta["certificate"] = {
            **cert.as_dict(),
            "bound_model_units": float(cert.bound),
            "bound": None if factor is None else float(cert.bound) * factor,
            "objective_scale": factor,
            "parameters": dict(self._rows[int(cert.index)]),
        }
        return meta
