r"""Saved-experiment size and save/load time with a precomputed kernel.

One JSON line per save of an ``ax.api.Client`` Chaining-UCB loop over a
precomputed Gram (size, times, and whether the loaded client suggests the
same); ``--table`` renders the lines (``docs/ax-guide.md``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from benchmarks._tables import fill_preset, json_lines

#: The defaults, and the ``--small`` preset (a few seconds).
FULL = {"items": 300, "trials": [10, 25], "init_trials": 10}
SMALL = {"items": 40, "trials": [4], "init_trials": 3}


def _items(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A normalized Gram matrix (random features) and an objective drawn from it."""
    g = torch.Generator().manual_seed(seed)
    phi = torch.rand(n, 16, generator=g, dtype=torch.float64) ** 3
    phi = phi / phi.norm(dim=1, keepdim=True)
    return phi @ phi.T, phi @ torch.randn(16, generator=g, dtype=torch.float64)


def table(paths: list[str]) -> str:
    """The docs' markdown table of the JSON lines in ``paths``."""
    out = [
        "| items | trials | JSON size | one Gram copy as JSON (baseline) | ratio "
        "| save | load | same next suggestion after load |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in json_lines(paths):
        out.append(
            f"| {r['items']:,} | {r['trials']} | {r['json_bytes'] / 1e6:.2f} MB "
            f"| {r['gram_json_bytes'] / 1e6:.1f} MB "
            f"| {r['ratio_vs_one_gram_copy']:.4f} | {r['save_s']:.2f} s "
            f"| {r['load_s']:.2f} s | {'yes' if r['same_next_suggestion'] else 'no'} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Print one JSON line per save; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ax_storage")
    parser.add_argument("--items", type=int, help=f"{FULL['items']}")
    parser.add_argument("--trials", type=int, nargs="+", help="when to save")
    parser.add_argument("--init-trials", type=int, help=f"{FULL['init_trials']}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true", help="the preset of a test")
    parser.add_argument("--table", nargs="+", metavar="JSONL", help="render lines")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    fill_preset(args, SMALL if args.small else FULL)
    if not 1 <= args.init_trials <= args.items or min(args.trials) < 1:
        parser.error(
            "need 1 <= --init-trials <= --items and --trials >= 1; got --items "
            f"{args.items}, --init-trials {args.init_trials}, --trials {args.trials}."
        )
    warnings.filterwarnings("ignore")
    logging.getLogger("ax").setLevel(logging.ERROR)
    from ax.api.client import Client

    from ax_chaining.ax import (
        candidate_index_parameter,
        chaining_generation_strategy,
        precomputed_kernel_surrogate_spec,
    )

    gram, f = _items(args.items, args.seed)
    baseline = len(json.dumps(gram.tolist()))
    client = Client(random_seed=args.seed)
    client.configure_experiment(parameters=[candidate_index_parameter(args.items)])
    client.configure_optimization(objective="f")
    spec = precomputed_kernel_surrogate_spec(gram)
    gs = chaining_generation_strategy(init_trials=args.init_trials, surrogate_spec=spec)
    client.set_generation_strategy(gs)
    noise = torch.Generator().manual_seed(args.seed + 1)
    done, t0 = 0, time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for target in sorted(args.trials):
            while done < target:
                for index, p in client.get_next_trials(max_trials=1).items():
                    eps = float(torch.randn(1, generator=noise))
                    y = float(f[p["item"]]) + 0.05 * eps
                    client.complete_trial(index, raw_data={"f": y})
                    done += 1
            path = Path(tmp) / f"snapshot_{target}.json"
            start = time.perf_counter()
            client.save_to_json_file(str(path))
            save_s = time.perf_counter() - start
            start = time.perf_counter()
            loaded = Client.load_from_json_file(str(path))
            load_s = time.perf_counter() - start
            following = client.get_next_trials(1)
            same = loaded.get_next_trials(1) == following
            for index, p in following.items():  # keep the trial count exact
                client.complete_trial(index, raw_data={"f": float(f[p["item"]])})
                done += 1
            record = {
                "benchmark": "ax_storage",
                "items": args.items,
                "trials": target,
                "json_bytes": path.stat().st_size,
                "gram_json_bytes": baseline,
                "ratio_vs_one_gram_copy": path.stat().st_size / baseline,
                "save_s": round(save_s, 3),
                "load_s": round(load_s, 3),
                "same_next_suggestion": same,
                "loop_s": round(time.perf_counter() - t0, 1),
            }
            print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
