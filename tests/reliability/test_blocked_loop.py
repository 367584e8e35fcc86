"""A loop blocked by the caller's own code counts the polls it missed, from the very start.

Holds "A blocked loop is counted": docs/guarantees.md#a-blocked-loop-is-counted-test_blocked_looppy

The slots a loop held by CPU work skips are counted in ``polls_missed``,
whether the work comes before the first poll or after a few.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from monitor_async import Monitor
from monitor_async.backends import MemorySink
from tests.support.targets import Ticker

INTERVAL = 0.1
BLOCKED = 3.0  # about 29 slots of INTERVAL


def _cpu_work(seconds: float) -> None:
    """Work that never awaits: the loop is held the whole time."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(1000))


@pytest.mark.parametrize("first_polls", [False, True], ids=["blocked-from-the-start", "blocked-after-polls"])
async def test_a_blocked_loop_counts_the_slots_it_missed(first_polls: bool) -> None:
    target = Ticker()
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL)
    monitor.watch(target, name="trainer")
    async with monitor:
        if first_polls:
            while target.n < 3:
                await asyncio.sleep(INTERVAL / 4)
        before = monitor.stats()["polls_missed"]
        _cpu_work(BLOCKED)
        polls = target.n
        while target.n < polls + 2:  # the loop runs again: the next polls see the slots gone by
            await asyncio.sleep(INTERVAL / 4)
    missed = monitor.stats()["polls_missed"] - before
    # about 29 slots went by; generous, for a loaded machine
    assert missed >= 0.6 * BLOCKED / INTERVAL, f"{missed} slots counted as missed after {BLOCKED} s blocked"
