"""``monitor-async demo``: a simulated RL system, monitored end to end.

Everything runs in this process with no account, network or GPU: a collector
thread producing frames into a replay buffer, a learner coroutine sampling
it, an async inference server answering fake requests, and the monitor
watching all three and itself, writing CSV, JSONL and TensorBoard files.
"""

from __future__ import annotations

import asyncio
import math
import random
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from ._monitor import Monitor
from ._schedule import Every


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
    """Steps a toy environment in a background thread and writes frames to the buffer."""

    def __init__(self, buffer: ReplayBuffer) -> None:
        self.buffer = buffer
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
        while not self._stop.is_set():
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


async def run_demo(seconds: float, logdir: Path, console: bool) -> int:
    from .backends import CSVSink, JSONLSink, TensorBoardSink

    run_dir = logdir / time.strftime("%Y%m%d-%H%M%S")
    suffix = 1
    while run_dir.exists():
        run_dir = logdir / f"{time.strftime('%Y%m%d-%H%M%S')}-{suffix}"
        suffix += 1
    sinks: list[Any] = [
        CSVSink(run_dir / "metrics.csv", name="csv"),
        JSONLSink(run_dir / "metrics.jsonl", name="jsonl"),
        TensorBoardSink(run_dir / "tensorboard", flush_secs=1, name="tensorboard"),
    ]
    if console:
        from .backends import ConsoleSink

        sinks.append(ConsoleSink(sys.stdout, min_interval=1.0, name="console"))
    monitor = Monitor(sinks, poll_interval=0.25, close_sinks=True)
    buffer = ReplayBuffer()
    collector = Collector(buffer)
    server = InferenceServer()
    learner = Learner()
    monitor.watch(collector, name="collector", schedule=Every.counter("frames", 20_000))
    monitor.watch(buffer, name="replay_buffer", schedule=Every.seconds(0.5), step="write_count")
    monitor.watch(server, name="inference", rate_keys=["requests", "batches"])
    monitor.watch(learner, name="learner", step="updates")
    monitor.watch(monitor, name="monitor", schedule=Every.seconds(1.0))

    print(f"monitor-async demo: {seconds:g} s of simulated training, writing to {run_dir}", flush=True)
    collector.start()
    background = [
        asyncio.create_task(server.serve(), name="demo-server"),
        asyncio.create_task(_learner(buffer, learner.losses), name="demo-learner"),
    ]
    interrupted = False
    try:
        async with monitor:
            await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        interrupted = True  # Ctrl-C: `async with` has stopped the monitor and flushed the sinks
    finally:
        collector.stop()
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
    _summary(monitor.stats(), run_dir, interrupted)
    return 130 if interrupted else 0


def _summary(stats: dict[str, float], run_dir: Path, interrupted: bool) -> None:
    print()
    print("interrupted: stopped cleanly, everything flushed" if interrupted else "done.")
    print(f"records: {stats['records']:.0f}  polls: {stats['polls']:.0f}  "
          f"failed: {stats['polls_failed']:.0f}  timed out: {stats['polls_timed_out']:.0f}  "
          f"values left out: {stats['values_dropped']:.0f}")
    for key, value in stats.items():
        if key.startswith("sink/") and key.endswith(("/dropped", "/errors")):
            print(f"  {key}: {value:.0f}")
    print("files:")
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        print(f"  {path}")
    print("look at it with:")
    print(f"  tensorboard --logdir {run_dir / 'tensorboard'}")


def main(seconds: float, logdir: str, console: bool) -> int:
    try:
        return asyncio.run(run_demo(seconds, Path(logdir), console))
    except KeyboardInterrupt:
        return 130
