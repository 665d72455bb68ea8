r"""Why does Chaining-UCB explore less than GP-UCB on a molecule library? At the
chosen steps of an Ax ``Client`` loop, one JSON line with the engine's covers,
the bonus against GP-UCB's and the best molecule's rank under each rule.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

import numpy as np

from benchmarks._tables import json_lines


def _quantiles(x: np.ndarray) -> dict[str, float]:
    q = np.quantile(x, [0.0, 0.1, 0.5, 0.9, 1.0])
    names = ("min", "p10", "median", "p90", "max")
    return {k: float(v) for k, v in zip(names, q, strict=True)}


def untested_ranks(
    scores: dict[str, np.ndarray], best: int, tested: np.ndarray
) -> dict[str, int]:
    """Per rule, how many untested molecules (``~tested``) score above
    molecule ``best``: its rank among the loop's candidates, 0 for the first.

    Example:
        >>> untested_ranks({"mean": np.array([3.0, 1.0, 2.0])}, 2,
        ...                np.array([True, False, False]))
        {'mean': 0}
    """
    return {
        rule: int(((score > score[best]) & ~tested).sum())
        for rule, score in scores.items()
    }


def run(
    dataset: str,
    seed: int,
    steps: list[int],
    n_init: int = 10,
    model: str | None = None,
) -> list[dict]:
    """One loop; a record at each of ``steps`` (queries made so far), on the
    Tanimoto Gram or the molecule benchmark's ``model`` variant."""
    import torch
    from ax.core import ObservationFeatures
    from ax.utils.common.logger import set_stderr_log_level
    from botorch.acquisition.objective import ScalarizedPosteriorTransform

    from ax_chaining import ChainingUCB
    from ax_chaining import ax as axc
    from ax_chaining.acquisition import gp_ucb_beta
    from ax_chaining.test_functions.molecules import library
    from benchmarks._tables import initial_items
    from benchmarks.molecules_bench import model_variant, run_client

    set_stderr_log_level(logging.WARNING)
    data, gram = library(dataset)
    y = data.y.numpy()
    n = len(y)
    if model is None:
        spec = axc.precomputed_kernel_surrogate_spec(gram)
    else:
        spec = model_variant(dataset, model)[0]
    gs = axc.chaining_generation_strategy(
        init_trials=n_init, surrogate_spec=spec, exclude_evaluated=True
    )
    initial = initial_items(n, n_init, seed)
    best = int(np.argmax(y))
    out: list[dict] = []

    def after_step(items: list[int]) -> None:
        # The model that chose the last item, before it was observed.
        q = len(items) - n_init
        if q in steps:
            tested = np.zeros(n, dtype=bool)
            tested[items[:-1]] = True
            adapter = gs.adapter
            gp = adapter.generator.surrogate.model
            X = adapter.transform_observation_features(
                [ObservationFeatures(parameters={"item": i}) for i in range(n)]
            )
            transform = ScalarizedPosteriorTransform(torch.ones(1, dtype=X.dtype))
            acqf = ChainingUCB(gp, X, posterior_transform=transform)
            res = acqf.chaining
            sigma = acqf.candidate_sigma.double().numpy()
            mean = acqf.candidate_mean.double().numpy()
            bonus = res.bonus(acqf.candidate_sigma).double().numpy()
            beta = gp_ucb_beta(n, acqf.t, 0.05)
            ucb = mean + np.sqrt(beta) * sigma
            chaining = mean + bonus
            pick = int(np.argmax(chaining))
            greedy = int(np.argmax(np.where(tested, -np.inf, mean)))
            rules = {"mean": mean, "chaining": chaining, "gp_ucb": ucb}
            over_library = untested_ranks(rules, best, np.zeros(n, dtype=bool))
            positive = sigma > 0
            ratio = bonus[positive] / (np.sqrt(beta) * sigma[positive])
            out.append(
                {
                    "dataset": dataset,
                    **({} if model is None else {"model": model}),
                    "seed": seed,
                    "queries": q,
                    "t": acqf.t,
                    "scale": float(res.scale),
                    "sigma": _quantiles(sigma),
                    "sigma_min_used": float(res.sigma_min_used),
                    "levels": res.num_levels,
                    "eps": res.eps.tolist(),
                    "cover_sizes": res.cover_sizes.tolist(),
                    "H": res.H.tolist(),
                    "sqrt_beta": float(np.sqrt(beta)),
                    "bonus": _quantiles(bonus),
                    "bonus_over_gp_ucb": _quantiles(ratio),
                    "mean": _quantiles(mean),
                    "pick_chaining": pick,
                    "loop_pick": items[-1],
                    "pick_mean": greedy,
                    "posterior_at_chaining_pick": {
                        "mean": float(mean[pick]),
                        "sigma": float(sigma[pick]),
                        "bonus": float(bonus[pick]),
                    },
                    "pick_gp_ucb": int(np.argmax(ucb)),
                    "value_chaining_pick": float(y[pick]),
                    "value_mean_pick": float(y[greedy]),
                    "value_gp_ucb_pick": float(y[int(np.argmax(ucb))]),
                    "best_rank_chaining": over_library["chaining"],
                    "best_rank_gp_ucb": over_library["gp_ucb"],
                    "untested_rank_of_best": untested_ranks(rules, best, tested),
                    "best_sigma": float(sigma[best]),
                    "best_value": float(y[best]),
                }
            )

    name = f"bonus_{dataset}_{seed}"
    run_client(y, initial, gs, max(steps), seed, name, after_step)
    return out


