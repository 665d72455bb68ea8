"""The answer at the end of a loop (recommend), and certify over a table for a
loop whose points lie off it, on real Ax Client loops."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from ax.api.client import Client
from ax.api.configs import RangeParameterConfig

from ax_chaining.ax import (
    best_certificate,
    certify,
    chaining_generation_strategy,
    parameters_from_table,
    recommend,
)
from ax_chaining.certificate import CertificateOptions

pytestmark = pytest.mark.filterwarnings("ignore::Warning")


@pytest.fixture(autouse=True)
def _quiet_ax() -> None:
    logging.getLogger("ax").setLevel(logging.WARNING)


def _table() -> pd.DataFrame:
    """A catalogue with an ID column, cleaned as users do: after ``dropna()``
    its index labels are not the row positions."""
    rng = np.random.default_rng(1)
    n = 30
    raw = pd.DataFrame(
        {
            "sku": [f"S-{100 + i}" for i in range(n)],
            "a": rng.uniform(0, 1, n).round(3),
            "b": rng.uniform(0, 1, n).round(3),
            "note": ["x" if i % 4 else None for i in range(n)],
        }
    )
    return raw.dropna()


def _score(p: dict[str, Any]) -> float:
    # Smooth, plus a bonus the GP cannot foresee on one row (the true best).
    bonus = 0.3 if (p["a"], p["b"]) == BEST else 0.0
    return -((p["a"] - 0.3) ** 2) - (p["b"] - 0.6) ** 2 + bonus


TABLE = _table()
BEST_LABEL = TABLE.index[-2]
BEST = (TABLE.loc[BEST_LABEL, "a"], TABLE.loc[BEST_LABEL, "b"])


def _client() -> Client:
    """A Client over the catalogue with Chaining-UCB, 3 initial rows."""
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=parameters_from_table(TABLE, ["sku", "note"])
    )
    client.configure_optimization(objective="score")
    client.set_generation_strategy(
        chaining_generation_strategy(
            init_trials=3, candidates=TABLE, id_column="sku", exclude_evaluated=True
        )
    )
    return client


def test_recommend_after_a_batch_loop_names_the_best_row_of_the_last_batch() -> None:
    table = TABLE
    assert list(table.index) != list(range(len(table)))  # labels, not positions
    client = _client()
    for _ in range(3):  # batches of 3
        for index, p in client.get_next_trials(max_trials=3).items():
            client.complete_trial(index, raw_data={"score": _score(p)})
    seen = {(p["a"], p["b"]) for p in client.summarize()[["a", "b"]].to_dict("records")}
    assert BEST not in seen  # the loop has not met the best row yet
    # The last batch: two suggestions, and the catalogue's best row added by hand.
    last = client.get_next_trials(max_trials=2)
    best_row = {"a": float(BEST[0]), "b": float(BEST[1])}
    attached = client.attach_trial(best_row, arm_name=TABLE.loc[BEST_LABEL, "sku"])
    for index, p in {**last, attached: best_row}.items():
        client.complete_trial(index, raw_data={"score": _score(p)})

    # 15 observations: certified from 5 (the default check waits for 20).
    answer = recommend(client, options=CertificateOptions(min_observations=5))
    assert answer["parameters"] == best_row
    assert answer["id"] == TABLE.loc[BEST_LABEL, "sku"]
    assert answer["row"] == BEST_LABEL  # the user's index label
    assert answer["value"] == pytest.approx(_score(best_row), rel=1e-12)
    assert answer["trial_index"] == attached
    cert = answer["certificate"]
    assert cert["parameters"] == best_row and cert["trial_index"] == attached
    assert cert["valid"] and 0 <= cert["bound"] < math.inf
    # What the last generation recorded (generating the last batch) never saw
    # that batch's results.
    recorded = best_certificate(client)
    assert recorded["recorded_at"] in last
    assert recorded["parameters"] != best_row
    # certify() takes the smallest bound among the evaluated rows of the same
    # fit: never above the bound of the recommended row.
    assert certify(client, options=CertificateOptions(min_observations=5))[
        "bound"
    ] <= cert["bound"] * (1 + 1e-6)


def test_certify_a_default_ax_loop_over_a_table_it_never_touched() -> None:
    """Ax's default strategy over a continuous space evaluates points off the
    table; the certificate covers the table and those points, from one
    posterior, and may certify an evaluated point off the table."""
    client = Client(random_seed=0)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name="a", bounds=(0.0, 1.0), parameter_type="float"),
            RangeParameterConfig(name="b", bounds=(0.0, 1.0), parameter_type="float"),
        ]
    )
    client.configure_optimization(objective="score")
    for _ in range(5):
        for index, p in client.get_next_trials(max_trials=1).items():
            client.complete_trial(index, raw_data={"score": _score(p)})
    table = TABLE[["a", "b"]]
    arms = client.summarize()[["a", "b"]]
    assert not set(map(tuple, arms.values)) & set(map(tuple, table.values))

    # 5 observations: the default check cannot run yet, and says so.
    unchecked = certify(client, candidates=table)
    assert not unchecked["valid"] and "min_observations=20" in unchecked["reason"]
    assert 0 < unchecked["bound"] < math.inf
    cert = certify(
        client, candidates=table, options=CertificateOptions(min_observations=3)
    )
    assert cert["trial_index"] is not None  # an evaluated point, off the table
    assert cert["valid"] and 0 < cert["bound"] < math.inf
    # The set is the table and the evaluated points: naming both gives the same.
    both = certify(
        client,
        candidates=pd.concat([table, arms], ignore_index=True),
        options=CertificateOptions(min_observations=3),
    )
    assert both["parameters"] == cert["parameters"]
    assert both["bound"] == pytest.approx(cert["bound"], rel=1e-6)
    # The recommended row is off the table: no row label, no ID.
    answer = recommend(client, candidates=table)
    best = max(_score(p) for p in arms.to_dict("records"))
    assert answer["value"] == pytest.approx(best)
    assert answer["row"] is None and answer["id"] is None


def test_analysis_card_from_a_client_loop_reads_recommend() -> None:
    from ax.core.analysis_card import AnalysisCard, NotApplicableStateAnalysisCard

    from ax_chaining.ax import RecommendationAnalysis

    client = _client()
    # No data yet: Ax's not-applicable card, not an error.
    (early,) = client.compute_analyses([RecommendationAnalysis()], display=False)
    assert isinstance(early, NotApplicableStateAnalysisCard)
    for _ in range(4):
        for index, p in client.get_next_trials(max_trials=3).items():
            client.complete_trial(index, raw_data={"score": _score(p)})
    options = CertificateOptions(min_observations=5)
    analysis = RecommendationAnalysis(options=options)
    (card,) = client.compute_analyses([analysis], display=False)
    answer = recommend(client, options=options)
    cert = answer["certificate"]
    assert isinstance(card, AnalysisCard) and len(card.df) == 1
    row = card.df.iloc[0]
    assert row["id"] == answer["id"] and row["trial_index"] == answer["trial_index"]
    # recommend(client) reads the client's JSON snapshot, whose data Ax writes
    # to 10 significant digits; the card reads the live experiment.
    assert row["value"] == pytest.approx(answer["value"], rel=1e-9)
    for key in ("bound", "delta", "expected_better"):
        assert row[key] == pytest.approx(cert[key], rel=1e-6), key
    assert (row["rank_bound"], row["num_candidates"]) == (
        cert["rank_bound"],
        cert["num_candidates"],
    )
    assert {k: row[k] for k in answer["parameters"]} == answer["parameters"]
    assert f"no candidate is more than {cert['bound']:.4g} better" in card.subtitle
    assert f"among the best {cert['rank_bound']} of" in card.subtitle
    # The probability that a better candidate remains, by a margin in the
    # objective's units: Markov's bound on the rank statement's expected count,
    # the same in the model's units; at the bound's own margin it is within
    # delta, as the bound says.
    scale = cert["bound"] / cert["bound_model_units"]
    margin = 0.5 * cert["bound"]
    asked = RecommendationAnalysis(options=options, tolerance=margin)
    (card,) = client.compute_analyses([asked], display=False)
    got = recommend(client, options=options, tolerance=margin)["certificate"]
    row = card.df.iloc[0]
    assert row["tolerance"] == pytest.approx(margin) == got["tolerance"]
    assert row["p_better"] == pytest.approx(got["p_better"], rel=1e-6)
    assert got["p_better"] == pytest.approx(min(1.0, got["expected_better"]))
    assert got["expected_better"] <= cert["expected_better"]  # tolerance 0 there
    model = recommend(client, options=options, units="model", tolerance=margin / scale)[
        "certificate"
    ]
    assert model["expected_better"] == pytest.approx(got["expected_better"])
    assert (
        f"The probability that a candidate more than {margin:.4g} better remains "
        f"is at most {got['p_better']:.2g}." in card.subtitle
    )
    at_bound = recommend(client, options=options, tolerance=cert["bound"])
    assert at_bound["certificate"]["p_better"] <= cert["delta"]
    with pytest.raises(ValueError, match="`tolerance` must be >= 0, got -1"):
        recommend(client, options=options, tolerance=-1.0)
    # 12 observations under the default check (20): the model's own numbers,
    # marked unchecked, as recommend gives them.
    (unchecked,) = client.compute_analyses([RecommendationAnalysis()], display=False)
    plain = recommend(client)["certificate"]
    row = unchecked.df.iloc[0]
    assert not row["valid"] and not plain["valid"]
    assert row["reason"].startswith("unchecked: only 12 observations")
    assert math.isfinite(row["bound"])
    assert row["bound"] == pytest.approx(plain["bound"], rel=1e-6)
    assert "(observed " in unchecked.subtitle
    assert ". Unchecked: only 12 observations" in unchecked.subtitle
    assert (
        f"no candidate is more than {plain['bound']:.4g} better" in unchecked.subtitle
    )
    # A check that rejects the model: no numbers, and the card says why.
    strict = CertificateOptions(min_observations=5, alpha=0.99)
    (refused,) = client.compute_analyses(
        [RecommendationAnalysis(options=strict)], display=False
    )
    assert "No certificate:" in refused.subtitle
    assert refused.df.iloc[0]["reason"].rstrip(".") + "." in refused.subtitle
    assert refused.df.iloc[0]["bound"] == math.inf
