"""Ax integration of Chaining-UCB: real ``ax.api.Client`` loops, no mocks."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from ax.api.client import Client
from ax.api.configs import ChoiceParameterConfig, RangeParameterConfig
from ax.core.observation import ObservationFeatures
from ax.core.parameter import (
    ChoiceParameter,
    FixedParameter,
    ParameterType,
    RangeParameter,
)
from ax.core.parameter_constraint import ParameterConstraint
from ax.core.search_space import SearchSpace
from ax.exceptions.core import SearchSpaceExhausted, UnsupportedError
from ax.generation_strategy.generation_strategy import GenerationStrategy
from ax.storage.json_store.decoder import object_from_json
from ax.storage.json_store.encoder import object_to_json
from ax.utils.common.constants import Keys

from ax_chaining.acquisition import UCB, ChainingUCB
from ax_chaining.ax import (
    GEN_METADATA_KEY,
    CandidateSetNode,
    CandidateSetSpec,
    candidate_index_parameter,
    candidate_parameterizations,
    candidate_set_node,
    candidate_set_strategy,
    chaining_generation_strategy,
    gp_ucb_generation_strategy,
    load_client,
    parameters_from_table,
    precomputed_kernel_surrogate_spec,
    register_storage,
    ucb_generation_strategy,
)
from ax_chaining.ax.certificates import experiment_of

Objective = Callable[[dict[str, Any]], float]

# Ax and pandas deprecation chatter, not about this package.
pytestmark = pytest.mark.filterwarnings("ignore::Warning:ax")


@pytest.fixture(autouse=True)
def _quiet_ax() -> None:
    # Ax logs every trial at INFO level; keep test output readable.
    logging.getLogger("ax").setLevel(logging.WARNING)


# ---------------------------------------------------------------------------
# Helpers.
# ---------------------------------------------------------------------------


def _int_grid_client(seed: int, **constraints: Any) -> Client:
    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", bounds=(0, 19), parameter_type="int"),
            RangeParameterConfig(name="y", bounds=(0, 19), parameter_type="int"),
        ],
        **constraints,
    )
    client.configure_optimization(objective="f")
    return client


def _grid_f(p: dict[str, Any]) -> float:
    # Two bumps; the global maximum 1.0 is at (13, 6).
    x, y = p["x"], p["y"]
    return math.exp(-((x - 13) ** 2 + (y - 6) ** 2) / 30.0) + 0.6 * math.exp(
        -((x - 4) ** 2 + (y - 15) ** 2) / 20.0
    )


def _continuous_client(seed: int) -> Client:
    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", bounds=(0.0, 1.0), parameter_type="float"),
            RangeParameterConfig(name="y", bounds=(0.0, 1.0), parameter_type="float"),
        ]
    )
    client.configure_optimization(objective="f")
    return client


def _continuous_f(p: dict[str, Any]) -> float:
    x, y = p["x"], p["y"]
    return -4.0 * ((x - 0.7) ** 2 + (y - 0.25) ** 2) + 0.3 * math.cos(6.0 * x)


def _run(
    client: Client,
    f: Objective,
    num_trials: int,
    batch: int = 1,
    noise_std: float = 0.01,
    seed: int = 0,
) -> list[list[dict[str, Any]]]:
    """Run an ask/tell loop; returns the parameterizations, one list per call."""
    rng = np.random.default_rng(seed)
    rounds = []
    done = 0
    while done < num_trials:
        trials = client.get_next_trials(max_trials=min(batch, num_trials - done))
        assert 1 <= len(trials) <= batch
        for index, params in trials.items():
            noise = noise_std * float(rng.standard_normal())
            client.complete_trial(index, raw_data={"f": f(params) + noise})
        rounds.append(list(trials.values()))
        done += len(trials)
    return rounds


def _flat(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [p for r in rounds for p in r]


def _key(p: dict[str, Any]) -> tuple:
    def canon(v: Any) -> Any:
        return v if isinstance(v, str | bool) else round(float(v), 9)

    return tuple(sorted((k, canon(v)) for k, v in p.items()))


def _expected_best_of_random(values: list[float], k: int) -> float:
    """E[max of k uniform draws without replacement from ``values``]."""
    v = sorted(values)
    n = len(v)
    total = math.comb(n, k)
    return sum(v[j] * math.comb(j, k - 1) / total for j in range(k - 1, n))


def _metadata(gs: GenerationStrategy, trial_index: int) -> dict[str, Any]:
    gr = gs.experiment.trials[trial_index].generator_runs[0]
    return (gr.gen_metadata or {}).get(GEN_METADATA_KEY, {})


def _assert_in_search_space(gs: GenerationStrategy, params: list[dict]) -> None:
    ss = gs.experiment.search_space
    for p in params:
        assert ss.check_membership(p), p


def _nodes(client: Client) -> list[str]:
    return list(client.summarize()["generation_node"])


# ---------------------------------------------------------------------------
# Integration loops.
# ---------------------------------------------------------------------------


def test_discrete_grid_400_candidates() -> None:
    """A 20 x 20 integer grid: 400 candidates, 20 trials, over two seeds."""
    grid = [{"x": x, "y": y} for x in range(20) for y in range(20)]
    values = [_grid_f(p) for p in grid]
    bests = []
    for seed in (0, 1):
        client = _int_grid_client(seed)
        gs = chaining_generation_strategy(init_trials=8, seed=seed)
        client.set_generation_strategy(gs)
        params = _flat(_run(client, _grid_f, 20, seed=seed))
        _assert_in_search_space(gs, params)
        assert all(isinstance(p["x"], int) and isinstance(p["y"], int) for p in params)
        meta = _metadata(gs, 19)
        assert meta["num_candidates"] == 400
        assert meta["acquisition_function"] == "ChainingUCB"
        assert meta["t"] == 20  # 19 observations + 1
        cert = meta["certificate"]
        assert cert["bound"] > 0 and cert["parameters"] in params  # an evaluated one
        bests.append(max(_grid_f(p) for p in params))
    assert np.mean(bests) > _expected_best_of_random(values, 20)
    assert max(bests) >= 0.95  # at or next to the optimum (13, 6)


def test_continuous_fixed_design() -> None:
    """A continuous square: queries come from one fixed Sobol design."""
    spec = CandidateSetSpec(num_candidates=256, seed=3)
    bests, randoms = [], []
    for seed in (0, 1):
        client = _continuous_client(seed)
        gs = chaining_generation_strategy(init_trials=8, num_candidates=256, seed=3)
        client.set_generation_strategy(gs)
        params = _flat(_run(client, _continuous_f, 20, seed=seed))
        _assert_in_search_space(gs, params)
        design = candidate_parameterizations(gs.experiment.search_space, spec)
        assert len(design) == 256
        design_keys = {_key(p) for p in design}
        assert all(_key(p) in design_keys for p in params)
        bests.append(max(_continuous_f(p) for p in params))
        randoms.append(_expected_best_of_random([_continuous_f(p) for p in design], 20))
    assert np.mean(bests) > np.mean(randoms)


def _graph_items(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random feature maps of graphs, their normalized kernel, and an objective
    drawn from the GP with that kernel (as in the paper's Section 4)."""
    g = torch.Generator().manual_seed(seed)
    phi = torch.rand(n, 8, generator=g, dtype=torch.float64) ** 3
    phi = phi / phi.norm(dim=1, keepdim=True)
    w = torch.randn(phi.shape[1], generator=g, dtype=torch.float64)
    return phi @ phi.T, phi @ w


