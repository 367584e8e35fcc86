"""Offloaded means offloaded.

Holds "Offloaded means offloaded": docs/guarantees.md#offloaded-means-offloaded-test_offload_flatteningpy

With ``offload="thread"`` the worker thread does all of a poll's work on the
target's side: the ``stats()`` call, and the copying and flattening of what
it returned. A lazy Mapping that makes one slow read per key (an IPC proxy,
a remote dict) then never holds up the event loop, so the other targets keep
being polled on time while it is read.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from monitor_async import Monitor
from monitor_async.backends import MemorySink
from tests.support.checks import wait_until
from tests.support.targets import Ticker

READ_WAIT = 5.0
"""How long one read of the lazy mapping waits for the test to let it go (a fail-safe on old code)."""


class SlowReads(Mapping[str, Any]):
    """A lazy mapping: each read blocks until ``release`` is set (a round trip to another process)."""

    def __init__(self, reading: threading.Event, release: threading.Event, keys: int = 3) -> None:
        self.reading = reading
        self.release = release
        self.names = [f"k{i}" for i in range(keys)]
        self.threads: set[str] = set()
        self.released: list[bool] = []
        self.nested = {"inner": 1.0}

    def __getitem__(self, key: str) -> Any:
        if key == "nested":
            return self.nested
        self.threads.add(threading.current_thread().name)
        self.reading.set()
        self.released.append(self.release.wait(READ_WAIT))
        return float(self.names.index(key))

    def __iter__(self) -> Iterator[str]:
        return iter([*self.names, "nested"])

    def __len__(self) -> int:
        return len(self.names) + 1


class Remote:
    """A target whose ``stats()`` returns at once, with a mapping that is slow to read."""

    def __init__(self) -> None:
        self.reading = threading.Event()
        self.release = threading.Event()
        self.results: list[SlowReads] = []

    def stats(self) -> SlowReads:
        result = SlowReads(self.reading, self.release)
        self.results.append(result)
        return result


async def test_a_slow_lazy_mapping_is_read_on_the_worker_thread_while_other_targets_are_polled() -> None:
    remote = Remote()
    ticker = Ticker()
    sink = MemorySink()
    monitor = Monitor(sink, poll_interval=0.01)
    monitor.watch(remote, name="remote", offload="thread", poll_interval=60.0, timeout=30.0)
    monitor.watch(ticker, name="local")
    async with monitor:
        await wait_until(remote.reading.is_set)
        polled = ticker.calls
        # the loop is free while the mapping is read: the neighbour keeps being polled
        await wait_until(lambda: ticker.calls >= polled + 5, timeout=READ_WAIT / 2)
        remote.release.set()
        await wait_until(lambda: any(r.name == "remote" for r in sink.records))
    (result, *_) = remote.results
    assert all(result.released), "every read was let go by the test, not by its fail-safe timeout"
    assert "MainThread" not in result.threads, f"read on {result.threads}"
    (record,) = [r for r in sink.records if r.name == "remote"][:1]
    assert record.metrics == {"remote/k0": 0.0, "remote/k1": 1.0, "remote/k2": 2.0, "remote/nested/inner": 1.0}


async def test_thread_offloaded_snapshots_keep_rates_step_and_value_accounting() -> None:
    class Counting:
        def __init__(self) -> None:
            self.frames = 0

        def stats(self) -> dict[str, Any]:
            self.frames += 100
            return {"frames": self.frames, "gpu": {"util": 0.5}, "bad": "text", "inf": float("inf")}

    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(Counting(), name="c", offload="thread", step="frames")
    first = await monitor.step()
    second = await monitor.step()
    assert first["c"] == {"c/frames": 100.0, "c/gpu/util": 0.5}
    assert second["c"]["c/frames"] == 200.0
    assert second["c"]["c/frames_per_second"] > 0
    assert [r.step for r in sink.records] == [100, 200]
    assert monitor.stats()["values_dropped"] == 4  # "text" and inf, at each of the two polls
