"""Fixtures the sink tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.network import Receiver


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """A real HTTP receiver on 127.0.0.1, one per test module."""
    server = Receiver()
    yield server
    server.stop()


@pytest.fixture
def wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """wandb in offline mode, writing under ``tmp_path`` (yielded); finishes any run a failing test left active."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    yield tmp_path
    if wandb.run is not None:
        wandb.run.finish()
