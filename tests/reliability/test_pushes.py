"""What ``log()`` is given is written as it was at the call, or counted; ``log()`` never raises.

Holds "Pushes are written as they were, or counted": docs/guarantees.md#pushes-are-written-as-they-were-or-counted-test_pushespy
"""

from __future__ import annotations

import logging
import threading
from collections import UserDict, defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from monitor_async import Monitor, SyncMonitor
from monitor_async.backends import MemorySink, TensorBoardSink


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
