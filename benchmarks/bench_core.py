"""Scenario 1: manual ``step()`` throughput, 100 targets x 12-key stats into a no-op sink.

Ours: ``await Monitor.step()`` on a running loop, ``SyncMonitor(background=
False).step()`` (drives a private loop in the calling thread) and
``SyncMonitor(background=True).step()`` before ``start()`` (one portal round
trip into the loop thread per call). TorchRL: ``LoggerMonitor(noop_logger,
background=False).step()``. The same target objects' class, the same number
of steps; each figure is the best of ``repeat`` runs, measured in turns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from monitor_async import Monitor, SyncMonitor

from ._common import NoopLogger, NoopSink, Row, TwelveKeys, best_rate, torchrl_monitor

__all__ = ["run"]


def _timed(step: Callable[[], object], steps: int, targets: int) -> float:
    step()  # the first step logs on start and primes the key caches: not measured
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * targets / (time.perf_counter() - started)


def _ours_async(targets: int, steps: int) -> float:
    async def main() -> float:
        monitor = Monitor(NoopSink())
        for i in range(targets):
            monitor.watch(TwelveKeys(), name=f"t{i}")
        await monitor.step()
        started = time.perf_counter()
        for _ in range(steps):
            await monitor.step()
        return steps * targets / (time.perf_counter() - started)

    return asyncio.run(main())


def _ours_sync(targets: int, steps: int, *, background: bool) -> float:
    monitor = SyncMonitor(NoopSink(), background=background)
    for i in range(targets):
        monitor.watch(TwelveKeys(), name=f"t{i}")
    try:
        return _timed(monitor.step, steps, targets)
    finally:
        monitor.close()


def _torchrl(targets: int, steps: int) -> float:
    monitor = torchrl_monitor()(NoopLogger(), background=False)
    for i in range(targets):
        monitor.watch(TwelveKeys(), name=f"t{i}")
    return _timed(monitor.step, steps, targets)


def run(*, targets: int = 100, steps: int = 2000, repeat: int = 5, baseline: bool = True) -> list[Row]:
    """Snapshots per second of each way to step, best of ``repeat`` interleaved runs."""
    with_torchrl = baseline and torchrl_monitor() is not None
    runs: dict[str, list[float]] = {"async": [], "sync": [], "portal": [], "torchrl": []}
    for _ in range(repeat):
        runs["async"].append(_ours_async(targets, steps))
        runs["sync"].append(_ours_sync(targets, steps, background=False))
        runs["portal"].append(_ours_sync(targets, max(1, steps // 4), background=True))
        if with_torchrl:
            runs["torchrl"].append(_torchrl(targets, steps))
    theirs = best_rate(runs["torchrl"]) if with_torchrl else None
    scenario = f"1. core step(), {targets} targets x 12 keys, no-op sink"
    size = f"{steps} steps, best of {repeat}"
    return [
        Row(
            scenario,
            "SyncMonitor(background=False).step(), snapshots/s",
            best_rate(runs["sync"]),
            theirs,
            goal=("ratio", 1.0),
            note=f"vs TorchRL LoggerMonitor(noop logger, background=False).step(); {size}",
        ),
        Row(
            scenario,
            "await Monitor.step(), snapshots/s",
            best_rate(runs["async"]),
            theirs,
            note="the async core on a running loop",
        ),
        Row(
            scenario,
            "SyncMonitor(background=True).step() via the portal, snapshots/s",
            best_rate(runs["portal"]),
            theirs,
            note="one cross-thread round trip into the loop thread per step()",
        ),
    ]
