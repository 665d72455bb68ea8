"""BoFire's convergence criteria, as BoFire 0.5 ships them, on the stopping
benchmark's runs: each run's observations are told, in their order, to a
``SoboStrategy`` holding the criterion, and ``has_converged()`` is asked after
every query. Runs in BoFire's own environment (see ``docs/results/stopping.md``);
it needs only BoFire and the packed records.

    python benchmarks/bofire_stops.py benchmarks/results/stopping.jsonl.gz \
        benchmarks/results/stopping_bofire.jsonl.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from typing import Any

import pandas as pd

#: Regret tolerances scored, as fractions of the table's range (the stopping
#: benchmark's); ObjectiveImprovementCriterion gets each as min_improvement.
EPS_FRACTIONS = (0.01, 0.05, 0.1)
LOOKBACKS = (5, 10)
#: ProposalDeviationCriterion: normalized distances and consecutive steps.
THRESHOLDS = (0.05, 0.1)
CONSECUTIVE = (1, 3)
GRID_SIDE = 30


def criteria(span: float) -> list[tuple[str, Any]]:
    """Every criterion setting run, by name; ``span`` is the table's range."""
    from bofire.data_models.strategies.convergence_criteria.api import (
        ObjectiveImprovementCriterion,
        ProposalDeviationCriterion,
    )

    out = [
        (
            f"bofire-improvement n_lookback={k} eps {f:g}",
            ObjectiveImprovementCriterion(min_improvement=f * span, n_lookback=k),
        )
        for k in LOOKBACKS
        for f in EPS_FRACTIONS
    ]
    out += [
        (
            f"bofire-deviation threshold={h:g} n_consecutive={c}",
            ProposalDeviationCriterion(threshold=h, n_consecutive=c),
        )
        for h in THRESHOLDS
        for c in CONSECUTIVE
    ]
    return out


def domain_and_rows(record: dict[str, Any]) -> tuple[Any, pd.DataFrame]:
    """BoFire's domain of the run's table (the grid's two coordinates, or a
    library's rows as one categorical input) and its observations in order."""
    from bofire.data_models.domain.api import Domain
    from bofire.data_models.features.api import (
        CategoricalInput,
        ContinuousInput,
        ContinuousOutput,
    )

    # Outcomes up to a shift (what the criteria read): minus each row's regret.
    y = [-record["truth"][str(i)][0] for i in record["items"]]
    if record["dataset"] == "grid":
        inputs = [
            ContinuousInput(key=k, bounds=(0.0, GRID_SIDE - 1.0)) for k in ("a", "b")
        ]
        rows = pd.DataFrame(
            {
                "a": [float(i // GRID_SIDE) for i in record["items"]],
                "b": [float(i % GRID_SIDE) for i in record["items"]],
            }
        )
    else:
        names = [str(i) for i in range(record["num_items"])]
        inputs = [CategoricalInput(key="item", categories=names)]
        rows = pd.DataFrame({"item": [str(i) for i in record["items"]]})
    rows["y"], rows["valid_y"] = y, 1
    return Domain.from_lists(inputs, [ContinuousOutput(key="y")]), rows


def first_stops(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Each criterion's first query with ``has_converged()`` (None: never) and
    whether the best observed row was then within each ``eps`` of the best."""
    import bofire.strategies.api as strategies
    from bofire.data_models.strategies.api import SoboStrategy

    domain, rows = domain_and_rows(record)
    n_init, span = record["n_init"], record["span"]
    out = []
    for name, criterion in criteria(span):
        strategy = strategies.map(
            SoboStrategy(domain=domain, convergence_criterion=criterion, seed=0)
        )
        strategy.tell(rows.iloc[:n_init], retrain=False)
        query, regret = None, None
        for t in range(n_init + 1, len(rows) + 1):
            strategy.tell(rows.iloc[t - 1 : t], retrain=False)
            if strategy.has_converged():
                query, regret = t - n_init, -float(rows["y"].iloc[:t].max())
                break
        rule, _, own = name.partition(" eps ")
        for f in EPS_FRACTIONS:
            # The improvement criterion is scored at its own tolerance only.
            if own and float(own) != f:
                continue
            true = None if query is None else regret <= f * span
            out.append({"rule": rule, "eps": f, "query": query, "true": true})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", help="the stopping benchmark's packed records")
    parser.add_argument("out", help="gzipped JSON lines: a run, criterion and eps each")
    args = parser.parse_args(argv)
    with gzip.open(args.records, "rt") as fh:
        records = [json.loads(line) for line in fh]
    lines = []
    for number, record in enumerate(records, 1):
        key = {k: record[k] for k in ("dataset", "acquisition", "n_init", "seed")}
        lines += [json.dumps({**key, **s}, sort_keys=True) for s in first_stops(record)]
        print(f"{number}/{len(records)} {key}", file=sys.stderr)
    # No name or time in the gzip header: the file depends on the records alone.
    with (
        open(args.out, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as fh,
    ):
        fh.write("".join(line + "\n" for line in lines).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