def test_graph_problem_with_precomputed_kernel(tmp_path: Any) -> None:
    """Items through an index and a precomputed Gram matrix, saved by reference."""
    n = 80
    gram, f_values = _graph_items(n, seed=0)
    values = f_values.tolist()
    bests = []
    for seed in (0, 1):
        client = Client(random_seed=seed)
        client.configure_experiment(parameters=[candidate_index_parameter(n, "graph")])
        client.configure_optimization(objective="f")
        gs = chaining_generation_strategy(
            init_trials=6, surrogate_spec=precomputed_kernel_surrogate_spec(gram)
        )
        client.set_generation_strategy(gs)
        params = _flat(
            _run(client, lambda p: values[p["graph"]], 20, noise_std=0.05, seed=seed)
        )
        _assert_in_search_space(gs, params)
        assert gs.adapter is not None
        model = gs.adapter.generator.surrogate.model  # type: ignore[attr-defined]
        assert type(model.covar_module).__name__ == "PrecomputedKernel"
        bests.append(max(values[p["graph"]] for p in params))
        if seed == 0:  # the kernel survives JSON, by reference to its content
            path = tmp_path / "graph.json"
            client.save_to_json_file(str(path))
            assert path.stat().st_size < 2e6
            loaded = Client.load_from_json_file(str(path))
            assert loaded.get_next_trials(1) == client.get_next_trials(1)
    assert np.mean(bests) > _expected_best_of_random(values, 20)
    assert max(bests) == max(values)


def test_batch_of_three_conditions_on_pending_points() -> None:
    """get_next_trials(3): sequential greedy with pending points (GP-BUCB)."""
    client = _int_grid_client(seed=2)
    gs = chaining_generation_strategy(init_trials=5, seed=2)
    client.set_generation_strategy(gs)
    rounds = _run(client, _grid_f, 21, batch=3, seed=2)
    assert [len(r) for r in rounds] == [3] * 7
    params = _flat(rounds)
    _assert_in_search_space(gs, params)
    for r in rounds:  # exclude_pending: three distinct points per batch
        assert len({_key(p) for p in r}) == 3
    # Ax checks transitions between get_next_trials calls: the third initial
    # batch completes the initialization (6 trials). Each pick conditions on the
    # earlier picks of its call, counted in t = observations + pending + 1.
    assert _nodes(client) == ["UniformCandidates"] * 6 + ["ChainingUCB"] * 15
    for index in range(6, 21):
        assert _metadata(gs, index)["t"] == index + 1
    grid = [{"x": x, "y": y} for x in range(20) for y in range(20)]
    best = max(_grid_f(p) for p in params)
    assert best > _expected_best_of_random([_grid_f(p) for p in grid], 21)


@pytest.mark.parametrize(
    "factory",
    [chaining_generation_strategy, ucb_generation_strategy, gp_ucb_generation_strategy],
)
def test_several_arms_in_one_generator_run(factory: Callable[..., Any]) -> None:
    """n > 1 arms from one gen call: sequential greedy with X_pending for
    ChainingUCB, the n best values for the analytic UCBs."""
    client = _int_grid_client(seed=0)
    gs = factory(init_trials=5, seed=0)
    client.set_generation_strategy(gs)
    _run(client, _grid_f, 6)
    gr = gs.current_node.gen(experiment=gs.experiment, pending_observations={}, n=4)
    params = [arm.parameters for arm in gr.arms]
    assert len({_key(p) for p in params}) == 4
    _assert_in_search_space(gs, params)
    values = gr.gen_metadata[Keys.EXPECTED_ACQF_VAL]
    if factory is not chaining_generation_strategy:  # analytic: the 4 best values
        assert values == sorted(values, reverse=True)


def test_stock_ucb_gp_ucb_and_chaining_in_one_script() -> None:
    """The three strategies run on the same problem through the same API."""
    results = {}
    for factory in (
        ucb_generation_strategy,
        gp_ucb_generation_strategy,
        chaining_generation_strategy,
    ):
        client = _int_grid_client(seed=0)
        gs = factory(init_trials=5, seed=0)
        client.set_generation_strategy(gs)
        params = _flat(_run(client, _grid_f, 10, seed=0))
        _assert_in_search_space(gs, params)
        results[factory.__name__] = _metadata(gs, 9)["acquisition_function"]
        # The same initial design (same seed): the comparison is paired.
        assert params[:5] == results.setdefault("init", params[:5])
    assert results["ucb_generation_strategy"] == "UCB"
    assert results["gp_ucb_generation_strategy"] == "GPUCB"
    assert results["chaining_generation_strategy"] == "ChainingUCB"


def test_mixed_space_goes_through_ax_transforms() -> None:
    """Log-scale and categorical parameters: the candidate set is mapped into
    Ax's transformed space (log, one-hot) by the adapter's own transforms."""
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", bounds=(0.0, 1.0), parameter_type="float"),
            RangeParameterConfig(
                name="lr", bounds=(1e-4, 1.0), parameter_type="float", scaling="log"
            ),
            ChoiceParameterConfig(
                name="c", values=["a", "b", "c"], parameter_type="str"
            ),
        ]
    )
    client.configure_optimization(objective="-f")  # minimize

    def f(p: dict[str, Any]) -> float:
        return (
            (p["x"] - 0.3) ** 2
            + math.log10(p["lr"] / 1e-2) ** 2 / 4
            + (0.0 if p["c"] == "b" else 0.5)
        )

    gs = chaining_generation_strategy(init_trials=5, num_candidates=128, seed=0)
    client.set_generation_strategy(gs)
    params = _flat(_run(client, f, 9, seed=0))
    _assert_in_search_space(gs, params)
    design = candidate_parameterizations(
        gs.experiment.search_space, CandidateSetSpec(num_candidates=128, seed=0)
    )
    assert all(_key(p) in {_key(q) for q in design} for p in params)
    node = gs.current_node
    assert isinstance(node, CandidateSetNode) and gs.adapter is not None
    X = node.model_space_candidates(gs.adapter, design)
    # x, lr (log10) and three one-hot columns for c.
    assert X.shape == (128, 5)
    assert X[:, 1].min() >= -4.0 - 1e-9 and X[:, 1].max() <= 0.0 + 1e-9


def test_sobol_initialization_and_fixed_parameters() -> None:
    client = _int_grid_client(seed=0)
    client.set_generation_strategy(
        chaining_generation_strategy(init_trials=3, init="sobol", seed=0)
    )
    for _ in range(5):
        trials = client.get_next_trials(max_trials=1, fixed_parameters={"x": 7})
        for index, p in trials.items():
            assert p["x"] == 7
            client.complete_trial(index, raw_data={"f": _grid_f(p)})
    assert _nodes(client) == ["Sobol"] * 3 + ["ChainingUCB"] * 2


