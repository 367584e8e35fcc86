"""Scenario 16: values that are many numbers (distributions), summarised at the poll or at the drain of a push.

- Summarising at a poll: ``await Monitor.step()`` of one watch whose
  ``stats()`` gives a 10,000-value float64 array (then the same values as a
  plain Python list), into no sink, against the numpy floor: ``np.quantile``
  of the same quantiles (0.5, 0.9, 0.99), ``min``, ``max``, ``sum`` and the
  bucket counts of the same base-2 exponential histogram (``log2``,
  ``ceil``, ``bincount`` at the summary's scale) of the same array. Rounds
  alternate ours and the floor; the figure is the median of the per-round
  ratios. Goals: at most 1.5 times the floor for the array, 3 times for the list.
- ``log()`` of a 1,000-value numpy array on the caller's thread, pushing at a
  steady 1,000 a second into a running ``SyncMonitor``: the median call, at
  most 5 us. The array is copied at the call (the caller may reuse it) and
  summarised at the drain, on the monitor's loop; the mean call is reported
  beside: it includes the waits for the GIL while the loop summarises. The
  caller spins in Python between pushes, never releasing the GIL by itself.
  The floor: the same caller copying each array into a ``deque`` (by
  ``bytearray``, a copy that holds the GIL) while a plain thread makes
  numpy's figures of each; the pushes still waiting when the last was made
  are reported for both (numpy's calls release the GIL, and a thread that
  releases it beside a spinning caller waits up to 5 ms to have it back).
- 100 targets each reporting a 1,000-value array at 10 Hz on one loop, into a
  no-op sink: the share of slots polled within 50 ms (goal >= 0.99), the
  records dropped (goal 0), and the CPU share beside the same 100 targets
  reporting four scalars each, measured the same way just before.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from monitor_async import Monitor, SyncMonitor

from ._common import NoopSink, Row, loop_window, quiet, share_on_time

__all__ = ["run"]

SCENARIO = "16. distributions: summaries at the poll and the push"
QUANTILES = (0.5, 0.9, 0.99)


def _floor(values: np.ndarray, scale: int) -> tuple[Any, ...]:
    """What numpy does for the same figures: the quantiles, min, max, sum and the exponential bucket counts."""
    quantiles = np.quantile(values, QUANTILES)
    positive = values[values > 0]
    index = np.ceil(np.log2(positive) * 2.0**scale).astype(np.int64) - 1
    counts = np.bincount(index - index.min())
    return quantiles, values.min(), values.max(), values.sum(), counts


def _per_call(call: Callable[[], object], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls


def _poll_ratio(values: Any, floor_values: np.ndarray, scale: int, rounds: int, calls: int) -> tuple[float, float, float]:
    """(median of per-round ratios ours/floor, our median seconds per poll, the floor's median seconds)."""
    snapshot = {"latency": values}
    monitor = Monitor(None)
    monitor.watch(stats_fn=lambda: snapshot, name="server")
    loop = asyncio.new_event_loop()
    try:
        def poll() -> None:
            loop.run_until_complete(monitor.step())

        poll()  # the first poll (baselines, key cache)
        ours: list[float] = []
        floor: list[float] = []
        for _ in range(rounds):
            ours.append(_per_call(poll, calls))
            floor.append(_per_call(lambda: _floor(floor_values, scale), calls))
        loop.run_until_complete(monitor.stop(log_final=False))
    finally:
        loop.close()
    ratios = [a / b for a, b in zip(ours, floor, strict=True)]
    return statistics.median(ratios), statistics.median(ours), statistics.median(floor)


def _paced(rate: float, pushes: int, push: Callable[[], object]) -> array:
    """The caller's seconds in each of ``pushes`` calls of ``push``, one every ``1 / rate`` s, spinning between
    them (a training loop's own Python work, which never releases the GIL by itself)."""
    clock = time.perf_counter
    calls = array("d")
    due = clock()
    for _ in range(pushes):
        started = clock()
        push()
        calls.append(clock() - started)
        due += 1.0 / rate
        while clock() < due:  # the trainer's own work between two pushes
            pass
    return calls


def _log_per_call(rate: float, pushes: int) -> tuple[float, float, float, float, float]:
    """Seconds per ``log()`` of a 1,000-value array at the caller, pushing at a steady ``rate`` a second.

    Returns the median and the mean call (the mean includes the waits for the GIL while the monitor's
    loop summarises earlier pushes), the records written, the pushes, and the pushes still waiting for
    the loop when the last was made.
    """
    sink = NoopSink()
    monitor = SyncMonitor(sink)
    monitor.start()
    values = np.random.default_rng(1).normal(size=1000)
    log = monitor.log
    try:
        calls = _paced(rate, pushes, lambda: log("learner", {"grad_norms": values}))
        waiting = float(monitor.monitor._pushes.waiting)
        monitor.flush()
    finally:
        monitor.close()
    written = monitor.stats().get(f"sink/{sink.name}/written", 0.0)
    return statistics.median(calls), statistics.fmean(calls), written, float(pushes), waiting


def _log_floor(rate: float, pushes: int, scale: int) -> tuple[float, float]:
    """The floor of the same pushes: each array copied at the call into a ``deque`` (``bytearray``'s copy, which
    holds the GIL, as ours does), and a plain thread making numpy's figures of each (`_floor`).

    Returns the median call and the arrays still waiting for the thread when the last was pushed.
    """
    waiting: deque[np.ndarray] = deque()
    done = threading.Event()

    def summarise() -> None:
        while not done.is_set() or waiting:
            try:
                _floor(waiting.popleft(), scale)
            except IndexError:
                time.sleep(0.02)  # as our drain, at most every 20 ms while idle

    worker = threading.Thread(target=summarise, name="floor summaries")
    worker.start()
    values = np.random.default_rng(1).normal(size=1000)
    frombuffer, dtype, append = np.frombuffer, values.dtype, waiting.append
    try:
        calls = _paced(rate, pushes, lambda: append(frombuffer(bytearray(values), dtype)))
        left = float(len(waiting))
    finally:
        done.set()
        worker.join()
    return statistics.median(calls), left


class Reporter:
    """A target: a fixed 1,000-value array (or four scalars), and the ``time.monotonic()`` of every call."""

    __slots__ = ("snapshot", "times")

    def __init__(self, many: bool, seed: int) -> None:
        self.times = array("d")
        if many:
            self.snapshot: dict[str, Any] = {"latency": np.random.default_rng(seed).exponential(0.01, size=1000)}
        else:
            self.snapshot = {"calls": 1, "queue_depth": 3, "latency_ms": 1.5, "ok": True}

    def stats(self) -> dict[str, Any]:
        self.times.append(time.monotonic())
        return self.snapshot


async def _fleet(many: bool, targets: int, interval: float, warmup: float, seconds: float) -> dict[str, float]:
    sink = NoopSink()
    monitor = Monitor(sink, poll_interval=interval)
    watched = [Reporter(many, i) for i in range(targets)]
    for i, target in enumerate(watched):
        monitor.watch(target, name=f"t{i}")
    async with monitor:
        wall0, wall1, cpu0, cpu1 = await loop_window(warmup, seconds)
    stats = monitor.stats()
    return {
        "on_time": share_on_time((target.times for target in watched), wall0, wall1, interval, 0.05), "cpu": (cpu1 - cpu0) / (wall1 - wall0),
        "dropped": float(stats.get(f"sink/{sink.name}/dropped", 0.0)), "values_dropped": float(stats["values_dropped"]),
    }


def run(
    *, rounds: int = 7, calls: int = 200, rate: float = 1000.0, pushes: int = 5000, targets: int = 100,
    interval: float = 0.1, warmup: float = 1.0, seconds: float = 5.0, baseline: bool = True,
) -> list[Row]:
    """The three measures of the scenario (``baseline`` is unused: TorchRL has no distributions to compare)."""
    quiet()
    values = np.random.default_rng(0).lognormal(size=10_000)
    from monitor_async._core.distribution import summarize

    scale = summarize(values).scale
    array_ratio, array_ours, array_floor = _poll_ratio(values, values, scale, rounds, calls)
    list_ratio, list_ours, list_floor = _poll_ratio(values.tolist(), values, scale, rounds, max(1, calls // 2))
    per_log, mean_log, written, pushed, behind = _log_per_call(rate, pushes)
    floor_log, floor_behind = _log_floor(rate, pushes, scale)
    scalars = asyncio.run(_fleet(False, targets, interval, warmup, seconds))
    arrays = asyncio.run(_fleet(True, targets, interval, warmup, seconds))
    return [
        Row(SCENARIO, "a poll summarising a 10,000-value float64 array, us (goal: <= 1.5x numpy's floor)",
            array_ours * 1e6, unit="us", goal=("floor", 1.5), floor=array_floor * 1e6, floor_ratio=array_ratio),
        Row(SCENARIO, "the same values as a Python list, us (goal: <= 3x numpy's floor on the array)",
            list_ours * 1e6, unit="us", goal=("floor", 3.0), floor=list_floor * 1e6, floor_ratio=list_ratio),
        Row(SCENARIO, f"log() of a 1,000-value numpy array at {rate:,.0f}/s, median us on the caller's thread (goal: <= 5 us)",
            per_log * 1e6, unit="us", goal=("max", 5.0), floor=floor_log * 1e6,
            note=(f"the floor (a deque of copies, a plain thread making numpy's figures of each): {floor_log * 1e6:.1f} us; "
                  f"pushes waiting after the last: ours {behind:,.0f}, the floor's thread {floor_behind:,.0f}"),
            extra={"mean_us": mean_log * 1e6, "written": written, "pushed": pushed, "waiting": behind,
                   "floor_waiting": floor_behind}),
        Row(SCENARIO, f"{targets} targets x 1,000-value array at {1 / interval:g} Hz: slots polled on time",
            arrays["on_time"], unit="share", goal=("min", 0.99)),
        Row(SCENARIO, f"{targets} targets x 1,000-value array: records dropped", arrays["dropped"] + arrays["values_dropped"],
            unit="records", goal=("max", 0.0)),
        Row(SCENARIO, f"{targets} targets x 1,000-value array: CPU share (beside: the same targets, 4 scalars each)",
            arrays["cpu"], unit="share", extra={"cpu_scalars": scalars["cpu"], "on_time_scalars": scalars["on_time"]}),
    ]
