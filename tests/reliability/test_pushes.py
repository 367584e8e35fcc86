"""What ``log()`` is given is written as it was at the call, or counted and said; ``log()`` never raises.

Holds "Pushes are written as they were, or counted": docs/guarantees.md#pushes-are-written-as-they-were-or-counted-test_pushespy
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import UserDict, defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from monitor_async import Monitor, SyncMonitor
from monitor_async.backends import CSVSink, MemorySink, TensorBoardSink
from tests.support.checks import wait_until


def test_everything_pushed_before_close_is_written_also_after_a_stop() -> None:
    sink = MemorySink()
    monitor = SyncMonitor(sink)
    monitor.start()
    monitor.stop()
    for step in (1, 2, 3):
        monitor.log("learner", {"loss": float(step)}, step=step)
    monitor.close()
    assert [r.step for r in sink.records] == [1, 2, 3]
    assert monitor.stats()["log_dropped"] == 0


class Settings(Mapping[str, Any]):
    """A mapping of the user's own that is not a dict."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


async def test_log_snapshots_nested_and_non_dict_mappings_at_the_call() -> None:
    sink = MemorySink()
    monitor = Monitor(sink)
    nested: dict[str, Any] = {"opt": {"lr": 0.0}}
    counts: defaultdict[str, float] = defaultdict(float)
    user = UserDict({"a": 0.0})
    own = Settings({"b": 0.0, "deep": {"c": 0.0}})
    for i in range(3):
        nested["opt"]["lr"] = float(i)
        counts["n"] = float(i)
        user["a"] = float(i)
        own.values["b"] = float(i)
        own.values["deep"]["c"] = float(i)
        monitor.log("nested", nested, step=i)
        monitor.log("counts", counts, step=i)
        monitor.log("user", user, step=i)
        monitor.log("own", own, step=i)
    nested["opt"]["lr"] = counts["n"] = user["a"] = own.values["b"] = own.values["deep"]["c"] = 99.0
    await monitor.flush()
    by_name: dict[str, list[dict[str, float]]] = {}
    for record in sink.records:
        by_name.setdefault(record.name, []).append(record.metrics)
    assert [m["nested/opt/lr"] for m in by_name["nested"]] == [0.0, 1.0, 2.0]
    assert [m["counts/n"] for m in by_name["counts"]] == [0.0, 1.0, 2.0]
    assert [m["user/a"] for m in by_name["user"]] == [0.0, 1.0, 2.0]
    assert [(m["own/b"], m["own/deep/c"]) for m in by_name["own"]] == [(0.0, 0.0), (1.0, 1.0), (2.0, 2.0)]


async def test_log_never_raises_a_bad_name_is_a_counted_warned_drop(caplog: pytest.LogCaptureFixture) -> None:
    sink = MemorySink()
    monitor = Monitor(sink)
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        monitor.log(["not", "hashable"], {"x": 1})  # type: ignore[arg-type]
        monitor.log({"a": 1}, {"x": 1})  # type: ignore[arg-type]
        monitor.log(None, {"x": 1})  # type: ignore[arg-type]
        monitor.log("learner", {"x": 2}, step=1)
        await monitor.flush()
    assert [r.metrics for r in sink.records] == [{"learner/x": 2.0}]
    assert monitor.stats()["log_dropped"] == 3
    assert "['not', 'hashable']" in caplog.text


def test_written_plus_dropped_equals_pushes_from_another_thread() -> None:
    sink = MemorySink()
    monitor = SyncMonitor(sink, queue_size=64)
    pushes = 1_000_000

    def push() -> None:
        log = monitor.log
        for i in range(pushes):
            log("fast", {"i": i})

    with monitor:
        thread = threading.Thread(target=push)
        thread.start()
        thread.join()
    stats = monitor.stats()
    lost_in_sink = sum(v for k, v in stats.items() if k.endswith(("/dropped", "/abandoned")))
    assert stats["log_dropped"] > 0  # the queue did fill: the count raced with the drain
    assert len(sink.records) + lost_in_sink + stats["log_dropped"] == pushes


def test_a_record_tensorboard_cannot_store_costs_only_that_record(tmp_path: Path) -> None:
    EventAccumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator").EventAccumulator

    sink = TensorBoardSink(tmp_path / "tb")
    monitor = SyncMonitor(sink, background=False)
    for step in range(5):
        monitor.log("a", {"v": float(step)}, step=step)
    monitor.log("a", {"v": -1.0}, step=2**70)
    for step in range(5, 10):
        monitor.log("a", {"v": float(step)}, step=step)
    monitor.step()
    stats = monitor.stats()
    monitor.close()
    label = next(k.split("/")[1] for k in stats if k.startswith("sink/"))
    assert stats[f"sink/{label}/written"] == 10
    assert stats[f"sink/{label}/dropped"] == 1
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert sorted(e.step for e in events.Scalars("a/v")) == list(range(10))