def test_candidate_table_and_exclude_evaluated() -> None:
    """A user table of predetermined candidates; noise-free, no repeats."""
    table = pd.DataFrame(
        {"x": [0.1, 0.2, 0.5, 0.7, 0.9, 0.95], "y": [0.3, 0.8, 0.5, 0.2, 0.1, 0.6]}
    )
    client = _continuous_client(seed=0)
    client.set_generation_strategy(
        chaining_generation_strategy(
            init_trials=2, candidates=table, exclude_evaluated=True, seed=0
        )
    )
    params = _flat(_run(client, _continuous_f, 6, noise_std=0.0))
    rows = {_key(r) for r in table.to_dict(orient="records")}
    assert {_key(p) for p in params} == rows  # each candidate exactly once
    with pytest.raises(SearchSpaceExhausted, match="exclude_evaluated"):
        client.get_next_trials(max_trials=1)


def test_exclude_evaluated_applies_to_the_initialization() -> None:
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[RangeParameterConfig(name="x", bounds=(0, 1), parameter_type="int")]
    )
    client.configure_optimization(objective="f")
    client.set_generation_strategy(
        chaining_generation_strategy(init_trials=5, exclude_evaluated=True, seed=0)
    )
    _run(client, lambda p: float(p["x"]), 2)
    with pytest.raises(
        SearchSpaceExhausted,
        match="All 2 candidates are used.*init_trials exceeds the candidate set",
    ):
        client.get_next_trials(max_trials=1)


def test_candidate_table_allows_reevaluation_by_default() -> None:
    """Noisy setting (the paper's): re-evaluating a candidate is allowed."""
    table = [{"x": 0.1, "y": 0.3}, {"x": 0.7, "y": 0.25}, {"x": 0.9, "y": 0.9}]
    client = _continuous_client(seed=0)
    client.set_generation_strategy(
        chaining_generation_strategy(init_trials=2, candidates=table, seed=0)
    )
    params = _flat(_run(client, _continuous_f, 7, noise_std=0.05))
    assert len(params) == 7
    assert {_key(p) for p in params} <= {_key(r) for r in table}


def test_init_trials_zero_with_attached_trials() -> None:
    """No initialization: the user attaches measurements, the model goes first."""
    client = _int_grid_client(seed=0)
    gs = chaining_generation_strategy(init_trials=0, seed=0)
    client.set_generation_strategy(gs)
    for p in ({"x": 2, "y": 3}, {"x": 15, "y": 15}, {"x": 10, "y": 5}):
        index = client.attach_trial(parameters=p)
        client.complete_trial(index, raw_data={"f": _grid_f(p)})
    _run(client, _grid_f, 2)
    assert _nodes(client)[3:] == ["ChainingUCB"] * 2


def test_model_space_candidates_are_reused_while_the_transforms_hold() -> None:
    """The candidates in the model space are kept between steps, and computed
    again when the adapter maps them elsewhere."""

    def client_with(scaling: str) -> GenerationStrategy:
        client = Client(random_seed=0)
        client.configure_experiment(
            parameters=[
                RangeParameterConfig(
                    name=n, bounds=(1, 20), parameter_type="int", scaling=scaling
                )
                for n in ("x", "y")
            ]
        )
        client.configure_optimization(objective="f")
        gs = chaining_generation_strategy(init_trials=3, seed=0)
        client.set_generation_strategy(gs)
        _run(client, _grid_f, 5)
        return gs

    linear, log = client_with("linear"), client_with("log")
    node = linear.current_node
    rows = candidate_parameterizations(linear.experiment.search_space)
    first = node.model_space_candidates(linear.adapter, rows)
    assert node.model_space_candidates(linear.adapter, rows) is first
    # Log scaling: Ax's Log transform maps the same rows to other values.
    X = node.model_space_candidates(log.adapter, rows)
    feats = [ObservationFeatures(parameters=dict(r)) for r in rows]
    assert torch.equal(X, log.adapter.transform_observation_features(feats))
    assert not torch.equal(X, first)


def test_evaluate_acquisition_function_works() -> None:
    """Ax's public evaluate_acquisition_function gives the value Ax selected on."""
    client = _int_grid_client(seed=0)
    gs = chaining_generation_strategy(init_trials=4, seed=0)
    client.set_generation_strategy(gs)
    _run(client, _grid_f, 6)
    node, adapter = gs.current_node, gs.adapter
    assert isinstance(node, CandidateSetNode) and adapter is not None
    gr = node.gen(experiment=gs.experiment, pending_observations={}, n=1)
    rows = candidate_parameterizations(gs.experiment.search_space)
    X = node.model_space_candidates(adapter, rows)
    feats = [ObservationFeatures(parameters=gr.arms[0].parameters)]
    value = adapter.evaluate_acquisition_function(feats, acq_options={"candidates": X})
    expected = np.ravel(gr.gen_metadata[Keys.EXPECTED_ACQF_VAL])
    assert value == pytest.approx(list(expected), rel=1e-9)
    other = [ObservationFeatures(parameters={"x": 0, "y": 19})]
    assert (
        adapter.evaluate_acquisition_function(other, acq_options={"candidates": X})[0]
        <= value[0] + 1e-9
    )
    with pytest.raises(ValueError, match="needs `candidates`"):
        adapter.evaluate_acquisition_function(feats)


# ---------------------------------------------------------------------------
# JSON storage.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "factory",
    [chaining_generation_strategy, ucb_generation_strategy, gp_ucb_generation_strategy],
)
def test_json_round_trip_gives_identical_next_suggestion(
    factory: Callable[..., Any], tmp_path: Any
) -> None:
    """Save mid-run (with a pending trial), load, continue: same suggestions."""
    client = _int_grid_client(seed=4)
    # torch_device goes through Ax's TorchAdapter and is stored in the JSON.
    client.set_generation_strategy(factory(init_trials=4, seed=4, torch_device="cpu"))
    _run(client, _grid_f, 7, seed=4)
    pending = client.get_next_trials(max_trials=1)  # left running
    path = str(tmp_path / "snapshot.json")
    client.save_to_json_file(path)
    loaded = Client.load_from_json_file(path)
    original = client.get_next_trials(max_trials=2)
    assert original == loaded.get_next_trials(max_trials=2)
    assert not set(pending) & set(original)
    index = client.attach_trial({"x": 1, "y": 1})  # failed and abandoned trials
    client.mark_trial_failed(index)
    client.mark_trial_abandoned(next(iter(pending)))
    for index, p in original.items():
        client.complete_trial(index, raw_data={"f": _grid_f(p)})
    assert len(client.get_next_trials(max_trials=1)) == 1


def test_json_round_trip_during_initialization(tmp_path: Any) -> None:
    table = [{"x": 0.1 * i, "y": 0.05 * i} for i in range(10)]
    client = _continuous_client(seed=0)
    client.set_generation_strategy(
        chaining_generation_strategy(init_trials=5, candidates=table, seed=11)
    )
    _run(client, _continuous_f, 2)
    path = str(tmp_path / "init.json")
    client.save_to_json_file(path)
    loaded = Client.load_from_json_file(path)
    assert client.get_next_trials(max_trials=3) == loaded.get_next_trials(max_trials=3)


