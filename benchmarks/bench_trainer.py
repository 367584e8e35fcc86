"""Scenario 6: a CPU-bound pure-Python trainer in the main thread, the monitor in the background.

The trainer is a plain Python arithmetic loop (it holds the GIL all the
time, like a pure-Python environment step or data pipeline). Beside it, a
monitor polls 100 targets at 20 Hz into a CSV file: ours is
``SyncMonitor(CSVSink)`` (loop thread, aiofiles worker for the writes),
TorchRL's is ``LoggerMonitor(CSVLogger)`` (its polling thread). Three figures:

- speed kept: the trainer's iterations per second with the monitor running,
  over its speed with no monitor in the same round (rounds of ``repeat``
  runs of each variant, the order turning each round; the figure is the
  median of the per-round ratios, so that the machine's drift from one
  round to the next cancels out);
- polls kept: the share of the configured poll slots (100 targets x 20 per
  second) in which a ``stats()`` call began (see ``slot_share``);
- CPU per background poll: the process CPU time (``time.process_time()``)
  less the trainer thread's own (``time.thread_time()``), from just after
  ``start()`` returns to just before ``stop()`` is called (start-up and
  shutdown are not counted), over the ``stats()`` calls made in that window.
  It is what the monitor's threads spend per snapshot, everything included
  (poll, rates, CSV text, the appends). TorchRL's thread, starved of the
  GIL, makes only a handful of ``stats()`` calls in the window (the note
  says how many), so its figure says more about that than about a poll.

Four floors run in the same rounds, polling the same targets at the same
rate into the same CSV rows with no monitor:

- the plain thread (:class:`PlainThread`): a ``threading.Thread`` with no
  event loop and no aiofiles; every interval it polls every target, builds
  the float dict and the rates our monitor derives, formats the same CSV
  rows our ``CSVSink`` writes and appends them with ``file.write`` (and a
  flush) every 0.25 s: the plain way of doing the same work, with no event
  loop;
- the bare loop (:class:`~benchmarks._common.Bare` on a plain asyncio loop,
  polled from one ``loop.call_at`` timer a tick as our timers do, its rows
  appended through the same aiofiles append as our ``CSVSink`` every five
  ticks, about as often as our sink appends): what the event loop and the
  safe appends cost on top of the plain thread, apart from the monitor. The
  CPU per poll goal holds ours to at most 1.1 times its figure, as the
  median of the per-round ratios ours / bare loop (the two run in the same
  round, so the machine's drift between rounds cancels out);
- the bare loop writing nothing: the same loop, its rows formatted and
  dropped: what an event loop thread spends on these polls, records and
  rows before any write. Its ratio to the plain thread (which does write)
  is printed beside it.
- the queued floor: the bare loop keeping each tick's records and
  formatting them at the append, as a writer fed by a queue formats them
  (formatting in the poll would let a slow sink delay polling): the least a
  monitor does beyond the bare loop. Its ratio to the bare loop is printed
  beside it, and ours over it in the CPU note.

They tell what polling these targets from a second thread costs the trainer
on this machine, whatever does it: how much of the loss is the monitor's
own, and how much the GIL's and the machine's.

Beside them the note gives the share of the trainer's time lost in pauses:
the trainer times each block of 2,000 iterations, and a block that took
over 1.5 times the run's median block holds a pause (the GIL was held by
another thread); the excess over the median, summed, over the run's length.
It tells the monitor's bursts of work apart from the machine's noise.

Speed and polls kept only mean something together: a monitor that is
starved of the GIL keeps the whole speed and polls nothing. Nothing here
touches ``sys.setswitchinterval`` or the garbage collector: the interpreter
runs with its defaults, as the user's program would.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from monitor_async import Record, SyncMonitor
from monitor_async.backends import CSVSink

from ._common import Bare, ClockedKeys, LineFile, Row, quiet, slot_share, torchrl_monitor

__all__ = ["PlainThread", "run"]


class Run(NamedTuple):
    """One run of the trainer beside a background poller."""

    speed: float
    """the trainer's iterations per second"""
    paused: float
    """the share of the trainer's time lost in pauses"""
    kept: float
    """the share of the configured poll slots in which a ``stats()`` call began"""
    cpu: float
    """seconds of CPU of the process less the trainer thread's, between ``start()`` and ``stop()``"""
    polls: int
    """``stats()`` calls begun in that window"""

    @property
    def per_poll(self) -> float | None:
        """Background CPU per ``stats()`` call in microseconds, ``None`` with no call in the window."""
        return self.cpu / self.polls * 1e6 if self.polls else None


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
) -> Run:
    t0 = time.monotonic()  # before start(): the first polls belong to the first slot
    start()
    # the steady window: from start()'s return to stop()'s call
    w0 = time.monotonic()
    cpu0, own0 = time.process_time(), time.thread_time()
    speed, paused = train(seconds)
    own1, cpu1 = time.thread_time(), time.process_time()
    w1 = time.monotonic()
    stop()
    kept = slots = polls = 0
    for target in targets:
        hit, n = slot_share(target.times, t0, w1, interval)
        kept += hit
        slots += n
        polls += sum(1 for t in target.times if w0 <= t < w1)
    return Run(speed, paused, kept / slots if slots else 0.0, (cpu1 - cpu0) - (own1 - own0), polls)