def table(paths: list[str]) -> str:
    """The markdown table of the JSON lines in ``paths``: the last column the
    ranks among the untested molecules where every line has them, else over
    the whole library."""
    rows = json_lines(paths)
    untested = all("untested_rank_of_best" in r for r in rows)
    last = (
        "rank of the best molecule among the untested: mean / chaining / GP-UCB"
        if untested
        else "rank of the best molecule: chaining / GP-UCB"
    )
    lines = [
        "| dataset | seed | queries | prior sd s | cover sizes | sqrt(beta_t) | "
        "chaining bonus p10 / median / p90 | bonus / GP-UCB's, p10 / median / "
        f"p90 | sigma_t p10 / median / p90 | {last} |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]

    def ranks(r: dict) -> str:
        if untested:
            got = r["untested_rank_of_best"]
            return " / ".join(str(got[k] + 1) for k in ("mean", "chaining", "gp_ucb"))
        return f"{r['best_rank_chaining'] + 1} / {r['best_rank_gp_ucb'] + 1}"

    def three(q: dict[str, float]) -> str:
        return " / ".join(f"{q[k]:.2f}" for k in ("p10", "median", "p90"))

    def name(r: dict) -> str:
        return r["dataset"] + (f"@{r['model']}" if "model" in r else "")

    for r in sorted(rows, key=lambda r: (name(r), r["seed"], r["queries"])):
        sizes = ", ".join(str(c) for c in r["cover_sizes"])
        lines.append(
            f"| {name(r)} | {r['seed']} | {r['queries']} | {r['scale']:.2f} | "
            f"{sizes} | {r['sqrt_beta']:.2f} | {three(r['bonus'])} | "
            f"{three(r['bonus_over_gp_ucb'])} | {three(r['sigma'])} | {ranks(r)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from benchmarks.molecules_bench import MODEL_VARIANTS

    parser = argparse.ArgumentParser(prog="python -m benchmarks bonus")
    add = parser.add_argument
    add("--table", nargs="+", help="JSON-lines files to tabulate")
    add("--dataset", default="freesolv")
    add(
        "--model",
        choices=tuple(MODEL_VARIANTS),
        help="a model variant of the molecule benchmark (e.g. mordred-chen); "
        "default: the Tanimoto Gram",
    )
    add("--seeds", type=int, nargs="+", default=[0])
    add("--steps", type=int, nargs="+", default=[1, 10, 25, 50])
    add("--small", action="store_true", help="one seed, 2 steps")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.table:
        print(table(args.table), end="")
        return 0
    seeds, steps = ([0], [1, 2]) if args.small else (args.seeds, args.steps)
    for seed in seeds:
        for row in run(args.dataset, seed, sorted(steps), model=args.model):
            print(json.dumps(row, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
