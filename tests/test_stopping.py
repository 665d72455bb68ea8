"""Stopping on the regret certificate, on real Ax Client loops."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig
from ax.exceptions.generation_strategy import GenerationStrategyCompleted
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.global_stopping.strategies.base import BaseGlobalStoppingStrategy
from ax.storage.json_store.decoder import object_from_json
from ax.storage.json_store.encoder import object_to_json

from ax_chaining.ax import (
    GEN_METADATA_KEY,
    CertifiedStop,
    RegretBoundGlobalStoppingStrategy,
    best_certificate,
    certificate_history,
    certify,
    chaining_generation_strategy,
    register_storage,
    ucb_generation_strategy,
)
from ax_chaining.certificate import (
    LOO_MIN_OBSERVATIONS,
    CertificateOptions,
    CheckSchedule,
)

pytestmark = pytest.mark.filterwarnings("ignore::Warning:ax")


@pytest.fixture(autouse=True)
def _quiet_ax() -> None:
    logging.getLogger("ax").setLevel(logging.WARNING)


def _f(p: dict[str, Any]) -> float:
    return math.exp(-((p["x"] - 9) ** 2 + (p["y"] - 4) ** 2) / 20.0)


def _client(gs: GenerationStrategy) -> Client:
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", bounds=(0, 14), parameter_type="int"),
            RangeParameterConfig(name="y", bounds=(0, 14), parameter_type="int"),
        ]
    )
    client.configure_optimization(objective="f")
    client.set_generation_strategy(gs)
    return client


#: The loops here are short: their certificates count from 4 observations
#: (the default, LOO_MIN_OBSERVATIONS = 20, is tested on its own below).
LEAST = {"certificate": CertificateOptions(min_observations=4)}


def _step(client: Client) -> None:
    for index, params in client.get_next_trials(max_trials=1).items():
        client.complete_trial(index, raw_data={"f": _f(params)})


@pytest.fixture(scope="module")
def chaining_gs() -> GenerationStrategy:
    logging.getLogger("ax").setLevel(logging.WARNING)
    gs = chaining_generation_strategy(init_trials=4, seed=0, **LEAST)
    client = _client(gs)
    for _ in range(12):
        _step(client)
    return gs


def _bounds(gs: GenerationStrategy, key: str = "bound") -> list[float]:
    trials = gs.experiment.trials
    metas = [trials[i].generator_runs[0].gen_metadata for i in sorted(trials)]
    return [
        m[GEN_METADATA_KEY]["certificate"][key]
        for m in metas
        if "certificate" in (m or {}).get(GEN_METADATA_KEY, {})
    ]


def test_is_an_ax_global_stopping_strategy() -> None:
    strategy = RegretBoundGlobalStoppingStrategy(tolerance=0.1)
    assert isinstance(strategy, BaseGlobalStoppingStrategy)
    assert strategy.min_trials == 5
    assert "tolerance=0.1" in repr(strategy)


def test_every_step_records_a_certificate(chaining_gs: GenerationStrategy) -> None:
    bounds = _bounds(chaining_gs)
    assert len(bounds) == 8  # one per Chaining-UCB step
    assert all(b > 0 for b in bounds)
    meta = chaining_gs.experiment.trials[11].generator_runs[0].gen_metadata
    cert = meta[GEN_METADATA_KEY]["certificate"]
    assert cert["delta"] == 0.05 and cert["t"] == 12
    assert cert["bound"] == pytest.approx(
        cert["bound_model_units"] * cert["objective_scale"]
    )
    # The recommended point is an evaluated one, in the user's space.
    evaluated = [t.arms[0].parameters for t in chaining_gs.experiment.trials.values()]
    assert cert["parameters"] in evaluated


def test_best_certificate_is_the_current_one_or_the_running_minimum(
    chaining_gs: GenerationStrategy,
) -> None:
    bounds = _bounds(chaining_gs)
    current = best_certificate(chaining_gs)
    assert current is not None and current["bound"] == bounds[-1]
    assert current["recorded_at"] == 11  # the last step recorded it
    lowest = best_certificate(chaining_gs, use="running_min")
    assert lowest is not None and lowest["bound"] == min(bounds)
    assert best_certificate(chaining_gs.experiment, use="running_min") == lowest
    model = best_certificate(chaining_gs, units="model", use="running_min")
    assert model is not None and model["bound"] == min(
        _bounds(chaining_gs, "bound_model_units")
    )
    # The history's running minimum is the prefix minimum, hence never increases.
    history = certificate_history(chaining_gs)
    assert [c["bound"] for c in history] == bounds
    running = [c["running_min"] for c in history]
    assert running == [min(bounds[: k + 1]) for k in range(len(bounds))]
    # trial_index is the trial that evaluated the certified point.
    trials = chaining_gs.experiment.trials
    for c in history:
        assert trials[c["trial_index"]].arms[0].parameters == c["parameters"]
        assert c["trial_index"] < c["recorded_at"]


def test_stops_below_tolerance_and_names_parameters_and_bound(
    chaining_gs: GenerationStrategy,
) -> None:
    experiment = chaining_gs.experiment
    best = best_certificate(experiment)
    assert best is not None
    stop, message = RegretBoundGlobalStoppingStrategy(
        tolerance=best["bound"] * 1.01
    ).should_stop_optimization(experiment=experiment)
    assert stop
    assert f"{best['bound']:.4g}" in message and str(best["parameters"]) in message
    stop, message = RegretBoundGlobalStoppingStrategy(
        tolerance=best["bound"] * 0.99
    ).should_stop_optimization(experiment=experiment)
    assert not stop and "above the tolerance" in message


def test_respects_min_trials(chaining_gs: GenerationStrategy) -> None:
    stop, message = RegretBoundGlobalStoppingStrategy(
        tolerance=1e9, min_trials=50
    ).should_stop_optimization(experiment=chaining_gs.experiment)
    assert not stop and "minimum of 50" in message


def test_a_plain_client_loop_stops_on_the_certificate(tmp_path: Any) -> None:
    """stop_tolerance: the strategy stops at the first step whose current
    certificate is within the tolerance; the exception names the bound."""
    reference = chaining_generation_strategy(init_trials=4, seed=0, **LEAST)
    client = _client(reference)
    for _ in range(8):
        _step(client)
    bounds = _bounds(reference)  # trials 4..7 are Chaining-UCB steps
    tolerance = min(bounds[:3])
    first = next(k for k, b in enumerate(bounds) if b <= tolerance)
    gs = chaining_generation_strategy(
        init_trials=4, seed=0, stop_tolerance=tolerance, **LEAST
    )
    client = _client(gs)
    steps = 0
    with pytest.raises(CertifiedStop, match=f"{bounds[first]:.4g}") as stopped:
        while steps < 30:
            _step(client)
            steps += 1
    assert isinstance(stopped.value, GenerationStrategyCompleted)
    assert "at most the tolerance" in str(stopped.value)
    assert steps == 4 + first + 1  # the same run, stopped after that step
    # A reloaded client reads the certificate through public functions and
    # stops as well.
    path = str(tmp_path / "stopped.json")
    client.save_to_json_file(path)
    loaded = Client.load_from_json_file(path)
    assert best_certificate(loaded)["bound"] == bounds[first]
    with pytest.raises(CertifiedStop):
        loaded.get_next_trials(max_trials=1)


def test_certify_any_loop_including_axs_default_strategy() -> None:
    """A Client run with Ax's own default strategy has no recorded certificate;
    certify() fits Ax's default surrogate and certifies its best evaluated arm."""
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", bounds=(0, 14), parameter_type="int"),
            RangeParameterConfig(name="y", bounds=(0, 14), parameter_type="int"),
        ]
    )
    client.configure_optimization(objective="f")
    for _ in range(8):
        for index, params in client.get_next_trials(max_trials=1).items():
            client.complete_trial(index, raw_data={"f": _f(params)})
    assert best_certificate(client) is None
    cert = certify(client, options=CertificateOptions(min_observations=8))
    f_max = max(_f({"x": x, "y": y}) for x in range(15) for y in range(15))
    assert cert["valid"] and 0 < cert["bound"] < 10
    assert f_max - _f(cert["parameters"]) <= cert["bound"]
    assert cert["trial_index"] is not None
    summary = client.summarize()
    row = summary[summary["trial_index"] == cert["trial_index"]]
    assert float(row["x"].iloc[0]) == cert["parameters"]["x"]