def _ours(root: Path, n: int, targets: int, seconds: float, interval: float) -> Run:
    watched = [ClockedKeys() for _ in range(targets)]
    monitor = SyncMonitor(CSVSink(root / f"ours{n}.csv"), poll_interval=interval, close_sinks=True)
    for i, target in enumerate(watched):
        monitor.watch(target, name=f"t{i}")
    try:
        return _run_with(monitor.start, monitor.stop, watched, seconds, interval)
    finally:
        monitor.close()


class PlainThread:
    """The plain-thread floor: the same polls into the same CSV rows, by a thread with no event loop.

    Every ``interval`` (slots ``start + k * interval``, waited for with
    ``Event.wait``) it calls every target's ``stats()``, builds its
    ``"<name>/<key>": float(value)`` dict and the rates of the counters
    present (``RATE_NAMES``: the change over the seconds since the
    target's last poll, as our monitor derives them), and formats one row per
    value as ``CSVSink`` writes it (``time,name,step,metric,value`` with an
    empty step). The rows are appended with one ``file.write`` and a flush
    every ``every`` seconds, to a file opened for append that starts with the
    CSV header. Nothing else: no queue, no checks of the values, no error
    handling.
    """

    def __init__(self, targets: Sequence[ClockedKeys], path: Path, interval: float, every: float = 0.25) -> None:
        self.targets = [(f"t{i}", f"t{i}/", target) for i, target in enumerate(targets)]
        self.path = path
        self.interval = interval
        self.every = every
        self.ready = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, name="plain-floor", daemon=True)

    def start(self) -> None:
        self.thread.start()
        self.ready.wait()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def _poll(self) -> None:
        try:
            file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (the with block below closes it)
        finally:
            self.ready.set()  # start() returns even if the file cannot be opened
        polls = Bare([target for _, _, target in self.targets])  # its metrics(): the dict and the rates
        lines: list[str] = []
        interval, done = self.interval, self.done
        with file:
            file.write(CSVSink.header.decode())
            file.flush()
            start = time.monotonic()
            due = start + self.every
            k = 0
            while True:
                for name, prefix, target in self.targets:
                    metrics = polls.metrics(name, prefix, target)
                    row = f"{time.time()!r},{name},,"
                    lines += [f"{row}{key},{value!r}\n" for key, value in metrics.items()]
                if time.monotonic() >= due:
                    file.write("".join(lines))
                    file.flush()
                    lines.clear()
                    due += self.every
                k += 1
                if done.wait(max(0.0, start + k * interval - time.monotonic())):
                    break
            file.write("".join(lines))
            file.flush()


def _plain(root: Path, n: int, targets: int, seconds: float, interval: float) -> Run:
    watched = [ClockedKeys() for _ in range(targets)]
    plain = PlainThread(watched, root / f"plain{n}.csv", interval)
    return _run_with(plain.start, plain.stop, watched, seconds, interval)


async def _bare_loop(
    bare: Bare, path: Path | None, interval: float, ready: threading.Event, done: threading.Event,
    queued: bool = False,
) -> None:
    """Polls every ``interval`` from one timer callback until ``done``; every fifth tick's rows go out in one append.

    One ``loop.call_at`` timer per tick, as our monitor's timers poll a
    tick's watches in one callback (an ``asyncio.sleep`` loop would take two
    passes of the loop per tick). With no ``path`` the rows are formatted
    and dropped: nothing is written. With ``queued``, each tick's records are
    kept and formatted at the append, as a writer fed by a queue formats them
    (the queued floor; ``python -m benchmarks.probes.queued`` times its callbacks beside ours).
    """
    file = None if path is None else LineFile(path, "floor", header=CSVSink.header)
    try:
        if file is not None:
            await file.open()
    finally:
        ready.set()  # start() returns even if the file cannot be opened (the thread then ends with the error)
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    blocks: list[bytes] = []
    kept: list[Record] = []  # queued: the records of the ticks since the last append
    writing: list[asyncio.Task[None]] = []  # the append in flight, if any
    start = loop.time()

    def tick(k: int) -> None:
        if done.is_set():
            finished.set_result(None)
            return
        if queued:
            kept.extend(bare.records())
            due = len(kept) >= 5 * len(bare.targets)
        else:
            blocks.append(bare.rows())
            due = len(blocks) >= 5
        if file is None:
            blocks.clear()
        elif due and (not writing or writing[0].done()):
            data = bare.csv.format(kept).encode() if queued else b"".join(blocks)
            writing[:] = [loop.create_task(file.write(data))]
            blocks.clear()
            kept.clear()
        loop.call_at(start + (k + 1) * interval, tick, k + 1)

    loop.call_at(start, tick, 0)
    try:
        await finished
        if writing:
            await writing[0]
    finally:
        if file is not None:
            await file.close()


