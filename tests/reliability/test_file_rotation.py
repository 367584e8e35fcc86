"""Files that move.

Holds "Files that move": docs/guarantees.md#files-that-move-test_file_rotationpy

A CSV or JSONL file deleted or renamed while being written (log rotation:
``mv metrics.csv metrics.csv.1``, or ``rm``) is noticed at the next write and
created again at its path, with the header and one warning; nothing written
before is lost (it stays in the moved file) and nothing after goes astray.
A file emptied in place (logrotate's ``copytruncate``) gets its header again.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from pathlib import Path

import pytest

from monitor_async import Monitor
from monitor_async.backends import CSVSink, JSONLSink
from tests.support.checks import monitor_warnings
from tests.support.targets import Ticker

HEADER = ["time", "name", "step", "metric", "value"]


def csv_values(path: Path) -> list[float]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == HEADER, f"{path.name} does not start with the header"
    assert all(row != HEADER for row in rows[1:]), "one header, at the top"
    return [float(row[4]) for row in rows[1:]]


def jsonl_values(path: Path) -> list[float]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["metrics"]["t/n"] for line in f]


def rename(path: Path) -> Path:
    moved = path.with_name(path.name + ".1")
    os.rename(path, moved)
    return moved


def delete(path: Path) -> None:
    os.remove(path)


@pytest.mark.parametrize("how", ["rename", "delete", "rename-and-create"])
@pytest.mark.parametrize("kind", ["csv", "jsonl"])
async def test_a_file_moved_away_while_written_is_created_again_with_its_header(
    tmp_path: Path, kind: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / f"metrics.{kind}"
    sink = CSVSink(path, name="file") if kind == "csv" else JSONLSink(path, name="file")
    values = csv_values if kind == "csv" else jsonl_values
    monitor = Monitor(sink, close_sinks=True)
    monitor.watch(Ticker(), name="t", rate_keys=[])
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.step()
        await monitor.step()
        moved = None if how == "delete" else rename(path)
        if how == "delete":
            delete(path)
        if how == "rename-and-create":
            path.touch()  # logrotate's "create": an empty file at the path
        await monitor.step()
        await monitor.step()
        await monitor.stop(log_final=False)
    assert values(path) == [3.0, 4.0], "the writes after the move go to a new file at the path"
    if moved is not None:
        assert values(moved) == [1.0, 2.0], "the writes before it stay in the moved file"
    stats = monitor.stats()
    assert stats["sink/file/errors"] == 0
    assert stats["sink/file/written"] == 4
    assert stats["sink/file/recreated"] == 1
    warnings = monitor_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0] and "created it again" in warnings[0]


async def test_every_rotation_is_noticed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "metrics.csv"
    monitor = Monitor(CSVSink(path, name="file"), close_sinks=True)
    monitor.watch(Ticker(), name="t", rate_keys=[])
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        for n in range(1, 4):
            await monitor.step()
            os.rename(path, tmp_path / f"metrics.csv.{n}")
        await monitor.step()
        await monitor.stop(log_final=False)
    assert [csv_values(tmp_path / f"metrics.csv.{n}") for n in range(1, 4)] == [[1.0], [2.0], [3.0]]
    assert csv_values(path) == [4.0]
    assert monitor.stats()["sink/file/recreated"] == 3
    assert len(monitor_warnings(caplog)) == 3, "one warning per re-creation"


async def test_a_file_emptied_in_place_gets_its_header_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "metrics.csv"
    monitor = Monitor(CSVSink(path, name="file"), close_sinks=True)
    monitor.watch(Ticker(), name="t", rate_keys=[])
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.step()
        os.truncate(path, 0)  # logrotate's copytruncate, after copying the file away
        await monitor.step()
        await monitor.stop(log_final=False)
    assert csv_values(path) == [2.0]
    (warning,) = monitor_warnings(caplog)
    assert str(path) in warning and "header" in warning


async def test_a_folder_deleted_with_the_file_is_created_again(tmp_path: Path) -> None:
    path = tmp_path / "run" / "metrics.jsonl"
    monitor = Monitor(JSONLSink(path, name="file"), close_sinks=True)
    monitor.watch(Ticker(), name="t", rate_keys=[])
    await monitor.step()
    os.remove(path)
    os.rmdir(path.parent)
    await monitor.step()
    await monitor.stop(log_final=False)
    assert jsonl_values(path) == [2.0]
    assert monitor.stats()["sink/file/errors"] == 0
