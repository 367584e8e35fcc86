"""Scenarios 3, 4 and 5: background polling cadence when something is slow.

3. One target every 50 ms, with a logger that takes 200 ms per call.
4. A healthy target every 50 ms beside a target whose ``stats()`` hangs.
5. 200 targets whose ``stats()`` has 10 ms of I/O latency, every 0.5 s:
   ``async def`` with ``asyncio.sleep`` and a blocking ``time.sleep`` on
   threads (``offload="thread"``).

Ours: ``SyncMonitor`` started in the background (its loop thread). TorchRL:
``LoggerMonitor`` started in the background (its polling thread). Both get
the same target classes and the same logger objects. The figure is the share
of poll slots kept: the window after ``start()`` is cut into slots of one
interval and a slot counts when a ``stats()`` call of that target began in
it (see ``slot_share``); late polls that spill into the next slot, and slots
nobody polled, do not count.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from monitor_async import SyncMonitor

from ._common import Clocked, NoopLogger, Row, quiet, slot_share, torchrl_monitor

__all__ = ["run_hung_target", "run_slow_io", "run_slow_sink"]


class SlowLogger:
    """A TorchRL-style logger whose every call takes ``seconds`` (a slow network backend)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.calls += 1
        time.sleep(self.seconds)


class Hung:
    """A target whose blocking ``stats()`` waits until ``release`` is set (a dead IPC peer)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def stats(self) -> dict[str, float]:
        self.release.wait()
        return {"x": 1.0}


class HungAsync:
    """An ``async def stats()`` that never returns (a request to a server that never answers)."""

    async def stats(self) -> dict[str, float]:
        await asyncio.Event().wait()
        return {"x": 1.0}


class SleepyIO:
    """``stats()`` with ``latency`` seconds of blocking I/O (``time.sleep``)."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.times: list[float] = []

    def stats(self) -> dict[str, float]:
        self.times.append(time.monotonic())
        time.sleep(self.latency)
        return {"value": 1.0}


class AsyncIO:
    """``async def stats()`` with ``latency`` seconds of awaited I/O (``asyncio.sleep``)."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.times: list[float] = []

    async def stats(self) -> dict[str, float]:
        self.times.append(time.monotonic())
        await asyncio.sleep(self.latency)
        return {"value": 1.0}


def _share(targets: Sequence[Any], start: float, end: float, interval: float) -> float:
    kept = slots = 0
    for target in targets:
        hit, n = slot_share(target.times, start, end, interval)
        kept += hit
        slots += n
    return kept / slots if slots else 0.0


def _window(
    start: Callable[[], object], stop: Callable[[], object], seconds: float, before_stop: Callable[[], object]
) -> tuple[float, float]:
    """Starts a monitor, lets it run ``seconds``, returns the window; stops it afterwards."""
    t0 = time.monotonic()
    start()
    time.sleep(seconds)
    t1 = time.monotonic()
    before_stop()
    stop()
    return t0, t1


def _ours(
    logger: Any,
    watches: Sequence[tuple[Any, dict[str, Any]]],
    interval: float,
    seconds: float,
    before_stop: Callable[[], object] = lambda: None,
    **options: Any,
) -> tuple[float, float]:
    monitor = SyncMonitor(logger, poll_interval=interval, stop_timeout=1.0, **options)
    for target, kwargs in watches:
        monitor.watch(target, **kwargs)
    try:
        return _window(monitor.start, monitor.stop, seconds, before_stop)
    finally:
        monitor.close()


def _theirs(
    logger: Any,
    watches: Sequence[Any],
    interval: float,
    seconds: float,
    before_stop: Callable[[], object] = lambda: None,
) -> tuple[float, float]:
    monitor = torchrl_monitor()(logger, poll_interval=interval)
    for n, target in enumerate(watches):
        monitor.watch(target, name=f"t{n}")
    return _window(monitor.start, lambda: monitor.stop(log_final=False), seconds, before_stop)


def run_slow_sink(*, seconds: float = 5.0, interval: float = 0.05, write: float = 0.2, baseline: bool = True) -> list[Row]:
    """Scenario 3: share of a 50 ms target's polls kept while its logger takes 200 ms per call."""
    quiet()
    target = Clocked()
    start, end = _ours(SlowLogger(write), [(target, {"name": "fast"})], interval, seconds)
    ours = _share([target], start, end, interval)
    theirs = None
    if baseline and torchrl_monitor() is not None:
        target = Clocked()
        start, end = _theirs(SlowLogger(write), [target], interval, seconds)
        theirs = _share([target], start, end, interval)
    return [
        Row(
            f"3. slow sink: {interval * 1000:g} ms target, logger {write * 1000:g} ms per call",
            "share of poll slots kept",
            ours,
            theirs,
            unit="share",
            goal=("min", 0.95),
            note=f"{seconds:g} s window; the same slow TorchRL-style logger object on both sides",
        )
    ]


