"""The Ax and BoTorch behaviours this package relies on, pinned one by one.

An Ax upgrade that changes one of them fails here, by name, before it shows up
as a wrong suggestion elsewhere.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import logging

import pytest
import torch
from ax.adapter.adapter_utils import extract_search_space_digest
from ax.adapter.registry import Generators
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig
from ax.core.arm import Arm
from ax.core.experiment import Experiment
from ax.core.generator_run import GeneratorRun
from ax.core.observation import ObservationFeatures
from ax.core.parameter import ParameterType, RangeParameter
from ax.core.parameter_constraint import ParameterConstraint
from ax.core.search_space import SearchSpace
from ax.generation_strategy.generation_node import GenerationNode
from ax.generation_strategy.generator_spec import GeneratorSpec
from ax.generators.torch.botorch_modular.acquisition import Acquisition
from ax.generators.torch.botorch_modular.utils import (
    construct_acquisition_and_optimizer_options,
)
from ax.global_stopping.strategies.base import BaseGlobalStoppingStrategy
from ax.storage.json_store.decoder import object_from_json
from ax.storage.json_store.encoder import object_to_json
from ax.utils.common.constants import Keys
from botorch.acquisition.analytic import UpperConfidenceBound
from botorch.acquisition.input_constructors import get_acqf_input_constructor
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


def test_acquisition_passes_x_pending_to_every_input_constructor() -> None:
    """Why the stock UCB needs a subclass: Ax passes X_pending to every input
    constructor, and BoTorch's own constructor for UpperConfidenceBound refuses it."""
    source = inspect.getsource(Acquisition._construct_botorch_acquisition)
    assert '"X_pending": self.X_pending' in source
    model = SingleTaskGP(
        torch.rand(3, 1, dtype=torch.double), torch.rand(3, 1).double()
    )
    with pytest.raises(TypeError):
        get_acqf_input_constructor(UpperConfidenceBound)(
            model=model, X_pending=torch.rand(1, 1)
        )


def test_select_from_candidate_set_is_public_with_this_signature() -> None:
    params = list(inspect.signature(Acquisition.select_from_candidate_set).parameters)
    assert params == ["self", "n", "candidate_set", "sampling_strategy"]
    optimize = inspect.signature(Acquisition.optimize).parameters
    assert "candidate_set" in optimize and "fixed_features" in optimize


def test_generator_spec_gen_deep_copies_gen_kwargs() -> None:
    """Options are deep-copied on the way down, so the `record` option is a
    function (a list's ``append``), which ``deepcopy`` keeps as it is."""
    assert "deepcopy(generator_gen_kwargs)" in inspect.getsource(GeneratorSpec.gen)
    chosen: list[int] = []
    copy.deepcopy({"r": chosen.append})["r"](1)
    assert chosen == [1]


def test_gen_metadata_is_the_runs_own_dict_and_is_stored() -> None:
    gr = GeneratorRun(arms=[Arm(parameters={"x": 1})], gen_metadata={})
    gr.gen_metadata["chaining_ucb"] = {"bound": 0.5}  # type: ignore[index]
    assert object_from_json(object_to_json(gr)).gen_metadata == {
        "chaining_ucb": {"bound": 0.5}
    }
    # GeneratorSpec.gen guarantees a dict (Ax's own node code relies on it too).
    assert "else generator_run.gen_metadata" in inspect.getsource(GeneratorSpec.gen)


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


def test_client_generates_under_its_random_seed() -> None:
    """Client.get_next_trials runs generation inside with_rng_seed(random_seed)."""
    source = inspect.getsource(Client.get_next_trials)
    assert "with_rng_seed(seed=self._random_seed)" in source


def test_strategy_completes_on_a_self_transition() -> None:
    """A met criterion pointing back at the current node completes the strategy."""
    from ax.generation_strategy.generation_strategy import GenerationStrategy

    source = inspect.getsource(GenerationStrategy.optimization_complete.fget)
    assert "next_node == self._curr.name" in source


def test_global_stopping_hook_after_min_trials_and_pending_checks() -> None:
    source = inspect.getsource(BaseGlobalStoppingStrategy.should_stop_optimization)
    assert source.index("min_trials") < source.index("_should_stop_optimization")
    assert inspect.isabstract(BaseGlobalStoppingStrategy)


def test_generation_node_gen_is_public_and_keyword_only() -> None:
    params = inspect.signature(GenerationNode.gen).parameters
    assert {"experiment", "pending_observations", "skip_fit", "data", "n"} <= set(
        params
    )
    assert params["experiment"].kind is inspect.Parameter.KEYWORD_ONLY


def test_client_snapshot_has_no_registry_bundle_for_botorch_classes() -> None:
    """Why registration is global: Ax encodes BoTorch classes (acquisition
    functions, kernels, Acquisition subclasses) through its global
    BoTorch-modular registries, which a RegistryBundle does not carry."""
    from ax.storage import botorch_modular_registry as reg

    assert hasattr(reg, "register_acquisition_function")
    assert hasattr(reg, "register_kernel") and hasattr(reg, "register_acquisition")


def test_observation_features_api() -> None:
    of = ObservationFeatures(parameters={"x": 1})
    assert of.parameters == {"x": 1}
    assert (
        RangeParameterConfig(name="x", bounds=(0, 1), parameter_type="int").name == "x"
    )
