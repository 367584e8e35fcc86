"""Scenario 6: a CPU-bound pure-Python trainer in the main thread, the monitor in the background.

The trainer is a plain Python arithmetic loop (it holds the GIL all the
time, like a pure-Python environment step or data pipeline). Beside it, a
monitor polls 100 targets at 20 Hz into a CSV file: ours is
``SyncMonitor(CSVSink)`` (loop thread, aiofiles worker for the writes),
TorchRL's is ``LoggerMonitor(CSVLogger)`` (its polling thread). Two figures:

- speed kept: the trainer's iterations per second with the monitor running,
  over its speed with no monitor (the median of ``repeat`` runs of each,
  taken in turns, the order rotating each round, so that machine noise
  hits every variant alike);
- polls kept: the share of the configured poll slots (100 targets x 20 per
  second) in which a ``stats()`` call began (see ``slot_share``).

The two only mean something together: a monitor that is starved of the GIL
keeps the whole speed and polls nothing. Nothing here touches
``sys.setswitchinterval`` or the garbage collector: the interpreter runs
with its defaults, as the user's program would.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from monitor_async import SyncMonitor
from monitor_async.backends import CSVSink

from ._common import Row, TwelveKeys, quiet, slot_share, torchrl_monitor

__all__ = ["run"]


class ClockedKeys(TwelveKeys):
    """The 12-key target, noting when each ``stats()`` call began."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def stats(self) -> dict[str, Any]:
        self.times.append(time.monotonic())
        return super().stats()


def train(seconds: float) -> float:
    """Runs the pure-Python loop for about ``seconds``; returns its iterations per second."""
    x = 0
    n = 0
    clock = time.perf_counter
    started = clock()
    deadline = started + seconds
    while True:
        for i in range(2000):
            x = (x * 31 + i) % 1_000_003
        n += 2000
        now = clock()
        if now >= deadline:
            return n / (now - started)


def _run_with(
    start: Callable[[], object], stop: Callable[[], object], targets: list[ClockedKeys], seconds: float,
    interval: float,
) -> tuple[float, float]:
    t0 = time.monotonic()  # before start(): the first polls belong to the first slot
    start()
    speed = train(seconds)
    t1 = time.monotonic()
    stop()
    kept = slots = 0
    for target in targets:
        hit, n = slot_share(target.times, t0, t1, interval)
        kept += hit
        slots += n
    return speed, kept / slots if slots else 0.0


def _ours(root: Path, n: int, targets: int, seconds: float, interval: float) -> tuple[float, float]:
    watched = [ClockedKeys() for _ in range(targets)]
    monitor = SyncMonitor(CSVSink(root / f"ours{n}.csv"), poll_interval=interval, close_sinks=True)
    for i, target in enumerate(watched):
        monitor.watch(target, name=f"t{i}")
    try:
        return _run_with(monitor.start, monitor.stop, watched, seconds, interval)
    finally:
        monitor.close()


def _theirs(root: Path, n: int, targets: int, seconds: float, interval: float) -> tuple[float, float]:
    from torchrl.record.loggers.csv import CSVLogger

    watched = [ClockedKeys() for _ in range(targets)]
    logger = CSVLogger(exp_name=f"theirs{n}", log_dir=str(root))
    monitor = torchrl_monitor()(logger, poll_interval=interval)
    for i, target in enumerate(watched):
        monitor.watch(target, name=f"t{i}")
    try:
        return _run_with(monitor.start, lambda: monitor.stop(log_final=False), watched, seconds, interval)
    finally:
        for file in logger.experiment.files.values():
            file.close()


def run(
    *, targets: int = 100, hz: float = 20.0, seconds: float = 3.0, repeat: int = 7, baseline: bool = True
) -> list[Row]:
    """Speed kept and polls kept, ours and TorchRL's, medians of ``repeat`` interleaved runs."""
    quiet()
    interval = 1.0 / hz
    with_torchrl = baseline and torchrl_monitor() is not None
    alone: list[float] = []
    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    train(0.5)  # warm up the CPU and the interpreter
    with tempfile.TemporaryDirectory(prefix="monitor-async-bench-") as tmp:
        root = Path(tmp)
        runs: list[Callable[[int], None]] = [
            lambda n: alone.append(train(seconds)),
            lambda n: ours.append(_ours(root, n, targets, seconds, interval)),
        ]
        if with_torchrl:
            runs.append(lambda n: theirs.append(_theirs(root, n, targets, seconds, interval)))
        for n in range(repeat):
            for k in range(len(runs)):  # the order turns from one round to the next
                runs[(n + k) % len(runs)](n)
    base = statistics.median(alone)
    speed_ours = statistics.median(s for s, _ in ours) / base
    polls_ours = statistics.median(p for _, p in ours)
    speed_theirs = statistics.median(s for s, _ in theirs) / base if theirs else None
    polls_theirs = statistics.median(p for _, p in theirs) if theirs else None
    scenario = f"6. CPU-bound trainer, monitor in background ({targets} targets at {hz:g} Hz into CSV)"
    rounds = sorted(o[0] / a for o, a in zip(ours, alone, strict=True))
    note = (
        f"{seconds:g} s runs, median of {repeat}; trainer alone: {base:,.0f} iterations/s; "
        f"ours round by round: {rounds[0]:.3f} to {rounds[-1]:.3f}"
    )
    return [
        Row(scenario, "trainer speed kept (vs no monitor)", speed_ours, speed_theirs, unit="share",
            goal=("min", 0.95), note=note),
        Row(scenario, "share of configured poll slots kept", polls_ours, polls_theirs, unit="share",
            goal=("min", 0.90), note="a monitor starved of the GIL keeps the trainer's speed and polls nothing"),
    ]
