"""multiprocessing manager proxies as targets: every stats() is an IPC round trip, run on a thread."""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator, Sequence
from multiprocessing.managers import BaseManager, SyncManager
from typing import Any

import pytest

from monitor_async import Every, Monitor, Record
from monitor_async.backends import MemorySink


class SharedCollector:
    """Lives in the manager process; the test and the monitor hold proxies to it."""

    def __init__(self) -> None:
        self.frames = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.frames += n

    def stats(self, workers: str = "aggregate") -> dict[str, Any]:
        with self._lock:
            return {"frames": self.frames, "pid": os.getpid(), "per_worker": workers != "aggregate"}

    def slow_stats(self, seconds: float) -> dict[str, Any]:
        time.sleep(seconds)
        return self.stats()


class CollectorManager(BaseManager):
    pass


CollectorManager.register("SharedCollector", SharedCollector)


@pytest.fixture
def manager() -> Iterator[Any]:
    mgr = CollectorManager()
    mgr.start()
    yield mgr
    mgr.shutdown()


class WaitingSink(MemorySink):
    """A MemorySink that tells when it holds ``n`` records."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.enough = asyncio.Event()

    async def _write(self, records: Sequence[Record]) -> None:
        await super()._write(records)
        if len(self.records) >= self.n:
            self.enough.set()


def produce(proxy: Any, stop: Any) -> None:
    """A worker process feeding the shared collector, like a data-collection worker."""
    while not stop.is_set():
        proxy.add(10)
        time.sleep(0.005)


async def test_base_manager_proxy_target_is_polled_on_a_thread(manager: Any) -> None:
    proxy = manager.SharedCollector()
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(
        proxy, name="collector", schedule=Every.counter("frames", 100), stats_kwargs={"workers": "both"}
    )
    monitor.watch(object(), name="method", stats_fn=proxy.stats)  # a bound method of a proxy
    assert monitor.watches() == {"collector": "thread", "method": "thread"}

    first = await monitor.step()
    assert first["collector"]["collector/frames"] == 0.0
    assert first["collector"]["collector/per_worker"] == 1.0  # stats_kwargs crossed the process boundary
    assert first["collector"]["collector/pid"] != os.getpid()
    proxy.add(60)
    assert "collector" not in await monitor.step()  # 60 < 100: not due
    proxy.add(60)
    logged = await monitor.step()
    assert logged["collector"]["collector/frames"] == 120.0
    assert logged["collector"]["collector/frames_per_second"] > 0
    assert [r.step for r in sink.records if r.name == "collector"] == [0, 120]


async def test_proxy_fed_by_a_worker_process_in_background(manager: Any) -> None:
    proxy = manager.SharedCollector()
    stop = multiprocessing.Event()
    worker = multiprocessing.Process(target=produce, args=(proxy, stop), daemon=True)
    worker.start()
    sink = WaitingSink(4)
    try:
        async with Monitor(sink, poll_interval=0.05) as monitor:
            monitor.watch(proxy, name="collector", schedule=Every.counter("frames", 200))
            await asyncio.wait_for(sink.enough.wait(), 10)
    finally:
        stop.set()
        worker.join(5)
    steps = [r.step for r in sink.records]
    assert len(steps) >= 4
    # each counter crossing is a new step; the final snapshot at stop may repeat the last one
    assert all(b > a for a, b in itertools.pairwise(steps[:-1])), steps
    assert steps[-1] >= steps[-2]
    assert all("collector/frames_per_second" in r.metrics for r in sink.records[1:-1])
    assert monitor.stats()["polls_failed"] == 0


async def test_manager_dict_with_stats_fn() -> None:
    with SyncManager() as mgr:
        shared = mgr.dict(frames=0, episodes=0)
        monitor = Monitor(MemorySink())
        monitor.watch(shared, name="shared", stats_fn=shared.copy)
        assert monitor.watches() == {"shared": "thread"}
        shared["frames"] = 42
        assert await monitor.step() == {"shared": {"shared/frames": 42.0, "shared/episodes": 0.0}}


async def test_slow_manager_call_leaves_the_loop_responsive(manager: Any) -> None:
    proxy = manager.SharedCollector()
    monitor = Monitor(MemorySink(), poll_timeout=2)
    monitor.watch(proxy, name="slow", stats_fn=proxy.slow_stats, stats_kwargs={"seconds": 0.3})
    worst = 0.0
    done = False

    async def tick() -> None:
        nonlocal worst
        while not done:
            start = time.perf_counter()
            await asyncio.sleep(0.01)
            worst = max(worst, time.perf_counter() - start - 0.01)

    ticker = asyncio.create_task(tick())
    logged = await monitor.step()
    done = True
    await ticker
    assert logged["slow"]["slow/frames"] == 0.0
    assert worst < 0.1


async def test_dead_manager_is_reported_dead_once_and_polling_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="monitor_async")
    mgr = CollectorManager()
    mgr.start()
    proxy = mgr.SharedCollector()
    monitor = Monitor(MemorySink())
    monitor.watch(proxy, name="remote")
    monitor.watch(SharedCollector(), name="local")
    assert "remote" in await monitor.step()
    mgr.shutdown()
    for _ in range(3):
        logged = await monitor.step()
        assert list(logged) == ["local"]
    # a dead target is reported once, then retried with backoff (1 s, then up to 30 s apart)
    assert monitor.stats()["polls_failed"] == 1 and monitor.stats()["targets_dead"] == 1
    warnings = [r.getMessage() for r in caplog.records if "'remote'" in r.getMessage()]
    assert len(warnings) == 1
    assert "watch 'remote': its target's process is gone" in warnings[0]


def test_default_name_of_a_proxy_is_the_class_behind_it(manager: Any) -> None:
    monitor = Monitor()
    assert monitor.watch(manager.SharedCollector()) == "sharedcollector"
    assert monitor.watch(manager.SharedCollector()) == "sharedcollector_1"
