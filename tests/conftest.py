"""Shared fixtures: a real local Ray for the whole session, and quiet temp dirs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """A real local Ray (``ray.init(num_cpus=1)``), started once per test session."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