def test_json_round_trip_during_sobol_initialization(tmp_path: Any) -> None:
    """The Sobol node, its seed drawn from the Client's, reloads and goes on."""
    client = _continuous_client(seed=0)
    client.set_generation_strategy(
        chaining_generation_strategy(init_trials=4, init="sobol")
    )
    _run(client, _continuous_f, 2)
    path = str(tmp_path / "sobol.json")
    client.save_to_json_file(path)
    loaded = Client.load_from_json_file(path)
    for _ in range(3):  # two Sobol trials, then the model's
        trials = client.get_next_trials(max_trials=1)
        assert trials == loaded.get_next_trials(max_trials=1)
        for index, p in trials.items():
            client.complete_trial(index, raw_data={"f": _continuous_f(p)})
            loaded.complete_trial(index, raw_data={"f": _continuous_f(p)})
    assert _nodes(client) == _nodes(loaded) == ["Sobol"] * 4 + ["ChainingUCB"]


def _fresh_process(code: str) -> str:
    """Run ``code`` in a new Python process; its stdout (fails on an error)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _saved_loop(tmp_path: Any) -> tuple[Any, Any]:
    """A Chaining-UCB loop of 5 trials saved to JSON, and its next suggestion."""
    client = _int_grid_client(3)
    client.set_generation_strategy(chaining_generation_strategy(init_trials=4))
    _run(client, _grid_f, 5)
    path = tmp_path / "saved.json"
    client.save_to_json_file(str(path))
    return path, client.get_next_trials(max_trials=1)


def test_a_saved_experiment_loads_in_a_new_process_after_importing_ax_layer(
    tmp_path: Any,
) -> None:
    path, expected = _saved_loop(tmp_path)
    out = _fresh_process(
        "import ax_chaining.ax\n"
        "from ax.api.client import Client\n"
        f"c = Client.load_from_json_file({str(path)!r})\n"
        "print(repr(c.get_next_trials(max_trials=1)))\n"
    )
    assert out.strip() == repr(expected)
    # Registration is idempotent, and the spec round-trips through Ax's JSON.
    register_storage()
    spec = CandidateSetSpec(candidates=[{"x": 1, "y": "a"}], seed=5)
    assert object_from_json(object_to_json(spec)) == spec
    node = candidate_set_node(
        ChainingUCB, {"sigma_floor": 1e-5}, candidate_spec=CandidateSetSpec(seed=1)
    )
    assert isinstance(object_from_json(object_to_json(node)), CandidateSetNode)


def test_load_client_after_importing_the_package_alone(tmp_path: Any) -> None:
    """``import ax_chaining`` loads no Ax (so registers nothing with it):
    ``ax_chaining.load_client`` does, and names a class that stays unknown."""
    path, expected = _saved_loop(tmp_path)
    # A snapshot naming an acquisition class this process never registered.
    text = path.read_text()
    assert text.count('"index": "ChainingUCB"') > 0
    other = tmp_path / "other.json"
    other.write_text(text.replace('"index": "ChainingUCB"', '"index": "MyOwnUCB"'))
    out = _fresh_process(
        "import sys\n"
        "import ax_chaining\n"
        "print(any(m == 'ax' or m.startswith('ax.') for m in sys.modules))\n"
        f"c = ax_chaining.load_client({str(path)!r})\n"
        "print(repr(c.get_next_trials(max_trials=1)))\n"
        "try:\n"
        f"    ax_chaining.load_client({str(other)!r})\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    no_ax, suggested, error = out.strip().split("\n")
    assert no_ax == "False"
    assert suggested == repr(expected)
    assert "Index 'MyOwnUCB' is not registered" in error
    assert "a class of your own" in error
    assert "must be registered with Ax's JSON storage before loading" in error
    with pytest.raises(TypeError, match="`filepath` must be a path"):
        load_client(3)  # type: ignore[arg-type]


def test_gram_is_stored_by_reference_and_checked_on_load(tmp_path: Any) -> None:
    from ax_chaining import kernels

    gram, f_values = _graph_items(40, seed=1)
    client = Client(random_seed=0)
    client.configure_experiment(parameters=[candidate_index_parameter(40)])
    client.configure_optimization(objective="f")
    spec = precomputed_kernel_surrogate_spec(gram)
    client.set_generation_strategy(chaining_generation_strategy(5, surrogate_spec=spec))
    _run(client, lambda p: float(f_values[p["item"]]), 7)
    path = tmp_path / "ref.json"
    client.save_to_json_file(str(path))
    assert kernels.gram_key(gram) in path.read_text()
    torch.save(gram, tmp_path / "gram.pt")
    expected = client.get_next_trials(max_trials=1)
    out = _fresh_process(
        "import torch, ax_chaining.ax as axc\n"
        "from ax.api.client import Client\n"
        f"c = Client.load_from_json_file({str(path)!r})\n"
        "try:\n"
        "    c.get_next_trials(max_trials=1)\n"
        "except ValueError as e:\n"
        "    print('refused:', 'no Gram matrix with that content' in str(e))\n"
        f"gram = torch.load({str(tmp_path / 'gram.pt')!r}) + 0.0  # a new tensor\n"
        "axc.precomputed_kernel_surrogate_spec(gram)\n"
        "print(repr(c.get_next_trials(max_trials=1)))\n"
    )
    refused, suggestion = out.strip().splitlines()
    assert refused == "refused: True"
    assert suggestion == repr(expected)


# ---------------------------------------------------------------------------
# The candidate set.
# ---------------------------------------------------------------------------


def test_candidate_parameterizations_discrete_enumeration() -> None:
    ss = SearchSpace(
        parameters=[
            ChoiceParameter("c", ParameterType.STRING, ["a", "b", "c"]),
            RangeParameter("k", ParameterType.INT, 1, 4),
            FixedParameter("fixed", ParameterType.FLOAT, 2.5),
        ],
    )
    rows = candidate_parameterizations(ss)
    assert len(rows) == 12
    assert all(r["fixed"] == 2.5 for r in rows)
    assert rows[:2] == [
        {"c": "a", "k": 1, "fixed": 2.5},
        {"c": "a", "k": 2, "fixed": 2.5},
    ]
    ss_constrained = SearchSpace(
        parameters=[
            RangeParameter("x", ParameterType.INT, 0, 9),
            RangeParameter("y", ParameterType.INT, 0, 9),
        ],
        parameter_constraints=[ParameterConstraint(inequality="x + y <= 4")],
    )
    rows = candidate_parameterizations(ss_constrained)
    assert len(rows) == 15
    assert all(r["x"] + r["y"] <= 4 for r in rows)


def test_candidate_parameterizations_sobol_design() -> None:
    ss = SearchSpace(
        parameters=[
            RangeParameter("x", ParameterType.FLOAT, -2.0, 3.0),
            RangeParameter("lr", ParameterType.FLOAT, 1e-5, 1e-1, log_scale=True),
            RangeParameter("n", ParameterType.INT, 1, 64, log_scale=True),
            ChoiceParameter("opt", ParameterType.STRING, ["adam", "sgd"]),
        ],
        parameter_constraints=[ParameterConstraint(inequality="x <= 2")],
    )
    a = candidate_parameterizations(ss, CandidateSetSpec(num_candidates=200, seed=1))
    b = candidate_parameterizations(ss, CandidateSetSpec(num_candidates=200, seed=1))
    c = candidate_parameterizations(ss, CandidateSetSpec(num_candidates=200, seed=2))
    assert a == b  # fixed design for a given seed
    assert a != c
    assert len(a) == 200
    assert all(ss.check_membership(r) for r in a)
    # Uniform in the log scale: about half of the learning rates below 1e-3.
    assert 0.4 < np.mean([r["lr"] < 1e-3 for r in a]) < 0.6
    assert {r["opt"] for r in a} == {"adam", "sgd"}


def test_candidate_table_is_validated_and_completed() -> None:
    ss = SearchSpace(
        parameters=[
            RangeParameter("x", ParameterType.FLOAT, 0.0, 1.0),
            FixedParameter("f", ParameterType.INT, 3),
        ]
    )
    table = [{"x": 0.5}, {"x": 0.25, "f": 3}]
    rows = candidate_parameterizations(ss, CandidateSetSpec(candidates=table))
    assert rows == [{"x": 0.5, "f": 3}, {"x": 0.25, "f": 3}]  # filled
    twice = [{"x": 0.5}, {"x": 0.25, "f": 3}, {"x": 0.5, "note": "again"}]
    same = r"`candidates\[0\]` and `candidates\[2\]` have the same parameters"
    with pytest.raises(ValueError, match=same):
        candidate_parameterizations(ss, CandidateSetSpec(candidates=twice))


# ---------------------------------------------------------------------------
# Bad input: clear errors naming the argument, before any trial.
# ---------------------------------------------------------------------------


def test_constraints_leaving_no_candidate_discrete() -> None:
    client = _int_grid_client(seed=0, parameter_constraints=["x + y <= -1"])
    client.set_generation_strategy(chaining_generation_strategy(seed=0))
    with pytest.raises(
        ValueError, match=r"parameter constraints .* leave no candidate"
    ):
        client.get_next_trials(max_trials=1)


@pytest.mark.parametrize(
    ("table", "match"),
    [
        (
            [{"x": 0.5, "y": 0.5}, {"x": 1.5, "y": 0.5}],
            r"candidates\[1\]` = .*1.5 is not a valid value for parameter .*'x'",
        ),
        ([{"x": 0.5}], r"candidates\[0\]` = .*search space has parameters"),
    ],
)
def test_bad_candidate_table_is_rejected_at_first_trial(
    table: list[dict[str, Any]], match: str
) -> None:
    client = _continuous_client(seed=0)
    client.set_generation_strategy(
        chaining_generation_strategy(init_trials=1, candidates=table)
    )
    with pytest.raises(ValueError, match=match):
        client.get_next_trials(max_trials=1)
    assert client.summarize().empty  # no trial was created


@pytest.mark.parametrize(
    ("candidates", "error", "match"),
    [
        ("x=1", TypeError, "`candidates` must be a pandas DataFrame"),
        ({"x": 1.0}, TypeError, "`candidates` must be a pandas DataFrame"),
        ([[0.1, 0.2]], TypeError, r"`candidates\[0\]` must be a mapping"),
        ([{"x": [1, 2]}], TypeError, r"`candidates\[0\]` has entry 'x'.*list"),
        ([], ValueError, "`candidates` is empty"),
        (
            [{"x": 0.1}, {"x": float("nan")}],
            ValueError,
            r"`candidates\[1\]`: 'x' is nan",
        ),
        (
            pd.DataFrame({"x": [0.1, np.inf]}),
            ValueError,
            r"`candidates` row with index label 1: 'x' is inf; expected a finite",
        ),
    ],
)
def test_malformed_candidate_table_is_rejected_by_factory(
    candidates: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        chaining_generation_strategy(init_trials=1, candidates=candidates)


def test_precomputed_kernel_surrogate_spec_validates_gram() -> None:
    with pytest.raises(TypeError, match="`gram` must be a torch.Tensor"):
        precomputed_kernel_surrogate_spec([[1.0, 0.0], [0.0, 1.0]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="symmetric"):
        precomputed_kernel_surrogate_spec(torch.tensor([[1.0, 0.9], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="`num_items` must be >= 2, got 1"):
        candidate_index_parameter(1)


@pytest.mark.parametrize("init", ["uniform", "sobol"])
def test_multi_objective_is_unsupported(init: str) -> None:
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[RangeParameterConfig(name="x", bounds=(0, 9), parameter_type="int")]
    )
    client.configure_optimization(objective="a, b")
    client.set_generation_strategy(chaining_generation_strategy(seed=0, init=init))
    with pytest.raises(UnsupportedError, match=r"single objective.*Scalarize"):
        client.get_next_trials(max_trials=1)
    assert len(client.summarize()) == 0  # refused before any trial


def test_scalarized_objective_is_supported() -> None:
    """The documented alternative to multi-objective: a weighted sum."""
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", bounds=(0, 9), parameter_type="int"),
            RangeParameterConfig(name="y", bounds=(0, 9), parameter_type="int"),
        ]
    )
    client.configure_optimization(objective="a + 0.5 * b")
    gs = chaining_generation_strategy(init_trials=3, seed=0)
    client.set_generation_strategy(gs)
    for _ in range(5):
        for index, p in client.get_next_trials(max_trials=1).items():
            raw = {"a": -((p["x"] - 3) ** 2), "b": -10.0 * (p["y"] - 7) ** 2}
            client.complete_trial(index, raw_data=raw)
    cert = _metadata(gs, 4)["certificate"]
    # Ax folds the outcome scales into the scalarized weights, so the model's
    # objective is already in the user's units.
    assert cert["objective_scale"] == pytest.approx(1.0)
    assert cert["bound"] == pytest.approx(cert["bound_model_units"])


def test_outcome_constraints_are_unsupported() -> None:
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[RangeParameterConfig(name="x", bounds=(0, 9), parameter_type="int")]
    )
    client.configure_optimization(objective="a", outcome_constraints=["b <= 1"])
    client.set_generation_strategy(chaining_generation_strategy(seed=0))
    with pytest.raises(UnsupportedError, match="outcome constraints"):
        client.get_next_trials(max_trials=1)


def test_candidate_set_over_memory_budget() -> None:
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="x", bounds=(0, 999), parameter_type="int"),
            RangeParameterConfig(name="y", bounds=(0, 999), parameter_type="int"),
        ]
    )
    client.configure_optimization(objective="f")
    client.set_generation_strategy(chaining_generation_strategy(seed=0))
    with pytest.raises(ValueError, match=r"1,000,000 combinations.*`max_candidates`"):
        client.get_next_trials(max_trials=1)
    table = [{"x": i, "y": 0} for i in range(50)]
    with pytest.raises(
        ValueError, match=r"50 `candidates` rows, more than `max_candidates`=20"
    ):
        chaining_generation_strategy(candidates=table, max_candidates=20)
    with pytest.raises(
        ValueError, match=r"`num_candidates`=5000, more than `max_candidates`"
    ):
        chaining_generation_strategy(num_candidates=5000, max_candidates=1000)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"delta": 1.5}, ValueError, r"`delta` must be in \(0, 1\), got 1.5"),
        ({"delta": "0.1"}, TypeError, "`delta` must be a float"),
        ({"scale": -1.0}, ValueError, r"`scale` must be finite and > 0, got -1.0"),
        ({"scale": float("nan")}, ValueError, "`scale` must be finite"),
        ({"init_trials": -1}, ValueError, "`init_trials` must be >= 0"),
        ({"init": "lhs"}, ValueError, "`init` must be 'uniform' or 'sobol'"),
        ({"seed": 1.5}, TypeError, "`seed` must be an int"),
        ({"num_candidates": -3}, ValueError, "`num_candidates` must be a positive"),
        (
            {"init": "sobol", "candidates": [{"x": 1}], "init_trials": 1},
            ValueError,
            "`init='sobol'`",
        ),
        (
            {"init_trials": 3, "candidates": [{"x": 1}, {"x": 2}]},
            ValueError,
            r"`init_trials`=3 exceeds the 2 rows of `candidates`",
        ),
        ({"surrogate_spec": "gp"}, TypeError, "`surrogate_spec` must be an ax"),
        (
            {"engine_options": {"sigma_flor": 1e-3}},
            TypeError,
            r"Unknown ChainingUCB option\(s\) \['sigma_flor'\]",
        ),
        ({"engine_options": {"sigma_floor": 2.0}}, ValueError, r"`sigma_floor` must"),
        ({"engine_options": [("path", "dense")]}, TypeError, "must be a mapping"),
        ({"engine_options": {"delta": 0.1}}, TypeError, r"Pass \['delta'\] as"),
        ({"engine_options": {"path": "sparse"}}, ValueError, "`path` must be"),
        ({"engine_options": {"cover": "best"}}, ValueError, "`cover` must be"),
        (
            {"engine_options": {"h_radius": 1}},
            ValueError,
            "`h_radius` must be",
        ),
        (
            {"engine_options": {"memory_budget": 0}},
            ValueError,
            "`memory_budget` must be a positive int",
        ),
        (
            {"engine_options": {"max_cover_size": 2.5}},
            TypeError,
            "`max_cover_size` must be an int",
        ),
    ],
)
def test_bad_factory_arguments(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        chaining_generation_strategy(**kwargs)


def test_other_factories_check_their_options() -> None:
    with pytest.raises(ValueError, match=r"`beta` must be >= 0, got -1"):
        ucb_generation_strategy(beta=-1.0)
    with pytest.raises(ValueError, match=r"`delta` must be in \(0, 1\)"):
        gp_ucb_generation_strategy(delta=0.0)
    with pytest.raises(TypeError, match=r"Unknown UCB option\(s\) \['delta'\]"):
        candidate_set_strategy(UCB, {"delta": 0.1})


def test_engine_options_reach_chaining_ucb() -> None:
    """Options travel Ax's documented route: botorch_acqf_options -> input
    constructor; a node built from them makes ChainingUCB use them."""
    node = candidate_set_node(ChainingUCB, {"delta": 0.2, "sigma_floor": 1e-4})
    kwargs = node.generator_specs[0].generator_kwargs
    assert kwargs["botorch_acqf_options"] == {"delta": 0.2, "sigma_floor": 1e-4}
    client = _int_grid_client(seed=0)
    gs = chaining_generation_strategy(init_trials=3, seed=0, delta=0.2)
    client.set_generation_strategy(gs)
    _run(client, _grid_f, 4)
    assert _metadata(gs, 3)["delta"] == 0.2


def test_bonus_is_stored_with_the_node_and_reaches_chaining_ucb(
    tmp_path: Any,
) -> None:
    """``bonus=`` travels to ChainingUCB through the node's acquisition options,
    and a JSON round trip keeps it."""
    gs = chaining_generation_strategy(init_trials=3, seed=0, bonus="continuous")
    spec = gs.nodes_by_name["ChainingUCB"].generator_specs[0]
    assert spec.generator_kwargs["botorch_acqf_options"]["bonus"] == "continuous"
    client = _int_grid_client(seed=0)
    client.set_generation_strategy(gs)
    _run(client, _grid_f, 4)
    path = tmp_path / "client.json"
    client.save_to_json_file(str(path))
    _, stored = experiment_of(load_client(path))
    spec = stored.nodes_by_name["ChainingUCB"].generator_specs[0]
    assert spec.generator_kwargs["botorch_acqf_options"]["bonus"] == "continuous"
    with pytest.raises(ValueError, match="`bonus` must be"):
        chaining_generation_strategy(bonus="smooth")
    with pytest.raises(TypeError, match=r"Pass \['bonus'\] as"):
        chaining_generation_strategy(engine_options={"bonus": "continuous"})


def test_float64_candidates_with_a_float32_model() -> None:
    """ChainingUCB converts candidates to the model's dtype instead of failing,
    and optimize_acqf_discrete works with float64 choices on a float32 model."""
    from botorch.models import SingleTaskGP
    from botorch.optim import optimize_acqf_discrete

    torch.manual_seed(0)
    X = torch.rand(6, 2)
    model = SingleTaskGP(X, torch.sin(6 * X).sum(-1, keepdim=True)).eval()
    candidates = torch.cat([X.double(), torch.rand(30, 2, dtype=torch.float64)])
    acqf = ChainingUCB(model, candidates)
    same = ChainingUCB(model, candidates.float())
    assert acqf.candidates.dtype == torch.float32
    values = acqf(candidates.float().unsqueeze(-2))
    assert torch.equal(values, same(candidates.float().unsqueeze(-2)))
    x, _ = optimize_acqf_discrete(acqf, q=2, choices=candidates)  # float64 choices
    assert x.shape == (2, 2)
    assert len(acqf.certificate().certified) == 6  # the training points match


def test_float32_candidates_with_a_float64_model() -> None:
    """The same points, rounded to float32, are still the training inputs."""
    from botorch.models import SingleTaskGP

    torch.manual_seed(0)
    X = torch.rand(6, 2, dtype=torch.float64)
    model = SingleTaskGP(X, torch.sin(6 * X).sum(-1, keepdim=True)).eval()
    candidates = torch.cat([X, torch.rand(30, 2, dtype=torch.float64)]).float()
    acqf = ChainingUCB(model, candidates)
    assert acqf.candidates.dtype == torch.float64
    assert len(acqf.certificate().certified) == 6
    # No training point among them: the dtype given is named, and the model's.
    far = torch.rand(30, 2)
    given = r"candidates given in torch.float32, compared in the model's torch.float64"
    with pytest.raises(ValueError, match=given):
        ChainingUCB(model, far).certificate()
    with pytest.raises(ValueError, match="candidates given in torch.float64"):
        ChainingUCB(model, far.double()).certificate()


# ---------------------------------------------------------------------------
# A new user's catalogue: IDs, failures, duplicates, wrong kernels, any
# acquisition over the table.
# ---------------------------------------------------------------------------


def _catalogue(n: int = 40, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "sku": [f"P-{1000 + i}" for i in range(n)],
            "length": rng.integers(1, 30, n),
            "width": rng.uniform(0.5, 3.0, n).round(3),
            "coating": rng.choice(["none", "zinc", "epoxy"], n),
            "vendor": rng.choice(["A", "B"], n),
        }
    ).drop_duplicates(subset=["length", "width", "coating"])


def _score(p: dict[str, Any]) -> float:
    bonus = {"none": 0.0, "zinc": 0.3, "epoxy": 0.5}[p["coating"]]
    return -((p["length"] - 17) ** 2) / 50.0 - (p["width"] - 2.0) ** 2 + bonus


def _catalogue_client(table: pd.DataFrame, seed: int = 0) -> Client:
    client = Client(random_seed=seed)
    params = parameters_from_table(table, exclude=["sku", "vendor"])
    client.configure_experiment(parameters=params)
    client.configure_optimization(objective="score")
    return client


def test_a_catalogue_with_an_id_column_leads_back_to_its_rows() -> None:
    table = _catalogue()
    names = [p.name for p in parameters_from_table(table, exclude=["sku", "vendor"])]
    assert names == ["length", "width", "coating"]
    client = _catalogue_client(table)
    gs = chaining_generation_strategy(
        init_trials=4, candidates=table, id_column="sku", exclude_evaluated=True
    )
    client.set_generation_strategy(gs)
    by_sku = table.set_index("sku")
    walls = []
    for _ in range(8):
        start = time.perf_counter()
        trials = client.get_next_trials(max_trials=1)
        walls.append(time.perf_counter() - start)
        for index, p in trials.items():
            client.complete_trial(index, raw_data={"score": _score(p)})
    best, _, trial_index, arm_name = client.get_best_parameterization()
    row = by_sku.loc[arm_name]  # the arm is named after its row's SKU
    assert (row["length"], row["coating"]) == (best["length"], best["coating"])
    for trial in gs.experiment.trials.values():
        sku = trial.arms[0].name
        assert trial.arms[0].parameters["length"] == by_sku.loc[sku, "length"]
    meta = gs.experiment.trials[7].generator_runs[0].gen_metadata[GEN_METADATA_KEY]
    (picked,) = meta["rows"]  # the metadata columns travel with the arm
    assert set(meta["seconds"]) == {"fit", "acquisition", "certificate"}
    assert all(v >= 0 for v in meta["seconds"].values())
    # The parts are parts of the step's own wall time (trial 7 is the 8th call).
    assert sum(meta["seconds"].values()) <= walls[7]
    assert picked["sku"] == gs.experiment.trials[7].arms[0].name
    assert picked["vendor"] == by_sku.loc[picked["sku"], "vendor"]


def test_duplicate_rows_are_refused_naming_them_before_any_trial() -> None:
    table = _catalogue(12)
    doubled = pd.concat([table, table.iloc[[3]]], ignore_index=True)
    client = _catalogue_client(doubled)
    client.set_generation_strategy(
        chaining_generation_strategy(init_trials=2, candidates=doubled)
    )
    same = r"index label 3 and `candidates` row with index label 12 have the same"
    with pytest.raises(ValueError, match=same):
        client.get_next_trials(max_trials=1)
    assert len(client.summarize()) == 0


def test_table_errors_name_the_users_index_labels_and_ids_after_dropna() -> None:
    """After ``dropna()`` the labels are not the positions: the errors name
    the labels (``table.loc[label]`` is the row) and the ``id_column`` values."""
    raw = _catalogue(12)
    raw.loc[[1, 4], "vendor"] = None
    table = raw.dropna()  # labels 0, 2, 3, 5, ...: position 3 is label 5
    doubled = table.copy()
    doubled.loc[9, ["length", "width", "coating"]] = table.loc[
        5, ["length", "width", "coating"]
    ]
    client = _catalogue_client(doubled)
    client.set_generation_strategy(
        chaining_generation_strategy(init_trials=2, candidates=doubled, id_column="sku")
    )
    same = (
        r"`candidates` row with index label 5 \(sku='P-1005'\) and `candidates` "
        r"row with index label 9 \(sku='P-1009'\) have the same parameters"
    )
    with pytest.raises(ValueError, match=same):
        client.get_next_trials(max_trials=1)
    # A NaN the cleaning left (another column): the label and the ID.
    holed = table.astype({"width": float})
    holed.loc[7, "width"] = np.nan
    nan = r"`candidates` row with index label 7 \(sku='P-1007'\): 'width' is nan"
    with pytest.raises(ValueError, match=nan):
        chaining_generation_strategy(init_trials=2, candidates=holed, id_column="sku")
    # The ID column's own duplicates, by label.
    twin = table.assign(sku=table["sku"].where(table.index != 8, "P-1003"))
    ids = r"row with index label 3 and `candidates` row with index label 8 both have"
    with pytest.raises(ValueError, match=ids):
        chaining_generation_strategy(init_trials=2, candidates=twin, id_column="sku")
    # A misspelt ID column: the error lists the table's columns.
    wrong = r"`id_column`='SKU' is not a column of every row; the table's columns "
    with pytest.raises(ValueError, match=wrong + r"are \['coating', .*'sku'"):
        chaining_generation_strategy(init_trials=2, candidates=table, id_column="SKU")


def test_a_failed_candidate_is_not_proposed_again_unless_asked() -> None:
    """Six rows, one trial failed, every other row evaluated: only the failed
    row is left. By default it is not proposed again; retry_failed=True does."""
    table = _catalogue(6)
    assert len(table) == 6
    for retry in (False, True):
        client = _catalogue_client(table)
        gs = chaining_generation_strategy(
            init_trials=3,
            candidates=table,
            seed=1,
            retry_failed=retry,
            exclude_evaluated=True,
        )
        client.set_generation_strategy(gs)
        ((failed, params),) = client.get_next_trials(max_trials=1).items()
        client.mark_trial_failed(failed)
        proposed = []
        for _ in range(5 + retry):
            for index, p in client.get_next_trials(max_trials=1).items():
                proposed.append(p)
                client.complete_trial(index, raw_data={"score": _score(p)})
        assert proposed.count(params) == int(retry)  # every row once
        if not retry:
            with pytest.raises(SearchSpaceExhausted, match="failed before"):
                client.get_next_trials(max_trials=1)


def test_init_trials_zero_without_data_says_what_to_do() -> None:
    from ax.exceptions.core import DataRequiredError

    client = _int_grid_client(seed=0)
    client.set_generation_strategy(chaining_generation_strategy(init_trials=0))
    with pytest.raises(DataRequiredError, match="attach and complete trials"):
        client.get_next_trials(max_trials=1)


@pytest.mark.parametrize("init", ["uniform", "sobol"])
@pytest.mark.parametrize("items", [80, 120])
def test_a_gram_of_another_size_is_refused_before_any_trial(
    items: int, init: str
) -> None:
    """Ax's Sobol (``init="sobol"``) would draw indices 0..99 for either."""
    gram, _ = _graph_items(items, seed=0)
    client = Client(random_seed=0)
    client.configure_experiment(parameters=[candidate_index_parameter(100)])
    client.configure_optimization(objective="f")
    spec = precomputed_kernel_surrogate_spec(gram)
    client.set_generation_strategy(
        chaining_generation_strategy(5, init=init, surrogate_spec=spec)
    )
    expected = rf"holds {items} items.*candidate_index_parameter\({items}\)"
    with pytest.raises(ValueError, match=expected):
        client.get_next_trials(max_trials=1)
    assert len(client.summarize()) == 0


