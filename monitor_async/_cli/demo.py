"""``monitor-async demo``: a simulated RL system, monitored end to end, in this process.

A collector thread fills a replay buffer, a learner coroutine samples it, an
async server answers fake requests; the monitor (with `Alert.defaults()`)
watches them and itself. ``--stall`` stops the collector part way. See [demo](cli.md#demo).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import math
import random
import shlex
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from .._core.alerts import Alert, AlertEvent
from .._core.schedule import Every
from .._core.text import count
from .._runtime.monitor import Monitor


class ReplayBuffer:
    """A thread-safe ring buffer written by the collector thread, sampled by the learner."""

    def __init__(self, capacity: int = 50_000) -> None:
        self._items: deque[float] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self.capacity = capacity
        self.write_count = 0
        self.sample_calls = 0
        self.samples_returned = 0

    def extend(self, items: list[float]) -> None:
        with self._lock:
            self._items.extend(items)
            self.write_count += len(items)

    def sample(self, batch_size: int) -> list[float]:
        with self._lock:
            n = len(self._items)
            self.sample_calls += 1
            if n == 0:
                return []
            batch = [self._items[random.randrange(n)] for _ in range(batch_size)]
            self.samples_returned += len(batch)
            return batch

    def stats(self) -> dict[str, float]:
        with self._lock:
            return {
                "size": len(self._items),
                "capacity": self.capacity,
                "write_count": self.write_count,
                "sample_calls": self.sample_calls,
                "samples_returned": self.samples_returned,
            }


class Collector:
    """Steps a toy environment in a background thread and writes frames to the buffer.

    Args:
        buffer: the replay buffer it writes to.
        stall_after: seconds after `start()` at which it stops producing frames
            (its thread stays alive); `None` (default): never.
    """

    def __init__(self, buffer: ReplayBuffer, stall_after: float | None = None) -> None:
        self.buffer = buffer
        self.stall_after = stall_after
        self.frames = 0
        self.episodes = 0
        self.batches = 0
        self.last_return = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-collector", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        episode_return = 0.0
        stall_at = None if self.stall_after is None else time.monotonic() + self.stall_after
        while not self._stop.is_set():
            if stall_at is not None and time.monotonic() >= stall_at:
                self._stop.wait(0.05)  # alive, answering stats(), producing nothing
                continue
            batch = [math.sin(self.frames + i) for i in range(200)]
            self.buffer.extend(batch)
            self.frames += len(batch)
            self.batches += 1
            episode_return += sum(batch) + random.random()
            if self.batches % 5 == 0:
                self.episodes += 1
                self.last_return, episode_return = episode_return, 0.0
            time.sleep(0.002)

    def stats(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "batches": self.batches,
            "episodes": self.episodes,
            "episode_return": self.last_return,
            "policy": "ppo",  # not a number: left out and counted
        }


class InferenceServer:
    """An async server: requests arrive, are batched, and answered after a short 'forward pass'."""

    def __init__(self) -> None:
        self.requests = 0
        self.batches = 0
        self.queue_depth = 0
        self.latency_ms = 0.0

    async def serve(self) -> None:
        while True:
            self.queue_depth = random.randint(0, 16)
            started = time.perf_counter()
            await asyncio.sleep(random.uniform(0.002, 0.01))
            self.requests += self.queue_depth
            self.batches += 1
            self.latency_ms = 1000 * (time.perf_counter() - started)

    async def stats(self) -> dict[str, float]:
        await asyncio.sleep(0)  # e.g. ask a worker over a socket
        return {
            "requests": self.requests,
            "batches": self.batches,
            "queue_depth": self.queue_depth,
            "latency_ms": self.latency_ms,
        }


async def _learner(buffer: ReplayBuffer, losses: list[float]) -> None:
    while True:
        batch = buffer.sample(256)
        if batch:
            losses.append(sum(x * x for x in batch) / len(batch))
        await asyncio.sleep(0.005)


class Learner:
    def __init__(self) -> None:
        self.losses: list[float] = []

    def stats(self) -> dict[str, float]:
        return {"updates": len(self.losses), "loss": self.losses[-1] if self.losses else 0.0}


class DemoSystem:
    """The simulated RL system the demo monitors: a collector thread, its replay buffer, a learner, a server.

    Args:
        stall_after: seconds after the start at which the collector stops
            producing frames (see `Collector`); `None` (default): never.

    Examples:
        >>> import asyncio
        >>> from monitor_async.backends import MemorySink
        >>> async def main():
        ...     system, sink = DemoSystem(), MemorySink()
        ...     monitor = Monitor(sink, poll_interval=0.05)
        ...     system.watch(monitor)
        ...     async with system.running(), monitor:
        ...         await asyncio.sleep(0.3)
        ...     return {r.name for r in sink.records}
        >>> sorted(asyncio.run(main()))
        ['collector', 'inference', 'learner', 'monitor', 'replay_buffer']
    """

    def __init__(self, stall_after: float | None = None) -> None:
        self.buffer = ReplayBuffer()
        self.collector = Collector(self.buffer, stall_after)
        self.server = InferenceServer()
        self.learner = Learner()

    def watch(self, monitor: Monitor) -> None:
        """Watches the four parts and ``monitor`` itself (as ``"monitor"``) on ``monitor``."""
        monitor.watch(self.collector, name="collector", schedule=Every.counter("frames", 20_000))
        monitor.watch(self.buffer, name="replay_buffer", schedule=Every.seconds(0.5), step="write_count")
        monitor.watch(self.server, name="inference", rate_keys=["requests", "batches"])
        monitor.watch(self.learner, name="learner", step="updates")
        monitor.watch(monitor, name="monitor", schedule=Every.seconds(1.0))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Runs the collector thread, the server and the learner until the block exits."""
        self.collector.start()
        background = [
            asyncio.create_task(self.server.serve(), name="demo-server"),
            asyncio.create_task(_learner(self.buffer, self.learner.losses), name="demo-learner"),
        ]
        try:
            yield
        finally:
            self.collector.stop()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)

    async def left_out(self) -> list[str]:
        """``"<watch>: key=value"`` for each value of a snapshot now that is not a finite number."""
        snapshots = {
            "collector": self.collector.stats(),
            "replay_buffer": self.buffer.stats(),
            "inference": await self.server.stats(),
            "learner": self.learner.stats(),
        }
        return [
            f"{name}: {key}={value!r}"
            for name, snapshot in snapshots.items()
            for key, value in snapshot.items()
            if isinstance(value, (str, bytes)) or not (isinstance(value, (int, float)) and math.isfinite(value))
        ]


