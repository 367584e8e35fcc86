"""ConsoleSink: line mode, the live table (a real 80x24 rich console, wider ones, a real pty) and tqdm."""

from __future__ import annotations

import asyncio
import io
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator

import pytest
from rich.console import Console

from monitor_async import AlertEvent, Monitor, Record, SinkClosedError
from monitor_async._cli.demo import DemoSystem
from monitor_async._core.names import DEFAULT_RATE_NAMES, RATE, split_rates
from monitor_async.backends import ConsoleSink, MemorySink
from monitor_async.backends._console import line
from monitor_async.backends._table import WatchTable, eng
from tests.support.targets import Counter

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def body(out: str) -> list[list[str]]:
    """Each line without its leading HH:MM:SS clock, split on spaces."""
    return [line.split()[1:] for line in out.splitlines()]


async def test_line_mode_prints_one_compact_line_per_record() -> None:
    out = io.StringIO()
    monitor = Monitor(ConsoleSink(out, min_interval=0), close_sinks=True)
    monitor.watch(Counter(step=100, size=7.25, dropped=3), name="collector", step="frames", rate_keys=[])
    monitor.watch(Counter(step=100, size=7.25, dropped=3), name="rb", rate_keys=[])
    await monitor.step()
    await monitor.step()
    await monitor.stop(log_final=False)
    assert body(out.getvalue()) == [
        ["collector", "step=100", "frames=100", "size=7.25", "dropped=3"],
        ["rb", "frames=100", "size=7.25", "dropped=3"],
        ["collector", "step=200", "frames=200", "size=7.25", "dropped=3"],
        ["rb", "frames=200", "size=7.25", "dropped=3"],
    ]
    big = Record(name="c", step=None, time=0.0, metrics={"c/frames": 1_234_567.0, "c/frames_per_second": 88_612.5})
    assert line(big).split()[1:] == ["c", "frames=1.23M", "frames/s=88.6k"], "engineering notation, no 8.862e+04"
    own = {"polls": 309.0, "records": 222.0, "values_dropped": 62.0, "watches": 5.0, "polls_failed": 0.0,
           "sink/csv/written": 215.0, "sink/csv/dropped": 0.0, "sink/csv/errors": 0.0}
    monitor = Record(name="monitor", step=None, time=0.0, metrics={f"monitor/{k}": v for k, v in own.items()})
    assert line(monitor).split(" ", 1)[1] == "monitor: polls 309 · records 222 · dropped 0 · errors 0 · 62 values left out"
    assert "\x1b[" not in out.getvalue(), "no terminal codes on a non-terminal stream"


async def test_line_mode_is_throttled_per_watch_and_flush_shows_the_latest() -> None:
    out = io.StringIO()
    sink = ConsoleSink(out, min_interval=3600)
    monitor = Monitor(sink)
    monitor.watch(Counter(step=100, size=7.25, dropped=3), name="a")
    monitor.watch(Counter(step=100, size=7.25, dropped=3), name="b", rate_keys=[])
    for _ in range(5):
        await monitor.step()
    lines = body(out.getvalue())
    assert [line[0] for line in lines] == ["a", "b"], "one line per watch per min_interval"
    await monitor.flush()
    lines = body(out.getvalue())
    assert [line[:2] for line in lines[2:]] == [["a", "frames=500"], ["b", "frames=500"]]
    assert any(part.startswith("frames/s=") for part in lines[2])
    await monitor.flush()
    assert len(body(out.getvalue())) == 4, "nothing new to show"
    await sink.close()


async def test_weird_names_stay_on_one_line() -> None:
    out = io.StringIO()
    async with ConsoleSink(out, min_interval=0) as sink:
        await sink.write([Record(name="w", step=None, time=0.0, metrics={"w/two\nlines": 1.0, "w/x": 0.5})])
    assert out.getvalue().count("\n") == 1
    assert "two\\nlines=1" in out.getvalue()