def test_a_gram_that_is_not_psd_is_refused_when_the_spec_is_built() -> None:
    gram, _ = _graph_items(30, seed=0)
    bent = gram.clone()
    bent[0, 1] = bent[1, 0] = -0.9  # two near-identical items, opposite signs
    with pytest.raises(ValueError, match="positive semi-definite"):
        precomputed_kernel_surrogate_spec(bent)


@pytest.mark.parametrize("acqf", ["LogExpectedImprovement", "qLogNEI", "qUCB"])
def test_any_botorch_acquisition_over_a_table(acqf: str) -> None:
    """Analytic and Monte Carlo acquisitions select over the table, batches are
    distinct with pending points, and every step records a certificate."""
    from botorch.acquisition.analytic import LogExpectedImprovement
    from botorch.acquisition.logei import qLogNoisyExpectedImprovement
    from botorch.acquisition.monte_carlo import qUpperConfidenceBound

    from ax_chaining.ax import qlognei_generation_strategy

    table = _catalogue(30)
    client = _catalogue_client(table)
    if acqf == "qLogNEI":
        gs = qlognei_generation_strategy(4, table, exclude_evaluated=True)
    else:
        cls = {"LogExpectedImprovement": LogExpectedImprovement}.get(
            acqf, qUpperConfidenceBound
        )
        gs = candidate_set_strategy(cls, None, 4, table, exclude_evaluated=True)
    client.set_generation_strategy(gs)
    rows = {(r.length, r.width, r.coating) for r in table.itertuples()}
    seen = []
    for batch in (1, 1, 1, 1, 3, 3):
        trials = client.get_next_trials(max_trials=batch)
        seen += list(trials.values())
        for index, p in trials.items():
            client.complete_trial(index, raw_data={"score": _score(p)})
    keys = [(p["length"], p["width"], p["coating"]) for p in seen]
    assert set(keys) <= rows and len(set(keys)) == len(keys) == 10
    records = [
        gr.gen_metadata[GEN_METADATA_KEY]
        for t in gs.experiment.trials.values()
        for gr in t.generator_runs
        if "certificate" in (gr.gen_metadata or {}).get(GEN_METADATA_KEY, {})
    ]
    assert records and all(r["certificate"]["bound"] > 0 for r in records)
    del qLogNoisyExpectedImprovement


