r"""Which candidates of a finite set :math:`X` a node may propose: the one
selection rule of every candidate-set node (one machine or sharded)."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ax.core import Experiment, ObservationFeatures
from ax.core.trial_status import TrialStatus
from ax.core.types import TParamValue
from ax.exceptions.core import SearchSpaceExhausted

from ax_chaining.ax.audit import audit_candidate, is_audit_step
from ax_chaining.ax.candidates import CandidateSetSpec

#: Trials whose arms are evaluated.
EVALUATED = (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED)
#: Trials whose arms are not evaluated and do not count as used.
DROPPED = (TrialStatus.FAILED, TrialStatus.ABANDONED)

#: Maps an arm's parameters to its candidate's index, None if not a candidate.
IndexOf = Callable[[Mapping[str, TParamValue]], int | None]


@dataclass(frozen=True)
class SelectableCandidates:
    """The candidates a node may propose at one step, by index in :math:`X`.

    Attributes:
        num_candidates: ``N``, the size of :math:`X`.
        selectable: Boolean mask (``N``) of the candidates that may be proposed.
        evaluated: Sorted indices of the candidates in a completed (or early
            stopped) trial.
        pending: Sorted indices of the candidates in pending trials.
        failed: Sorted indices of the candidates in a failed trial.
        audit: The audited candidate of an audit step
            (:mod:`ax_chaining.ax.audit`; the one selectable candidate then),
            else None.
    """

    num_candidates: int
    selectable: np.ndarray
    evaluated: np.ndarray
    pending: np.ndarray
    failed: np.ndarray
    audit: Any = None

    @property
    def num_selectable(self) -> int:
        """How many candidates may be proposed."""
        return int(self.selectable.sum())

    @property
    def excluded(self) -> np.ndarray:
        """Sorted indices of the candidates that may not be proposed."""
        return np.flatnonzero(~self.selectable)

    def evaluated_mask(self) -> np.ndarray:
        """Boolean mask (``N``) of the evaluated candidates."""
        mask = np.zeros(self.num_candidates, dtype=bool)
        mask[self.evaluated] = True
        return mask


def candidate_indices(
    parameterizations: Iterable[Mapping[str, TParamValue]], index_of: IndexOf
) -> np.ndarray:
    """Sorted indices of the candidates among ``parameterizations``."""
    found = {index_of(p) for p in parameterizations}
    return np.array(sorted(i for i in found if i is not None), dtype=np.int64)


def trial_candidates(
    experiment: Experiment, statuses: Sequence[TrialStatus], index_of: IndexOf
) -> np.ndarray:
    """Sorted indices of the candidates in a trial of one of ``statuses``."""
    trials = [t for t in experiment.trials.values() if t.status in statuses]
    return candidate_indices((a.parameters for t in trials for a in t.arms), index_of)


def selectable_candidates(
    experiment: Experiment,
    spec: CandidateSetSpec,
    num_candidates: int,
    index_of: IndexOf,
    *,
    pending_observations: Mapping[str, Sequence[ObservationFeatures]] | None = None,
    allowed: np.ndarray | None = None,
    audit_step: int | None = None,
) -> SelectableCandidates:
    """The candidates a node may propose, under ``spec``'s rules.

    A candidate may be proposed if ``allowed`` (e.g. by fixed features), unless
    its trial failed (``retry_failed=False``) or it is evaluated
    (``exclude_evaluated=True``); pending candidates are avoided
    (``exclude_pending=True``) while others remain: they are conditioned on
    anyway, so their exclusion must not make generation fail. At an audit
    step (``spec.audit_every``, :mod:`ax_chaining.ax.audit`) the one
    selectable candidate is drawn uniformly, with the spec's seed, from the
    allowed candidates neither evaluated nor pending.

    Args:
        experiment: Ax's experiment, whose trials say which candidates are used.
        spec: The candidate set's rules.
        num_candidates: ``N``.
        index_of: The candidate index of an arm's parameters (None: not one).
        pending_observations: Ax's pending points of the step, by metric.
        allowed: Boolean mask (``N``) of the candidates the caller allows;
            None allows all.
        audit_step: The model-based step's number (from 1), for
            ``spec.audit_every``; None: no audit.

    Raises:
        SearchSpaceExhausted: No allowed candidate is left (naming the rule).
    """
    evaluated = trial_candidates(experiment, EVALUATED, index_of)
    failed = trial_candidates(experiment, [TrialStatus.FAILED], index_of)
    pending_points = (
        f.parameters for fs in (pending_observations or {}).values() for f in fs
    )
    pending = candidate_indices(pending_points, index_of)
    mask = np.ones(num_candidates, dtype=bool) if allowed is None else allowed.copy()
    if not spec.retry_failed:
        mask[failed] = False
    if spec.exclude_evaluated:
        mask[evaluated] = False
    if not mask.any():
        raise SearchSpaceExhausted(_exhausted(spec, num_candidates))
    if spec.exclude_pending:
        keep = mask.copy()
        keep[pending] = False
        mask = keep if keep.any() else mask
    audit = None
    if audit_step is not None and is_audit_step(spec.audit_every, audit_step):
        unexplored = mask.copy()
        unexplored[evaluated] = False
        unexplored[pending] = False
        audit = audit_candidate(unexplored, spec.resolve_seed(), audit_step)
        if audit is not None:
            mask = np.arange(num_candidates) == audit
    return SelectableCandidates(
        num_candidates, mask, evaluated, pending, failed, audit=audit
    )


def _exhausted(spec: CandidateSetSpec, num_candidates: int) -> str:
    """Why no candidate is left, naming the spec's rules that excluded them."""
    why = []
    if spec.exclude_evaluated:
        why.append("evaluated (`exclude_evaluated=True`)")
    if not spec.retry_failed:
        why.append("failed before (`retry_failed=False`)")
    return f"All {num_candidates} candidates are {' or '.join(why) or 'excluded'}."