async def test_live_mode_draws_a_table_row_per_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # what rich sizes a console by when it is not a terminal
    monkeypatch.setenv("LINES", "24")
    out = io.StringIO()
    monitor = Monitor(ConsoleSink(out, live=True, refresh=0.05), close_sinks=True)
    monitor.watch(Counter(step=100, size=7.25, dropped=3), name="collector", step="frames")
    monitor.watch(Counter(step=100, size=7.25, dropped=3), name="rb")
    monitor.watch(monitor, name="monitor")
    for _ in range(3):
        await monitor.step()
    await monitor.stop(log_final=False)
    text = ANSI.sub("", out.getvalue())
    last = text[text.rindex("monitor-async · "):].splitlines()
    assert all(len(row) <= 80 for row in last) and len(last) <= 24
    header = next(row for row in last if "│ watch" in row)
    assert [c.strip() for c in header.split("│")[1:-1]] == ["watch", "step", "age", "values"]
    rows = {row.split("│")[1].strip(): row for row in last if row.startswith("│ ") and "│" in row[1:]}
    assert "frames 300" in rows["collector"] and "size 7.25" in rows["collector"]
    assert " 300 │" in rows["collector"], "the step column"
    assert "frames 300 (" in rows["rb"] and "/s)" in rows["rb"], "a counter beside its rate"
    assert "monitor" not in rows, "the monitor is a summary line, not a row"
    (summary,) = [row for row in last if row.startswith("monitor:")]
    assert re.fullmatch(r"monitor: polls \d+ · records \d+ · dropped 0 · errors 0\s*", summary)


# ------------------------------------------------------------ the demo's table on a real rich console


@pytest.fixture(scope="module")
def demo_records() -> list[Record]:
    """What the demo's five watches log over 2 s of background polling (before stop's final snapshots)."""

    async def run() -> list[Record]:
        system, memory = DemoSystem(), MemorySink()
        monitor = Monitor(memory, poll_interval=0.1)
        system.watch(monitor)
        async with system.running(), monitor:
            await asyncio.sleep(2.0)
            await monitor.flush()
            return list(memory.records)

    return asyncio.run(run())


def draw(records: list[Record], width: int, height: int) -> list[str]:
    """``records`` in a WatchTable printed on a real rich console of ``width`` x ``height``."""
    table = WatchTable()
    table.update(records)
    console = Console(width=width, height=height, file=io.StringIO(), record=True, color_system=None)
    console.print(table)
    return console.export_text().rstrip("\n").splitlines()


def test_the_demo_table_fits_80x24(demo_records: list[Record]) -> None:
    lines = draw(demo_records, 80, 24)
    text = "\n".join(lines)
    assert len(lines) <= 24 and max(map(len, lines)) <= 80
    rows = [line.split("│") for line in lines if line.startswith("│ ")]
    names = {cells[1].strip() for cells in rows} - {"watch", ""}
    assert names == {"collector", "replay_buffer", "inference", "learner"}, "every watch shows"
    assert "more" not in text and "…" not in text, "nothing is cut at 80x24"
    assert re.search(r"frames \d+(\.\d+)?[kM] \(\d+(\.\d+)?k/s\)", text), "engineering notation: frames 1.2M (88.6k/s)"
    assert not re.search(r"\d\.\d{4,}|e[+-]\d\d", text), "no long decimals, no 8.862e+04"
    (summary,) = [line for line in lines if line.startswith("monitor:")]  # one line
    assert re.fullmatch(r"monitor: polls \S+ · records \S+ · dropped 0 · errors 0 · \S+ values left out\s*", summary)
    assert "sink" not in text, "per-sink detail only when something is wrong"


def test_wider_terminals_show_more_columns(demo_records: list[Record]) -> None:
    def header(width: int) -> list[str]:
        row = next(line for line in draw(demo_records, width, 40) if "│ watch" in line)
        return [cell.strip() for cell in row.split("│")[1:-1]]

    assert header(80) == ["watch", "step", "age", "values"]
    assert header(120) == ["watch", "step", "age", "values", "rates"]
    assert header(160) == ["watch", "step", "age", "time", "records", "values", "rates"]
    for width in (80, 120, 160):
        assert max(map(len, draw(demo_records, width, 40))) <= width


def test_rows_give_way_to_the_height_and_left_out_watches_are_named() -> None:
    many = [Record(f"w{i}", i, 0.0, {f"w{i}/{k}": float(j) for j, k in enumerate("abcdefghijkl")}) for i in range(30)]
    many.append(Record("monitor", None, 0.0, {"monitor/polls": 9.0, "monitor/records": 9.0,
                                              "monitor/values_dropped": 0.0, "monitor/watches": 31.0}))
    lines = draw(many, 80, 24)
    assert len(lines) <= 24 and max(map(len, lines)) <= 80
    assert any(line.startswith("monitor: polls 9") for line in lines), "the monitor's line stays"
    (note,) = [line for line in lines if line.startswith("+")]
    shown = [line.split("│")[1].strip() for line in lines if re.match(r"│ w\d", line)]
    assert note.startswith(f"+{30 - len(shown)} more watches: w{len(shown)}, ")
    assert all(line.rstrip(" │").endswith("more") for line in lines if re.match(r"│ w\d", line)), "one line each"


