"""``KeyboardInterrupt``, ``SystemExit`` or a stray ``CancelledError`` from user code.

Holds "`KeyboardInterrupt` and friends from your code": docs/guarantees.md#keyboardinterrupt-and-friends-from-your-code-test_base_exceptionspy

Raised by a sink or by a ``stats()`` that runs on the monitor's own loop or
threads, each is a failure of that sink or watch: counted, warned once per
streak, and polling and writing go on; ``stop()`` works after it. A
``CancelledError`` that really cancels the caller still propagates. With
``SyncMonitor(background=False)`` a ``KeyboardInterrupt`` raised in the
caller's own thread propagates to the caller, as Python would, and the
monitor stays stoppable.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from monitor_async import Monitor, PollError, SinkError, SyncMonitor
from tests.support.checks import monitor_warnings, wait_until, wait_until_sync
from tests.support.hostile import ESCAPES, RaisingSink, RaisingStats, RaisingThreadSink, run_isolated
from tests.support.sinks import RecordingSink
from tests.support.targets import Ticker

SOURCES = ["stats-inline", "stats-async", "stats-thread", "sink-async", "sink-thread"]


class Setup:
    """A healthy target and sink beside one source of ``escape``."""

    def __init__(self, source: str, escape: str) -> None:
        make = ESCAPES[escape]
        self.source = source
        self.escape = escape
        self.healthy = Ticker()
        self.good = RecordingSink("good")
        self.bad_sink: Any = None
        self.bad_target: RaisingStats | None = None
        if source == "sink-async":
            self.bad_sink = RaisingSink("bad", make)
        elif source == "sink-thread":
            self.bad_sink = RaisingThreadSink("bad", make)
        else:
            self.bad_target = RaisingStats(make, how="async" if source == "stats-async" else "sync")

    @property
    def sinks(self) -> list[Any]:
        return [self.good] + ([self.bad_sink] if self.bad_sink is not None else [])

    def watch(self, monitor: Monitor | SyncMonitor) -> None:
        monitor.watch(self.healthy, name="healthy")
        if self.bad_target is not None:
            offload = "thread" if self.source == "stats-thread" else "inline"
            monitor.watch(self.bad_target, name="bad", offload=offload)

    def failures(self, stats: dict[str, float]) -> float:
        return stats["sink/bad/errors"] if self.bad_sink is not None else stats["polls_failed"]

    def check(self, stats: dict[str, float], warnings: list[str], calls_when_failing: int) -> None:
        assert self.healthy.calls > calls_when_failing + 3, "polling went on after the failures"
        assert self.good.records[-1].metrics["healthy/n"] == self.healthy.calls, "the final snapshot arrived"
        if self.bad_sink is not None:
            assert stats["sink/bad/errors"] == self.bad_sink.attempts
            assert stats["sink/bad/written"] == 0
            assert stats["polls_failed"] == 0
            about = [w for w in warnings if "sink 'bad'" in w]
        else:
            assert self.bad_target is not None
            # every call is one failure, but for a call whose poll stop() cancelled as it answered
            assert self.bad_target.calls - 1 <= stats["polls_failed"] <= self.bad_target.calls
            about = [w for w in warnings if "watch 'bad'" in w and "raised" in w]
        assert len(about) == 1, f"one warning for the whole streak: {about}"
        assert self.escape in about[0], about[0]


@pytest.mark.parametrize("escape", list(ESCAPES))
@pytest.mark.parametrize("source", SOURCES)
def test_sync_monitor_in_background_counts_it_and_keeps_polling(
    source: str, escape: str, caplog: pytest.LogCaptureFixture
) -> None:
    setup = Setup(source, escape)
    monitor = SyncMonitor(setup.sinks, poll_interval=0.01, batch_wait=0, stop_timeout=2)
    setup.watch(monitor)
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        try:
            monitor.start()
            wait_until_sync(lambda: setup.failures(monitor.stats()) >= 3, timeout=5)
            calls = setup.healthy.calls
            wait_until_sync(lambda: setup.healthy.calls > calls + 3, timeout=5)
            monitor.stop()
        finally:
            monitor.close()
    setup.check(monitor.stats(), monitor_warnings(caplog), calls)


@pytest.mark.parametrize("escape", list(ESCAPES))
@pytest.mark.parametrize("source", ["stats-inline", "stats-async", "sink-async"])
def test_async_monitor_in_background_counts_it_and_keeps_polling(
    source: str, escape: str, caplog: pytest.LogCaptureFixture
) -> None:
    setup = Setup(source, escape)

    async def main() -> tuple[dict[str, float], int]:
        monitor = Monitor(setup.sinks, poll_interval=0.01, batch_wait=0, stop_timeout=2)
        setup.watch(monitor)
        async with monitor:
            await wait_until(lambda: setup.failures(monitor.stats()) >= 3, timeout=5)
            calls = setup.healthy.calls
            await wait_until(lambda: setup.healthy.calls > calls + 3, timeout=5)
        return monitor.stats(), calls

    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        stats, calls = run_isolated(main)
    setup.check(stats, monitor_warnings(caplog), calls)


@pytest.mark.parametrize("escape", list(ESCAPES))
@pytest.mark.parametrize("source", SOURCES)
def test_step_returns_and_counts_it(source: str, escape: str) -> None:
    setup = Setup(source, escape)

    async def main() -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        monitor = Monitor(setup.sinks)
        setup.watch(monitor)
        logged = await monitor.step()
        await monitor.step()
        return logged, monitor.stats()

    logged, stats = run_isolated(main)
    assert list(logged) == ["healthy"]
    assert setup.failures(stats) == 2
    assert len(setup.good.records) == 2


@pytest.mark.parametrize("source", ["stats-inline", "sink-async"])
def test_on_error_raise_raises_a_monitor_error_caused_by_it(source: str) -> None:
    setup = Setup(source, "KeyboardInterrupt")

    async def main() -> BaseException:
        monitor = Monitor(setup.sinks, on_error="raise")
        setup.watch(monitor)
        try:
            await monitor.step()
        except Exception as exc:  # noqa: BLE001 - what the caller catches is the point
            return exc
        raise AssertionError("step() did not raise")

    error = run_isolated(main)
    assert isinstance(error, PollError if source.startswith("stats") else SinkError)
    assert isinstance(error.__cause__, KeyboardInterrupt)
    assert "KeyboardInterrupt" in str(error) and "'bad'" in str(error)


async def test_cancelling_the_caller_of_step_still_cancels_it() -> None:
    entered = asyncio.Event()

    class Slow:
        async def stats(self) -> dict[str, float]:
            entered.set()
            await asyncio.sleep(3600)
            return {}

    monitor = Monitor(RecordingSink("rec"), poll_timeout=3600)
    monitor.watch(Slow(), name="slow")
    step = asyncio.create_task(monitor.step())
    await entered.wait()
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step
    assert monitor.stats()["polls_failed"] == 0, "a real cancel is no failure of the watch"


def test_manual_sync_monitor_lets_a_keyboard_interrupt_of_its_own_thread_propagate() -> None:
    sink, healthy = RecordingSink("rec"), Ticker()
    bad = RaisingStats(ESCAPES["KeyboardInterrupt"])
    monitor = SyncMonitor(sink, background=False)
    monitor.watch(healthy, name="healthy")
    monitor.watch(bad, name="bad", offload="inline", log_on_close=False)
    with pytest.raises(KeyboardInterrupt):
        monitor.step()
    monitor.unwatch("bad")
    assert "healthy" in monitor.step(), "still usable"
    monitor.stop()
    assert sink.records[-1].metrics["healthy/n"] == healthy.calls, "and stoppable: the final snapshot arrived"
    assert sink.flushes >= 1
    monitor.close()


@pytest.mark.parametrize("escape", list(ESCAPES))
def test_manual_sync_monitor_counts_it_when_raised_on_a_worker_thread(escape: str) -> None:
    sink = RecordingSink("rec")
    bad = RaisingStats(ESCAPES[escape])
    thread_sink = RaisingThreadSink("bad", ESCAPES[escape])
    monitor = SyncMonitor([sink, thread_sink], background=False)
    monitor.watch(Ticker(), name="healthy")
    monitor.watch(bad, name="stuck", offload="thread")

    def steps() -> dict[str, float]:
        for _ in range(3):
            monitor.step()
        monitor.close()
        return monitor.stats()

    stats = run_isolated(lambda: asyncio.to_thread(steps))
    assert stats["polls_failed"] == 4  # three steps and the final snapshot
    assert stats["sink/bad/errors"] == 4
    assert len(sink.records) == 4