def test_an_unsupported_acquisition_is_refused_when_the_strategy_is_built() -> None:
    from botorch.acquisition.acquisition import AcquisitionFunction

    class NoConstructor(AcquisitionFunction):
        def forward(self, X):  # pragma: no cover - never built
            return X.sum(-1)

    with pytest.raises(TypeError, match="`botorch_acqf_class` must be an"):
        candidate_set_strategy(dict)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="has no BoTorch input constructor"):
        candidate_set_strategy(NoConstructor)


@pytest.mark.parametrize(
    ("module", "acqf", "why"),
    [
        ("knowledge_gradient", "qKnowledgeGradient", "a one-shot acquisition"),
        ("knowledge_gradient", "qMultiFidelityKnowledgeGradient", "a one-shot"),
        ("multi_objective.logei", "qLogExpectedHypervolumeImprovement", "multi-ob"),
        ("multi_objective.analytic", "ExpectedHypervolumeImprovement", "multi-ob"),
        (
            "multi_objective.joint_entropy_search",
            "qLowerBoundMultiObjectiveJointEntropySearch",
            "multi-objective",
        ),
    ],
)
def test_one_shot_and_multi_objective_acquisitions_are_refused_at_build_time(
    module: str, acqf: str, why: str
) -> None:
    import importlib

    cls = getattr(importlib.import_module(f"botorch.acquisition.{module}"), acqf)
    expected = rf"`botorch_acqf_class`={acqf} is {why}.*expected a single-objective"
    with pytest.raises(ValueError, match=expected):
        candidate_set_strategy(cls, None, 3)
    with pytest.raises(ValueError, match=expected):
        candidate_set_node(cls)


