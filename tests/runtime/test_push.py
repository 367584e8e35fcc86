"""``monitor.log()``: values pushed from the user's own loop share the pipeline of polled snapshots."""

from __future__ import annotations

import asyncio
import csv
import json
import logging
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor_async import ConfigError, Monitor, SyncMonitor
from monitor_async.backends import CSVSink, JSONLSink, MemorySink
from tests.support.targets import Collector


async def test_pushed_values_become_records_of_their_name_in_every_sink(tmp_path: Path) -> None:
    memory = MemorySink()
    csv_path, jsonl_path = tmp_path / "m.csv", tmp_path / "m.jsonl"
    monitor = Monitor([memory, CSVSink(csv_path), JSONLSink(jsonl_path)])
    monitor.log("learner", {"loss": 0.5, "lr": 3e-4, "grad": {"norm": 2}}, step=7)
    await monitor.flush()
    assert [(r.name, r.step, r.metrics) for r in memory.records] == [
        ("learner", 7, {"learner/loss": 0.5, "learner/lr": 3e-4, "learner/grad/norm": 2.0})
    ]
    rows = list(csv.DictReader(csv_path.open()))
    assert {(r["name"], r["step"], r["metric"], float(r["value"])) for r in rows} == {
        ("learner", "7", "learner/loss", 0.5),
        ("learner", "7", "learner/lr", 3e-4),
        ("learner", "7", "learner/grad/norm", 2.0),
    }
    line = json.loads(jsonl_path.read_text().splitlines()[0])
    assert line["name"] == "learner" and line["step"] == 7 and line["metrics"]["learner/loss"] == 0.5


async def test_the_caller_may_reuse_its_dict_after_log() -> None:
    sink = MemorySink()
    monitor = Monitor(sink)
    values = {"loss": 1.0}
    monitor.log("learner", values, step=0)
    values["loss"] = 99.0
    await monitor.flush()
    assert sink.records[0].metrics == {"learner/loss": 1.0}


async def test_bad_values_are_left_out_and_counted_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.log("learner", {"loss": float("nan"), "policy": "ppo", "ok": 1})
    monitor.log("learner", [1, 2, 3])  # not a mapping: an error of that push, warned
    monitor.log(42, {"x": 1})  # a name that is not a string
    monitor.log("learner", {"ok": 2}, step="seven")  # a step that is not an int
    monitor.log("learner", {"ok": 3}, step=3)
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.flush()
    assert [r.metrics for r in sink.records] == [{"learner/ok": 1.0}, {"learner/ok": 3.0}]
    stats = monitor.stats()
    assert stats["values_dropped"] == 2
    assert "list" in caplog.text and "learner" in caplog.text


async def test_a_pushed_name_that_is_a_watch_is_rejected_and_the_other_way_round() -> None:
    monitor = Monitor(MemorySink())
    monitor.watch(Collector(), name="collector")
    with pytest.raises(ConfigError, match="collector"):
        monitor.log("collector", {"x": 1})
    monitor.log("learner", {"x": 1})
    with pytest.raises(ConfigError, match="learner"):
        monitor.watch(Collector(), name="learner")


async def test_pushes_while_running_reach_the_sink_without_any_step() -> None:
    sink = MemorySink()
    async with Monitor(sink, batch_wait=0) as monitor:
        monitor.log("learner", {"loss": 1.0}, step=1)
        for _ in range(200):
            if sink.records:
                break
            await asyncio.sleep(0.01)
        assert [r.metrics for r in sink.records] == [{"learner/loss": 1.0}]


def test_sync_monitor_log_from_many_threads_writes_everything_by_close(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    monitor = SyncMonitor(JSONLSink(path), queue_size=100_000)
    monitor.start()

    def push(worker: int) -> None:
        for i in range(500):
            monitor.log(f"worker{worker}", {"i": i}, step=i)

    threads = [threading.Thread(target=push, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monitor.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2000
    for w in range(4):
        steps = [line["step"] for line in lines if line["name"] == f"worker{w}"]
        assert steps == list(range(500)), "each thread's pushes arrive in order"
    assert monitor.stats()["log_dropped"] == 0


def test_manual_sync_monitor_writes_pushes_at_step(tmp_path: Path) -> None:
    sink = MemorySink()
    monitor = SyncMonitor(sink, background=False)
    monitor.log("learner", {"loss": 1.0}, step=0)
    assert sink.records == []
    monitor.step()
    assert [r.name for r in sink.records] == ["learner"]
    monitor.close()


async def test_pushes_beyond_the_bound_drop_the_oldest_and_are_counted() -> None:
    sink = MemorySink()
    monitor = Monitor(sink, queue_size=8)
    for i in range(200):  # 16 x 8 may wait
        monitor.log("learner", {"i": i}, step=i)
    await monitor.flush()
    assert [r.step for r in sink.records] == list(range(72, 200))
    assert monitor.stats()["log_dropped"] == 72


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pushes=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.floats(-1e6, 1e6)), max_size=60),
    batch_wait=st.sampled_from([0.0, 0.01, 0.25]),
    stop_via=st.sampled_from(["stop", "context", "close"]),
)
def test_every_push_before_stop_is_written_once_in_order(
    pushes: list[tuple[str, float]], batch_wait: float, stop_via: str
) -> None:
    sink = MemorySink()
    monitor = SyncMonitor(sink, batch_wait=batch_wait, queue_size=4096)
    if stop_via == "context":
        with monitor:
            for i, (name, value) in enumerate(pushes):
                monitor.log(name, {"v": value}, step=i)
    else:
        monitor.start()
        for i, (name, value) in enumerate(pushes):
            monitor.log(name, {"v": value}, step=i)
        monitor.stop() if stop_via == "stop" else monitor.close()
        monitor.close()
    got = [(r.name, r.step, r.metrics[f"{r.name}/v"]) for r in sink.records]
    assert got == [(name, i, value) for i, (name, value) in enumerate(pushes)]
