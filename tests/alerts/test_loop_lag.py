"""The monitor notices its own loop: a CPU loop that never awaits is counted, measured and warned once."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from monitor_async import Alert, Monitor, SyncMonitor
from monitor_async.backends import MemorySink
from tests.support.sinks import Events
from tests.support.targets import Moving


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


async def test_a_three_second_cpu_loop_is_counted_in_polls_missed_and_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = MemorySink()
    monitor = Monitor(sink, poll_interval=0.1)
    monitor.watch(Moving(), name="collector")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with monitor:
            _spin(3.0)  # the user's CPU work, on the monitor's loop, never awaiting
    stats = monitor.stats()
    assert stats["polls_missed"] >= 20, stats
    assert stats["loop_lag_max"] >= 2.5, stats
    warned = [r.getMessage() for r in caplog.records if "event loop was blocked" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "the event loop was blocked for 3.0 s: polls could not run; offload CPU work with asyncio.to_thread" in (
        warned[0]
    )


async def test_a_blocked_loop_rule_fires_and_resolves_once_the_loop_is_on_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = Events()
    monitor = Monitor(MemorySink(), poll_interval=0.1, notify=events, alerts=[Alert.blocked(after=0.5)])
    monitor.watch(Moving(), name="collector")
    async with monitor:
        await asyncio.sleep(0.3)
        _spin(1.0)
        await asyncio.sleep(0.3)
        assert [(e.rule, e.state) for e in events] == [("blocked loop", "firing")]
        assert "blocked for 1." in events[0].message
        _spin(0.7)  # the same episode: no second event
        await asyncio.sleep(0.2)
        assert len(events) == 1
    assert monitor.stats()["loop_lag_max"] >= 0.6


async def test_a_loop_that_runs_on_time_warns_nothing(caplog: pytest.LogCaptureFixture) -> None:
    monitor = Monitor(MemorySink(), poll_interval=0.05)
    monitor.watch(Moving(), name="collector")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with monitor:
            await asyncio.sleep(1.0)
    assert not [r for r in caplog.records if "blocked" in r.getMessage()]
    assert monitor.stats()["loop_lag_max"] < 0.5


def test_a_sync_monitor_names_its_own_thread_when_a_stats_call_blocks_its_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    blocking = {"left": 1}

    def stats() -> dict[str, int]:
        if blocking["left"]:
            blocking["left"] -= 1
            time.sleep(1.2)  # inline on the monitor's loop thread
        return {"n": 1}

    with caplog.at_level(logging.WARNING, logger="monitor_async"), SyncMonitor(
        MemorySink(), poll_interval=0.05
    ) as monitor:
        monitor.watch(stats_fn=stats, name="blocking", offload="inline")
        deadline = time.monotonic() + 10
        while monitor.stats()["loop_lag_max"] < 1.0 and time.monotonic() < deadline:
            time.sleep(0.05)
    warned = [r.getMessage() for r in caplog.records if "was blocked for" in r.getMessage()]
    assert len(warned) == 1 and "the monitor's event loop (its own thread)" in warned[0], warned
    assert "offload='thread'" in warned[0]
