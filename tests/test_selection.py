"""The one selection rule of candidate-set nodes, on a hand-made experiment."""

import numpy as np
import pytest
from ax.core import Arm, Experiment, ObservationFeatures, SearchSpace
from ax.core.parameter import ParameterType, RangeParameter
from ax.exceptions.core import SearchSpaceExhausted

from ax_chaining.ax.candidates import (
    CandidateSet,
    CandidateSetSpec,
    selectable_candidates,
)


def _experiment(statuses: dict[int, str]) -> Experiment:
    """Items 0..5, one trial per item in ``statuses`` with that status."""
    space = SearchSpace([RangeParameter("i", ParameterType.INT, 0, 5)])
    experiment = Experiment(search_space=space, name="selection")
    for item, status in statuses.items():
        trial = experiment.new_trial().add_arm(Arm({"i": item}))
        trial.mark_running(no_runner_required=True)
        getattr(trial, f"mark_{status}")()
    return experiment


def _set(experiment: Experiment, spec: CandidateSetSpec) -> CandidateSet:
    return CandidateSet(experiment.search_space, spec)


def _pending(*items: int) -> dict[str, list[ObservationFeatures]]:
    return {"y": [ObservationFeatures(parameters={"i": i}) for i in items]}


def test_rules_exclude_evaluated_failed_and_pending() -> None:
    experiment = _experiment({0: "completed", 1: "failed", 2: "abandoned"})
    spec = CandidateSetSpec(exclude_evaluated=True, retry_failed=False)
    got = selectable_candidates(
        experiment, _set(experiment, spec), pending_observations=_pending(3)
    )
    assert got.selectable.tolist() == [False, False, True, False, True, True]
    assert got.evaluated.tolist() == [0]
    assert got.pending.tolist() == [3]
    assert got.audit is None


def test_defaults_keep_evaluated_and_failed_and_allowed_narrows() -> None:
    experiment = _experiment({0: "completed", 1: "failed"})
    spec = CandidateSetSpec(retry_failed=True)  # exclude_evaluated=False
    allowed = np.array([True, True, True, False, False, False])
    got = selectable_candidates(experiment, _set(experiment, spec), allowed=allowed)
    assert got.selectable.tolist() == allowed.tolist()
    assert allowed.tolist() == [True, True, True, False, False, False]  # not mutated


def test_pending_are_kept_when_nothing_else_is_left() -> None:
    experiment = _experiment({0: "completed", 1: "completed"})
    spec = CandidateSetSpec(exclude_evaluated=True)
    allowed = np.array([True, True, True, True, False, False])
    got = selectable_candidates(
        experiment,
        _set(experiment, spec),
        pending_observations=_pending(2, 3),
        allowed=allowed,
    )
    assert np.flatnonzero(got.selectable).tolist() == [2, 3]


def test_no_candidate_left_names_the_rules() -> None:
    experiment = _experiment({0: "completed", 1: "failed"})
    spec = CandidateSetSpec(exclude_evaluated=True, retry_failed=False)
    allowed = np.array([True, True, False, False, False, False])
    with pytest.raises(SearchSpaceExhausted, match=r"All 6 candidates are evaluated"):
        selectable_candidates(experiment, _set(experiment, spec), allowed=allowed)