def test_no_recorded_certificate_means_no_stop() -> None:
    gs = ucb_generation_strategy(init_trials=4, seed=0)
    client = _client(gs)
    assert best_certificate(gs.experiment) is None
    stop, message = RegretBoundGlobalStoppingStrategy(
        tolerance=1e9, min_trials=0
    ).should_stop_optimization(experiment=gs.experiment)
    assert not stop and "No regret certificate" in message
    for _ in range(6):
        _step(client)
    # Every candidate-set strategy records one, whatever its acquisition.
    assert best_certificate(gs) is not None


def test_json_round_trip() -> None:
    register_storage()
    strategy = RegretBoundGlobalStoppingStrategy(
        tolerance=0.25, min_trials=7, inactive_when_pending_trials=False, units="model"
    )
    decoded = object_from_json(object_to_json(strategy))
    assert isinstance(decoded, RegretBoundGlobalStoppingStrategy)
    assert (decoded.tolerance, decoded.min_trials, decoded.units) == (0.25, 7, "model")
    assert decoded.inactive_when_pending_trials is False


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"tolerance": 0.0}, ValueError, "`tolerance` must be a finite positive"),
        ({"tolerance": math.inf}, ValueError, "`tolerance` must be a finite positive"),
        ({"tolerance": "1"}, TypeError, "`tolerance` must be a positive float"),
        ({"tolerance": 1.0, "min_trials": -1}, ValueError, "`min_trials` must be"),
        ({"tolerance": 1.0, "min_trials": 2.5}, TypeError, "`min_trials` must be"),
        ({"tolerance": 1.0, "units": "raw"}, ValueError, "`units` must be"),
    ],
)
def test_bad_arguments(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        RegretBoundGlobalStoppingStrategy(**kwargs)
    if len(kwargs) == 1:
        with pytest.raises(
            error, match=match.replace("`tolerance`", "`stop_tolerance`")
        ):
            chaining_generation_strategy(stop_tolerance=kwargs["tolerance"])


def test_a_declared_schedule_spends_delta_on_its_checks_alone(tmp_path: Any) -> None:
    """certificate_schedule: certificates are recorded at the declared checks
    only (after 5, 8, 11, 14 observations), the j-th with the share
    6 delta / (pi^2 j^2); the schedule survives a save and reload."""
    schedule = CheckSchedule("every_k", k=3, start=5)
    gs = chaining_generation_strategy(
        init_trials=4,
        seed=0,
        certificate=CertificateOptions(schedule=schedule, min_observations=4),
    )
    client = _client(gs)
    for _ in range(13):  # trials 0..3 initial, 4..12 Chaining-UCB
        _step(client)
    history = certificate_history(client)
    # Trial k is generated with k observations: checks at trials 5, 8, 11.
    assert [h["recorded_at"] for h in history] == [5, 8, 11]
    shares = [6 * 0.05 / (math.pi**2 * j**2) for j in (1, 2, 3)]
    assert [h["share"] for h in history] == pytest.approx(shares, rel=1e-12)
    # Every step instead: the check after n observations has index n + 1.
    every = chaining_generation_strategy(init_trials=4, seed=0, **LEAST)
    reference = _client(every)
    for _ in range(6):
        _step(reference)
    assert certificate_history(reference)[-1]["share"] == pytest.approx(
        6 * 0.05 / (math.pi**2 * 6**2), rel=1e-12
    )
    path = str(tmp_path / "scheduled.json")
    client.save_to_json_file(path)
    loaded = Client.load_from_json_file(path)
    for _ in range(2):  # trials 13 and 14: the next check is at 14
        _step(loaded)
    history = certificate_history(loaded)
    assert [h["recorded_at"] for h in history] == [5, 8, 11, 14]
    # The reloaded strategy kept its minimum: the check at 14 is not refused.
    assert history[-1]["share"] == pytest.approx(6 * 0.05 / (math.pi**2 * 16))
    assert history[-1]["valid"]


def test_the_default_check_certifies_from_20_observations() -> None:
    """Before LOO_MIN_OBSERVATIONS observations the recorded certificate holds
    the model's own numbers, marked unchecked (not valid: no stop acts on it);
    from then on the same loop's are checked; a fresh certify() follows its
    own minimum."""
    assert LOO_MIN_OBSERVATIONS == 20
    gs = chaining_generation_strategy(init_trials=4, seed=0)
    client = _client(gs)
    for _ in range(22):
        _step(client)
    history = certificate_history(client)
    n = [h["recorded_at"] for h in history]  # trial k sees k observations
    assert n == list(range(4, 22))
    for h in history:
        if h["recorded_at"] < 20:
            assert not h["valid"] and 0 < h["bound"] < math.inf
            assert h["reason"].startswith("unchecked: only")
            assert "min_observations=20" in h["reason"]
            assert 1 <= h["rank_bound"] <= 225  # among all 15 x 15 at worst
            # Numbers are floats, not the strings JSON stores.
            assert isinstance(h["share"], float) and 0 < h["share"] < 0.05
            assert isinstance(h["expected_better"], float)
        else:
            assert h["valid"] and 0 < h["bound"] < math.inf, h["reason"]
    assert certify(client)["valid"]  # 22 observations
    with pytest.raises(ValueError, match="`min_observations` must be"):
        CertificateOptions(min_observations=0)


def test_the_scale_level_widens_the_recorded_certificates_and_survives_json(
    tmp_path: Any,
) -> None:
    """``certificate_scale_level`` reaches the recorded certificates: the same
    loop (same seed, same trials: the certificate does not choose them)
    records bounds at least as wide under the upper limit (0.05, the default)
    as under the point estimate (None) at every step, wider where the LOO
    residuals are few, the same as ``certify(..., scale_level=...)`` on the
    experiment; the option survives Ax's JSON; a bad level is refused."""
    point = CertificateOptions(min_observations=4, scale_level=None)
    point_gs = chaining_generation_strategy(init_trials=4, seed=0, certificate=point)
    plain = _client(point_gs)
    level = CertificateOptions(min_observations=4, scale_level=0.05)
    upper_gs = chaining_generation_strategy(init_trials=4, seed=0, certificate=level)
    upper = _client(upper_gs)
    for _ in range(8):
        _step(plain)
        _step(upper)
    a, b = certificate_history(plain), certificate_history(upper)
    assert [h["recorded_at"] for h in a] == [h["recorded_at"] for h in b]
    for p, u in zip(a, b, strict=True):
        assert u["bound"] >= p["bound"] * (1 - 1e-9)
    assert any(u["bound"] > p["bound"] * 1.05 for p, u in zip(a, b, strict=True))
    point_estimate = CertificateOptions(scale_level=None)
    assert certify(upper)["bound"] >= certify(upper, options=point_estimate)["bound"]
    upper_limit = CertificateOptions(scale_level=0.05)
    assert certify(upper)["bound"] == certify(upper, options=upper_limit)["bound"]
    default = _client(chaining_generation_strategy(init_trials=4, seed=0, **LEAST))
    for _ in range(8):
        _step(default)
    assert [h["bound"] for h in certificate_history(default)] == [h["bound"] for h in b]
    path = str(tmp_path / "upper.json")
    upper.save_to_json_file(path)
    loaded = Client.load_from_json_file(path)
    _step(loaded)
    _step(upper)
    assert certificate_history(loaded)[-1]["bound"] == pytest.approx(
        certificate_history(upper)[-1]["bound"], rel=1e-9
    )
    with pytest.raises(ValueError, match="`scale_level` must be"):
        CertificateOptions(scale_level=1.0)


def test_no_certificate_records_none_and_refuses_a_tolerance() -> None:
    gs = chaining_generation_strategy(init_trials=3, seed=0, certificate=None)
    client = _client(gs)
    for _ in range(5):
        _step(client)
    assert certificate_history(client) == [] and best_certificate(client) is None
    with pytest.raises(ValueError, match="certificate=None` records none"):
        chaining_generation_strategy(certificate=None, stop_tolerance=0.1)
    with pytest.raises(TypeError, match="`certificate` must be a CertificateOptions"):
        chaining_generation_strategy(certificate="geometric")
    with pytest.raises(TypeError, match="`schedule` must be a CheckSchedule"):
        CertificateOptions(schedule="geometric")
