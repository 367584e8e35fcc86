"""Memory stays flat behind a stalled sink.

Holds "Memory stays flat": docs/guarantees.md#memory-stays-flat-test_bounded_memorypy

20 targets x 50 keys polled every millisecond for a few seconds while one
sink never finishes a write: its queue sits at ``queue_size``, the oldest
records are dropped and counted, and the traced memory does not grow.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

from monitor_async import Monitor
from tests.support.checks import wait_until
from tests.support.sinks import HungAsyncSink

QUEUE_SIZE = 256


class Wide:
    """50 keys per snapshot, all changing."""

    def __init__(self) -> None:
        self.n = 0

    def stats(self) -> dict[str, float]:
        self.n += 1
        return {f"metric_{k}": self.n + k * 0.5 for k in range(50)}


async def test_memory_is_flat_behind_a_stalled_sink() -> None:
    stalled = HungAsyncSink("stalled")
    targets = [Wide() for _ in range(20)]
    monitor = Monitor(stalled, poll_interval=0.001, queue_size=QUEUE_SIZE, stop_timeout=0.2, on_error="ignore")
    for i, target in enumerate(targets):
        monitor.watch(target, name=f"w{i}", rate_keys=[])
    tracemalloc.start()
    try:
        await monitor.start()
        # warm-up: the queue fills up, key caches and the loop's internals reach their size
        await wait_until(lambda: monitor.stats()["records"] >= QUEUE_SIZE + 2_000)
        await asyncio.sleep(0.5)
        gc.collect()
        baseline, _ = tracemalloc.get_traced_memory()
        polls_at_baseline = monitor.stats()["polls"]
        await asyncio.sleep(2.5)
        gc.collect()
        current, _ = tracemalloc.get_traced_memory()
        stats = monitor.stats()
    finally:
        await monitor.stop()
        tracemalloc.stop()
    polled = stats["polls"] - polls_at_baseline
    assert polled >= 2_000, f"only {polled} polls during the measurement: not a stress test"
    growth = current - baseline
    assert growth < 2_000_000, f"traced memory grew by {growth / 1e6:.2f} MB over {polled:.0f} polls"
    assert stats["sink/stalled/queued"] == QUEUE_SIZE
    assert stats["sink/stalled/written"] == 0
    # everything produced beyond what the queue holds (and the one batch in the hung write) was dropped
    assert stats["sink/stalled/dropped"] >= stats["records"] - QUEUE_SIZE - 256
