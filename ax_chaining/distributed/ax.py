"""An Ax runner and metric that evaluate trials on a Dask cluster."""

from collections.abc import Callable, Mapping
from typing import Any

from ax.api.protocols.metric import IMetric
from ax.api.protocols.runner import IRunner
from ax.core.base_trial import TrialStatus
from ax.core.types import TParameterization

__all__ = ["DaskMetric", "DaskRunner"]


class DaskRunner(IRunner):
    """An Ax runner that evaluates each trial as a task on a Dask cluster; the
    task's key is in the trial's metadata, where :class:`DaskMetric` finds its
    result, and a task that raised fails its trial.

    Example:
        >>> client.configure_runner(DaskRunner(dask_client, evaluate))
        >>> client.configure_metrics([DaskMetric("score", dask_client)])
        >>> client.run_trials(max_trials=20, parallelism=4)

    Args:
        client: A ``distributed.Client``.
        evaluate: Maps a trial's parameters to ``{metric name: value}`` (or
            ``(mean, sem)`` values); picklable, as it runs on the workers.
    """

    def __init__(self, client: Any, evaluate: Callable[[dict], Mapping]) -> None:
        super().__init__()
        self.client, self.evaluate = client, evaluate
        self._futures: dict[int, Any] = {}

    def run_trial(
        self, trial_index: int, parameterization: TParameterization
    ) -> dict[str, Any]:
        future = self.client.submit(self.evaluate, dict(parameterization), pure=False)
        self._futures[trial_index] = future  # keeps the result until fetched
        return {"dask_key": str(future.key)}

    def poll_trial(
        self, trial_index: int, trial_metadata: Mapping[str, Any]
    ) -> TrialStatus:
        future = self._futures.get(trial_index)
        if future is None or future.status in ("error", "cancelled", "lost"):
            return TrialStatus.FAILED
        return TrialStatus.COMPLETED if future.done() else TrialStatus.RUNNING

    def stop_trial(
        self, trial_index: int, trial_metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        future = self._futures.pop(trial_index, None)
        if future is not None:
            future.cancel()
        return {}


class DaskMetric(IMetric):
    """An Ax metric read from :class:`DaskRunner`'s task of the trial:
    ``evaluate(parameters)[name]``, found by the key in the trial's metadata.

    Example:
        >>> DaskMetric("score", dask_client)
    """

    def __init__(self, name: str, client: Any) -> None:
        super().__init__(name=name)
        self.client = client

    def fetch(
        self, trial_index: int, trial_metadata: Mapping[str, Any]
    ) -> tuple[int, float | tuple[float, float]]:
        from distributed import Future

        future = Future(trial_metadata["dask_key"], client=self.client)
        value = future.result()[self.name]
        if isinstance(value, tuple | list):
            return 0, (float(value[0]), float(value[1]))
        return 0, float(value)
