"""Shared fixtures and helpers for the test suite."""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.register_profile(
    "dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


# Many small GP fits and solves: one thread each is faster than two fighting
# over two cores (pytest-xdist already runs one worker per core).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed_torch():
    torch.manual_seed(0)
    yield
