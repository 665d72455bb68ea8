"""Audit queries, recorded forecasts and the rank statement in real Ax Client
loops: an audit is uniform over the unexplored candidates and follows the
seed; the recorded forecasts give the residuals; the dicts carry
``rank_bound`` and a stopping rule acts on it."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import pytest
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig
from ax.core import Arm, Experiment, ObservationFeatures, SearchSpace
from ax.core.parameter import ParameterType, RangeParameter
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.storage.json_store.decoder import object_from_json
from ax.storage.json_store.encoder import object_to_json
from scipy.stats import chisquare

from ax_chaining.ax import (
    GEN_METADATA_KEY,
    CandidateSetSpec,
    RankBoundGlobalStoppingStrategy,
    best_certificate,
    certificate_history,
    certify,
    chaining_generation_strategy,
    register_storage,
)
from ax_chaining.ax.candidates import CandidateSet, selectable_candidates
from ax_chaining.ax.certificates import recorded_residuals
from ax_chaining.certificate import CertificateOptions
from ax_chaining.certificate.residuals import ResidualCalibration

pytestmark = pytest.mark.filterwarnings("ignore::Warning:ax")


@pytest.fixture(autouse=True)
def _quiet_ax() -> None:
    logging.getLogger("ax").setLevel(logging.WARNING)


def test_audit_every_must_be_a_positive_int() -> None:
    with pytest.raises(ValueError, match="`audit_every` must be a positive int"):
        CandidateSetSpec(audit_every=0)


def test_selection_audits_an_unexplored_candidate_at_audit_steps() -> None:
    space = SearchSpace([RangeParameter("i", ParameterType.INT, 0, 7)])
    experiment = Experiment(search_space=space, name="audit")
    for item, status in {0: "completed", 1: "completed", 2: "failed"}.items():
        trial = experiment.new_trial().add_arm(Arm({"i": item}))
        trial.mark_running(no_runner_required=True)
        getattr(trial, f"mark_{status}")()
    pending = {"y": [ObservationFeatures(parameters={"i": 3})]}
    spec = CandidateSetSpec(audit_every=5, seed=11)

    def select(step: int):
        return selectable_candidates(
            experiment,
            CandidateSet(space, spec),
            pending_observations=pending,
            audit_step=step,
        )

    assert select(4).audit is None and select(4).selectable.sum() == 6
    # Unexplored: not evaluated (0, 1), failed (2) or pending (3).
    picks = [select(step).audit for step in range(5, 5 * 2001, 5)]
    assert set(picks) == {4, 5, 6, 7}
    assert chisquare(np.bincount(picks)[4:]).pvalue > 1e-3
    got = select(10)
    assert got.selectable.sum() == 1 and got.selectable[got.audit]
    assert [select(s).audit for s in (5, 10, 15)] == picks[:3]  # the seed's


def _f(p: dict[str, Any]) -> float:
    return math.exp(-((p["x"] - 9) ** 2 + (p["y"] - 4) ** 2) / 20.0)


def _loop(seed: int, steps: int = 9, **options: Any) -> GenerationStrategy:
    """A Client loop on a 10 x 10 grid; ``options`` go to the strategy
    (default: an audit every third step)."""
    options = {"audit_every": 3, **options}
    gs = chaining_generation_strategy(init_trials=3, seed=seed, **options)
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", bounds=(0, 9), parameter_type="int"),
            RangeParameterConfig(name="y", bounds=(0, 9), parameter_type="int"),
        ]
    )
    client.configure_optimization(objective="f")
    client.set_generation_strategy(gs)
    for _ in range(3 + steps):
        for index, params in client.get_next_trials(max_trials=1).items():
            client.complete_trial(index, raw_data={"f": _f(params)})
    return gs


@pytest.fixture(scope="module")
def audited() -> GenerationStrategy:
    logging.getLogger("ax").setLevel(logging.WARNING)
    # 3 + 9 observations: certificates from 3 on, to test their rank statements.
    return _loop(seed=3, certificate=CertificateOptions(min_observations=3))


def _steps(gs: GenerationStrategy) -> list[tuple[int, dict]]:
    trials = gs.experiment.trials
    out = []
    for i in sorted(trials):
        meta = (trials[i].generator_runs[0].gen_metadata or {}).get(GEN_METADATA_KEY)
        if meta is not None:
            out.append((i, meta))
    return out


def _arm(gs: GenerationStrategy, i: int) -> tuple:
    p = gs.experiment.trials[i].arms[0].parameters
    return (p["x"], p["y"])


def test_audits_are_every_third_step_on_unexplored_candidates(audited) -> None:
    steps = _steps(audited)
    assert [m["audit"] for _, m in steps] == [False, False, True] * 3
    for i, meta in steps:
        before = {_arm(audited, j) for j in range(i)}
        if meta["audit"]:
            assert _arm(audited, i) not in before
        # Every step recorded its forecast of the arm it proposed.
        (forecast,) = meta["forecast"]
        assert (forecast["parameters"]["x"], forecast["parameters"]["y"]) == _arm(
            audited, i
        )
        assert forecast["sd"] > 0 and forecast["weights"] == {"f": 1.0}


def test_audits_follow_the_seed(audited) -> None:
    def audits(gs):
        return [_arm(gs, i) for i, m in _steps(gs) if m["audit"]]

    assert audits(_loop(seed=3)) == audits(audited)


def test_recorded_residuals_are_the_forecasts_against_the_values(audited) -> None:
    z = recorded_residuals(audited.experiment)
    steps = _steps(audited)
    expected = [
        (_f(m["forecast"][0]["parameters"]) - m["forecast"][0]["mean"])
        / m["forecast"][0]["sd"]
        for _, m in steps
    ]
    assert z == pytest.approx(expected)
    audit = recorded_residuals(audited.experiment, "audit")
    assert audit == pytest.approx(
        [e for e, (_, m) in zip(expected, steps, strict=True) if m["audit"]]
    )


def test_rank_bound_in_every_dict_and_the_rank_stop(audited) -> None:
    history = certificate_history(audited)
    assert history and all(isinstance(c["rank_bound"], int) for c in history)
    assert all(
        1 <= c["rank_bound"] <= 100 and c["num_candidates"] == 100 for c in history
    )
    assert all(c["expected_better"] >= 0 for c in history)
    best = best_certificate(audited)
    assert best["rank_bound"] == history[-1]["rank_bound"]
    options = CertificateOptions(calibration="forecast", min_observations=3)
    fresh = certify(audited, options=options)
    assert 1 <= fresh["rank_bound"] <= 100 and fresh["num_candidates"] == 100
    # 9 residuals are too few for the forecast calibration: it falls back.
    assert fresh["checks"]["fallback_loo"] == 1.0
    rank = best["rank_bound"]
    stop, message = RankBoundGlobalStoppingStrategy(
        max_rank=rank
    ).should_stop_optimization(audited.experiment)
    assert stop and f"among the {rank} best" in message
    if rank > 1:
        stop, message = RankBoundGlobalStoppingStrategy(
            max_rank=rank - 1
        ).should_stop_optimization(audited.experiment)
        assert not stop and "above the limit" in message
    fraction = RankBoundGlobalStoppingStrategy(max_fraction=rank / 100)
    assert fraction.limit(100) == rank
    assert fraction.should_stop_optimization(audited.experiment)[0]


def test_rank_stop_arguments_and_storage() -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        RankBoundGlobalStoppingStrategy()
    with pytest.raises(ValueError, match="exactly one of"):
        RankBoundGlobalStoppingStrategy(max_rank=3, max_fraction=0.1)
    with pytest.raises(ValueError, match="`max_fraction` must be in"):
        RankBoundGlobalStoppingStrategy(max_fraction=1.5)
    register_storage()
    rule = RankBoundGlobalStoppingStrategy(max_fraction=0.01, min_trials=7)
    back = object_from_json(object_to_json(rule))
    assert (back.max_fraction, back.max_rank, back.min_trials) == (0.01, None, 7)


def test_node_records_forecast_calibrated_certificates() -> None:
    """``calibration="forecast"``: every recorded certificate is
    calibrated on the residuals of the forecasts completed before its step
    (the first ``j`` residuals at the ``j``-th step), or says it fell back;
    the trials are those of the default calibration (same seed); the option
    survives Ax's JSON storage and a bad value is refused up front."""
    with pytest.raises(ValueError, match="`calibration` must be"):
        CertificateOptions(calibration="conformal")

    def loop(calibration: str) -> GenerationStrategy:
        options = CertificateOptions(calibration=calibration)
        return _loop(5, 16, audit_every=None, certificate=options)

    forecast, default = loop("forecast"), loop("loo")
    assert [_arm(forecast, i) for i in range(19)] == [
        _arm(default, i) for i in range(19)
    ]
    z = recorded_residuals(forecast.experiment)
    calibrated = 0
    for j, (_, meta) in enumerate(_steps(forecast)):
        checks = meta["certificate"]["checks"]
        given = ResidualCalibration(tuple(z[:j]))
        if given.usable():
            calibrated += 1
            assert checks["forecast_scale"] == pytest.approx(given.fit().scale)
            assert checks["forecast_residuals"] == j
        else:
            assert checks["fallback_loo"] == 1.0 and checks["forecast_residuals"] == j
    assert calibrated >= 5
    register_storage()
    back = object_from_json(object_to_json(forecast))
    assert back.current_node.certificate.calibration == "forecast"
