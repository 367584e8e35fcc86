"""Scenario 8: memory while a sink is stalled.

20 targets with 50 keys each are polled every millisecond by an async
``Monitor`` whose only sink never finishes a write (it waits on an event
that is never set). The per-sink queue fills up to ``queue_size`` and from
then on drops its oldest records (counted). ``tracemalloc`` measures the
Python heap: the growth from the end of the warm-up (queue long full) to the
end of the run is what a stalled backend costs over time; it must stay flat.

tracemalloc slows every allocation down, so the monitor polls far fewer than
20,000 times a second here; the polls made and records dropped are reported
in the note. TorchRL's ``LoggerMonitor`` has no queue (a stalled logger
blocks its only polling thread, so nothing is polled at all): no TorchRL
figure here.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Sequence
from typing import Any

from monitor_async import Monitor

from ._common import Row, quiet

__all__ = ["run"]


class Wide:
    """A target with ``keys`` values, all changing at every call."""

    def __init__(self, keys: int) -> None:
        self.names = [f"metric_{i:02d}" for i in range(keys)]
        self.calls = 0

    def stats(self) -> dict[str, float]:
        self.calls += 1
        base = float(self.calls)
        return {name: base + i for i, name in enumerate(self.names)}


class StalledSink:
    """A sink whose first ``write`` never returns (a backend that stopped answering)."""

    name = "stalled"

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def write(self, records: Sequence[Any]) -> None:
        await self.gate.wait()

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        return None


async def _measure(targets: int, keys: int, interval: float, warmup: float, seconds: float) -> tuple[int, dict[str, float]]:
    sink = StalledSink()
    monitor = Monitor(sink, poll_interval=interval, stop_timeout=0.5)
    for n in range(targets):
        monitor.watch(Wide(keys), name=f"w{n}")
    await monitor.start()
    await asyncio.sleep(warmup)
    before, _ = tracemalloc.get_traced_memory()
    await asyncio.sleep(seconds)
    after, _ = tracemalloc.get_traced_memory()
    stats = monitor.stats()
    sink.gate.set()
    await monitor.stop(log_final=False)
    return after - before, stats


def run(
    *, targets: int = 20, keys: int = 50, hz: float = 1000.0, warmup: float = 2.0, seconds: float = 10.0,
    baseline: bool = True,
) -> list[Row]:
    """Python heap growth (MB) after warm-up while the only sink is stalled."""
    quiet()
    tracemalloc.start()
    try:
        growth, stats = asyncio.run(_measure(targets, keys, 1.0 / hz, warmup, seconds))
    finally:
        tracemalloc.stop()
    total = warmup + seconds
    return [
        Row(
            f"8. stalled sink, {targets} targets x {keys} keys at {hz:g} Hz",
            f"Python heap growth over {seconds:g} s after {warmup:g} s warm-up, MB",
            growth / 1e6,
            None,
            unit="MB",
            goal=("below", 2.0),
            note=(
                f"tracemalloc; {stats['polls'] / total:,.0f} polls/s under tracing, "
                f"{stats['sink/stalled/queued']:,.0f} records queued (queue_size), "
                f"{stats['sink/stalled/dropped']:,.0f} oldest dropped and counted"
            ),
        )
    ]
