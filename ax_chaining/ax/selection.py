"""Selection over the candidate set inside Ax's modular BoTorch generator.

:class:`CandidateSetAcquisition` is the ``acquisition_class`` of the candidate-set
nodes. It overrides one public method, ``Acquisition.optimize``, to select from
the candidate set through Ax's public ``select_from_candidate_set`` (restricted
by the node's evaluated / pending / fixed-feature mask). The BoTorch acquisition
function is built by Ax's own code, through the input constructor registered for
its class, which receives the candidate set in ``botorch_acqf_options``
(``model_gen_options[Keys.ACQF_KWARGS]``).

:class:`UCB` is BoTorch's ``UpperConfidenceBound`` with an input constructor that
accepts what Ax passes for every class (``X_pending``) and the candidate set.
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

__all__ = ["UCB", "CandidateSetAcquisition", "GenerationRecord"]


class UCB(UpperConfidenceBound):
    r"""BoTorch's stock ``UpperConfidenceBound``, :math:`\mu + \sqrt{\beta}\sigma`.

    Identical to its parent; it exists so that its input constructor
    (:func:`construct_inputs_ucb`) accepts ``X_pending``, which Ax passes to
    every acquisition function when trials are running. The analytic UCB does
    not condition on pending points (a batch is the ``q`` best values).

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
    """Construct kwargs for :class:`UCB`; ``X_pending`` and ``candidates`` unused.

    Args:
        model: The model.
        beta: Exploration weight.
        posterior_transform: Optional posterior transform.
        maximize: If True, maximize.
        X_pending: Pending points (ignored: analytic).
        candidates: The candidate set (ignored).

    Returns:
        A dict mapping kwarg names of the constructor to values.
    """
    return {
        "model": model,
        "beta": beta,
        "posterior_transform": posterior_transform,
        "maximize": maximize,
    }


class GenerationRecord:
    """Where :class:`CandidateSetAcquisition` leaves itself after selecting.

    The node passes one in ``Keys.AX_ACQUISITION_KWARGS`` and reads it after
    generation (to record the certificate), instead of reading Ax's private
    generator state. Ax deep-copies generation options, so a copy of a record is
    the record itself.
    """

    def __init__(self) -> None:
        self.acquisition: CandidateSetAcquisition | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> GenerationRecord:
        return self


class CandidateSetAcquisition(Acquisition):
    """Ax ``Acquisition`` that maximizes over a finite candidate set.

    Options (``Keys.AX_ACQUISITION_KWARGS`` of ``model_gen_options``, or
    ``acq_options`` of ``adapter.evaluate_acquisition_function``):

    * ``selectable``: boolean mask of the candidates that may be proposed;
    * ``record``: a :class:`GenerationRecord` that receives this object;
    * ``candidates``: the ``N x d`` set in Ax's transformed space, when it is not
      already in ``botorch_acqf_options`` (e.g. for
      ``adapter.evaluate_acquisition_function(..., acq_options={"candidates": X})``);
      it is added there, so the input constructor receives it.

    Multi-objective configurations and outcome constraints raise
    ``UnsupportedError``.

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
        botorch_acqf_classes_with_options: Not supported (one class only).
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
        options = dict(options or {})
        acqf_options = dict(botorch_acqf_options or {})
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
                "transformed space) in botorch_acqf_options or in its options; the "
                "candidate-set nodes pass it, and for "
                "`adapter.evaluate_acquisition_function` pass acq_options="
                '{"candidates": adapter.transform_observation_features(...)}.'
            )
        self.candidates: Tensor = torch.as_tensor(candidates)
        acqf_options["candidates"] = self.candidates
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
        """Select ``n`` of the selectable candidates (Ax's selection path).

        Parameter constraints were applied when the candidate set was built, so
        every candidate satisfies them; ``fixed_features`` restricts the mask.
        With Ax's own ``candidate_set`` (e.g. ``in_sample``) that set is used.

        Returns:
            The ``q x d`` selected candidates (``q = min(n, #selectable)``), their
            acquisition values, and unit arm weights.
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
            # Analytic functions cannot condition on the batch's own picks: the
            # batch is the n best values (Ax's greedy path would need X_pending).
            with torch.no_grad():
                values = self.acqf(candidate_set.unsqueeze(-2))
            values, best = torch.topk(values, n)
            weights = torch.ones(n, dtype=self.dtype, device=self.device)
            selected = candidate_set[best]
        else:
            selected, values, weights = self.select_from_candidate_set(
                n=n, candidate_set=candidate_set, sampling_strategy=sampling_strategy
            )
        if self.record is not None:
            self.record.acquisition = self
        return selected, values, weights
