"""Fake sinks, a TorchRL-shaped logger and an alert notifier: what the monitor writes to, kept for the test to read."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from monitor_async import AlertEvent, Record
from monitor_async.backends import BaseSink, ThreadedSink


class RecordingSink(BaseSink):
    """Keeps every record and every batch size; optionally sleeps ``delay`` seconds per write."""

    def __init__(self, name: str | None = None, delay: float = 0.0) -> None:
        self.name = name
        self.delay = delay
        self.records: list[Record] = []
        self.batches: list[int] = []
        self.flushes = 0

    async def _write(self, records: Sequence[Record]) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        self.batches.append(len(records))
        self.records.extend(records)

    async def _flush(self) -> None:
        self.flushes += 1

    def by_name(self) -> dict[str, list[Record]]:
        out: dict[str, list[Record]] = {}
        for record in self.records:
            out.setdefault(record.name, []).append(record)
        return out


class FailingSink(BaseSink):
    """Raises on every write."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self.attempts = 0

    async def _write(self, records: Sequence[Record]) -> None:
        self.attempts += 1
        raise OSError("disk on fire")


class FlakySink(BaseSink):
    """Raises on the writes whose 1-based index is in ``fail_on``; keeps the records of the others."""

    def __init__(self, name: str, fail_on: set[int]) -> None:
        self.name = name
        self.fail_on = fail_on
        self.attempts = 0
        self.records: list[Record] = []

    async def _write(self, records: Sequence[Record]) -> None:
        self.attempts += 1
        if self.attempts in self.fail_on:
            raise ConnectionError(f"backend refused write #{self.attempts}")
        self.records.extend(records)


class StallSink(BaseSink):
    """A write blocks until ``gate`` is set (a stalled backend), then keeps the records."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self.gate = asyncio.Event()
        self.entered = threading.Event()
        self.records: list[Record] = []

    async def _write(self, records: Sequence[Record]) -> None:
        self.entered.set()
        await self.gate.wait()
        self.records.extend(records)


class HungAsyncSink(BaseSink):
    """The first write never returns (awaits forever on the loop); flush and close hang too."""

    def __init__(self, name: str = "hung") -> None:
        self.name = name
        self.entered = threading.Event()

    async def _write(self, records: Sequence[Record]) -> None:
        self.entered.set()
        await asyncio.Event().wait()

    async def _flush(self) -> None:
        await asyncio.Event().wait()

    async def _close(self) -> None:
        await asyncio.Event().wait()


class HungThreadSink(ThreadedSink):
    """A blocking sink whose ``write_blocking`` does not return until ``release`` is set: its worker thread is stuck."""

    def __init__(self, name: str = "hungthread") -> None:
        self.name = name
        self.release = threading.Event()
        self.entered = threading.Event()

    def write_blocking(self, records: Sequence[Record]) -> None:
        self.entered.set()
        self.release.wait()


class RecordingLogger:
    """A logger of TorchRL's shape (``log_metrics(dict, step=)``) that keeps its calls and their threads."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int | None]] = []
        self.closed = False
        self.thread_names: set[str] = set()

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.thread_names.add(threading.current_thread().name)
        self.calls.append((dict(metrics), step))

    def close(self) -> None:
        self.closed = True


class Events(list[AlertEvent]):
    """A notifier that keeps every event it is given."""

    def __call__(self, event: AlertEvent) -> None:
        self.append(event)

    def states(self) -> list[tuple[str, str]]:
        return [(e.rule, e.state) for e in self]
