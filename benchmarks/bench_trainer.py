"""Scenario 6: a CPU-bound pure-Python trainer in the main thread, the monitor in the background.

The trainer is a plain Python arithmetic loop (it holds the GIL all the
time, like a pure-Python environment step or data pipeline). Beside it, a
monitor polls 100 targets at 20 Hz into a CSV file: ours is
``SyncMonitor(CSVSink)`` (loop thread, aiofiles worker for the writes),
TorchRL's is ``LoggerMonitor(CSVLogger)`` (its polling thread). Two figures:

- speed kept: the trainer's iterations per second with the monitor running,
  over its speed with no monitor in the same round (rounds of ``repeat``
  runs of each variant, the order turning each round; the figure is the
  median of the per-round ratios, so that the machine's drift from one
  round to the next cancels out);
- polls kept: the share of the configured poll slots (100 targets x 20 per
  second) in which a ``stats()`` call began (see ``slot_share``).

The floor row: the same targets polled at the same rate into the same CSV
rows by a bare loop thread with no monitor (:class:`~benchmarks._common.Bare`
on a plain asyncio loop, its rows appended through the same aiofiles append
every five ticks, about as often as our sink appends), in the same rounds.
It tells what polling these targets from a second thread costs the trainer
on this machine, whatever does it: how much of the loss is the monitor's
own, and how much the GIL's and the machine's.

Beside them the note gives the share of the trainer's time lost in pauses:
the trainer times each block of 2,000 iterations, and a block that took
over 1.5 times the run's median block holds a pause (the GIL was held by
another thread); the excess over the median, summed, over the run's length.
It tells the monitor's bursts of work apart from the machine's noise.

The two only mean something together: a monitor that is starved of the GIL
keeps the whole speed and polls nothing. Nothing here touches
``sys.setswitchinterval`` or the garbage collector: the interpreter runs
with its defaults, as the user's program would.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from monitor_async import SyncMonitor
from monitor_async.backends import CSVSink
from monitor_async.backends._files import LineFile

from ._common import Bare, ClockedKeys, Row, quiet, slot_share, torchrl_monitor

__all__ = ["run"]


def train(seconds: float) -> tuple[float, float]:
    """Runs the pure-Python loop for about ``seconds``; returns its iterations per second and pause share."""
    x = 0
    clock = time.perf_counter
    started = clock()
    deadline = started + seconds
    marks = [started]
    mark = marks.append
    while True:
        for i in range(2000):
            x = (x * 31 + i) % 1_000_003
        now = clock()
        mark(now)
        if now >= deadline:
            break
    blocks = [b - a for a, b in itertools.pairwise(marks)]
    typical = statistics.median(blocks)
    paused = sum(b - typical for b in blocks if b > 1.5 * typical)
    elapsed = now - started
    return 2000 * len(blocks) / elapsed, paused / elapsed


def _run_with(
    start: Callable[[], object], stop: Callable[[], object], targets: list[ClockedKeys], seconds: float,
    interval: float,
) -> tuple[float, float, float]:
    t0 = time.monotonic()  # before start(): the first polls belong to the first slot
    start()
    speed, paused = train(seconds)
    t1 = time.monotonic()
    stop()
    kept = slots = 0
    for target in targets:
        hit, n = slot_share(target.times, t0, t1, interval)
        kept += hit
        slots += n
    return speed, paused, kept / slots if slots else 0.0


def _ours(root: Path, n: int, targets: int, seconds: float, interval: float) -> tuple[float, float, float]:
    watched = [ClockedKeys() for _ in range(targets)]
    monitor = SyncMonitor(CSVSink(root / f"ours{n}.csv"), poll_interval=interval, close_sinks=True)
    for i, target in enumerate(watched):
        monitor.watch(target, name=f"t{i}")
    try:
        return _run_with(monitor.start, monitor.stop, watched, seconds, interval)
    finally:
        monitor.close()


async def _bare_loop(bare: Bare, path: Path, interval: float, ready: threading.Event, done: threading.Event) -> None:
    """Polls every ``interval`` until ``done``; every fifth tick's rows go out in one append."""
    file = LineFile(path, "floor", header=CSVSink.header)
    try:
        await file.open()
    finally:
        ready.set()  # start() returns even if the file cannot be opened (the thread then ends with the error)
    loop = asyncio.get_running_loop()
    blocks: list[bytes] = []
    writing: asyncio.Task[None] | None = None
    start = loop.time()
    ticks = 0
    try:
        while not done.is_set():
            blocks.append(bare.rows())
            if len(blocks) >= 5 and (writing is None or writing.done()):
                writing = loop.create_task(file.write(b"".join(blocks)))
                blocks.clear()
            ticks += 1
            await asyncio.sleep(max(0.0, start + ticks * interval - loop.time()))
        if writing is not None:
            await writing
    finally:
        await file.close()


