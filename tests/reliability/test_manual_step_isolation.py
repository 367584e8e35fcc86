"""Manual ``step()`` writes to the sinks concurrently.

Holds "Manual `step()` writes to all sinks at once": docs/guarantees.md#manual-step-writes-to-all-sinks-at-once-test_manual_step_isolationpy

A hung sink does not keep the other sinks from getting the step's records,
whichever place it has in the list; ``stop()`` is still bounded.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from monitor_async import Monitor, SyncMonitor
from tests.support.checks import wait_until, wait_until_sync
from tests.support.hostile import GateSink, call_within
from tests.support.sinks import RecordingSink
from tests.support.targets import Ticker


@pytest.mark.parametrize("hung_first", [True, False])
async def test_a_hung_sink_does_not_hold_the_steps_records_from_the_others(hung_first: bool) -> None:
    gate, good, other = GateSink("gate"), RecordingSink("good"), RecordingSink("other")
    sinks = [gate, good, other] if hung_first else [good, gate, other]
    monitor = Monitor(sinks, stop_timeout=0.3)
    monitor.watch(Ticker(), name="t")
    step = asyncio.create_task(monitor.step())
    try:
        await wait_until(lambda: len(good.records) == 1 and len(other.records) == 1, timeout=5)
        assert gate.entered.is_set() and not step.done(), "the step waits for the hung sink only"
    finally:
        gate.gate.set()
    assert (await asyncio.wait_for(step, 5)) == {"t": {"t/n": 1.0}}
    assert len(gate.records) == 1
    started = time.monotonic()
    await monitor.stop()
    assert time.monotonic() - started < 2


def test_sync_manual_step_with_a_hung_sink_still_feeds_the_others() -> None:
    gate, good = GateSink("gate"), RecordingSink("good")
    monitor = SyncMonitor([gate, good], background=False, stop_timeout=0.3)
    monitor.watch(Ticker(), name="t")
    stepper = threading.Thread(target=monitor.step, name="stepper", daemon=True)
    stepper.start()
    try:
        wait_until_sync(lambda: len(good.records) == 1, timeout=5)
        assert stepper.is_alive()
    finally:
        gate.gate.set()
    stepper.join(5)
    assert not stepper.is_alive()
    call_within(monitor.close, 10)
    assert len(gate.records) == len(good.records) == 2  # the step and the final snapshot
