"""JSONLSink: one JSON object per record, read back with the json module."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from monitor_async import Monitor, Record
from monitor_async._core.formats import parse_distribution
from monitor_async.backends import JSONLSink
from tests.support.distributions import RETURNS, dist_record
from tests.support.targets import Collector


def read(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


async def test_monitor_steps_read_back_with_json(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "metrics.jsonl"
    sink = JSONLSink(path)
    assert not path.parent.exists(), "constructing the sink must not touch the disk"
    monitor = Monitor(sink, close_sinks=True)
    monitor.watch(Collector(), name="collector", step="frames", rate_keys=[])
    monitor.watch(Collector(), name="rb", rate_keys=[])
    start = time.time()
    returned = [await monitor.step() for _ in range(3)]
    await monitor.stop(log_final=False)
    end = time.time()
    lines = read(path)
    assert len(lines) == 6
    assert all(set(line) == {"time", "name", "step", "metrics"} for line in lines)
    assert all(start <= line["time"] <= end for line in lines)
    assert [line["step"] for line in lines if line["name"] == "collector"] == [100, 200, 300]
    assert [line["step"] for line in lines if line["name"] == "rb"] == [None, None, None]
    assert [line["metrics"] for line in lines if line["name"] == "rb"] == [r["rb"] for r in returned]
    assert lines[-1]["metrics"] == {"rb/frames": 300.0, "rb/size": 7.25}


async def test_weird_names_stay_one_record_per_line(tmp_path: Path) -> None:
    weird = ['a,b', 'say "hi"', "two\nlines", "carriage\rreturn", "tab\there", "ünï/cödé", "back\\slash"]

    class Weird:
        def stats(self) -> dict[str, float]:
            return {name: float(i) for i, name in enumerate(weird)}

    path = tmp_path / "weird.jsonl"
    async with JSONLSink(path) as sink:
        monitor = Monitor(sink)
        monitor.watch(Weird(), name="odd\nwatch")
        await monitor.step()
        await monitor.step()
    assert path.read_bytes().count(b"\n") == 2
    lines = read(path)
    assert [line["name"] for line in lines] == ["odd\nwatch", "odd\nwatch"]
    assert lines[1]["metrics"] == {f"odd\nwatch/{name}": float(i) for i, name in enumerate(weird)}


async def test_appends_to_an_existing_file_and_cuts_away_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"time": 1.0, "name": "old", "step": null, "metrics": {}}\n{"time": 2.0, "na')  # crashed
    async with JSONLSink(path) as sink:
        await sink.write([Record(name="new", step=4, time=3.0, metrics={"new/x": 3.0})])
    raw = path.read_text().splitlines()
    assert len(raw) == 3, "the partial line is gone; every line parses"
    assert json.loads(raw[0]) == {"time": 1.0, "name": "old", "step": None, "metrics": {}}
    launch = json.loads(raw[1])["launch"]
    assert launch["pid"] == os.getpid() and launch["time"] > 3.0, "the new launch is marked before its records"
    assert json.loads(raw[2]) == {"time": 3.0, "name": "new", "step": 4, "metrics": {"new/x": 3.0}}


async def test_alert_events_are_strict_json_lines_the_readers_list(tmp_path: Path) -> None:
    from monitor_async import AlertEvent
    from monitor_async._cli.runs import load_run
    from monitor_async._cli.show import Summary

    path = tmp_path / "m.jsonl"
    firing = AlertEvent("nonfinite learner/loss", "firing", "critical", "learner", "learner/loss",
                        float("nan"), 10.0, 10.0, {}, "learner/loss is nan")
    async with JSONLSink(path) as sink:
        await sink.write([Record(name="learner", step=1, time=9.0, metrics={"learner/loss": 1.0})])
        await sink.alert(firing)
    lines = path.read_text().splitlines()
    alert = json.loads(lines[1], parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert alert["time"] == 10.0 and alert["alert"]["value"] == "nan" and alert["alert"]["state"] == "firing"
    run = load_run(path)
    assert len(run.records) == 1, "an alert line is not a record"
    assert [e.rule for e in Summary.of(run).alerts] == ["nonfinite learner/loss"] and run.skipped == 0


async def test_a_directory_path_is_reported_through_on_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monitor = Monitor(JSONLSink(tmp_path), on_error="warn")
    monitor.watch(Collector(), name="collector")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.step()
    assert monitor.stats()["sink/jsonl/errors"] == 1.0
    [warning] = [r.getMessage() for r in caplog.records if r.name == "monitor_async"]
    assert "'jsonl'" in warning and "JSONLSink cannot append to" in warning and str(tmp_path) in warning


async def test_writing_after_close_raises(tmp_path: Path) -> None:
    sink = JSONLSink(tmp_path / "m.jsonl")
    async with sink:
        await sink.write([Record(name="t", step=None, time=1.0, metrics={"t/x": 1.0})])
    with pytest.raises(RuntimeError, match="'jsonl' is closed"):
        await sink.write([Record(name="t", step=None, time=2.0, metrics={"t/x": 2.0})])
    assert len(read(tmp_path / "m.jsonl")) == 1


async def test_a_large_batch_is_written_whole(tmp_path: Path) -> None:
    records = [
        Record(name=f"w{i % 7}", step=i, time=float(i), metrics={f"w{i % 7}/k{j}": i + j / 10 for j in range(12)})
        for i in range(2000)
    ]
    async with JSONLSink(tmp_path / "big.jsonl", fsync=True) as sink:
        await sink.write(records)
    lines = read(tmp_path / "big.jsonl")
    assert [line["step"] for line in lines] == list(range(2000))
    assert lines[1234]["metrics"]["w2/k11"] == 1234 + 1.1


async def test_a_distribution_keeps_its_histogram_in_the_line(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    records = [
        dist_record("learner", {"returns": RETURNS}, step=3),
        dist_record("server", {"latency": [0.1, 0.2, 0.2, 5.0]}, bounds=[0.1, 0.5, 1.0]),
        Record(name="rb", step=None, time=1.0, metrics={"rb/size": 3.0}),
    ]
    async with JSONLSink(path) as sink:
        await sink.write(records)
    returns, latency, plain = read(path)
    assert set(plain) == {"time", "name", "step", "metrics"}
    shape = returns["distributions"]["learner/returns"]
    assert parse_distribution(shape) == records[0].distributions["learner/returns"]
    assert (shape["count"], shape["min"], shape["max"], shape["zero"]) == (10, -12.5, 40.0, 2)
    assert returns["metrics"]["learner/returns/p90"] == records[0].metrics["learner/returns/p90"]
    assert latency["distributions"]["server/latency"]["bounds"] == [0.1, 0.5, 1.0]
    assert latency["distributions"]["server/latency"]["counts"] == [1, 2, 0, 1]
    assert parse_distribution(latency["distributions"]["server/latency"]) == records[1].distributions["server/latency"]
