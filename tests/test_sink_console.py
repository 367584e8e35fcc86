"""ConsoleSink: output captured in line mode, live-table mode (StringIO and a real pty) and under tqdm."""

from __future__ import annotations

import io
import os
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from monitor_async import Monitor, Record
from monitor_async.backends import ConsoleSink


class Collector:
    def __init__(self) -> None:
        self.frames = 0

    def stats(self) -> dict[str, float]:
        self.frames += 100
        return {"frames": self.frames, "size": 7.25, "dropped": 3}


def body(out: str) -> list[list[str]]:
    """Each line without its leading HH:MM:SS clock, split on spaces."""
    return [line.split()[1:] for line in out.splitlines()]


async def test_line_mode_prints_one_compact_line_per_record() -> None:
    out = io.StringIO()
    monitor = Monitor(ConsoleSink(out, min_interval=0), close_sinks=True)
    monitor.watch(Collector(), name="collector", step="frames", rate_keys=[])
    monitor.watch(Collector(), name="rb", rate_keys=[])
    await monitor.step()
    await monitor.step()
    await monitor.stop(log_final=False)
    assert body(out.getvalue()) == [
        ["collector", "step=100", "frames=100", "size=7.25", "dropped=3"],
        ["rb", "frames=100", "size=7.25", "dropped=3"],
        ["collector", "step=200", "frames=200", "size=7.25", "dropped=3"],
        ["rb", "frames=200", "size=7.25", "dropped=3"],
    ]
    assert "\x1b[" not in out.getvalue(), "no terminal codes on a non-terminal stream"


async def test_line_mode_is_throttled_per_watch_and_flush_shows_the_latest() -> None:
    out = io.StringIO()
    sink = ConsoleSink(out, min_interval=3600)
    monitor = Monitor(sink)
    monitor.watch(Collector(), name="a")
    monitor.watch(Collector(), name="b", rate_keys=[])
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


async def test_live_mode_draws_a_table_row_per_watch() -> None:
    out = io.StringIO()
    monitor = Monitor(ConsoleSink(out, live=True, refresh=0.05), close_sinks=True)
    monitor.watch(Collector(), name="collector", step="frames")
    monitor.watch(Collector(), name="rb")
    for _ in range(3):
        await monitor.step()
    await monitor.stop(log_final=False)
    text = out.getvalue()
    assert "\x1b[" in text, "the live table uses terminal codes"
    last = text[text.rindex("monitor-async"):]
    for column in ("watch", "step", "age", "drops", "latest values", "rates"):
        assert column in last
    rows = {line.split("│")[1].strip(): line for line in last.splitlines() if line.startswith("│ ") and "│" in line[1:]}
    assert "frames 300" in rows["collector"] and "size 7.25" in rows["collector"]
    assert " 300 │" in rows["collector"], "the step column"
    assert "│     3 │" in rows["rb"], "the drops column sums the ./dropped counters"
    assert "frames/s" in last


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
    monitor.watch(Collector(), name="collector")
    await monitor.step()
    await monitor.stop(log_final=False)
    text = captured()
    assert "┏" in text and "collector" in text and "frames 100" in text


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
    assert "┏" not in text and "rb size=3" in text


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
    with pytest.raises(RuntimeError, match="'consolesink' is closed"):
        await sink.write([Record(name="rb", step=None, time=0.0, metrics={"rb/size": 3.0})])


def test_bad_intervals_are_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match="min_interval"):
        ConsoleSink(min_interval=-1)
    with pytest.raises(ValueError, match="refresh must be a strictly positive"):
        ConsoleSink(refresh=0)