# ---------------------------------------------------------------------------
# Reproducibility under the caller's seed (strategy built with seed=None).
# ---------------------------------------------------------------------------


def _seeded_run(random_seed: int, factory: Callable[..., Any]) -> list[dict]:
    client = _continuous_client(seed=random_seed)
    client.set_generation_strategy(factory(init_trials=3, num_candidates=64))
    return _flat(_run(client, _continuous_f, 5, noise_std=0.0))


@pytest.mark.parametrize(
    "factory", [chaining_generation_strategy, gp_ucb_generation_strategy]
)
def test_client_random_seed_determines_every_trial(
    factory: Callable[..., Any],
) -> None:
    """Default seed=None: the Client's random_seed decides the design and draws."""
    torch.manual_seed(123)  # the global state outside the Client must not matter
    first = _seeded_run(7, factory)
    torch.manual_seed(456)
    second = _seeded_run(7, factory)
    other = _seeded_run(8, factory)
    assert first == second
    assert first[:3] != other[:3]


def test_drawn_seed_survives_json_reload(tmp_path: Any) -> None:
    client = _continuous_client(seed=3)
    client.set_generation_strategy(
        chaining_generation_strategy(init_trials=4, num_candidates=64)
    )
    _run(client, _continuous_f, 2, noise_std=0.0)
    path = str(tmp_path / "seeded.json")
    client.save_to_json_file(path)
    loaded = Client.load_from_json_file(path)
    assert client.get_next_trials(max_trials=3) == loaded.get_next_trials(max_trials=3)


