"""Selection over the candidate set in Ax's modular BoTorch generator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from ax.core.search_space import SearchSpaceDigest
from ax.exceptions.core import SearchSpaceExhausted
from ax.generators.torch.botorch_modular.acquisition import Acquisition
from botorch.acquisition.analytic import AnalyticAcquisitionFunction
from torch import Tensor


class CandidateSetAcquisition(Acquisition):
    """Ax ``Acquisition`` that maximizes over a finite candidate set: Ax builds the
    function by its input constructor (which gets the candidates); this overrides
    only ``optimize``, to select with Ax's own ``select_from_candidate_set``.

    Ax's arguments, by keyword. ``options`` may add ``selectable`` (a boolean mask
    of the candidates that may be proposed), ``record`` (a function, called with
    this object once it has selected: Ax deep-copies options, and ``deepcopy``
    keeps functions as they are) and ``candidates`` (the ``N x d`` set in Ax's
    model space) if ``botorch_acqf_options`` lacks them; a
    :class:`~ax_chaining.ax.nodes.CandidateSetNode` supplies all three.
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
            raise ValueError(
                "CandidateSetAcquisition needs `candidates` (N x d, in Ax's model "
                "space), e.g. acq_options={'candidates': ...} of "
                "adapter.evaluate_acquisition_function."
            )
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
        candidate_set: Tensor | None = None,
        sampling_strategy: Any = None,
        **kwargs: Any,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Select ``min(n, #selectable)`` candidates (points, values, weights);
        ``fixed_features`` narrow the mask, an Ax ``candidate_set`` replaces it
        (parameter constraints hold for every candidate already)."""
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
            self.record(self)
        return selected, values, weights
