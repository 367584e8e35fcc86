"""The accounting closes.

Holds "The accounting closes": docs/guarantees.md#the-accounting-closes-test_accountingpy

For every sink, at every moment after ``stop()``: ``written + dropped +
queued + abandoned == delivered``, and every sink was delivered every
record (``delivered == records``). A record lost with a failed write counts
as dropped; what a hung sink still held at stop is abandoned, counted and
warned, and stays abandoned when the sink wakes up later.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from monitor_async import Monitor, SyncMonitor
from monitor_async.backends import MemorySink
from tests.support.checks import monitor_warnings, wait_until, wait_until_sync
from tests.support.hostile import SwallowingSink, run_isolated
from tests.support.sinks import FailingSink, HungAsyncSink, HungThreadSink, RecordingSink
from tests.support.targets import Ticker

PARTS = ("written", "dropped", "queued", "abandoned")


def check_closes(stats: dict[str, float], labels: list[str]) -> None:
    for label in labels:
        parts = {part: stats[f"sink/{label}/{part}"] for part in PARTS}
        delivered = stats[f"sink/{label}/delivered"]
        assert sum(parts.values()) == delivered, f"{label}: {parts} do not add up to delivered={delivered}"
        assert delivered == stats["records"], f"{label} was delivered every record"


def build_sinks() -> dict[str, Any]:
    return {
        "healthy": MemorySink(name="healthy"),
        "failing": FailingSink(name="failing"),
        "slow": RecordingSink("slow", delay=0.05),
        "hung": HungAsyncSink("hung"),
        "hungthread": HungThreadSink("hungthread"),
        "swallows": SwallowingSink("swallows", "write"),
    }


def test_accounting_closes_for_every_kind_of_sink(caplog: pytest.LogCaptureFixture) -> None:
    sinks = build_sinks()

    async def main() -> tuple[dict[str, float], dict[str, float]]:
        monitor = Monitor(list(sinks.values()), poll_interval=0.005, queue_size=4, stop_timeout=0.3, batch_wait=0)
        for i in range(3):
            monitor.watch(Ticker(), name=f"t{i}")
        await monitor.start()
        await wait_until(
            lambda: monitor.stats()["records"] >= 60
            and sinks["hungthread"].entered.is_set()
            and sinks["swallows"].swallower.entered.is_set()
        )
        await monitor.stop()
        after_stop = monitor.stats()
        check_closes(after_stop, list(sinks))
        # the hung sinks wake up after stop: what they held stays abandoned, the sums still close
        sinks["hungthread"].release.set()
        sinks["swallows"].swallower.released = True
        await asyncio.sleep(0.2)
        return after_stop, monitor.stats()

    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        after_stop, later = run_isolated(main)
    check_closes(later, list(sinks))
    for label in ("hungthread", "swallows", "hung"):
        assert after_stop[f"sink/{label}/abandoned"] >= 1, label
        assert later[f"sink/{label}/written"] == after_stop[f"sink/{label}/written"], label
    assert after_stop["sink/failing/dropped"] == after_stop["records"], "records of failed writes are dropped"
    assert after_stop["sink/slow/dropped"] > 0 and after_stop["sink/slow/abandoned"] == 0
    assert after_stop["sink/healthy/written"] == after_stop["records"]
    warnings = monitor_warnings(caplog)
    for label in ("hung", "hungthread", "swallows"):
        assert any(f"sink {label!r}" in w and "abandoned" in w for w in warnings), label


def test_accounting_closes_in_manual_mode_after_a_step_cancelled_mid_write() -> None:
    gate = HungAsyncSink("hung")

    async def main() -> dict[str, float]:
        monitor = Monitor([gate, MemorySink(name="mem")], stop_timeout=0.2)
        monitor.watch(Ticker(), name="t")
        step = asyncio.create_task(monitor.step())
        await wait_until(gate.entered.is_set)
        step.cancel()
        with pytest.raises(asyncio.CancelledError):
            await step
        await monitor.stop()
        return monitor.stats()

    stats = run_isolated(main)
    check_closes(stats, ["hung", "mem"])
    assert stats["sink/hung/abandoned"] + stats["sink/hung/queued"] == 2


def test_accounting_closes_after_a_sync_monitor_stops() -> None:
    sinks = build_sinks()
    monitor = SyncMonitor(list(sinks.values()), poll_interval=0.005, queue_size=4, stop_timeout=0.3, batch_wait=0)
    monitor.watch(Ticker(), name="t")
    try:
        monitor.start()
        wait_until_sync(lambda: monitor.stats()["records"] >= 40 and sinks["hungthread"].entered.is_set())
        monitor.stop()
        check_closes(monitor.stats(), list(sinks))
    finally:
        sinks["hungthread"].release.set()
        sinks["swallows"].swallower.released = True
        monitor.close()
    check_closes(monitor.stats(), list(sinks))
