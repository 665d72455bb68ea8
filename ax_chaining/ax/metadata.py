"""What a step of a candidate-set strategy records in its generator run's
``gen_metadata[GEN_METADATA_KEY]``, and reading it back from an experiment."""

from collections.abc import Iterator
from typing import Any

from ax.core import Experiment

#: Key of this package's entry in ``GeneratorRun.gen_metadata``.
GEN_METADATA_KEY: str = "chaining_ucb"


def recorded(experiment: Experiment) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(trial index, metadata)`` of this package's generator runs, in order."""
    for index in sorted(experiment.trials):
        for gr in experiment.trials[index].generator_runs:
            meta = (gr.gen_metadata or {}).get(GEN_METADATA_KEY)
            if isinstance(meta, dict):
                yield index, meta
