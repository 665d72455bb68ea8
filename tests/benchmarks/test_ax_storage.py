"""The saved-experiment size benchmark's small preset, end to end."""

from __future__ import annotations

import json

import pytest

from benchmarks import ax_storage

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::Warning")]


def test_ax_storage_small_preset_end_to_end(capsys):
    assert ax_storage.main(["--small"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    (row,) = [json.loads(x) for x in lines]
    small = ax_storage.SMALL
    assert (row["items"], row["trials"]) == (small["items"], small["trials"][0])
    gram, _ = ax_storage._items(small["items"], 0)
    assert row["gram_json_bytes"] == len(json.dumps(gram.tolist()))
    assert row["ratio_vs_one_gram_copy"] == row["json_bytes"] / row["gram_json_bytes"]
    # The loaded client proposes what the original does.
    assert row["same_next_suggestion"] is True
    assert row["save_s"] >= 0 and row["load_s"] >= 0


def test_ax_storage_rejects_bad_arguments():
    with pytest.raises(SystemExit):
        ax_storage.main(["--small", "--init-trials", "50"])
