"""``on_error="raise"`` in background mode.

Holds the guarantee of `on_error="raise"`: docs/guarantees.md#on_errorraise-test_on_error_raisepy

The first error (of a target or a sink) stops all polling at once and is
re-raised, the very exception object, from ``run()``, ``stop()`` or
``__aexit__``; later errors are logged, not raised; a second ``stop()`` is
quiet. What was logged before the error still reaches the sinks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from monitor_async import Monitor, Record
from monitor_async.backends import MemorySink
from tests.support.checks import monitor_warnings, wait_until
from tests.support.sinks import FailingSink
from tests.support.targets import Ticker


class BreaksAt:
    """Healthy for ``good`` polls, then raises the same error object every time."""

    def __init__(self, good: int) -> None:
        self.good = good
        self.calls = 0
        self.error = RuntimeError("replay buffer corrupted")

    def stats(self) -> dict[str, float]:
        self.calls += 1
        if self.calls > self.good:
            raise self.error
        return {"n": float(self.calls)}


class FlushFails(MemorySink):
    """Writes fine; flush() raises (a later error, during stop)."""

    async def _flush(self) -> None:
        raise OSError("flush refused")


def build(sink: object) -> tuple[Monitor, BreaksAt, Ticker]:
    broken, healthy = BreaksAt(good=3), Ticker()
    monitor = Monitor(sink, poll_interval=0.01, on_error="raise")
    monitor.watch(broken, name="broken")
    monitor.watch(healthy, name="healthy")
    return monitor, broken, healthy


async def assert_polling_stopped(*targets: BreaksAt | Ticker) -> None:
    calls = [t.calls for t in targets]
    await asyncio.sleep(0.15)  # 15 intervals
    assert [t.calls for t in targets] == calls, "nothing is polled after the first error"


async def test_run_reraises_the_first_error_and_logs_later_ones(caplog: pytest.LogCaptureFixture) -> None:
    sink = FlushFails(name="mem")
    monitor, broken, healthy = build(sink)
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        task = asyncio.create_task(monitor.run())
        with pytest.raises(RuntimeError) as raised:
            await asyncio.wait_for(task, 5)
    assert raised.value is broken.error
    assert not monitor.running, "run() ended by itself and cleaned up"
    await assert_polling_stopped(broken, healthy)
    assert broken.calls == 4
    assert [r.metrics["broken/n"] for r in sink.records if r.name == "broken"] == [1.0, 2.0, 3.0]
    (later,) = monitor_warnings(caplog)
    assert "sink 'mem': flush() raised OSError('flush refused')" in later
    assert "after an earlier error that stopped the monitor" in later
    await monitor.stop()  # already raised: a no-op, not raised again


async def test_stop_reraises_the_first_error_once() -> None:
    sink = MemorySink()
    monitor, broken, healthy = build(sink)
    await monitor.start()
    await wait_until(lambda: broken.calls > broken.good)
    await assert_polling_stopped(broken, healthy)
    with pytest.raises(RuntimeError) as raised:
        await monitor.stop()
    assert raised.value is broken.error
    assert not monitor.running
    await monitor.stop()
    assert all(r.metrics.get("broken/n", 0) <= 3 for r in sink.records)
    assert sink.flushes == 1, "the sinks were drained and flushed before the error was raised"


async def test_async_with_reraises_the_first_error_on_exit() -> None:
    monitor, broken, healthy = build(MemorySink())
    with pytest.raises(RuntimeError) as raised:
        async with monitor:
            await wait_until(lambda: broken.calls > broken.good)
            await assert_polling_stopped(broken, healthy)
    assert raised.value is broken.error
    assert not monitor.running


async def test_a_sink_error_is_the_first_error_too() -> None:
    class Writes(FailingSink):
        async def _write(self, records: Sequence[Record]) -> None:
            await super()._write(records)

    bad, good = Writes(name="bad"), MemorySink()
    healthy = Ticker()
    monitor = Monitor([bad, good], poll_interval=0.01, on_error="raise")
    monitor.watch(healthy, name="healthy")
    task = asyncio.create_task(monitor.run())
    with pytest.raises(OSError, match="disk on fire"):
        await asyncio.wait_for(task, 5)
    await assert_polling_stopped(healthy)
    assert bad.attempts == 1, "the failing sink is not written to again"
    assert len(good.records) == healthy.calls, "the healthy sink got everything polled before the error"
