"""CSVSink: long-format rows read back with the csv module."""

from __future__ import annotations

import asyncio
import csv
import logging
import os
import time
from pathlib import Path

import pytest

from monitor_async import Monitor, Record
from monitor_async.backends import CSVSink
from tests.support.targets import Collector

HEADER = ["time", "name", "step", "metric", "value"]



def read(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


async def test_monitor_steps_read_back_with_csv_reader(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "a" / "metrics.csv"
    sink = CSVSink(path)
    assert not (tmp_path / "runs").exists(), "constructing the sink must not touch the disk"
    monitor = Monitor(sink, close_sinks=True)
    monitor.watch(Collector(), name="collector", step="frames")
    monitor.watch(Collector(), name="rb", rate_keys=[])
    start = time.time()
    for _ in range(3):
        await monitor.step()
    await monitor.stop(log_final=False)
    end = time.time()
    rows = read(path)
    assert rows[0] == HEADER
    body = rows[1:]
    assert all(len(row) == 5 for row in body)
    assert all(start <= float(row[0]) <= end for row in body)
    collector = [(row[2], row[3], float(row[4])) for row in body if row[1] == "collector"]
    assert ("300", "collector/frames", 300.0) in collector
    assert [s for s, m, _ in collector if m == "collector/frames"] == ["100", "200", "300"]
    rb = [(row[2], row[3], float(row[4])) for row in body if row[1] == "rb"]
    assert rb == [("", "rb/frames", f) if i % 2 == 0 else ("", "rb/size", 7.25)
                  for f in (100.0, 200.0, 300.0) for i in range(2)]


@pytest.mark.parametrize("fsync", [False, True])
async def test_values_round_trip_exactly(tmp_path: Path, fsync: bool) -> None:
    values = {"t/tiny": 1e-300, "t/third": 1 / 3, "t/big": 12345678901234.5, "t/neg": -0.0}
    async with CSVSink(tmp_path / "m.csv", fsync=fsync) as sink:
        await sink.write([Record(name="t", step=5, time=1700000000.123456, metrics=values)])
    rows = read(tmp_path / "m.csv")[1:]
    assert {row[3]: float(row[4]) for row in rows} == values
    assert {float(row[0]) for row in rows} == {1700000000.123456}
    assert {row[2] for row in rows} == {"5"}


async def test_weird_metric_and_watch_names_read_back(tmp_path: Path) -> None:
    weird = ['a,b', 'say "hi"', "two\nlines", "carriage\rreturn", " padded ", "ünï/cödé", ""]

    class Weird:
        def stats(self) -> dict[str, float]:
            return {name: float(i) for i, name in enumerate(weird)}

    path = tmp_path / "weird.csv"
    async with CSVSink(path) as sink:
        monitor = Monitor(sink)
        monitor.watch(Weird(), name='odd, "watch"')
        await monitor.step()
        await monitor.step()
    rows = read(path)[1:]
    assert len(rows) == 2 * len(weird)
    assert {row[1] for row in rows} == {'odd, "watch"'}
    got = {row[3]: float(row[4]) for row in rows}
    assert got == {f'odd, "watch"/{name}': float(i) for i, name in enumerate(weird)}


async def test_appending_to_an_existing_file_writes_no_second_header(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    for run in range(3):
        async with CSVSink(path) as sink:
            monitor = Monitor(sink)
            monitor.watch(Collector(), name=f"run{run}", rate_keys=[])
            await monitor.step()
    rows = read(path)
    assert rows.count(HEADER) == 1 and rows[0] == HEADER
    names = [row[1] for row in rows[1:]]
    assert names == ["run0", "run0", "__launch__", "run1", "run1", "__launch__", "run2", "run2"], "launches marked"
    launch = rows[3]
    assert launch[2:4] == ["", "__launch__/pid"] and float(launch[4]) == os.getpid() and len(launch) == 5


async def test_a_torn_last_row_is_cut_away_when_the_file_is_opened_again(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text("time,name,step,metric,value\n1.0,old,,old/x,1.0\n2.0,old,,old/x")  # crashed mid-row
    async with CSVSink(path) as sink:
        await sink.write([Record(name="new", step=None, time=3.0, metrics={"new/x": 3.0})])
    rows = read(path)
    assert [r for r in rows if r[1] != "__launch__"] == [
        HEADER, ["1.0", "old", "", "old/x", "1.0"], ["3.0", "new", "", "new/x", "3.0"]]
    assert [r[1] for r in rows].index("__launch__") == 2, "the new launch is marked before its rows"


async def test_a_file_with_another_header_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("epoch,loss\n1,0.5\n")
    sink = CSVSink(path)
    with pytest.raises(ValueError, match=r"other\.csv.*header"):
        await sink.write([Record(name="t", step=None, time=1.0, metrics={"t/x": 1.0})])
    assert path.read_text() == "epoch,loss\n1,0.5\n"
    await sink.close()


async def test_a_directory_path_fails_clearly_and_recovers_once_fixed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "metrics.csv"
    path.mkdir()
    monitor = Monitor(CSVSink(path, name="csv"), on_error="warn")
    monitor.watch(Collector(), name="collector", rate_keys=[])
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.step()
        await monitor.step()
    assert monitor.stats()["sink/csv/errors"] == 2.0
    warnings = [r.getMessage() for r in caplog.records if r.name == "monitor_async"]
    assert len(warnings) == 1, "one warning per failure streak"
    assert "'csv'" in warnings[0] and "CSVSink cannot append to" in warnings[0] and "metrics.csv" in warnings[0]
    path.rmdir()
    await monitor.step()
    assert monitor.stats()["sink/csv/written"] == 1.0
    assert [row[4] for row in read(path)[1:]] == ["300.0", "7.25"]


async def test_a_full_disk_fails_with_a_clear_error() -> None:
    sink = CSVSink("/dev/full")
    with pytest.raises(OSError, match=r"CSVSink cannot append to '/dev/full'"):
        await sink.write([Record(name="t", step=None, time=1.0, metrics={"t/x": 1.0})])
    await sink.close()


async def test_writing_after_close_raises(tmp_path: Path) -> None:
    sink = CSVSink(tmp_path / "m.csv", name="metrics")
    await sink.write([Record(name="t", step=None, time=1.0, metrics={"t/x": 1.0})])
    await sink.close()
    await sink.close()  # idempotent
    with pytest.raises(RuntimeError, match="'metrics' is closed"):
        await sink.write([Record(name="t", step=None, time=2.0, metrics={"t/x": 2.0})])
    assert len(read(tmp_path / "m.csv")) == 2


def test_built_in_sync_code_then_used_on_a_loop(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "m.csv"
    sink = CSVSink(path)
    assert not path.parent.exists()

    async def main() -> None:
        monitor = Monitor(sink, close_sinks=True)
        monitor.watch(Collector(), name="c", rate_keys=[])
        await monitor.step()
        await monitor.stop(log_final=False)

    asyncio.run(main())
    assert len(read(path)) == 3


def test_bad_path_type_is_rejected_at_construction() -> None:
    with pytest.raises(TypeError, match=r"CSVSink: path must be a str or os\.PathLike"):
        CSVSink(3)  # type: ignore[arg-type]


async def test_rows_can_go_to_a_pipe(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    try:
        async with CSVSink(f"/proc/self/fd/{write_end}") as sink:  # what CSVSink("/dev/stdout") opens
            await sink.write([Record(name="p", step=1, time=2.0, metrics={"p/x": 3.0})])
        assert os.read(read_end, 4096) == b"time,name,step,metric,value\n2.0,p,1,p/x,3.0\n"
    finally:
        os.close(read_end)
        os.close(write_end)
