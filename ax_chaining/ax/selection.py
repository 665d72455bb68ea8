"""Selection over the candidate set inside Ax's modular BoTorch generator.

:class:`CandidateSetAcquisition` is the ``acquisition_class`` of the candidate-set
nodes. Ax builds the BoTorch acquisition function with its own code, through the
input constructor registered for its class, which receives the candidate set in
``botorch_acqf_options``; this class overrides one public method,
``Acquisition.optimize``, to select through Ax's public
``select_from_candidate_set`` from the candidates the node's mask allows.
"""

from __future__ import annotations

from typing import Any

import torch
from ax.exceptions.core import SearchSpaceExhausted, UnsupportedError
from ax.generators.torch.botorch_modular.acquisition import Acquisition
from botorch.acquisition.analytic import (
    AnalyticAcquisitionFunction,
    UpperConfidenceBound,
)
from botorch.acquisition.input_constructors import acqf_input_constructor
from botorch.acquisition.objective import PosteriorTransform
from botorch.models.model import Model
from torch import Tensor


class UCB(UpperConfidenceBound):
    r"""BoTorch's stock ``UpperConfidenceBound``, :math:`\mu + \sqrt{\beta}\sigma`.

    Identical to its parent, with an input constructor that accepts (and
    ignores) the ``X_pending`` Ax passes to every class and the candidate set.

    Example:
        >>> acqf = UCB(model, beta=0.2)
    """


@acqf_input_constructor(UCB)
def construct_inputs_ucb(
    model: Model,
    beta: float = 0.2,
    posterior_transform: PosteriorTransform | None = None,
    maximize: bool = True,
    X_pending: Tensor | None = None,
    candidates: Tensor | None = None,
) -> dict[str, Any]:
    """Kwargs for :class:`UCB`; ``X_pending`` and ``candidates`` are unused."""
    return {
        "model": model,
        "beta": beta,
        "posterior_transform": posterior_transform,
        "maximize": maximize,
    }


class GenerationRecord:
    """Receives the :class:`CandidateSetAcquisition` that selected, so the node
    can record the certificate without reading Ax's private generator state. Ax
    deep-copies generation options: a copy of a record is the record itself."""

    def __init__(self) -> None:
        self.acquisition: CandidateSetAcquisition | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> GenerationRecord:
        return self


class CandidateSetAcquisition(Acquisition):
    """Ax ``Acquisition`` that maximizes over a finite candidate set.

    Options (``Keys.AX_ACQUISITION_KWARGS``, or ``acq_options`` of
    ``adapter.evaluate_acquisition_function``): ``selectable``, a boolean mask of
    the candidates that may be proposed; ``record``, a :class:`GenerationRecord`;
    ``candidates``, the ``N x d`` set in Ax's transformed space when it is not in
    ``botorch_acqf_options`` already (it is added there for the input
    constructor). One objective, no outcome constraints.

    Example:
        >>> GeneratorSpec(
        ...     generator_enum=Generators.BOTORCH_MODULAR,
        ...     generator_kwargs={
        ...         "botorch_acqf_class": ChainingUCB,
        ...         "acquisition_class": CandidateSetAcquisition,
        ...     },
        ... )  # in a candidate-set node, which supplies the candidates

    Args:
        surrogate: The fitted Ax ``Surrogate``.
        search_space_digest: Ax's transformed search space.
        torch_opt_config: Objective weights, pending points, fixed features.
        botorch_acqf_class: The BoTorch acquisition function class.
        botorch_acqf_options: Its input constructor's keyword arguments.
        botorch_acqf_classes_with_options: Ax's multi-acquisition option.
        n: Number of candidates to generate.
        options: See above, plus Ax ``Acquisition`` options.
    """

    def __init__(
        self,
        surrogate: Any,
        search_space_digest: Any,
        torch_opt_config: Any,
        botorch_acqf_class: Any,
        botorch_acqf_options: dict[str, Any] | None = None,
        botorch_acqf_classes_with_options: Any = None,
        n: int | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        options, acqf_options = dict(options or {}), dict(botorch_acqf_options or {})
        candidates = acqf_options.get("candidates", options.pop("candidates", None))
        selectable = options.pop("selectable", None)
        self.record: GenerationRecord | None = options.pop("record", None)
        if torch_opt_config.is_moo or torch_opt_config.outcome_constraints is not None:
            raise UnsupportedError(
                "Candidate-set acquisition (Chaining-UCB, GP-UCB, UCB) supports one "
                "objective without outcome constraints; scalarize or drop them."
            )
        if candidates is None:
            raise ValueError(
                "CandidateSetAcquisition needs `candidates` (an N x d tensor in Ax's "
                "transformed space) in botorch_acqf_options or its options; for "
                "`adapter.evaluate_acquisition_function` pass acq_options="
                '{"candidates": adapter.transform_observation_features(...)}.'
            )
        self.candidates = acqf_options["candidates"] = torch.as_tensor(candidates)
        mask = torch.ones(len(self.candidates), dtype=torch.bool)
        self.selectable = mask if selectable is None else torch.as_tensor(selectable)
        if self.selectable.shape != mask.shape or self.selectable.dtype != mask.dtype:
            raise ValueError(
                f"`selectable` must be a boolean mask of shape ({len(mask)},), got "
                f"{self.selectable.dtype} of shape {tuple(self.selectable.shape)}."
            )
        super().__init__(
            surrogate=surrogate,
            search_space_digest=search_space_digest,
            torch_opt_config=torch_opt_config,
            botorch_acqf_class=botorch_acqf_class,
            botorch_acqf_options=acqf_options,
            botorch_acqf_classes_with_options=botorch_acqf_classes_with_options,
            n=n,
            options=options,
        )

    def optimize(
        self,
        n: int,
        search_space_digest: Any,
        inequality_constraints: Any = None,
        equality_constraints: Any = None,
        fixed_features: dict[int, float] | None = None,
        rounding_func: Any = None,
        optimizer_options: dict[str, Any] | None = None,
        candidate_set: Tensor | None = None,
        sampling_strategy: Any = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Select ``min(n, #selectable)`` candidates; Ax's arguments.

        Parameter constraints hold for every candidate already (the set was built
        with them); ``fixed_features`` narrows the mask; an Ax ``candidate_set``
        (e.g. ``in_sample``) replaces it. Returns points, values, unit weights.
        """
        X = self.candidates.to(device=self.device, dtype=self.dtype)
        if candidate_set is None:
            mask = self.selectable.to(X.device).clone()
            for i, v in (fixed_features or {}).items():
                mask &= torch.isclose(X[:, i], X.new_tensor(v), rtol=0.0, atol=1e-9)
            if not mask.any():
                raise SearchSpaceExhausted(
                    "No selectable candidate is left (after excluding evaluated or "
                    "pending candidates and matching the fixed features)."
                )
            candidate_set = X[mask]
        n = min(int(n), len(candidate_set))
        if n > 1 and isinstance(self.acqf, AnalyticAcquisitionFunction):
            # Analytic functions cannot condition on the batch's own picks (Ax's
            # greedy path needs X_pending): the batch is the n best values.
            with torch.no_grad():
                values, best = torch.topk(self.acqf(candidate_set.unsqueeze(-2)), n)
            selected = candidate_set[best]
            weights = torch.ones(n, dtype=self.dtype, device=self.device)
        else:
            selected, values, weights = self.select_from_candidate_set(
                n=n, candidate_set=candidate_set, sampling_strategy=sampling_strategy
            )
        if self.record is not None:
            self.record.acquisition = self
        return selected, values, weights