def _floor(root: Path | None, n: int, targets: int, seconds: float, interval: float, queued: bool = False) -> Run:
    """The bare loop's run; with no ``root``, the loop that writes nothing (its rows formatted and dropped).

    Its thread is named ``floor``, or ``queued`` with ``queued`` (see `_bare_loop`).
    """
    watched = [ClockedKeys() for _ in range(targets)]
    ready, done = threading.Event(), threading.Event()
    name = "queued" if queued else "floor"
    path = None if root is None else root / f"{name}{n}.csv"
    thread = threading.Thread(
        target=asyncio.run, args=(_bare_loop(Bare(watched), path, interval, ready, done, queued),),
        name=name, daemon=True,
    )

    def start() -> None:
        thread.start()
        ready.wait()

    def stop() -> None:
        done.set()
        thread.join()

    return _run_with(start, stop, watched, seconds, interval)


def _theirs(root: Path, n: int, targets: int, seconds: float, interval: float) -> Run:
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


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _us(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1f} us" if value < 100 else f"{value:,.0f} us"


def _figure(value: float | None) -> float:
    """A per-poll figure for a row: infinite when no poll was made (so that no goal is met by polling nothing)."""
    return math.inf if value is None else value


def run(
    *, targets: int = 100, hz: float = 20.0, seconds: float = 3.0, repeat: int = 9, baseline: bool = True
) -> list[Row]:
    """Speed kept, polls kept and CPU per poll, ours, the floors' and TorchRL's, medians over ``repeat`` rounds."""
    quiet()
    interval = 1.0 / hz
    with_torchrl = baseline and torchrl_monitor() is not None
    alone: list[tuple[float, float]] = []
    ours: list[Run] = []
    plain: list[Run] = []
    floor: list[Run] = []
    silent: list[Run] = []  # the bare loop that writes nothing
    queued: list[Run] = []  # the bare loop that formats each tick's records later, at the append
    theirs: list[Run] = []
    train(0.5)  # warm up the CPU and the interpreter
    with tempfile.TemporaryDirectory(prefix="monitor-async-bench-") as tmp:
        root = Path(tmp)
        runs: list[Callable[[int], None]] = [
            lambda n: alone.append(train(seconds)),
            lambda n: ours.append(_ours(root, n, targets, seconds, interval)),
            lambda n: plain.append(_plain(root, n, targets, seconds, interval)),
            lambda n: floor.append(_floor(root, n, targets, seconds, interval)),
            lambda n: silent.append(_floor(None, n, targets, seconds, interval)),
            lambda n: queued.append(_floor(root, n, targets, seconds, interval, queued=True)),
        ]
        if with_torchrl:
            runs.append(lambda n: theirs.append(_theirs(root, n, targets, seconds, interval)))
        for n in range(repeat):
            for k in range(len(runs)):  # the order turns from one round to the next
                runs[(n + k) % len(runs)](n)

    def kept(variant: list[Run]) -> list[float]:
        return sorted(run.speed / base[0] for run, base in zip(variant, alone, strict=True))

    def paused(variant: Sequence[tuple[float, ...]]) -> float:
        return statistics.median(run[1] for run in variant)

    def per_poll(variant: list[Run]) -> float | None:
        return _median([run.per_poll for run in variant])

    rounds = kept(ours)
    speed_plain = statistics.median(kept(plain))
    speed_theirs = statistics.median(kept(theirs)) if theirs else None
    polls_ours = statistics.median(run.kept for run in ours)
    polls_theirs = statistics.median(run.kept for run in theirs) if theirs else None
    cpu_ours, cpu_plain, cpu_floor, cpu_theirs = per_poll(ours), per_poll(plain), per_poll(floor), per_poll(theirs)
    cpu_silent, cpu_queued = per_poll(silent), per_poll(queued)

    def over_rounds(variant: list[Run], under: list[Run]) -> list[float]:
        """``variant`` over the floor ``under``, round by round, sorted."""
        return sorted(
            a / b for a, b in ((o.per_poll, p.per_poll) for o, p in zip(variant, under, strict=True))
            if a is not None and b is not None and b > 0
        )

    def spread(ratios: list[float]) -> str:
        """Sorted per-round ratios as the notes print them, or ``n/a`` with none."""
        if not ratios:
            return "n/a"
        return f"round by round: median {statistics.median(ratios):.2f}x ({ratios[0]:.2f}x to {ratios[-1]:.2f}x)"

    over = over_rounds(ours, plain)
    over_loop = over_rounds(ours, floor)
    over_floor = statistics.median(over_loop) if over_loop else None
    silent_over = over_rounds(silent, plain)
    queued_over = over_rounds(queued, floor)
    over_queued = over_rounds(ours, queued)
    scenario = f"6. CPU-bound trainer, monitor in background ({targets} targets at {hz:g} Hz into CSV)"
    pauses = (
        f"trainer time lost in pauses: alone {paused(alone):.1%}, ours {paused(ours):.1%}, "
        f"plain thread {paused(plain):.1%}, bare loop {paused(floor):.1%}, bare loop writing nothing "
        f"{paused(silent):.1%}, queued floor {paused(queued):.1%}"
    )
    if theirs:
        pauses += f", TorchRL {paused(theirs):.1%}"
    note = (
        f"{seconds:g} s runs, median of {repeat} rounds of ours / alone; trainer alone: "
        f"{statistics.median(run[0] for run in alone):,.0f} iterations/s; ours round by round: "
        f"{rounds[0]:.3f} to {rounds[-1]:.3f}; plain-thread floor {speed_plain:.3f}; {pauses}"
    )
    cpu_note = (
        f"medians of {repeat} rounds, process CPU less the trainer thread's between start() and stop(), "
        f"per stats() call: ours {_us(cpu_ours)}, plain thread {_us(cpu_plain)}, bare loop {_us(cpu_floor)}, "
        f"bare loop writing nothing {_us(cpu_silent)}, queued floor {_us(cpu_queued)}"
    )
    if theirs:
        cpu_note += (
            f", TorchRL {_us(cpu_theirs)} (over a median of "
            f"{statistics.median(run.polls for run in theirs):,.0f} polls a run)"
        )
    for under, ratios in (("bare loop", over_loop), ("queued floor", over_queued), ("plain thread", over)):
        if ratios:
            cpu_note += f"; ours / {under} {spread(ratios)}"
    return [
        Row(scenario, "trainer speed kept (vs no monitor)", statistics.median(rounds), speed_theirs,
            unit="share", goal=("min", 0.95), note=note),
        Row(scenario, "share of configured poll slots kept", polls_ours, polls_theirs, unit="share",
            goal=("min", 0.95), note="a monitor starved of the GIL keeps the trainer's speed and polls nothing"),
        Row(scenario, "CPU per background poll beside the trainer", _figure(cpu_ours), cpu_theirs, unit="us",
            goal=("floor", 1.1), note=cpu_note, floor=cpu_floor, floor_ratio=over_floor),
        Row(scenario, "floor: speed kept beside a plain polling thread, no event loop", speed_plain,
            unit="share", note=(
                "the same polls into the same CSV rows, appended with file.write every 0.25 s, nothing else "
                f"(see PlainThread); its poll slots kept: {statistics.median(run.kept for run in plain):.3f}"
            ), who="floor"),
        Row(scenario, "floor: CPU per poll, plain polling thread, no event loop", _figure(cpu_plain), unit="us",
            note="process CPU less the trainer thread's over the same window, per stats() call", who="floor"),
        Row(scenario, "floor: speed kept beside a bare asyncio loop thread, no monitor",
            statistics.median(kept(floor)), unit="share", note=(
                f"the same polls into the same rows and aiofiles appends, nothing else (see Bare); "
                f"its poll slots kept: {statistics.median(run.kept for run in floor):.3f}"
            ), who="floor"),
        Row(scenario, "floor: CPU per poll, bare asyncio loop thread", _figure(cpu_floor), unit="us",
            note="what the event loop and aiofiles cost beside the plain thread, apart from the monitor",
            who="floor"),
        Row(scenario, "floor: CPU per poll, bare asyncio loop keeping each tick's records for a writer",
            _figure(cpu_queued), unit="us", floor=cpu_floor,
            floor_ratio=statistics.median(queued_over) if queued_over else None,
            note=(
                "the queued floor: the bare loop, each tick's records kept and formatted at the append, as a "
                "writer fed by a queue formats them (formatting in the poll would let a slow sink delay polling): "
                "the least a monitor does beyond the bare loop; over the bare loop " + spread(queued_over)
            ), who="floor"),
        Row(scenario, "floor: CPU per poll, bare asyncio loop thread writing nothing", _figure(cpu_silent),
            unit="us", floor=cpu_plain, floor_ratio=statistics.median(silent_over) if silent_over else None,
            note=(
                "the bare loop's polls and CSV rows, the rows dropped instead of appended: what an event loop "
                "costs beside the plain thread (which does write) before any write; over the plain thread "
                + spread(silent_over)
            ), who="floor"),
    ]