def _push_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "monitor_async" and "log()" in r.getMessage()]


async def test_a_burst_that_overflows_is_said_once_at_its_start_and_once_at_its_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 20,000 pushes from the loop's own thread in one go: the loop has no turn before the last, 16,384 wait
    path = tmp_path / "metrics.csv"
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with Monitor(CSVSink(path)) as monitor:
            for step in range(20_000):
                monitor.log("learner", {"loss": 0.5}, step=step)
            first = _push_warnings(caplog)
            await monitor.flush()
            await wait_until(lambda: len(_push_warnings(caplog)) == 2)  # no drop for a while: the streak ended
            ended = _push_warnings(caplog)
            for step in range(17_000):  # a second streak: its warning names the count so far
                monitor.log("learner", {"loss": 0.5}, step=step)
            second = _push_warnings(caplog)
        said = _push_warnings(caplog)  # stop() ended the second streak
    assert len(first) == 1, first
    assert "16,384 pushes (16 x queue_size=1024)" in first[0] and "1 push dropped so far" in first[0], first[0]
    assert "3,616 pushes dropped in all" in ended[1], ended[1]
    assert len(second) == 3 and "3,617 pushes dropped so far" in second[2], second
    assert len(said) == 4 and "616 pushes dropped in all" in said[3], said
    stats = monitor.stats()
    assert stats["log_dropped"] == 3_616 + 616
    assert stats["sink/csv/dropped"] == 0  # what the buffer held reached the sink's queue whole
    assert len(path.read_text().splitlines()) == 1 + 2 * 16_384


def test_pushes_waiting_for_step_are_said_when_they_overflow(caplog: pytest.LogCaptureFixture) -> None:
    sink = MemorySink()
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        monitor = SyncMonitor(sink, background=False, queue_size=64)
        for step in range(1_200):  # 16 x 64 wait for step()
            monitor.log("learner", {"loss": 0.5}, step=step)
        assert len(_push_warnings(caplog)) == 1
        monitor.step()
        monitor.close()
    said = _push_warnings(caplog)
    assert len(said) == 2, said
    assert "queue_size=64" in said[0] and "176 pushes dropped in all" in said[1], said
    assert [r.step for r in sink.records] == list(range(176, 1_200))


def _paced(log: Any, rate: float, seconds: float) -> int:
    """Pushes a 4-key dict ``rate`` times a second for ``seconds``, paced on ``perf_counter``.

    Steady, as a training loop is: where the process got no CPU for a while (a shared machine),
    the pushes go on at ``rate`` from there rather than catching up in one burst.
    """
    period = 1.0 / rate
    total = int(rate * seconds)
    clock = time.perf_counter
    start = clock()
    for i in range(total):
        due = start + i * period
        now = clock()
        if now - due > 0.01:
            start += now - due
        while clock() < due:
            pass
        log("learner", {"loss": 0.5, "lr": 3e-4, "grad": 0.7, "i": i}, step=i)
    return total


class Counting:
    """A sink that keeps up and keeps nothing (a growing heap would add the collector's pauses): it counts."""

    name = "counting"

    def __init__(self) -> None:
        self.written = 0
        self.out_of_order = 0

    async def write(self, records: Any) -> None:
        for record in records:
            self.out_of_order += record.step != self.written
            self.written += 1


def test_a_steady_fifty_thousand_pushes_a_second_lose_nothing() -> None:
    sink = Counting()
    with SyncMonitor(sink) as monitor:
        pushed = _paced(monitor.log, 50_000, 2.0)
    stats = monitor.stats()
    assert stats["log_dropped"] == 0, stats
    assert stats["sink/counting/dropped"] == 0 and stats["sink/counting/written"] == pushed
    assert sink.written == pushed and sink.out_of_order == 0


class Gated:
    """A sink whose writes wait for ``gate``: a write stays in flight until the test opens it."""

    name = "gated"

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.gate = asyncio.Event()
        self.writing = 0

    async def write(self, records: Any) -> None:
        self.writing += 1
        await self.gate.wait()
        self.records.extend(records)


async def test_pushes_wait_for_room_in_a_sink_queue_rather_than_being_dropped_from_it() -> None:
    sink = Gated()
    async with Monitor(sink, queue_size=64, max_batch=16, batch_wait=0) as monitor:
        monitor.log("learner", {"loss": 0.5}, step=0)
        await wait_until(lambda: sink.writing)  # a write in flight: the sink's queue takes 64 more at most
        for step in range(1, 500):
            monitor.log("learner", {"loss": 0.5}, step=step)
        await wait_until(lambda: monitor.stats()["sink/gated/queued"] == 64)  # full: the rest wait among the pushes
        sink.gate.set()
        await monitor.flush()
        stats = monitor.stats()
    assert stats["sink/gated/dropped"] == 0 and stats["log_dropped"] == 0
    assert [r.step for r in sink.records] == list(range(500))
