"""AgileRL's own loggers (CSVLogger, StdOutLogger, TensorboardLogger) as sinks, for a whole run.

AgileRL pins tensordict to a version torchrl 0.14 cannot share, so these tests run in a
virtual environment of their own (.ci/run builds it); elsewhere they are skipped.
"""

from __future__ import annotations

import asyncio
import csv
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agilerl")
from agilerl.logger import CSVLogger, StdOutLogger, TensorboardLogger

from monitor_async import Every, LoggerSink, SyncMonitor
from tests.support.distributions import RETURNS, dist_record
from tests.support.targets import Counter


class Buffer:
    """A replay-buffer-like target: a write counter and a size."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writes = 0

    def stats(self) -> dict[str, Any]:
        with self.lock:
            self.writes += 5
            return {"write_count": self.writes, "size": min(self.writes, 100)}


def run(sinks: list[Any], *, background: bool, iterations: int = 12) -> list[float]:
    """Two watches and log() from the training loop, background or manual; returns the losses pushed."""
    losses = []
    monitor = SyncMonitor(sinks, background=background, poll_interval=0.01)
    interval = Every.seconds(0.05) if background else None
    monitor.watch(Counter(), name="collector", step="frames", schedule=interval)
    monitor.watch(Buffer(), name="replay_buffer", schedule=interval)
    with monitor:
        for i in range(iterations):
            loss = 1.0 / (i + 1)
            losses.append(loss)
            monitor.log("learner", {"loss": loss, "iteration": i})
            if background:
                time.sleep(0.03)
            else:
                monitor.step()
    return losses


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


@pytest.mark.parametrize("background", [False, True], ids=["manual", "background"])
def test_csv_logger_keeps_every_report_of_a_run_with_two_watches_and_log(tmp_path: Path, background: bool) -> None:
    path = tmp_path / "agilerl.csv"
    logger = CSVLogger(path)
    sink = LoggerSink(logger)
    losses = run([sink], background=background)
    logger.close()

    header, rows = read_csv(path)
    # every watch's keys, the rates of its counters and the pushed name are columns from the first row on
    for key in (
        "train/global_step", "collector/frames", "collector/frames_per_second", "collector/step",
        "replay_buffer/write_count", "replay_buffer/writes_per_second", "replay_buffer/size",
        "learner/loss", "learner/iteration",
    ):
        assert key in header
    assert sink.counters() == {"values_left_out": 0.0}
    assert len(rows) >= len(losses)
    # nothing pushed is lost: every loss is in some row
    assert {float(r["learner/iteration"]) for r in rows if r["learner/iteration"] != "nan"} == set(
        map(float, range(len(losses)))
    )
    steps = [float(r["train/global_step"]) for r in rows]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)  # moves forward
    rates = [float(r["collector/frames_per_second"]) for r in rows]
    assert any(rate > 0 for rate in rates)
    assert all(r["collector/frames"] not in ("", "nan") for r in rows)


def test_a_key_that_comes_late_is_warned_once_and_the_csv_keeps_its_rows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "late.csv"
    logger = CSVLogger(path)
    sink = LoggerSink(logger, keys=["eval/score"])
    monitor = SyncMonitor(sink, background=False)
    monitor.watch(Counter(), name="collector")
    with monitor:
        for i in range(6):
            if i >= 3:
                monitor.log("eval", {"score": float(i)})
                monitor.log("late", {"value": float(i)})
            monitor.step()
    logger.close()

    header, rows = read_csv(path)
    assert len(rows) >= 6  # one per step(), and the final snapshot at close
    assert "eval/score" in header  # named ahead: a column even though it came late
    assert [r["eval/score"] for r in rows][:6] == ["nan", "nan", "nan", "3.0", "4.0", "5.0"]
    assert "late/value" not in header
    warnings = [r.getMessage() for r in caplog.records if "late/value" in r.getMessage()]
    assert len(warnings) == 1 and "left out" in warnings[0]
    assert sink.counters()["values_left_out"] == 3.0


def test_stdout_logger_prints_one_table_per_report(capsys: pytest.CaptureFixture[str]) -> None:
    run([LoggerSink(StdOutLogger())], background=False, iterations=4)
    tables = capsys.readouterr().out.replace("\n  ", " ").splitlines()
    assert len(tables) >= 4  # one table per step() (and the final snapshot)
    for table in tables:  # each one holds every watch's and the pushed name's values
        for key in ("learner/loss", "collector/frames_per_second", "replay_buffer/size"):
            assert f" {key} " in table


def test_tensorboard_logger_writes_every_key_on_a_moving_global_step(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TensorboardLogger(log_dir=tmp_path, experiment_name="run")
    losses = run([LoggerSink(logger, grow=True)], background=True)
    logger.close()

    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    events = EventAccumulator(str(folder))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"learner/loss", "collector/frames", "collector/frames_per_second", "replay_buffer/size"} <= tags
    loss_events = events.Scalars("learner/loss")
    steps = [e.step for e in loss_events]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    logged = {round(e.value, 6) for e in loss_events if not math.isnan(e.value)}
    assert {round(x, 6) for x in losses} <= logged


def test_the_agilerl_page_and_every_block_that_needs_agilerl_run_as_written(tmp_path: Path) -> None:
    """The blocks tests/docs/test_docs_examples.py skips where AgileRL is missing run here, in its venv."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "integrations" / "agilerl.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python[^\n]*\n(.*?)^```\s*$", text, re.S | re.M)
    for page in sorted((root / "docs").rglob("*.md")):
        found = re.findall(r"^```python[^\n]*\n(.*?)^```\s*$", page.read_text(encoding="utf-8"), re.S | re.M)
        blocks += [code for code in found if code.startswith("# needs: agilerl") and code not in blocks]
    assert len(blocks) >= 2
    for code in blocks:
        script = tmp_path / "example.py"
        script.write_text(code, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=180,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        assert done.returncode == 0, done.stderr[-3000:]


def test_tensorboard_logger_draws_a_histogram_of_each_distribution(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import HISTOGRAMS, EventAccumulator

    logger = TensorboardLogger(log_dir=tmp_path, experiment_name="run")
    latencies = [0.001 * (i + 1) for i in range(500)]

    async def write() -> None:
        async with LoggerSink(logger, grow=True) as sink:
            await sink.write([dist_record("learner", {"returns": RETURNS}, step=1), dist_record("server", {"latency": latencies})])
            await sink.write([dist_record("learner", {"returns": [5.0, 6.0]}, step=2)])
            await sink.flush()

    asyncio.run(write())
    logger.close()
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    events = EventAccumulator(str(folder), size_guidance={HISTOGRAMS: 0})
    events.Reload()
    assert {"learner/returns", "server/latency"} <= set(events.Tags()["histograms"])
    first, second = (e.histogram_value for e in events.Histograms("learner/returns"))
    assert (first.num, first.min, first.max) == (10, -12.5, 40.0)
    assert (second.num, second.min, second.max) == (2, 5.0, 6.0)
    [latency] = (e.histogram_value for e in events.Histograms("server/latency"))
    assert (latency.num, latency.min, latency.max) == (500, 0.001, 0.5)
    assert latency.sum == pytest.approx(sum(latencies), rel=0.01)  # values placed evenly in their buckets
    assert {"learner/returns/p50", "server/latency/p99"} <= set(events.Tags()["scalars"])
