"""Bounded whatever hangs, even code that swallows its cancellation.

Holds "Bounded, whatever hangs": docs/guarantees.md#bounded-whatever-hangs-test_bounded_hangspy

``stop()``, ``flush()``, ``close()`` and ``SyncMonitor.stop()`` return within
about ``stop_timeout`` when a sink's ``write``/``flush``/``close`` or an async
``stats()`` ignores cancellation (the monitor waits with a deadline, then
abandons and counts), also from a watchdog thread while another thread's
``step()`` is stuck on a sink. A ``stop()`` cancelled half way leaves a
monitor that a second ``stop()`` finishes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from monitor_async import Monitor, SyncMonitor
from tests.support.checks import monitor_warnings, wait_until, wait_until_sync
from tests.support.hostile import GateSink, SwallowingSink, SwallowingStats, call_within, run_isolated
from tests.support.sinks import HungAsyncSink, HungThreadSink, RecordingSink
from tests.support.targets import Ticker

STOP_TIMEOUT = 0.3
TIMEOUT = 0.2
BOUND = 2 * TIMEOUT + 2 * STOP_TIMEOUT + 1.5  # every phase of stop(), plus slack for a busy machine


def writer_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("monitor-async sink") and not t.done()]


def only_left_behind(label: str) -> bool:
    """No writer task is left but those stuck in user code that ignores its cancellation (asked to end)."""
    return all(t.get_name().startswith(f"monitor-async sink {label}") and t.cancelling() for t in writer_tasks())


@pytest.mark.parametrize("hangs", ["write", "flush", "close"])
def test_stop_is_bounded_when_a_sink_swallows_its_cancellation(hangs: str, caplog: pytest.LogCaptureFixture) -> None:
    bad, good, target = SwallowingSink("bad", hangs), RecordingSink("good"), Ticker()

    async def main() -> tuple[float, dict[str, float]]:
        monitor = Monitor(
            [bad, good], poll_interval=0.01, stop_timeout=STOP_TIMEOUT, close_sinks=hangs == "close", batch_wait=0
        )
        monitor.watch(target, name="t")
        await monitor.start()
        if hangs == "write":
            await wait_until(bad.swallower.entered.is_set)
        else:
            await wait_until(lambda: len(bad.records) >= 3)
        started = time.monotonic()
        await monitor.stop()
        took = time.monotonic() - started
        assert not monitor.running
        assert only_left_behind("bad"), writer_tasks()
        return took, monitor.stats()

    try:
        with caplog.at_level(logging.WARNING, logger="monitor_async"):
            took, stats = run_isolated(main)
    finally:
        bad.swallower.released = True
    assert took < BOUND, f"stop() took {took:.2f}s with a sink whose {hangs}() swallows cancellation"
    assert good.records[-1].metrics["t/n"] == target.calls, "the healthy sink got the final snapshot"
    assert good.flushes >= 1
    warnings = [w for w in monitor_warnings(caplog) if "sink 'bad'" in w]
    assert warnings, "abandoning the sink is warned"
    if hangs == "write":
        assert stats["sink/bad/abandoned"] >= 1


def test_flush_is_bounded_when_a_sink_write_swallows_its_cancellation() -> None:
    bad, good = SwallowingSink("bad", "write"), RecordingSink("good")

    async def main() -> float:
        monitor = Monitor([bad, good], poll_interval=0.01, stop_timeout=STOP_TIMEOUT, batch_wait=0)
        monitor.watch(Ticker(), name="t")
        await monitor.start()
        await wait_until(bad.swallower.entered.is_set)
        started = time.monotonic()
        await monitor.flush()
        took = time.monotonic() - started
        assert good.flushes >= 1, "the healthy sink was flushed"
        await monitor.stop()
        return took

    try:
        took = run_isolated(main)
    finally:
        bad.swallower.released = True
    assert took < STOP_TIMEOUT + 1.0


@pytest.mark.parametrize("mode", ["background", "step"])
def test_an_async_stats_that_swallows_its_cancellation_cannot_hold_stop_or_step(mode: str) -> None:
    bad, healthy, sink = SwallowingStats(), Ticker(), RecordingSink("rec")

    async def main() -> tuple[float, dict[str, float]]:
        monitor = Monitor(sink, poll_interval=0.01, stop_timeout=STOP_TIMEOUT)
        monitor.watch(bad, name="bad", timeout=TIMEOUT)
        monitor.watch(healthy, name="healthy")
        started = time.monotonic()
        if mode == "background":
            await monitor.start()
            await wait_until(bad.swallower.entered.is_set)
            started = time.monotonic()
        else:
            for _ in range(3):
                logged = await monitor.step()
                assert "healthy" in logged
        await monitor.stop()
        return time.monotonic() - started, monitor.stats()

    try:
        took, stats = run_isolated(main)
    finally:
        bad.swallower.released = True
    limit = BOUND if mode == "background" else 3 * (TIMEOUT + 0.5) + BOUND
    assert took < limit, f"{mode} took {took:.2f}s"
    assert stats["polls_timed_out"] >= 1
    assert sink.records[-1].metrics["healthy/n"] == healthy.calls
    if mode == "step":
        assert bad.calls == 1, "a swallowing call is left alone until it returns, not called again"


@pytest.mark.parametrize("background", [True, False])
@pytest.mark.parametrize("kind", ["async", "thread"])
def test_sync_stop_from_a_watchdog_thread_while_another_threads_step_is_stuck(background: bool, kind: str) -> None:
    hung: Any = HungAsyncSink("hung") if kind == "async" else HungThreadSink("hung")
    good, target = RecordingSink("good"), Ticker()
    monitor = SyncMonitor([hung, good], background=background, stop_timeout=STOP_TIMEOUT)
    monitor.watch(target, name="t")
    stepper = threading.Thread(target=lambda: monitor.step(), name="stuck-step", daemon=True)
    try:
        stepper.start()
        wait_until_sync(hung.entered.is_set)
        wait_until_sync(lambda: len(good.records) == 1)
        _, took = call_within(monitor.stop, 15)
        assert took < BOUND, f"stop() took {took:.2f}s"
        assert good.records[-1].metrics["t/n"] == target.calls, "the final snapshot reached the healthy sink"
        assert good.flushes >= 1
        stats = monitor.stats()
        assert stats["sink/hung/abandoned"] >= 1
    finally:
        if isinstance(hung, HungThreadSink):
            hung.release.set()
    call_within(monitor.close, 15)


class LoopBlockingSink(RecordingSink):
    """A sink that does blocking work inside ``async def write``: it blocks the loop itself."""

    def __init__(self) -> None:
        super().__init__("blocker")
        self.entered = threading.Event()
        self.release = threading.Event()

    async def _write(self, records: Any) -> None:
        self.entered.set()
        self.release.wait()  # what no deadline on the loop can interrupt
        await super()._write(records)


def test_sync_stop_gives_up_on_a_loop_blocked_by_a_sink_and_a_later_close_finishes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    blocker, target = LoopBlockingSink(), Ticker()
    monitor = SyncMonitor(blocker, poll_interval=0.01, stop_timeout=STOP_TIMEOUT, batch_wait=0)
    monitor.watch(target, name="t")
    monitor.start()
    try:
        wait_until_sync(blocker.entered.is_set)
        with caplog.at_level(logging.WARNING, logger="monitor_async"):
            _, took = call_within(monitor.stop, 30)
        assert took < monitor.monitor.stop_bound() + 2.0
        assert any("did not answer" in w for w in monitor_warnings(caplog))
    finally:
        blocker.release.set()
    call_within(monitor.close, 30)  # the loop is free again: the stop completes
    assert not [t for t in threading.enumerate() if t.name == "monitor-async-loop" and t.is_alive()]
    assert blocker.records[-1].metrics["t/n"] == target.calls, "the final snapshot arrived"


def test_a_stop_cancelled_half_way_is_finished_by_a_second_stop() -> None:
    hung, good, target = HungAsyncSink("hung"), RecordingSink("good"), Ticker()

    async def main() -> None:
        monitor = Monitor([hung, good], poll_interval=0.01, stop_timeout=5, batch_wait=0)
        monitor.watch(target, name="t")
        await monitor.start()
        await wait_until(hung.entered.is_set)
        first = asyncio.create_task(monitor.stop())
        await wait_until(lambda: good.flushes >= 1)  # stop() reached the sinks; the hung one holds it
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        polls = target.calls
        await asyncio.wait_for(monitor.stop(), 10)
        assert not monitor.running
        assert not writer_tasks(), "the writer tasks are gone"
        assert target.calls == polls, "polling stayed stopped; the final snapshot is not taken twice"
        assert good.flushes >= 2, "the second stop() flushed the sinks"
        await asyncio.sleep(0.05)
        assert target.calls == polls

    run_isolated(main, timeout=30)
    assert good.records[-1].metrics["t/n"] == target.calls


def test_a_stop_cancelled_half_way_then_run_again() -> None:
    gate, target = GateSink("gate"), Ticker()

    async def main() -> None:
        monitor = Monitor(gate, poll_interval=0.01, stop_timeout=5, batch_wait=0)
        monitor.watch(target, name="t")
        await monitor.start()
        await wait_until(gate.entered.is_set)
        first = asyncio.create_task(monitor.stop())
        await asyncio.sleep(0.05)  # not a synchronisation: a cancel at any point must leave it finishable
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        gate.gate.set()
        await monitor.start()  # finishes the stop first, then starts afresh
        calls = target.calls
        await wait_until(lambda: target.calls > calls + 3)
        await monitor.stop()
        assert not monitor.running

    run_isolated(main, timeout=30)
    assert [r.metrics["t/n"] for r in gate.records] == sorted({r.metrics["t/n"] for r in gate.records})
