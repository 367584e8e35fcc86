"""Faulty targets and sinks for the reliability suite: the user's objects misbehaving, not our libraries."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from monitor_async import Record
from monitor_async.backends import BaseSink, ThreadedSink


class Ticker:
    """A healthy target: ``n`` grows by one per call; remembers when each call happened."""

    def __init__(self, **extra: Any) -> None:
        self.n = 0
        self.times: list[float] = []
        self.extra = extra
        self._lock = threading.Lock()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            self.n += 1
            self.times.append(time.monotonic())
            return {"n": self.n, **self.extra}

    @property
    def calls(self) -> int:
        return len(self.times)


class Raising:
    """``stats()`` raises ``error`` every time (or returns ``{"x": 1}`` once ``healthy`` is set)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error or RuntimeError("collector lost its worker")
        self.healthy = False
        self.calls = 0

    def stats(self) -> dict[str, float]:
        self.calls += 1
        if self.healthy:
            return {"x": 1.0}
        raise self.error


class BlockingHung:
    """A sync ``stats()`` that blocks its thread until ``release`` is set (a dead server)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.calls = 0
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def stats(self) -> dict[str, float]:
        with self._lock:
            self.calls += 1
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        self.entered.set()
        self.release.wait()
        with self._lock:
            self.running -= 1
        return {"x": 1.0}


class AsyncHung:
    """``async def stats()`` that never returns; counts how many calls are pending at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.running = 0
        self.most_running = 0
        self.cancelled = 0

    async def stats(self) -> dict[str, float]:
        self.calls += 1
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
        return {"x": 1.0}


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


class HungAsyncSink(BaseSink):
    """A sink whose first write never returns (awaits forever on the loop); flush and close hang too."""

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
    """A blocking sink whose ``write_blocking`` never returns until ``release`` is set: its worker thread is stuck."""

    def __init__(self, name: str = "hungthread") -> None:
        self.name = name
        self.release = threading.Event()
        self.entered = threading.Event()

    def write_blocking(self, records: Sequence[Record]) -> None:
        self.entered.set()
        self.release.wait()


def monitor_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages logged on the ``monitor_async`` logger at WARNING or above."""
    return [r.getMessage() for r in caplog.records if r.name == "monitor_async" and r.levelno >= logging.WARNING]


async def wait_until(predicate: Any, timeout: float = 10.0, period: float = 0.005) -> None:
    """Polls ``predicate()`` on the loop until it holds; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(period)


def wait_until_sync(predicate: Any, timeout: float = 10.0, period: float = 0.005) -> None:
    """:func:`wait_until` for plain threads."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(period)