def test_the_monitor_line_names_a_sink_only_when_it_fails() -> None:
    metrics = {"polls": 10.0, "records": 8.0, "values_dropped": 62.0, "watches": 3.0, "polls_failed": 1.0,
               "sink/csv/dropped": 0.0, "sink/csv/errors": 0.0, "sink/tb/dropped": 5.0, "sink/tb/errors": 2.0}
    lines = draw([Record("monitor", None, 0.0, {f"monitor/{k}": v for k, v in metrics.items()})], 80, 24)
    summary = " ".join(line.strip() for line in lines[lines.index(next(x for x in lines if x.startswith("monitor:"))):])
    assert "dropped 5 · errors 3 · 62 values left out" in summary and "tb: 5 dropped, 2 errors" in summary
    assert "csv" not in summary


def test_engineering_notation() -> None:
    assert [eng(v) for v in (0, 300, -42, 7.25, 0.5, 1234, 88_612.5, 999_999, 1.5e9, 2e-5, float("nan"))] == [
        "0", "300", "-42", "7.25", "0.5", "1.23k", "88.6k", "1M", "1.5G", "2.00e-05", "nan"]
    assert max(len(eng(v * s)) for v in (1.0, 9.99, 123.456, 999.5) for s in (1, -1, 1e3, 1e6, 1e-2)) <= 8


def test_rates_pair_with_the_counters_the_monitor_names_them_after() -> None:
    for counter, rate in DEFAULT_RATE_NAMES.items():
        assert rate.endswith(RATE)
        assert split_rates({counter: 1.0, rate: 2.0}) == ([(counter, 1.0, 2.0)], [])


@pytest.fixture
def pty_stream() -> Iterator[tuple[io.TextIOWrapper, Callable[[], str]]]:
    """A real pseudo-terminal: the sink writes to its slave end, a thread drains the master end.

    Yields the stream and ``captured()``, which closes the stream and returns all that was written.
    """
    master, slave = os.openpty()
    stream = open(slave, "w", encoding="utf-8", closefd=True)  # noqa: SIM115 - closed below
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    def captured() -> str:
        stream.close()
        reader.join(timeout=10)
        return b"".join(chunks).decode("utf-8", "replace")

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    yield stream, captured
    stream.close()
    reader.join(timeout=10)
    os.close(master)


async def test_a_terminal_gets_the_live_table(pty_stream: tuple[io.TextIOWrapper, Callable[[], str]]) -> None:
    stream, captured = pty_stream
    assert stream.isatty()
    monitor = Monitor(ConsoleSink(stream, refresh=0.05), close_sinks=True)
    monitor.watch(Counter(step=100, size=7.25, dropped=3), name="collector")
    await monitor.step()
    await monitor.stop(log_final=False)
    text = captured()
    assert "╭" in text and "collector" in text and "frames 100" in text


async def test_without_rich_a_terminal_gets_plain_lines(
    pty_stream: tuple[io.TextIOWrapper, Callable[[], str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)  # import rich -> ImportError, find_spec -> None
    with pytest.raises(ImportError, match=r"monitor-async\[console\]"):
        ConsoleSink(live=True)
    stream, captured = pty_stream
    async with ConsoleSink(stream, min_interval=0) as sink:
        await sink.write([Record(name="rb", step=None, time=0.0, metrics={"rb/size": 3.0})])
    text = captured()
    assert "╭" not in text and "rb size=3" in text


async def test_lines_go_through_tqdm_write_while_a_bar_is_open() -> None:
    tqdm = pytest.importorskip("tqdm")
    out = io.StringIO()
    with tqdm.tqdm(total=10, desc="training", file=out, mininterval=0) as bar:
        bar.update(3)
        async with ConsoleSink(out, min_interval=0) as sink:
            await sink.write([Record(name="rb", step=None, time=0.0, metrics={"rb/size": 3.0})])
        text = out.getvalue()
        after = text[text.index("rb size=3"):]
        assert "training:  30%" in after, "tqdm.write redraws the bar below the line"
        assert text.index("rb size=3") > text.index("training:  30%")


async def test_writing_after_close_raises() -> None:
    sink = ConsoleSink(io.StringIO())
    await sink.close()
    with pytest.raises(RuntimeError, match="'console' is closed"):
        await sink.write([Record(name="rb", step=None, time=0.0, metrics={"rb/size": 3.0})])


def test_bad_intervals_are_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match="min_interval"):
        ConsoleSink(min_interval=-1)
    with pytest.raises(ValueError, match="ConsoleSink: refresh must be"):
        ConsoleSink(refresh=0)


# ------------------------------------------------------------------------------------------ alerts


def stalled(state: str = "firing", severity: str = "warning", watch: str = "collector", **source: int) -> AlertEvent:
    return AlertEvent(f"stalled {watch}/frames", state, severity, watch, f"{watch}/frames", 120_000.0,  # type: ignore[arg-type]
                      1_000.0, 1_062.0, source, f"{watch}/frames has not increased for 62 s (last value 120000)")


async def test_line_mode_prints_each_alert_at_once_whatever_the_throttle() -> None:
    out = io.StringIO()
    sink = ConsoleSink(out, min_interval=3600)
    monitor = Monitor(sink)
    monitor.watch(Counter(step=100, size=7.25, dropped=3), name="collector")
    await monitor.step()
    await sink.alert(stalled())
    await sink.alert(stalled(severity="critical", watch="rb", rank=1))
    await sink.alert(stalled("resolved"))
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()[1:]]
    assert lines == [
        "ALERT warning: collector/frames has not increased for 62 s (last value 120000)",
        "ALERT critical: rb/frames has not increased for 62 s (last value 120000) [rank=1]",
        "resolved: collector/frames has not increased for 62 s (last value 120000)",
    ]
    await sink.close()