def _new_run_dir(logdir: Path) -> Path:
    run_dir = logdir / time.strftime("%Y%m%d-%H%M%S")
    suffix = 1
    while run_dir.exists():
        run_dir = logdir / f"{time.strftime('%Y%m%d-%H%M%S')}-{suffix}"
        suffix += 1
    return run_dir


def stall_timing(seconds: float) -> tuple[float, float]:
    """When ``--stall`` stops the collector in a demo of ``seconds``, and the stall rule's ``after``.

    The collector stops at 30% of the run; the rule fires ``after`` seconds
    later (a fifth of the run, 1 to 3 s), leaving half the run to see it.

    Examples:
        >>> stall_timing(15.0), stall_timing(4.0)
        ((4.5, 3.0), (1.2, 1.0))
    """
    return 0.3 * seconds, min(max(seconds / 5, 1.0), 3.0)


async def run_demo(seconds: float, logdir: Path, console: bool, stall: bool = False) -> int:
    """Runs the demo for ``seconds`` into a new folder under ``logdir``; returns 0, or 130 on Ctrl-C (files whole either way).

    Args:
        seconds: how long the simulated training runs.
        logdir: the folder the run's folder is made in.
        console: show the live console table (rich) rather than lines.
        stall: stop the collector part way (see `stall_timing`).
    """
    from ..backends import CSVSink, JSONLSink, TensorBoardSink

    run_dir = _new_run_dir(logdir)
    sinks: list[Any] = [
        CSVSink(run_dir / "metrics.csv"),
        JSONLSink(run_dir / "metrics.jsonl"),
        # event files right in the run's folder: `tensorboard --logdir <logdir>` names the run after it
        TensorBoardSink(run_dir, flush_secs=1),
    ]
    if console:
        from ..backends import ConsoleSink

        sinks.append(ConsoleSink(sys.stdout, min_interval=1.0, title="monitor-async demo"))
    rules = [*Alert.defaults()]
    stall_after, after = stall_timing(seconds)
    if stall:
        rules.append(Alert.stalled("collector/frames", after=after))
    fired: list[AlertEvent] = []
    monitor = Monitor(sinks, poll_interval=0.25, close_sinks=True, alerts=rules, notify=fired.append)
    system = DemoSystem(stall_after if stall else None)
    system.watch(monitor)

    print(f"monitor-async demo: {seconds:g} s of simulated training, writing to {run_dir}", flush=True)
    if stall:
        print(f"--stall: the collector stops producing frames after {stall_after:g} s; "
              f"the rule 'stalled collector/frames' fires {after:g} s later", flush=True)
    interrupted = False
    try:
        # opened before the monitor starts: importing tensorboardX and rich holds the GIL for a moment,
        # which the blocked-loop rule would otherwise see as the loop stalling (the files still
        # appear at their first record)
        for sink in sinks[2:]:
            await sink.open()
        async with system.running(), monitor:
            await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        interrupted = True  # Ctrl-C: `async with` has stopped the monitor and flushed the sinks
    alerts = [e for e in fired if e.state == "firing"]
    print("\n".join(closing(monitor.stats(), run_dir, logdir, await system.left_out(), interrupted, alerts)))
    return 130 if interrupted else 0


