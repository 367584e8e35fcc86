"""SyncMonitor is safe to call from many threads while it polls in the background.

Holds "Thread safety of `SyncMonitor`": docs/guarantees.md#thread-safety-of-syncmonitor-test_sync_threadspy

Four threads register, step, unwatch and read stats at once. Every call
either works or fails with its documented error (a duplicate name), every
watch's records stay whole and in order, an unwatched target is never polled
again once ``unwatch`` returned, and the kept ones get their final snapshot.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from monitor_async import SyncMonitor
from tests.support.sinks import RecordingSink
from tests.support.targets import Ticker

THREADS = 4
ROUNDS = 30


def test_watch_unwatch_step_from_four_threads_while_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    # asyncio's debug mode makes any loop call from a foreign thread raise instead of racing silently
    monkeypatch.setenv("PYTHONASYNCIODEBUG", "1")
    sink = RecordingSink("mem")
    monitor = SyncMonitor(sink, poll_interval=0.005, queue_size=100_000, stop_timeout=5)
    monitor.watch(Ticker(), name="base")
    monitor.start()
    assert monitor.monitor._loop is not None and monitor.monitor._loop.get_debug()
    shared = Ticker()
    targets: dict[str, Ticker] = {}
    unwatched: dict[str, int] = {}  # name -> calls when unwatch() returned
    shared_wins: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    go = threading.Barrier(THREADS)

    def worker(k: int) -> None:
        try:
            go.wait()
            mine: list[str] = []
            for i in range(ROUNDS):
                target = Ticker()
                name = monitor.watch(target, name=f"w{k}_{i}")
                with lock:
                    targets[name] = target
                mine.append(name)
                if i % 3 == 0:
                    logged = monitor.step()
                    assert name in logged, "a watch registered before step() is polled by it"
                if i % 2 == 1:
                    gone = mine.pop(0)
                    monitor.unwatch(gone)
                    with lock:
                        unwatched[gone] = targets[gone].calls
                try:
                    monitor.watch(shared, name="shared")
                    shared_wins.append(k)
                except ValueError as exc:
                    assert "already registered" in str(exc)
                assert monitor.stats()["watches"] >= 2
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a call deadlocked"
    assert not errors, errors
    assert len(shared_wins) == 1, "exactly one thread registered the shared name"
    kept = {name for name in targets if name not in unwatched}
    assert len(kept) == THREADS * ROUNDS // 2
    assert monitor.stats()["watches"] == len(kept) + 2  # + base + shared
    monitor.stop()

    by_name: dict[str, list[Any]] = {}
    for record in sink.records:
        by_name.setdefault(record.name, []).append(record.metrics[f"{record.name}/n"])
    for name, values in by_name.items():
        assert values == sorted(set(values)), f"{name}: out of order or duplicated"
    for name, calls in unwatched.items():
        assert targets[name].calls == calls, f"{name} was polled after unwatch() returned"
    for name in kept:
        assert by_name[name][-1] == targets[name].calls, f"{name}: final snapshot missing"
    assert monitor.stats()["sink/mem/dropped"] == 0