def _floor(root: Path, n: int, targets: int, seconds: float, interval: float) -> tuple[float, float, float]:
    watched = [ClockedKeys() for _ in range(targets)]
    ready, done = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=asyncio.run, args=(_bare_loop(Bare(watched), root / f"floor{n}.csv", interval, ready, done),),
        name="floor", daemon=True,
    )

    def start() -> None:
        thread.start()
        ready.wait()

    def stop() -> None:
        done.set()
        thread.join()

    return _run_with(start, stop, watched, seconds, interval)


def _theirs(root: Path, n: int, targets: int, seconds: float, interval: float) -> tuple[float, float, float]:
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
    *, targets: int = 100, hz: float = 20.0, seconds: float = 3.0, repeat: int = 9, baseline: bool = True
) -> list[Row]:
    """Speed kept and polls kept, ours and TorchRL's, medians over ``repeat`` rounds of interleaved runs."""
    quiet()
    interval = 1.0 / hz
    with_torchrl = baseline and torchrl_monitor() is not None
    alone: list[tuple[float, float]] = []
    ours: list[tuple[float, float, float]] = []
    floor: list[tuple[float, float, float]] = []
    theirs: list[tuple[float, float, float]] = []
    train(0.5)  # warm up the CPU and the interpreter
    with tempfile.TemporaryDirectory(prefix="monitor-async-bench-") as tmp:
        root = Path(tmp)
        runs: list[Callable[[int], None]] = [
            lambda n: alone.append(train(seconds)),
            lambda n: ours.append(_ours(root, n, targets, seconds, interval)),
            lambda n: floor.append(_floor(root, n, targets, seconds, interval)),
        ]
        if with_torchrl:
            runs.append(lambda n: theirs.append(_theirs(root, n, targets, seconds, interval)))
        for n in range(repeat):
            for k in range(len(runs)):  # the order turns from one round to the next
                runs[(n + k) % len(runs)](n)

    def kept(variant: list[tuple[float, float, float]]) -> list[float]:
        return sorted(run[0] / base[0] for run, base in zip(variant, alone, strict=True))

    def paused(variant: Sequence[tuple[float, ...]]) -> float:
        return statistics.median(run[1] for run in variant)

    rounds = kept(ours)
    speed_theirs = statistics.median(kept(theirs)) if theirs else None
    polls_ours = statistics.median(run[2] for run in ours)
    polls_theirs = statistics.median(run[2] for run in theirs) if theirs else None
    scenario = f"6. CPU-bound trainer, monitor in background ({targets} targets at {hz:g} Hz into CSV)"
    pauses = (
        f"trainer time lost in pauses: alone {paused(alone):.1%}, ours {paused(ours):.1%}, "
        f"floor {paused(floor):.1%}"
    )
    if theirs:
        pauses += f", TorchRL {paused(theirs):.1%}"
    note = (
        f"{seconds:g} s runs, median of {repeat} rounds of ours / alone; trainer alone: "
        f"{statistics.median(run[0] for run in alone):,.0f} iterations/s; ours round by round: "
        f"{rounds[0]:.3f} to {rounds[-1]:.3f}; {pauses}"
    )
    return [
        Row(scenario, "trainer speed kept (vs no monitor)", statistics.median(rounds), speed_theirs,
            unit="share", goal=("min", 0.95), note=note),
        Row(scenario, "share of configured poll slots kept", polls_ours, polls_theirs, unit="share",
            goal=("min", 0.90), note="a monitor starved of the GIL keeps the trainer's speed and polls nothing"),
        Row(scenario, "floor: speed kept beside a bare polling thread, no monitor", statistics.median(kept(floor)),
            unit="share", note=(
                f"the same polls into the same rows and appends, nothing else (see Bare); its poll slots kept: "
                f"{statistics.median(run[2] for run in floor):.3f}"
            ), who="floor"),
    ]