def _benchmark_problem() -> Any:
    from ax.benchmark.benchmark_problem import BenchmarkProblem, get_soo_opt_config
    from ax.benchmark.benchmark_test_function import BenchmarkTestFunction

    class Bumps(BenchmarkTestFunction):
        def __init__(self) -> None:
            self.outcome_names = ["f"]
            self.n_steps = 1

        def evaluate_true(self, params: Any) -> torch.Tensor:
            return torch.tensor([[_grid_f(params)]], dtype=torch.double)

    search_space = SearchSpace(
        [
            RangeParameter("x", ParameterType.INT, 0, 19),
            RangeParameter("y", ParameterType.INT, 0, 19),
        ]
    )
    opt_config, metrics = get_soo_opt_config(outcome_names=["f"], lower_is_better=False)
    return BenchmarkProblem(
        name="bumps",
        optimization_config=opt_config,
        num_trials=6,
        test_function=Bumps(),
        noise_std=0.05,
        optimal_value=1.0,
        baseline_value=0.0,
        search_space=search_space,
        opt_config_metrics=metrics,
    )


def test_benchmark_replications_follow_the_harness_seed() -> None:
    """ax.benchmark: same seed -> same run; other seeds -> other runs."""
    from ax.benchmark.benchmark import benchmark_replication
    from ax.benchmark.benchmark_method import BenchmarkMethod

    problem = _benchmark_problem()
    method = BenchmarkMethod(
        generation_strategy=chaining_generation_strategy(init_trials=3)
    )

    def arms(seed: int) -> list[dict]:
        result = benchmark_replication(problem=problem, method=method, seed=seed)
        assert result.experiment is not None
        trials = result.experiment.trials
        return [trials[i].arms[0].parameters for i in sorted(trials)]

    first = arms(0)
    assert arms(0) == first
    others = [arms(s) for s in (1, 2)]
    assert all(o != first for o in others)
    assert others[0] != others[1]
