"""A monitor starts again after ``stop()``, any number of times.

Holds "Restart": docs/guarantees.md#restart-test_restartpy

``Monitor`` restarts on the same loop or on a new one, ``SyncMonitor`` on a
new loop thread each time; while it runs, records reach the sinks (not only
at the next ``stop()``) and nothing that fits the queues is dropped. After
``close()`` a ``SyncMonitor`` refuses ``start()``, ``step()``, ``watch()``
and ``flush()`` with ``MonitorClosedError`` and leaves no thread behind.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from monitor_async import Monitor, MonitorClosedError, SyncMonitor
from monitor_async.backends import MemorySink
from tests.support.checks import wait_until, wait_until_sync
from tests.support.sinks import RecordingSink
from tests.support.targets import Ticker

ROUNDS = 3


def check_every_record(sink: RecordingSink, target: Ticker, monitor: Monitor | SyncMonitor) -> None:
    """Each poll of the target reached the sink once, in order, and nothing was dropped."""
    values = [r.metrics["t/n"] for r in sink.records]
    assert values == [float(i) for i in range(1, target.calls + 1)]
    assert monitor.stats()["sink/rec/dropped"] == 0


async def one_run(monitor: Monitor, sink: RecordingSink) -> None:
    await monitor.start()
    before = len(sink.records)
    # written while running: a dead writer would leave them queued until stop()
    await wait_until(lambda: len(sink.records) >= before + 3, timeout=5)
    await monitor.stop()
    assert not monitor.running


def build() -> tuple[Monitor, RecordingSink, Ticker]:
    sink, target = RecordingSink("rec"), Ticker()
    monitor = Monitor(sink, poll_interval=0.01, batch_wait=0.02)
    monitor.watch(target, name="t")
    return monitor, sink, target


async def test_monitor_restarts_on_the_same_loop() -> None:
    monitor, sink, target = build()
    for _ in range(ROUNDS):
        await one_run(monitor, sink)
    check_every_record(sink, target, monitor)


def test_monitor_restarts_on_a_new_loop_each_time() -> None:
    monitor, sink, target = build()
    for _ in range(ROUNDS):
        asyncio.run(one_run(monitor, sink))
    check_every_record(sink, target, monitor)


def test_sync_monitor_restarts_and_its_sinks_keep_writing() -> None:
    sink, target = RecordingSink("rec"), Ticker()
    monitor = SyncMonitor(sink, poll_interval=0.01, batch_wait=0.02, stop_timeout=2)
    monitor.watch(target, name="t")
    try:
        for _ in range(ROUNDS):
            monitor.start()
            before = len(sink.records)
            wait_until_sync(lambda before=before: len(sink.records) >= before + 3, timeout=5)
            monitor.stop()
    finally:
        monitor.close()
    check_every_record(sink, target, monitor)


def test_sync_monitor_in_manual_mode_restarts() -> None:
    sink, target = RecordingSink("rec"), Ticker()
    monitor = SyncMonitor(sink, background=False)
    monitor.watch(target, name="t")
    for _ in range(ROUNDS):
        monitor.start()
        for _ in range(3):
            monitor.step()
        monitor.stop()  # the final snapshot of this round
    monitor.close()
    check_every_record(sink, target, monitor)
    assert target.calls == ROUNDS * 4


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "monitor-async-loop" and t.is_alive()]


@pytest.mark.parametrize("background", [True, False])
def test_a_closed_sync_monitor_refuses_to_be_used_again(background: bool) -> None:
    monitor = SyncMonitor(MemorySink(), background=background, poll_interval=0.01)
    monitor.watch(Ticker(), name="t")
    if background:
        monitor.start()
    monitor.step()
    monitor.close()
    calls = {
        "start": monitor.start,
        "step": monitor.step,
        "watch": lambda: monitor.watch(Ticker(), name="u"),
        "flush": monitor.flush,
    }
    for name, call in calls.items():
        with pytest.raises(MonitorClosedError, match="closed"):
            call()
        assert not loop_threads(), f"{name}() after close() left a loop thread behind"
    assert isinstance(MonitorClosedError("x"), RuntimeError)
    assert monitor.stats()["watches"] == 1, "its figures stay readable"
    monitor.stop()  # both stay no-ops
    monitor.close()