def closing(
    stats: dict[str, float], run_dir: Path, logdir: Path, left_out: list[str], interrupted: bool = False,
    alerts: Sequence[AlertEvent] = (),
) -> list[str]:
    """The demo's closing lines: what happened, where the files are, and commands that work here.

    Args:
        stats: ``Monitor.stats()`` after the run.
        run_dir: the run's folder.
        logdir: the folder the run's folder is in (TensorBoard's ``--logdir``).
        left_out: ``"<watch>: key=value"`` examples of values that are not numbers.
        interrupted: whether Ctrl-C ended the run.
        alerts: the alert events that fired during the run.
    """
    sinks: dict[str, dict[str, float]] = {}
    for key, value in stats.items():
        if key.startswith("sink/"):
            label, field = key[5:].rsplit("/", 1)
            sinks.setdefault(label, {})[field] = value
    dropped = sum(s.get("dropped", 0.0) for s in sinks.values())
    errors = stats["polls_failed"] + sum(s.get("errors", 0.0) for s in sinks.values())
    lines = [
        "",
        "interrupted: stopped cleanly, everything flushed." if interrupted else "done.",
        f"{stats['records']:.0f} records from {stats['polls']:.0f} polls of {stats['watches']:.0f} watches; "
        f"{dropped:.0f} dropped, {errors:.0f} errors.",
    ]
    for label, fields in sinks.items():
        if fields.get("dropped") or fields.get("errors"):
            lines.append(f"  sink {label}: {fields.get('dropped', 0):.0f} dropped, {fields.get('errors', 0):.0f} errors")
    n = stats["values_dropped"]
    if n:
        lines.append(
            f"{n:.0f} non-numeric values left out ({'; '.join(left_out[:3])})." if left_out
            else f"{n:.0f} values left out: not finite numbers (strings, NaN, inf...); only numbers are logged."
        )
    if alerts:
        lines.append(f"{count(len(alerts), 'alert')} fired:")
        lines.extend(f"  {e.severity}: {e.message or e.rule}" for e in alerts)
    lines.append(f"files in {run_dir}:")
    lines.extend(f"  {p.relative_to(run_dir)}" for p in sorted(run_dir.rglob("*")) if p.is_file())
    q = shlex.quote
    lines.append("look at it:")
    lines.append(f"  monitor-async show {q(str(run_dir))}")
    plot = f"monitor-async plot {q(str(run_dir))}"
    lines.append(f"  {plot}" if importlib.util.find_spec("matplotlib") else f"  pip install matplotlib && {plot}")
    board = f"tensorboard --logdir {q(str(logdir))}"
    lines.append(f"  {board}" if importlib.util.find_spec("tensorboard") else f"  pip install tensorboard && {board}")
    return lines


def main(seconds: float, logdir: str, console: bool, stall: bool = False) -> int:
    """``monitor-async demo``: runs `run_demo`; Ctrl-C ends it cleanly (exit code 130)."""
    try:
        return asyncio.run(run_demo(seconds, Path(logdir), console, stall))
    except KeyboardInterrupt:
        return 130
