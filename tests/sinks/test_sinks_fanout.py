"""One monitor fanned out to every sink at once; a failing sink never stops the others."""

from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing import event_accumulator

from monitor_async import Monitor
from monitor_async.backends import (
    ConsoleSink,
    CSVSink,
    JSONLSink,
    MemorySink,
    TensorBoardSink,
    WandbSink,
)
from tests.support.targets import Collector


def csv_series(path: Path, key: str) -> list[float]:
    with open(path, newline="") as f:
        return [float(row[4]) for row in csv.reader(f) if row[3] == key]


def jsonl_series(path: Path, key: str) -> list[float]:
    with open(path) as f:
        return [m[key] for m in (json.loads(line)["metrics"] for line in f) if key in m]


def tb_series(log_dir: Path, key: str) -> list[float]:
    acc = event_accumulator.EventAccumulator(str(log_dir))
    acc.Reload()
    return [e.value for e in acc.Scalars(key)]


async def test_one_monitor_writes_the_same_values_to_every_sink(tmp_path: Path, wandb_offline: Path) -> None:
    memory, console_out = MemorySink(), io.StringIO()
    wandb_sink = WandbSink(project="fanout", dir=str(tmp_path))
    sinks = [
        CSVSink(tmp_path / "m.csv"),
        JSONLSink(tmp_path / "m.jsonl"),
        TensorBoardSink(tmp_path / "tb"),
        wandb_sink,
        ConsoleSink(console_out, min_interval=0),
        memory,
    ]
    monitor = Monitor(sinks, close_sinks=True)
    monitor.watch(Collector(), name="collector", step="frames")
    monitor.watch(Collector(), name="rb", rate_keys=[])
    for _ in range(4):
        await monitor.step()
    summary = dict(wandb_sink.run.summary)
    await monitor.stop(log_final=False)

    stats = monitor.stats()
    for label in ("csv", "jsonl", "tensorboard", "wandb", "console", "memory"):
        assert stats[f"sink/{label}/written"] == 8.0 and stats[f"sink/{label}/errors"] == 0.0
    for key in ("collector/frames", "rb/size", "collector/frames_per_second"):
        expected = memory.series(key)
        assert len(expected) == (3 if key.endswith("second") else 4)
        assert csv_series(tmp_path / "m.csv", key) == expected
        assert jsonl_series(tmp_path / "m.jsonl", key) == expected
        assert tb_series(tmp_path / "tb", key) == pytest.approx(expected, rel=1e-6)
        assert summary[key] == pytest.approx(expected[-1])
    assert len(console_out.getvalue().splitlines()) == 8


@pytest.mark.parametrize("broken", ["csv", "jsonl", "tensorboard", "full disk"])
async def test_a_failing_sink_is_reported_and_the_others_keep_writing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, broken: str
) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    bad: Any = {
        "csv": CSVSink(tmp_path, name="bad"),
        "jsonl": JSONLSink(tmp_path, name="bad"),
        "tensorboard": TensorBoardSink(a_file, name="bad"),
        "full disk": CSVSink("/dev/full", name="bad"),
    }[broken]
    memory = MemorySink()
    good = [CSVSink(tmp_path / "ok" / "m.csv"), JSONLSink(tmp_path / "ok" / "m.jsonl"), TensorBoardSink(tmp_path / "tb")]
    monitor = Monitor([*good[:1], bad, *good[1:], memory], on_error="warn", close_sinks=True)
    monitor.watch(Collector(), name="collector", rate_keys=[])
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        for _ in range(3):
            await monitor.step()
        await monitor.stop(log_final=False)

    stats = monitor.stats()
    assert stats["sink/bad/errors"] == 3.0 and stats["sink/bad/written"] == 0.0
    warnings = [r.getMessage() for r in caplog.records if r.name == "monitor_async"]
    assert len(warnings) == 1, warnings
    assert "sink 'bad' failed to write" in warnings[0]
    assert {"csv": "Is a directory", "jsonl": "Is a directory", "tensorboard": "event files under",
            "full disk": "No space left on device"}[broken] in warnings[0]
    expected = [100.0, 200.0, 300.0]
    assert memory.series("collector/frames") == expected
    assert csv_series(tmp_path / "ok" / "m.csv", "collector/frames") == expected
    assert jsonl_series(tmp_path / "ok" / "m.jsonl", "collector/frames") == expected
    assert tb_series(tmp_path / "tb", "collector/frames") == expected
