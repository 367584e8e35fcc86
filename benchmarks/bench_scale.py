"""Scenario 7: 10,000 targets at 1 Hz on one event loop.

An async ``Monitor`` in ``asyncio.run`` watches ``targets`` cheap targets
(each ``stats()`` notes the time of the call), every ``interval`` seconds,
into a no-op sink. Each target's slots are its own: its first poll (at
``start()``) is slot 0 and the k-th poll is due one interval after the
(k-1)-th, as the design says. After ``warmup`` seconds, for ``seconds``:

- on time: the share of slots in the window whose poll began within
  ``tolerance`` (50 ms) of the slot; a skipped slot or a poll further off
  counts as missed (tasks started together share their group's first slot,
  so a poll may come a few milliseconds before its own first poll's beat);
- CPU: the process CPU time over the wall time of the window (1.0 = one
  core busy), which includes the targets' own ``stats()`` calls;
- the garbage collector's work in the window (collections of the oldest
  generation and the longest pause) is reported too: the default GC
  settings are left alone, as in the user's program.

TorchRL's ``LoggerMonitor`` has no per-target schedule (one thread polls
every target in turn, then waits ``poll_interval``), so it has no slots to
be on time for: no TorchRL figure here.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import time
from array import array
from collections.abc import Sequence
from typing import Any

from monitor_async import Monitor

from ._common import NoopSink, Row

__all__ = ["run"]



class Tiny:
    """A cheap target: four scalars, and the ``time.monotonic()`` of every call.

    The times go to an ``array`` (not a list of floats) so that the benchmark's
    own bookkeeping adds nothing for the garbage collector to walk.
    """

    __slots__ = ("times",)

    def __init__(self) -> None:
        self.times = array("d")

    def stats(self) -> dict[str, float]:
        times = self.times
        times.append(time.monotonic())
        return {"calls": len(times), "queue_depth": 3, "latency_ms": 1.5, "ok": True}


class GCWatch:
    """Times collections of the oldest generation (``gc.callbacks``) without changing any GC setting."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.pauses: list[tuple[float, float]] = []

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self.started = time.perf_counter()
        elif self.started is not None:
            self.pauses.append((time.monotonic(), time.perf_counter() - self.started))
            self.started = None


def _on_time(times: Sequence[float], start: float, end: float, interval: float, tolerance: float) -> tuple[int, int]:
    """(slots in [start, end) polled within ``tolerance`` of the slot, slots in [start, end)) for one target."""
    if not times:
        return 0, 0
    origin = times[0]
    first = max(0, int((start - origin) // interval) + 1)
    last = int((end - origin) // interval)  # slots first..last-1 lie wholly in the window
    kept = 0
    for k in range(first, last):
        slot = origin + k * interval
        i = bisect.bisect_left(times, slot - tolerance)
        if i < len(times) and abs(times[i] - slot) <= tolerance:
            kept += 1
    return kept, max(0, last - first)


async def _measure(
    targets: list[Tiny], interval: float, warmup: float, seconds: float, gcwatch: GCWatch
) -> tuple[float, float, float, float, dict[str, float]]:
    # a queue that holds a whole round of records: what a user watching this many targets sets
    monitor = Monitor(NoopSink(), poll_interval=interval, queue_size=2 * len(targets))
    for n, target in enumerate(targets):
        monitor.watch(target, name=f"t{n}")
    await monitor.start()
    await asyncio.sleep(warmup)
    wall0, cpu0 = time.monotonic(), time.process_time()
    await asyncio.sleep(seconds)
    wall1, cpu1 = time.monotonic(), time.process_time()
    stats = monitor.stats()
    await monitor.stop(log_final=False)
    return wall0, wall1, cpu0, cpu1, stats


def run(
    *,
    targets: int = 10_000,
    interval: float = 1.0,
    warmup: float = 3.0,
    seconds: float = 15.0,
    tolerance: float = 0.05,
    baseline: bool = True,
) -> list[Row]:
    """Share of slots polled within ``tolerance`` and the process CPU share, for ``targets`` targets."""
    watched = [Tiny() for _ in range(targets)]
    gcwatch = GCWatch()
    gc.callbacks.append(gcwatch)
    try:
        wall0, wall1, cpu0, cpu1, stats = asyncio.run(_measure(watched, interval, warmup, seconds, gcwatch))
    finally:
        gc.callbacks.remove(gcwatch)
    kept = slots = 0
    for target in watched:
        hit, n = _on_time(target.times, wall0, wall1, interval, tolerance)
        kept += hit
        slots += n
    pauses = [p for t, p in gcwatch.pauses if wall0 <= t < wall1]
    gc_note = (
        f"full GC collections in the window: {len(pauses)}, longest {max(pauses) * 1000:.0f} ms"
        if pauses
        else "no full GC collection in the window"
    )
    scenario = f"7. {targets:,} targets at {1 / interval:g} Hz on one loop"
    window = f"{seconds:g} s window after {warmup:g} s warm-up"
    return [
        Row(scenario, f"share of polls within {tolerance * 1000:g} ms of their slot", kept / slots if slots else 0.0,
            None, unit="share", goal=("min", 0.99), note=f"{window}; {gc_note}"),
        Row(scenario, "process CPU share of one core", (cpu1 - cpu0) / (wall1 - wall0), None, unit="share",
            goal=("max", 0.25),
            note=(
                f"polls {stats['polls']:,.0f}, missed {stats['polls_missed']:,.0f}, records dropped "
                f"{stats['sink/noop/dropped']:,.0f}; TorchRL has no per-target slots"
            )),
    ]
