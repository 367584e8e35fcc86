"""Small fake targets and sinks shared by the tests (the user's objects, not our libraries)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from monitor_async import Record
from monitor_async.backends import BaseSink


class Collector:
    """A fake target: a cumulative frame counter and a fixed-size buffer."""

    def __init__(self) -> None:
        self.frames = 0

    def stats(self) -> dict[str, float]:
        self.frames += 100
        return {"frames": self.frames, "size": 7.25}


class Counter:
    """A target whose ``frames`` grows by ``step`` at each stats() call."""

    def __init__(self, step: int = 10, **extra: Any) -> None:
        self.frames = 0
        self.step = step
        self.calls = 0
        self.extra = extra

    def stats(self) -> dict[str, Any]:
        self.calls += 1
        self.frames += self.step
        return {"frames": self.frames, **self.extra}


class Settable:
    """A target returning whatever ``.value`` is."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def stats(self) -> Any:
        return self.value


class HungAsync:
    """``async def stats()`` that never returns until ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls = 0

    async def stats(self) -> dict[str, float]:
        self.calls += 1
        await self.release.wait()
        return {"x": 1.0}


class StallSink(BaseSink):
    """A sink whose write blocks until ``gate`` is set (a stalled backend)."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self.gate = asyncio.Event()
        self.entered = threading.Event()
        self.records: list[Record] = []

    async def _write(self, records: Sequence[Record]) -> None:
        self.entered.set()
        await self.gate.wait()
        self.records.extend(records)


class FailingSink(BaseSink):
    """A sink that raises on every write."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self.attempts = 0

    async def _write(self, records: Sequence[Record]) -> None:
        self.attempts += 1
        raise OSError("disk on fire")


class RecordingLogger:
    """A logger of TorchRL's shape (``log_metrics(dict, step=)``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int | None]] = []
        self.closed = False
        self.thread_names: set[str] = set()

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.thread_names.add(threading.current_thread().name)
        self.calls.append((dict(metrics), step))

    def close(self) -> None:
        self.closed = True
