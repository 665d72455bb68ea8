"""The Ax and BoTorch behaviours this package relies on, pinned one by one.

An Ax upgrade that changes one of them fails here, by name, before it shows up
as a wrong suggestion elsewhere.
"""

from __future__ import annotations

import itertools
import logging

import pytest
import torch
from ax.adapter.adapter_utils import extract_search_space_digest
from ax.adapter.registry import Generators
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig
from ax.core.experiment import Experiment
from ax.core.observation import ObservationFeatures
from ax.core.parameter import ParameterType, RangeParameter
from ax.core.parameter_constraint import ParameterConstraint
from ax.core.search_space import SearchSpace
from ax.generators.torch.botorch_modular.utils import (
    construct_acquisition_and_optimizer_options,
)
from ax.global_stopping.strategies.base import BaseGlobalStoppingStrategy
from ax.utils.common.constants import Keys
from botorch.acquisition.analytic import UpperConfidenceBound
from botorch.acquisition.input_constructors import (
    acqf_input_constructor,
    get_acqf_input_constructor,
)
from botorch.models import SingleTaskGP

from ax_chaining.ax import candidate_parameterizations

pytestmark = pytest.mark.filterwarnings("ignore::Warning:ax")


@pytest.fixture(autouse=True)
def _quiet_ax() -> None:
    logging.getLogger("ax").setLevel(logging.WARNING)


def _grid() -> SearchSpace:
    return SearchSpace(
        [
            RangeParameter("x", ParameterType.INT, 0, 4),
            RangeParameter("y", ParameterType.FLOAT, 0.0, 1.0),
        ]
    )


def test_model_gen_options_reach_acqf_and_acquisition_options() -> None:
    """Keys.ACQF_KWARGS -> botorch_acqf_options (input constructor);
    Keys.AX_ACQUISITION_KWARGS -> the Acquisition's options."""
    acq, acqf, _, _ = construct_acquisition_and_optimizer_options(
        acqf_options={"a": 1},
        botorch_acqf_options={"delta": 0.1},
        model_gen_options={
            Keys.ACQF_KWARGS.value: {"candidates": "X"},
            Keys.AX_ACQUISITION_KWARGS.value: {"selectable": "mask"},
        },
    )
    assert acqf == {"delta": 0.1, "candidates": "X"}
    assert acq == {"a": 1, "selectable": "mask"}


def test_transform_observation_features_gives_model_space_tensor() -> None:
    """The public Adapter method equals applying every transform in turn."""
    from ax_chaining.ax import chaining_generation_strategy

    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", bounds=(0, 4), parameter_type="int"),
            RangeParameterConfig(
                name="y", bounds=(1e-3, 1.0), parameter_type="float", scaling="log"
            ),
        ]
    )
    client.configure_optimization(objective="f")
    gs = chaining_generation_strategy(init_trials=3, seed=0)
    client.set_generation_strategy(gs)
    for _ in range(4):
        for index, p in client.get_next_trials(max_trials=1).items():
            client.complete_trial(index, raw_data={"f": p["x"] * p["y"]})
    adapter = gs.adapter
    assert adapter is not None
    rows = [{"x": 1, "y": 0.01}, {"x": 3, "y": 0.5}]
    feats = [ObservationFeatures(parameters=dict(r)) for r in rows]
    X = adapter.transform_observation_features(feats)
    for t in adapter.transforms.values():
        feats = t.transform_observation_features(feats)
    manual = [[float(f.parameters[n]) for n in adapter.parameters] for f in feats]
    assert isinstance(X, torch.Tensor) and X.dtype == torch.float64
    assert X.tolist() == manual


def test_sobol_generator_is_seeded_and_respects_constraints() -> None:
    """Ax's Sobol is a function of its seed once the global RNGs are seeded too
    (integer rounding under constraints draws from them)."""
    from ax.utils.common.random import with_rng_seed

    ss = _grid()
    ss.add_parameter_constraints([ParameterConstraint(inequality="x + y <= 2")])
    experiment = Experiment(search_space=ss)

    def draw(seed: int) -> list[dict]:
        with with_rng_seed(seed):
            adapter = Generators.SOBOL(
                experiment=experiment, search_space=ss, seed=seed, deduplicate=False
            )
            return [a.parameters for a in adapter.gen(n=20).arms]

    assert draw(3) == draw(3) and draw(3) != draw(4)
    assert all(p["x"] + p["y"] <= 2 for p in draw(3))


def test_discrete_enumeration_matches_axs_discrete_choices() -> None:
    """Ax's discrete optimizer enumerates itertools.product over the digest's
    discrete choices in feature order; so does candidate_parameterizations."""
    ss = SearchSpace(
        [
            RangeParameter("a", ParameterType.INT, 0, 2),
            RangeParameter("b", ParameterType.INT, 5, 6),
        ]
    )
    digest = extract_search_space_digest(ss, param_names=["a", "b"])
    ax_order = list(itertools.product(*(digest.discrete_choices[i] for i in range(2))))
    ours = [(r["a"], r["b"]) for r in candidate_parameterizations(ss)]
    assert ours == [tuple(int(v) for v in c) for c in ax_order]


