"""Rules on a watch given reduce=: the main rank evaluates every rank's published values, through a real TCPStore.

Two monitors in this process stand for ranks 0 and 1 of a job of two (``World``),
publishing through one real ``torch.distributed.TCPStore`` served here: no
collective is called, and rank 1 evaluates nothing of the reduced watch.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest

from monitor_async import Alert, Monitor
from monitor_async.backends import MemorySink
from monitor_async.distributed import Reduce, World
from tests.support.checks import wait_until
from tests.support.sinks import Events
from tests.support.targets import Moving

dist = pytest.importorskip("torch.distributed")

INTERVAL = 0.05
AFTER = 0.6


async def test_a_stalled_then_silent_rank_is_reported_by_the_main_rank_with_its_rank() -> None:
    server = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=10))
    client = dist.TCPStore("127.0.0.1", server.port, 1, False, timeout=timedelta(seconds=10))
    main_events, other_events = Events(), Events()
    rules = [Alert.stalled("learner/frames", after=AFTER), Alert.quiet("learner", after=AFTER)]
    learners = [Moving(), Moving()]
    monitors = []
    for rank, store, events in ((0, server, main_events), (1, client, other_events)):
        monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events, alerts=list(rules),
                          world=World(rank=rank, world_size=2))
        monitor.watch(learners[rank], name="learner", reduce=Reduce({"frames": "sum"}, store=store))
        monitors.append(monitor)
    for monitor in monitors:
        await monitor.start()
    try:
        await wait_until(lambda: any(r.metrics.get("learner/all/ranks") == 2
                                for r in monitors[0].sinks[0].records), what="both ranks on the board")
        learners[1].running = False
        stalled = time.monotonic()
        await wait_until(lambda: bool(main_events), what="rank 1's stall")
        assert time.monotonic() - stalled <= AFTER + 2 * INTERVAL + 0.5
        event = main_events[0]
        assert (event.rule, event.watch, event.metric, dict(event.source)) == (
            "stalled learner/frames", "learner", "learner/frames", {"rank": 1})
        assert "on rank 1" in event.message
        await monitors[1].stop()  # rank 1 goes away: its snapshot stops changing on the board
        gone = time.monotonic()
        await wait_until(lambda: any(e.rule == "quiet learner" for e in main_events), what="rank 1 quiet")
        assert time.monotonic() - gone <= AFTER + 2 * INTERVAL + 0.5
        quiet = next(e for e in main_events if e.rule == "quiet learner")
        assert dict(quiet.source) == {"rank": 1}
        await asyncio.sleep(0.2)
        assert all(dict(e.source) == {"rank": 1} for e in main_events), "rank 0 itself is fine"
        assert other_events == [], "rank 1 leaves its reduced watch's rules to the main rank"
    finally:
        for monitor in monitors:
            await monitor.stop()
