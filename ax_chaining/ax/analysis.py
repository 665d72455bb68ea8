"""The recommendation and its certificate as an Ax analysis card, computed by
``client.compute_analyses`` beside Ax's own cards."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
from ax.adapter.base import Adapter
from ax.analysis.analysis import Analysis
from ax.core.analysis_card import AnalysisCard
from ax.core.experiment import Experiment
from ax.generation_strategy.generation_strategy import GenerationStrategy

from ax_chaining.ax.candidates import CandidateTable
from ax_chaining.ax.certificates import Units, recommend
from ax_chaining.certificate.certify import CertificateOptions

__all__ = ["RecommendationAnalysis"]

#: The certificate's fields the card shows, in order.
CERTIFICATE_COLUMNS = (
    "bound",
    "delta",
    "rank_bound",
    "num_candidates",
    "expected_better",
    "p_better",
    "tolerance",
    "valid",
    "reason",
)


@dataclass(eq=False, repr=False)
class RecommendationAnalysis(Analysis):
    r"""The evaluated candidate :func:`~ax_chaining.ax.recommend` returns, and its
    regret certificate, as an Ax ``AnalysisCard``: one row (``id``, ``row``,
    ``trial_index``, ``value``, the certificate's ``CERTIFICATE_COLUMNS``, then the
    candidate's parameters) and a subtitle that reads out the bound, the rank and
    ``p_better``, under the assumptions of :mod:`ax_chaining.certificate`.

    Example:
        >>> analysis = RecommendationAnalysis(tolerance=0.5)
        >>> (card,) = client.compute_analyses([analysis])
        >>> card.df[["id", "value", "bound", "rank_bound", "p_better"]]

    Args:
        candidates, delta, options, units, tolerance: As in :func:`recommend`.
    """

    candidates: CandidateTable | None = None
    delta: float | None = None
    options: CertificateOptions | None = None
    units: Units = "objective"
    tolerance: float | None = None

    def validate_applicable_state(
        self,
        experiment: Experiment | None = None,
        generation_strategy: GenerationStrategy | None = None,
        adapter: Adapter | None = None,
    ) -> str | None:
        if experiment is None and generation_strategy is None:
            return (
                "RecommendationAnalysis needs an experiment or a generation strategy."
            )
        if experiment is not None and experiment.lookup_data().df.empty:
            return "No trial has data yet: there is nothing to recommend."
        return None

    def compute(
        self,
        experiment: Experiment | None = None,
        generation_strategy: GenerationStrategy | None = None,
        adapter: Adapter | None = None,
    ) -> AnalysisCard:
        source = generation_strategy if generation_strategy is not None else experiment
        if source is None:
            raise ValueError(
                "RecommendationAnalysis needs an experiment or a strategy."
            )
        answer = recommend(
            source,
            self.candidates,
            self.delta,
            options=self.options,
            units=self.units,
            tolerance=self.tolerance,
        )
        cert = answer["certificate"]
        row: dict[str, Any] = {
            "id": answer["id"],
            "row": answer["row"],
            "trial_index": answer["trial_index"],
            "value": answer["value"],
            **{k: cert.get(k) for k in CERTIFICATE_COLUMNS},
            **answer["parameters"],
        }
        df = pd.DataFrame([row])
        return AnalysisCard(
            name=type(self).__name__,
            title="Recommended candidate and its regret certificate",
            subtitle=_reading(answer),
            df=df,
            blob=df.to_json(),
        )


def _reading(answer: dict[str, Any]) -> str:
    """The card's subtitle: the certificate in one or two sentences."""
    cert = answer["certificate"]
    name = answer["id"] if answer["id"] is not None else answer["parameters"]
    head = f"Best evaluated candidate {name} (observed {answer['value']:.4g})."
    bound = cert.get("bound")
    reason = (cert.get("reason") or "refused").rstrip(".")
    if bound is None or not math.isfinite(bound):
        return f"{head} No certificate: {reason}."
    claim = (
        f"With probability at least {1 - cert['delta']:.3g}, no candidate is more "
        f"than {bound:.4g} better, and it is among the best {cert['rank_bound']} "
        f"of {cert['num_candidates']} candidates."
    )
    if math.isfinite(cert.get("p_better", math.nan)):
        margin = cert["tolerance"]
        better = f"more than {margin:.4g} better" if margin > 0 else "better"
        claim += (
            f" The probability that a candidate {better} remains is at most "
            f"{cert['p_better']:.2g}."
        )
    if not cert.get("valid", False):  # the model's own numbers, not yet checked
        return f"{head} {reason[0].upper()}{reason[1:]}. {claim}"
    return f"{head} {claim}"