def _grid_client(seed: int = 0) -> Client:
    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", bounds=(0, 9), parameter_type="int"),
            RangeParameterConfig(name="y", bounds=(0, 9), parameter_type="int"),
        ]
    )
    client.configure_optimization(objective="f")
    return client


def _complete(client: Client, trials: dict) -> None:
    for index, p in trials.items():
        client.complete_trial(index, raw_data={"f": -((p["x"] - 3) ** 2) - p["y"]})


class _RecordingUCB(UpperConfidenceBound):
    """BoTorch's UCB; its input constructor records what Ax passes it."""

    seen: list[dict] = []
    takes_candidates = True


@acqf_input_constructor(_RecordingUCB)
def _construct_recording_ucb(
    model, posterior_transform=None, X_pending=None, candidates=None
):
    _RecordingUCB.seen.append({"X_pending": X_pending, "candidates": candidates})
    return {"model": model, "beta": 0.2, "posterior_transform": posterior_transform}


def test_acquisition_passes_x_pending_to_every_input_constructor() -> None:
    """Why the stock UCB needs a subclass: Ax passes X_pending (the running
    trials, in model space) to every input constructor, and BoTorch's own
    constructor for UpperConfidenceBound refuses it."""
    from ax_chaining.ax import candidate_set_strategy

    client = _grid_client()
    client.set_generation_strategy(candidate_set_strategy(_RecordingUCB, None, 3))
    for _ in range(4):
        _complete(client, client.get_next_trials(max_trials=1))
    client.get_next_trials(max_trials=1)  # left running: a pending point
    _RecordingUCB.seen.clear()
    client.get_next_trials(max_trials=1)
    pending = _RecordingUCB.seen[-1]["X_pending"]
    assert isinstance(pending, torch.Tensor) and pending.shape == (1, 2)
    model = SingleTaskGP(
        torch.rand(3, 1, dtype=torch.double), torch.rand(3, 1).double()
    )
    with pytest.raises(TypeError):
        get_acqf_input_constructor(UpperConfidenceBound)(
            model=model, X_pending=torch.rand(1, 1)
        )


def test_options_reach_the_acquisition_and_gen_metadata_is_stored(tmp_path) -> None:
    """Ax deep-copies model_gen_options on their way to the Acquisition; the
    `record` callable survives the copy, and what the node writes into the
    generator run's own gen_metadata dict is saved and loaded with it."""
    from ax_chaining.ax import GEN_METADATA_KEY, chaining_generation_strategy

    client = _grid_client()
    client.set_generation_strategy(chaining_generation_strategy(init_trials=3))
    for _ in range(5):
        _complete(client, client.get_next_trials(max_trials=1))
    path = tmp_path / "c.json"
    client.save_to_json_file(str(path))
    loaded = Client.load_from_json_file(str(path))
    gs = chaining_generation_strategy(init_trials=3)
    loaded.set_generation_strategy(gs)  # to reach the loaded experiment
    metas = [
        (gr.gen_metadata or {}).get(GEN_METADATA_KEY)
        for trial in gs.experiment.trials.values()
        for gr in trial.generator_runs
    ]
    model_steps = [m for m in metas if m and "acquisition_function" in m]
    assert [m["acquisition_function"] for m in model_steps] == ["ChainingUCB"] * 2


def test_a_met_criterion_pointing_at_its_own_node_completes_the_strategy() -> None:
    """Ax completes a strategy whose node transitions to itself: what
    RegretBoundCriterion relies on to stop a loop."""
    from ax.exceptions.generation_strategy import GenerationStrategyCompleted
    from ax.generation_strategy.transition_criterion import MinTrials

    from ax_chaining.ax import chaining_generation_strategy

    stop = MinTrials(threshold=3, transition_to="ChainingUCB")  # its own trials
    client = _grid_client()
    client.set_generation_strategy(
        chaining_generation_strategy(init_trials=2, transition_criteria=[stop])
    )
    for _ in range(5):
        _complete(client, client.get_next_trials(max_trials=1))
    with pytest.raises(GenerationStrategyCompleted):
        client.get_next_trials(max_trials=1)


class _CountingStop(BaseGlobalStoppingStrategy):
    """Stops always; counts how often Ax asks."""

    def __init__(self, min_trials: int) -> None:
        super().__init__(min_trials=min_trials, inactive_when_pending_trials=True)
        self.asked = 0

    def _should_stop_optimization(self, experiment, **kwargs):  # Ax's abstract hook
        self.asked += 1
        return True, "stop"


def test_global_stopping_hook_runs_after_min_trials_and_pending_checks() -> None:
    from ax_chaining.ax import chaining_generation_strategy

    client = _grid_client()
    gs = chaining_generation_strategy(init_trials=2)
    client.set_generation_strategy(gs)
    rule = _CountingStop(min_trials=3)
    _complete(client, client.get_next_trials(max_trials=2))
    experiment = gs.experiment
    assert rule.should_stop_optimization(experiment)[0] is False
    assert rule.asked == 0  # below min_trials: the hook is not called
    running = client.get_next_trials(max_trials=1)
    _complete(client, client.get_next_trials(max_trials=1))
    assert rule.should_stop_optimization(experiment)[0] is False
    assert rule.asked == 0  # a pending trial: inactive
    _complete(client, running)
    assert rule.should_stop_optimization(experiment) == (True, "stop")
    assert rule.asked == 1
