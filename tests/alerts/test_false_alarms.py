"""No false alarms: targets that are fine but look idle give zero events over hundreds of poll intervals."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from monitor_async import Alert, Every, Monitor
from monitor_async.backends import MemorySink
from tests.support.checks import wait_until
from tests.support.sinks import Events
from tests.support.targets import Moving

INTERVAL = 0.01
AFTER = 1.0
INTERVALS = 300


class Finishing:
    """A collector that reaches its total and says so (TorchRL: ``completed=1``)."""

    def __init__(self) -> None:
        self.frames = 0

    def stats(self) -> dict[str, int]:
        self.frames = min(self.frames + 50, 1000)
        return {"frames": self.frames, "completed": int(self.frames >= 1000)}


class FullBuffer:
    """A replay buffer at capacity: ``size`` never moves, ``write_count`` does."""

    def __init__(self) -> None:
        self.writes = 0

    def stats(self) -> dict[str, int]:
        self.writes += 10
        return {"size": 1000, "capacity": 1000, "write_count": self.writes}


class Slow:
    """A counter that moves once per ``AFTER / 2``: slowly, but steadily."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def stats(self) -> dict[str, Any]:
        return {"frames": int((time.monotonic() - self.start) // (AFTER / 2))}


async def test_a_finished_collector_a_full_buffer_and_a_slow_counter_raise_nothing() -> None:
    events = Events()
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events, alerts=[
        *Alert.defaults(),
        Alert.stalled("collector/frames", after=AFTER, unless="completed"),
        Alert.stalled("rb/write_count", after=AFTER),
        Alert.stalled("slow/frames", after=AFTER),
        Alert.quiet("*", after=AFTER),
    ])
    monitor.watch(Finishing(), name="collector")
    monitor.watch(FullBuffer(), name="rb")
    monitor.watch(Slow(), name="slow")
    async with monitor:
        await wait_until(lambda: monitor.stats()["polls"] >= 3 * INTERVALS, timeout=60)
    assert events == [], events.states()
    assert monitor.stats()["alerts_fired"] == 0.0


async def test_a_monitor_stopped_mid_run_raises_nothing_then_or_when_it_starts_again() -> None:
    events = Events()
    target = Moving()
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events, alerts=[
        *Alert.defaults(), Alert.stalled("c/frames", after=0.3), Alert.quiet("c", after=0.3),
    ])
    monitor.watch(target, name="c")
    for run in range(1, 4):
        await monitor.start()
        await wait_until(lambda run=run: monitor.stats()["polls"] >= 20 * run)  # type: ignore[misc]
        await monitor.stop()
        polls = monitor.stats()["polls"]
        await asyncio.sleep(0.5)  # stopped for longer than `after`
        assert monitor.stats()["polls"] == polls
    await monitor.start()
    await asyncio.sleep(0.2)
    await monitor.stop()
    assert events == [], events.states()


async def test_a_scheduled_watch_that_keeps_moving_between_its_logged_records_does_not_stall() -> None:
    """`schedule=Every.seconds(...)` logs rarely, but every poll reads the counter: it is moving, not stalled."""
    events = Events()
    moving, stopping = Moving(), Moving()
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events, alerts=[
        Alert.stalled("*/frames", after=AFTER),
    ])
    monitor.watch(moving, name="moving", schedule=Every.seconds(60.0))
    monitor.watch(stopping, name="stopping", schedule=Every.seconds(60.0))
    async with monitor:
        await wait_until(lambda: monitor.stats()["polls"] >= 20)
        stopping.running = False
        await wait_until(lambda: any(e.watch == "stopping" for e in events), timeout=30, what="the real stall")
        await wait_until(lambda: monitor.stats()["polls"] >= 2 * INTERVALS, timeout=60)
    assert [(e.watch, e.state) for e in events] == [("stopping", "firing")], events.states()


async def test_a_process_that_got_no_cpu_for_longer_than_after_raises_nothing_for_moving_watches() -> None:
    """Preemption, swap or a stopped container: when the loop runs again its overdue polls come before a verdict.

    Each pause below is longer than ``after``: the rules may look only once the watches had their chance
    to be polled (the stalled one still fires, from its own stop on).
    """
    events = Events()
    moving = [Moving() for _ in range(3)]
    stopping = Moving()
    monitor = Monitor(MemorySink(), poll_interval=0.05, notify=events, alerts=[
        Alert.stalled("*/frames", after=0.3), Alert.quiet("*", after=0.3),
    ])
    for i, target in enumerate(moving):
        monitor.watch(target, name=f"moving_{i}")
    monitor.watch(stopping, name="stopping")
    async with monitor:
        await wait_until(lambda: monitor.stats()["polls"] >= 20)
        for _ in range(5):
            time.sleep(0.5)  # the whole loop gets no CPU, as a preempted process would
            polls = monitor.stats()["polls"]
            await wait_until(lambda polls=polls: monitor.stats()["polls"] >= polls + 8)  # type: ignore[misc]
        stopping.running = False
        await wait_until(lambda: any(e.watch == "stopping" for e in events), timeout=10, what="the real stall")
        await asyncio.sleep(0.1)
    assert [(e.watch, e.rule, e.state) for e in events] == [("stopping", "stalled */frames", "firing")], events.states()