async def test_an_alert_before_any_record_opens_the_sink() -> None:
    out = io.StringIO()
    async with ConsoleSink(out) as sink:
        pass
    fresh = ConsoleSink(out)
    await fresh.alert(stalled())
    assert "ALERT warning: collector/frames" in out.getvalue()
    await fresh.close()
    with pytest.raises(SinkClosedError):
        await sink.alert(stalled())


async def test_live_mode_shows_firing_alerts_above_the_table_until_they_resolve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "24")
    out = io.StringIO()
    sink = ConsoleSink(out, live=True, refresh=0.05)
    monitor = Monitor(sink)
    monitor.watch(Counter(step=100, size=7.25, dropped=3), name="collector", step="frames")
    monitor.watch(monitor, name="monitor")
    await monitor.step()
    await sink.alert(stalled(severity="critical"))
    await sink.alert(stalled(watch="rb"))
    await monitor.flush()

    def frame() -> list[str]:
        text = ANSI.sub("", out.getvalue())
        start = text.rfind("\n", 0, text.rfind("monitor-async · ")) + 1
        lines = text[:start].rstrip("\n").splitlines()
        above = [line for line in reversed(lines) if line.startswith("ALERT")]
        return [*reversed(above[:2]), *text[start:].splitlines()]

    shown = frame()
    assert shown[0].startswith("ALERT critical: collector/frames has not increased for 62 s")
    assert shown[1].startswith("ALERT warning: rb/frames has not increased")
    assert shown[2].startswith("monitor-async · 2 watches · ")
    assert len(sink.table.firing()) == 2

    await sink.alert(stalled("resolved", severity="critical"))
    await monitor.flush()
    assert [e.watch for e in sink.table.firing()] == ["rb"], "the resolved one leaves"
    await sink.alert(stalled("resolved", watch="rb"))
    await monitor.stop(log_final=False)
    await sink.close()
    text = ANSI.sub("", out.getvalue())
    assert "ALERT" not in text[text.rindex("monitor-async · ") - 200:], "no alert above the last table"


def test_alerts_take_at_most_a_third_of_the_height(demo_records: list[Record]) -> None:
    table = WatchTable()
    table.update(demo_records)
    for i in range(20):
        table.alert(stalled(watch=f"w{i}"))
    console = Console(width=80, height=24, file=io.StringIO(), record=True, color_system=None)
    console.print(table)
    lines = console.export_text().rstrip("\n").splitlines()
    assert len(lines) <= 24 and max(map(len, lines)) <= 80
    assert [line for line in lines if line.startswith(("ALERT", "+"))][-1] == "+13 more alerts"
    assert sum(line.startswith("ALERT") for line in lines) == 7


def test_the_title_counts_the_watches_the_demo_summary_counts(demo_records: list[Record]) -> None:
    (title,) = [line for line in draw(demo_records, 80, 24) if line.startswith("monitor-async · ")]
    watches = max(r.metrics["monitor/watches"] for r in demo_records if r.name == "monitor")
    assert watches == 5 and title.startswith("monitor-async · 5 watches · "), title


def test_one_value_left_out_is_singular() -> None:
    own = {"polls": 3.0, "records": 3.0, "values_dropped": 1.0, "watches": 1.0}
    record = Record(name="monitor", step=None, time=0.0, metrics={f"monitor/{k}": v for k, v in own.items()})
    assert line(record).endswith("errors 0 · 1 value left out")
    assert "1 value left out" in "\n".join(draw([record], 80, 24))
