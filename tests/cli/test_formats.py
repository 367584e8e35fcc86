"""The file formats have one definition: what CSVSink and JSONLSink write, with each option, reads back through it.

The header, the launch mark, the ``source`` column and the JSONL keys come from
``monitor_async._core.formats``; the sinks write with them and the run readers
(`monitor-async show`, `export`, `tail`) parse with them. See
[what a run is](../../docs/cli.md#what-a-run-is).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from monitor_async import AlertEvent, Record
from monitor_async._cli.runs import Launch, load_run
from monitor_async._core import formats
from monitor_async.backends import CSVSink, JSONLSink

SURROGATE = b"gpu\xff".decode("utf-8", "surrogateescape")
KEYS = {
    "plain": "w/loss",
    "escaping": 'w/a,b "c"\nd',  # CSV quotes it
    "surrogate": f"w/{SURROGATE}",  # written escaped
    "percent": "w/100%",  # the CSV row template must not read it as a conversion
}


def records(key: str, source: dict[str, object] | None = None) -> list[Record]:
    src = source or {}
    return [
        Record("w", 1, 1700000000.25, {key: 1.5, "w/n": 3.0}, src),
        Record("w", 2, 1700000001.5, {key: -0.0, "w/n": 1e-300}, src),
        Record("v", None, 1700000002.0, {"v/x": 7.0}, src),
    ]


def escaped(key: str) -> str:
    """The key as CSVSink writes it: a lone surrogate escaped (JSON carries it as ``\\udcff``)."""
    return key.encode("utf-8", "backslashreplace").decode()


def read_back(path: Path) -> tuple[list[Record], list[Launch], list[AlertEvent]]:
    items = [item for _, item in load_run(path).entries()]
    return (
        [i for i in items if isinstance(i, Record)],
        [i for i in items if isinstance(i, Launch)],
        [i for i in items if isinstance(i, AlertEvent)],
    )


def same(got: list[Record], sent: list[Record], key: str, source: dict[str, str], *, escape: bool = False) -> None:
    assert [(r.name, r.step, r.time) for r in got] == [(r.name, r.step, r.time) for r in sent]
    assert [dict(r.metrics) for r in got] == [
        {(escaped(k) if escape else k): v for k, v in r.metrics.items()} for r in sent
    ], f"values of {key!r} read back exactly"
    assert [dict(r.source) for r in got] == [source] * len(sent)


@pytest.mark.parametrize("option", ["plain", "escaping", "surrogate", "percent", "source", "fsync"])
async def test_csv_reads_back_through_the_formats(tmp_path: Path, option: str) -> None:
    path = tmp_path / "metrics.csv"
    key = KEYS.get(option, "w/loss")
    source = {"rank": 1, "host": "n1"} if option == "source" else None
    async with CSVSink(path, source=option == "source", fsync=option == "fsync") as sink:
        await sink.write(records(key, source))
    header = formats.CSV_HEADER_SOURCE if option == "source" else formats.CSV_HEADER
    assert path.read_text(encoding="utf-8").startswith(header)
    rows = list(csv.reader(path.open(newline="", encoding="utf-8")))
    assert tuple(rows[0]) == (formats.CSV_SOURCE_COLUMNS if option == "source" else formats.CSV_COLUMNS)
    if option == "source":
        assert {r[-1] for r in rows[1:]} == {formats.source_text(source or {})}
        assert formats.parse_source(rows[1][-1]) == {"rank": "1", "host": "n1"}
    got, launches, _ = read_back(path)
    same(got, records(key, source), key, {"rank": "1", "host": "n1"} if source else {}, escape=True)
    assert launches == []


@pytest.mark.parametrize("option", ["plain", "escaping", "surrogate", "source", "fsync"])
async def test_jsonl_reads_back_through_the_formats(tmp_path: Path, option: str) -> None:
    path = tmp_path / "metrics.jsonl"
    key = KEYS.get(option, "w/loss")
    source = {"rank": 1, "host": "n1"} if option == "source" else None
    async with JSONLSink(path, fsync=option == "fsync") as sink:
        await sink.write(records(key, source))
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    keys = {formats.JSONL_TIME, formats.JSONL_NAME, formats.JSONL_STEP, formats.JSONL_METRICS}
    assert all(set(line) == (keys | {formats.JSONL_SOURCE} if source else keys) for line in lines)
    got, launches, _ = read_back(path)
    same(got, records(key, source), key, {"rank": 1, "host": "n1"} if source else {})
    assert launches == []


@pytest.mark.parametrize("sink_type", [CSVSink, JSONLSink])
@pytest.mark.parametrize("source", [False, True])
async def test_each_launch_is_marked_and_read_as_one(tmp_path: Path, sink_type: type, source: bool) -> None:
    path = tmp_path / ("metrics.csv" if sink_type is CSVSink else "metrics.jsonl")
    options = {"source": source} if sink_type is CSVSink else {}
    for n in range(3):
        async with sink_type(path, **options) as sink:
            await sink.write([Record("w", n, 1700000000.0 + n, {"w/n": float(n)})])
    text = path.read_text(encoding="utf-8")
    if sink_type is CSVSink:
        assert text.count(f",{formats.LAUNCH},,{formats.LAUNCH_PID},") == 2
        row = next(r for r in csv.reader(text.splitlines()) if r[1] == formats.LAUNCH)
        assert len(row) == (6 if source else 5), "the launch row has the file's columns"
        assert formats.csv_launch(row) is not None
        assert formats.csv_launch(row)["pid"] == os.getpid()  # type: ignore[index]
    else:
        marks = [formats.jsonl_launch(json.loads(line)) for line in text.splitlines()]
        assert [m["pid"] for m in marks if m is not None] == [os.getpid()] * 2
    items = list(load_run(path).entries())
    assert [(launch, item.step) for launch, item in items if isinstance(item, Record)] == [(1, 0), (2, 1), (3, 2)]
    launches = [item for _, item in items if isinstance(item, Launch)]
    assert [launch.info["pid"] for launch in launches] == [os.getpid()] * 2
    if sink_type is JSONLSink:
        assert all(set(formats.launch_info()) <= set(launch.info) for launch in launches)


@pytest.mark.parametrize("sink_type", [CSVSink, JSONLSink])
async def test_a_rotated_file_starts_again_with_the_header(tmp_path: Path, sink_type: type) -> None:
    path = tmp_path / ("metrics.csv" if sink_type is CSVSink else "metrics.jsonl")
    async with sink_type(path) as sink:
        await sink.write([Record("w", 1, 1700000000.0, {"w/n": 1.0})])
        old = path.rename(tmp_path / f"old{path.suffix}")
        await sink.write([Record("w", 2, 1700000001.0, {"w/n": 2.0})])
    if sink_type is CSVSink:
        assert path.read_text(encoding="utf-8").startswith(formats.CSV_HEADER)
    for file, step in ((old, 1), (path, 2)):
        got, launches, _ = read_back(file)
        assert [r.step for r in got] == [step] and launches == []


async def test_alert_lines_read_back_through_the_formats(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    event = AlertEvent(
        rule="stalled", state="firing", severity="warning", watch="w", metric="w/n", value=None,
        since=1699999990.0, time=1700000000.0, message="no frames",
    )
    async with JSONLSink(path) as sink:
        await sink.alert(event)
    line = json.loads(path.read_text(encoding="utf-8"))
    assert set(line) == {formats.JSONL_TIME, formats.JSONL_ALERT}
    _, _, alerts = read_back(path)
    assert [(a.rule, a.watch, a.state) for a in alerts] == [("stalled", "w", "firing")]


async def test_the_rank_in_the_path_and_the_source_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    async with CSVSink(tmp_path / "rank{rank}.csv") as sink:  # several processes: the source column by default
        await sink.write([Record("w", 1, 1700000000.0, {"w/n": 1.0}, {"rank": 1})])
    path = tmp_path / "rank1.csv"
    assert path.read_text(encoding="utf-8").startswith(formats.CSV_HEADER_SOURCE)
    got, _, _ = read_back(path)
    assert [dict(r.source) for r in got] == [{"rank": "1"}]
