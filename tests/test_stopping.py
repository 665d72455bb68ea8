"""The certificate-based global stopping strategy, on real Ax Client loops."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig
from ax.global_stopping.strategies.base import BaseGlobalStoppingStrategy
from ax.storage.json_store.decoder import object_from_json
from ax.storage.json_store.encoder import object_to_json

from ax_chaining.ax import (
    GEN_METADATA_KEY,
    chaining_generation_strategy,
    ucb_generation_strategy,
)
from ax_chaining.stopping import (
    RegretBoundGlobalStoppingStrategy,
    latest_regret_bound,
)

pytestmark = pytest.mark.filterwarnings("ignore::Warning:ax")


@pytest.fixture(autouse=True)
def _quiet_ax() -> None:
    logging.getLogger("ax").setLevel(logging.WARNING)


def _f(p: dict[str, Any]) -> float:
    return math.exp(-((p["x"] - 9) ** 2 + (p["y"] - 4) ** 2) / 20.0)


def _client(factory: Any = chaining_generation_strategy) -> Client:
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", bounds=(0, 14), parameter_type="int"),
            RangeParameterConfig(name="y", bounds=(0, 14), parameter_type="int"),
        ]
    )
    client.configure_optimization(objective="f")
    client.set_generation_strategy(factory(init_trials=4, seed=0))
    return client


def _step(client: Client) -> None:
    for index, params in client.get_next_trials(max_trials=1).items():
        client.complete_trial(index, raw_data={"f": _f(params)})


@pytest.fixture(scope="module")
def chaining_client() -> Client:
    logging.getLogger("ax").setLevel(logging.WARNING)
    client = _client()
    for _ in range(10):
        _step(client)
    return client


def test_is_an_ax_global_stopping_strategy() -> None:
    strategy = RegretBoundGlobalStoppingStrategy(tolerance=0.1)
    assert isinstance(strategy, BaseGlobalStoppingStrategy)
    assert strategy.min_trials == 5
    assert "tolerance=0.1" in repr(strategy)


def test_certificate_is_recorded_and_read(chaining_client: Client) -> None:
    experiment = chaining_client._experiment
    meta = experiment.trials[9].generator_runs[0].gen_metadata[GEN_METADATA_KEY]
    index, bound = latest_regret_bound(experiment)
    assert index == 9
    assert bound == pytest.approx(meta["regret_bound"][0])
    _, model_bound = latest_regret_bound(experiment, units="model")
    assert model_bound == pytest.approx(meta["regret_bound_model_units"][0])
    assert bound == pytest.approx(model_bound * meta["objective_scale"])
    assert bound > 0


def test_stops_below_tolerance_and_reports_the_bound(chaining_client: Client) -> None:
    experiment = chaining_client._experiment
    _, bound = latest_regret_bound(experiment)

    stop, message = RegretBoundGlobalStoppingStrategy(
        tolerance=bound * 1.01, min_trials=5
    ).should_stop_optimization(experiment=experiment)
    assert stop
    assert f"{bound:.4g}" in message and "trial 9" in message

    stop, message = RegretBoundGlobalStoppingStrategy(
        tolerance=bound * 0.99, min_trials=5
    ).should_stop_optimization(experiment=experiment)
    assert not stop
    assert f"{bound:.4g}" in message and "above the tolerance" in message


def test_respects_min_trials_and_pending_trials(chaining_client: Client) -> None:
    experiment = chaining_client._experiment
    stop, message = RegretBoundGlobalStoppingStrategy(
        tolerance=1e9, min_trials=50
    ).should_stop_optimization(experiment=experiment)
    assert not stop and "minimum of 50" in message


def test_stops_a_client_loop() -> None:
    """The documented Client loop: stop as soon as the certificate is small."""
    client = _client()
    # A generous tolerance (model-unit bounds are O(10) on this problem) so the
    # loop stops on the first certificate after min_trials.
    strategy = RegretBoundGlobalStoppingStrategy(
        tolerance=1e3, min_trials=6, units="model"
    )
    completed = 0
    while completed < 30:
        stop, message = strategy.should_stop_optimization(experiment=client._experiment)
        if stop:
            break
        _step(client)
        completed += 1
    assert stop and completed == 6
    assert "model units" in message
    # A pending trial keeps the optimization going.
    client.get_next_trials(max_trials=1)
    stop, message = strategy.should_stop_optimization(experiment=client._experiment)
    assert not stop and "pending" in message


def test_no_certificate_without_chaining() -> None:
    client = _client(ucb_generation_strategy)
    for _ in range(6):
        _step(client)
    assert latest_regret_bound(client._experiment) is None
    stop, message = RegretBoundGlobalStoppingStrategy(
        tolerance=1e9, min_trials=1
    ).should_stop_optimization(experiment=client._experiment)
    assert not stop and "No Chaining-UCB regret certificate" in message


def test_json_round_trip() -> None:
    strategy = RegretBoundGlobalStoppingStrategy(
        tolerance=0.25, min_trials=7, inactive_when_pending_trials=False, units="model"
    )
    decoded = object_from_json(object_to_json(strategy))
    assert isinstance(decoded, RegretBoundGlobalStoppingStrategy)
    assert decoded == strategy
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