def run_hung_target(*, seconds: float = 5.0, interval: float = 0.05, baseline: bool = True) -> list[Row]:
    """Scenario 4: share of a healthy 50 ms target's polls kept beside a target whose stats() hangs."""
    quiet()
    rows: list[Row] = []
    healthy, hung = Clocked(), Hung()
    start, end = _ours(
        NoopLogger(),
        [(healthy, {"name": "healthy"}), (hung, {"name": "hung", "offload": "thread"})],
        interval,
        seconds,
    )
    hung.release.set()
    ours = _share([healthy], start, end, interval)
    theirs = None
    if baseline and torchrl_monitor() is not None:
        healthy, hung = Clocked(), Hung()
        start, end = _theirs(NoopLogger(), [healthy, hung], interval, seconds, before_stop=hung.release.set)
        theirs = _share([healthy], start, end, interval)
    rows.append(
        Row(
            f"4. hung target beside a healthy {interval * 1000:g} ms one",
            "share of the healthy target's slots kept (blocking hang)",
            ours,
            theirs,
            unit="share",
            goal=("min", 0.95),
            note=f"{seconds:g} s window; the hung stats() blocks on an Event (ours: offload='thread')",
        )
    )
    healthy = Clocked()
    start, end = _ours(
        NoopLogger(), [(healthy, {"name": "healthy"}), (HungAsync(), {"name": "hung"})], interval, seconds
    )
    rows.append(
        Row(
            f"4. hung target beside a healthy {interval * 1000:g} ms one",
            "share of the healthy target's slots kept (async hang, ours only)",
            _share([healthy], start, end, interval),
            None,
            unit="share",
            goal=("min", 0.95),
            note="an async def stats() that never returns; TorchRL cannot await a stats() coroutine",
        )
    )
    return rows


def run_slow_io(
    *,
    targets: int = 200,
    latency: float = 0.01,
    interval: float = 0.5,
    seconds: float = 10.0,
    thread_limit: int = 8,
    baseline: bool = True,
) -> list[Row]:
    """Scenario 5: share of poll slots kept for ``targets`` targets with ``latency`` of I/O each."""
    quiet()
    scenario = f"5. {targets} targets with {latency * 1000:g} ms I/O, every {interval:g} s"
    async_targets = [AsyncIO(latency) for _ in range(targets)]
    start, end = _ours(
        NoopLogger(), [(t, {"name": f"a{n}"}) for n, t in enumerate(async_targets)], interval, seconds
    )
    async_share = _share(async_targets, start, end, interval)
    thread_targets = [SleepyIO(latency) for _ in range(targets)]
    start, end = _ours(
        NoopLogger(),
        [(t, {"name": f"s{n}", "offload": "thread"}) for n, t in enumerate(thread_targets)],
        interval,
        seconds,
        thread_limit=thread_limit,
    )
    thread_share = _share(thread_targets, start, end, interval)
    theirs = None
    if baseline and torchrl_monitor() is not None:
        their_targets = [SleepyIO(latency) for _ in range(targets)]
        start, end = _theirs(NoopLogger(), their_targets, interval, seconds)
        theirs = _share(their_targets, start, end, interval)
    note = f"{seconds:g} s window; TorchRL polls the blocking targets one after another"
    return [
        Row(scenario, "share of poll slots kept, async def stats() (asyncio.sleep)", async_share, theirs,
            unit="share", goal=("min", 0.95), note=note),
        Row(scenario, f"share of poll slots kept, blocking stats() on threads (thread_limit={thread_limit})",
            thread_share, theirs, unit="share", goal=("min", 0.95), note=note),
    ]
