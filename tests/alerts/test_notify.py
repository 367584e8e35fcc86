"""Where events go: the logger, notify= callables (sync, async, raising, hung) and a sink's alert()."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence

import pytest

from monitor_async import Alert, AlertEvent, BaseSink, Monitor, Record
from monitor_async.backends import MemorySink
from tests.support.checks import wait_until
from tests.support.sinks import Events
from tests.support.targets import Moving

INTERVAL = 0.05


class AlertSink(BaseSink):
    """A sink that also takes alert events."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[AlertEvent] = []

    async def _write(self, records: Sequence[Record]) -> None:
        pass

    async def alert(self, event: AlertEvent) -> None:
        self.events.append(event)


async def _stall(monitor: Monitor, target: Moving, count: int = 1) -> None:
    async with monitor:
        await asyncio.sleep(0.15)
        target.running = False
        await wait_until(lambda: monitor.stats()["alerts_fired"] >= count, what="the stall")
        target.running = True
        await wait_until(lambda: monitor.stats()["alerts_firing"] == 0, what="the resolve")


async def test_the_logger_says_warning_when_firing_error_when_critical_info_when_resolved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    target = Moving()
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, alerts=[
        Alert.stalled("a/frames", after=0.2), Alert.stalled("a/frames", after=0.2, name="page", severity="critical"),
    ])
    monitor.watch(target, name="a")
    with caplog.at_level(logging.INFO, logger="monitor_async"):
        await _stall(monitor, target, 2)
    levels = {(r.levelname, r.getMessage().split(":")[0]) for r in caplog.records if "alert" in r.getMessage()}
    assert ("WARNING", "alert stalled a/frames firing") in levels
    assert ("ERROR", "alert page firing") in levels
    assert ("INFO", "alert page resolved") in levels


async def test_sync_and_async_notifiers_and_a_rules_own_notifier_get_every_event() -> None:
    monitor_wide, own = Events(), Events()
    got_async: list[AlertEvent] = []
    caller_threads: set[str] = set()

    async def later(event: AlertEvent) -> None:
        await asyncio.sleep(0.01)
        got_async.append(event)

    def sync(event: AlertEvent) -> None:
        caller_threads.add(threading.current_thread().name)
        monitor_wide.append(event)

    target = Moving()
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=[sync, later],
                      alerts=[Alert.stalled("a/frames", after=0.2, notify=own)])
    monitor.watch(target, name="a")
    await _stall(monitor, target)
    await wait_until(lambda: len(monitor_wide) == len(own) == len(got_async) == 2)
    assert [e.state for e in own] == ["firing", "resolved"]
    assert threading.main_thread().name not in caller_threads, "a sync notifier runs off the loop's thread"


async def test_a_raising_or_hung_notifier_is_counted_and_warned_and_the_others_get_everything(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = Events()
    release = threading.Event()
    hung_calls: list[AlertEvent] = []

    def hangs(event: AlertEvent) -> None:
        hung_calls.append(event)
        release.wait(30)

    def raises(event: AlertEvent) -> None:
        raise RuntimeError("webhook down")

    targets = [Moving() for _ in range(3)]
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=[hangs, raises, good], notify_timeout=0.2,
                      alerts=[Alert.stalled("*/frames", after=0.2)])
    for i, target in enumerate(targets):
        monitor.watch(target, name=f"t{i}")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with monitor:
            await asyncio.sleep(0.15)
            targets[0].running = False
            await wait_until(lambda: len(good) == 1)
            await wait_until(lambda: monitor.stats()["notify_errors"] >= 2, what="the hang counted")  # raised + hung
            for target in targets[1:]:
                target.running = False
            await wait_until(lambda: len(good) == 3, what="the other notifier got every event")
            assert len(hung_calls) == 1, "a hung notifier gets no new call until it returns"
            assert monitor.stats()["notify_skipped"] >= 2
            release.set()
            for target in targets:
                target.running = True
            await wait_until(lambda: len(good) == 6)
            await wait_until(lambda: len(hung_calls) > 1, what="the notifier called again once it returned")
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "raises raised RuntimeError('webhook down')" in messages
    assert "did not return within notify_timeout=0.2s" in messages


async def test_events_reach_a_sinks_alert_through_its_channel_and_are_counted() -> None:
    sink = AlertSink()
    target = Moving()
    monitor = Monitor(sink, poll_interval=INTERVAL, alerts=[Alert.stalled("a/frames", after=0.2)])
    monitor.watch(target, name="a")
    await _stall(monitor, target)
    assert [e.state for e in sink.events] == ["firing", "resolved"]
    assert sink.events[0].metric == "a/frames"
    label = monitor.sinks[0].name if hasattr(monitor.sinks[0], "name") else "alertsink"
    stats = monitor.stats()
    assert any(key.endswith("/alerts_written") and value == 2.0 for key, value in stats.items()), (label, stats)
