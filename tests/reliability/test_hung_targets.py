"""A stats() that hangs forever, inline-async or on a thread, or is always too slow.

Holds "Isolation: hung and slow targets": docs/guarantees.md#isolation-hung-and-slow-targets-test_hung_targetspy

A hung target is timed out, reported once naming the watch, and never piles
up calls; its neighbours keep their cadence. A target slower than its
interval skips the slots it missed (counted) and never bursts to catch up.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time

import pytest

from monitor_async import Monitor
from monitor_async.backends import MemorySink
from tests.support.checks import monitor_warnings
from tests.support.targets import AsyncHung, BlockingHung, Ticker


async def test_async_stats_hanging_forever_is_timed_out_and_cancelled(caplog: pytest.LogCaptureFixture) -> None:
    hung, healthy = AsyncHung(), Ticker()
    monitor = Monitor(MemorySink(), poll_interval=0.05)
    monitor.watch(hung, name="hung", timeout=0.1)
    monitor.watch(healthy, name="healthy")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.start()
        await asyncio.sleep(1.0)
        started = time.monotonic()
        await monitor.stop()
    assert time.monotonic() - started < 1.5
    assert healthy.calls >= 15, "~20 polls expected at 50 ms: the hung neighbour delays nothing"
    stats = monitor.stats()
    assert stats["polls_timed_out"] >= 5
    assert hung.most_running == 1, "each timed-out call is cancelled before the next one starts"
    assert hung.running == 0 and hung.cancelled == hung.calls
    timeouts = [w for w in monitor_warnings(caplog) if "watch 'hung'" in w and "did not return within 0.1s" in w]
    assert len(timeouts) == 1, "one warning for the whole streak"
    assert any("final snapshot of watch 'hung' skipped" in w for w in monitor_warnings(caplog))


async def test_thread_stats_hanging_forever_is_abandoned_without_piling_up_threads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hung, healthy = BlockingHung(), Ticker()
    monitor = Monitor(MemorySink(), poll_interval=0.05, thread_limit=2)
    monitor.watch(hung, name="hung", timeout=0.1, offload="thread")
    monitor.watch(healthy, name="healthy", offload="thread")
    threads_before = threading.active_count()
    try:
        with caplog.at_level(logging.WARNING, logger="monitor_async"):
            await monitor.start()
            await asyncio.sleep(1.0)
            assert hung.calls == 1, "a hung call is never started again while it runs"
            assert threading.active_count() - threads_before <= 3
            started = time.monotonic()
            await monitor.stop()
        assert time.monotonic() - started < 1.5
        assert healthy.calls >= 15, "the hung call's thread no longer counts: the healthy target keeps a thread"
        stats = monitor.stats()
        assert stats["polls_timed_out"] == 1
        assert stats["polls_missed"] >= 10, "polls of the busy target are skipped and counted"
        (warning,) = [w for w in monitor_warnings(caplog) if "watch 'hung'" in w and "did not return" in w]
        assert "0.1s" in warning
    finally:
        hung.release.set()

    # once the hung call returns, the target is polled again
    await asyncio.sleep(0.05)
    assert (await monitor.step())["hung"] == {"hung/x": 1.0}
    assert hung.calls == 2


@pytest.mark.parametrize("offload", ["thread", "async"])
async def test_a_target_slower_than_its_interval_skips_missed_slots_and_never_bursts(offload: str) -> None:
    slow = threading.Event()
    slow.set()
    times: list[float] = []

    def sync_stats() -> dict[str, float]:
        times.append(time.monotonic())
        if slow.is_set():
            time.sleep(0.12)
        return {"x": 1.0}

    async def async_stats() -> dict[str, float]:
        times.append(time.monotonic())
        if slow.is_set():
            await asyncio.sleep(0.12)
        return {"x": 1.0}

    monitor = Monitor(MemorySink(), poll_interval=0.05, poll_timeout=1.0)
    if offload == "thread":
        monitor.watch(object(), name="slow", stats_fn=sync_stats, offload="thread", log_on_close=False)
    else:
        monitor.watch(object(), name="slow", stats_fn=async_stats, log_on_close=False)
    await monitor.start()
    await asyncio.sleep(1.0)
    slow_calls = len(times)
    missed = monitor.stats()["polls_missed"]
    slow.clear()  # now fast again: the cadence resumes at 50 ms, with no catch-up burst
    switched = time.monotonic()
    await asyncio.sleep(0.5)
    await monitor.stop()
    assert 5 <= slow_calls <= 9, f"~1 s / 0.15 s expected, got {slow_calls}"
    assert missed >= 8, "the skipped slots are counted"
    after = [t for t in times if t > switched + 0.15]
    gaps = [b - a for a, b in itertools.pairwise(after)]
    assert gaps and min(gaps) > 0.03, f"polls burst after the slow phase: gaps {gaps}"
    assert len(times) - slow_calls <= 13, "no more than one poll per 50 ms slot after the slow phase"
