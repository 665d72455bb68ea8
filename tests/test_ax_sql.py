"""Ax's SQL storage on SQLite: a loop saved to a database, reloaded in a new
process, makes the same next suggestions and the same certificate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")
pytest.importorskip("tabulate")

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::Warning")]

ROOT = Path(__file__).resolve().parents[1]

# A catalogue with an ID column, run with batches of two; Ax saves every step.
LOOP = """
import json, logging, shutil, sys
import numpy as np, pandas as pd
from ax.api.client import Client
from ax_chaining.ax import (
    best_certificate, certify, chaining_generation_strategy, parameters_from_table,
    storage_config,
)
from ax_chaining.certificate import CertificateOptions
logging.getLogger("ax").setLevel(logging.WARNING)
url, copy, path = sys.argv[1], sys.argv[2], sys.argv[3]
rng = np.random.default_rng(0)
table = pd.DataFrame({"sku": [f"P-{i}" for i in range(30)],
                      "a": rng.uniform(0, 1, 30).round(3),
                      "b": rng.uniform(0, 1, 30).round(3)})
client = Client(random_seed=0, storage_config=storage_config(url))
client.configure_experiment(name="catalogue",
                            parameters=parameters_from_table(table, exclude=["sku"]))
client.configure_optimization(objective="score")
# 8 observations: certificates from 4 (the default check waits for 20).
client.set_generation_strategy(chaining_generation_strategy(
    init_trials=4, candidates=table, id_column="sku", exclude_evaluated=True,
    certificate=CertificateOptions(min_observations=4)))
for _ in range(4):
    for index, p in client.get_next_trials(max_trials=2).items():
        client.complete_trial(index, raw_data={"score": -(p["a"] - 0.3) ** 2 - p["b"]})
shutil.copy(url.removeprefix("sqlite:///"), copy)  # the database at this point
few = CertificateOptions(min_observations=4)
out = {"certify": certify(client, options=few),
       "recorded": best_certificate(client)}
out["next"] = {str(k): v for k, v in client.get_next_trials(max_trials=2).items()}
out["next_valid"] = best_certificate(client)["valid"]
json.dump(out, open(path, "w"), default=str)
"""

# A new process that has not imported ax_chaining.ax: no class of this package
# is registered with Ax until load_client_from_database does it.
RELOAD = """
import json, logging, sys
import ax_chaining
logging.getLogger("ax").setLevel(logging.WARNING)
url, path = sys.argv[1], sys.argv[2]
assert not any(m == "ax" or m.startswith("ax.") for m in sys.modules)
client = ax_chaining.load_client_from_database("catalogue", url)
few = ax_chaining.CertificateOptions(min_observations=4)
out = {"certify": ax_chaining.certify(client, options=few),
       "recorded": ax_chaining.best_certificate(client)}
out["next"] = {str(k): v for k, v in client.get_next_trials(max_trials=2).items()}
out["next_valid"] = ax_chaining.best_certificate(client)["valid"]
try:
    ax_chaining.storage_config("sqlite:///" + path + ".other.db")
except ValueError as e:
    out["second_url"] = str(e)
json.dump(out, open(path, "w"), default=str)
"""


def _python(code: str, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_loop_on_sqlite_reloads_in_a_new_process_with_the_same_next_trials(
    tmp_path: Path,
) -> None:
    db, copy = tmp_path / "ax.db", tmp_path / "copy.db"
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    _python(LOOP, f"sqlite:///{db}", str(copy), str(first))
    _python(RELOAD, f"sqlite:///{copy}", str(second))
    original, reloaded = json.loads(first.read_text()), json.loads(second.read_text())
    # Same next batch (the table's rows, by their parameters) and certificate.
    assert len(original["next"]) == 2
    assert reloaded["next"] == original["next"]
    assert reloaded["certify"] == original["certify"]
    assert reloaded["recorded"] == original["recorded"]
    assert original["certify"]["valid"] and original["certify"]["bound"] > 0
    # The strategy's certificate options came back from the database:
    # the certificate recorded with the next batch (8 observations) is issued.
    assert original["next_valid"] is True and reloaded["next_valid"] is True
    # Ax keeps one engine per process: another URL is refused, naming both.
    assert "already uses" in reloaded["second_url"]
    assert "copy.db" in reloaded["second_url"]


def test_storage_config_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from ax_chaining.ax import storage_config

    monkeypatch.setitem(sys.modules, "tabulate", None)  # as if not installed
    with pytest.raises(ImportError, match=r"needs 'tabulate'.*ax-chaining\[sql\]"):
        storage_config("sqlite://")


def test_storage_config_refuses_a_non_url() -> None:
    from ax_chaining.ax import load_client_from_database, storage_config

    with pytest.raises(TypeError, match="`url` must be a SQLAlchemy database URL"):
        storage_config(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`storage` must be a database URL"):
        load_client_from_database("name", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`experiment_name` must be a non-empty"):
        load_client_from_database("", "sqlite://")


def test_the_sql_extra_is_declared_with_what_ax_needs() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {r.split(">=")[0].lower() for r in extras["optional-dependencies"]["sql"]}
    assert names == {"sqlalchemy", "tabulate"}
    # The extra is part of the dev set-up, so the suite tests it.
    assert any("sql" in r for r in extras["optional-dependencies"]["dev"])
