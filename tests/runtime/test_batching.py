"""Background writes gather batches: ``max_batch`` records, or ``batch_wait`` seconds, whichever comes first.

``step()``, ``flush()`` and ``stop()`` never wait for a batch to fill, and
gathering never makes a queue drop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from monitor_async import Monitor, Record, SyncMonitor
from monitor_async._core.policy import ErrorPolicy
from monitor_async._runtime.channel import Channel
from monitor_async.backends import CSVSink, ThreadedSink
from tests.support.checks import wait_until
from tests.support.sinks import RecordingSink
from tests.support.targets import Counter


async def test_records_gather_to_half_the_queue_then_go_out_max_batch_per_write() -> None:
    sink = RecordingSink("rec")
    target = Counter()
    # half of queue_size=20 gathers, then 10 records go out as writes of 3, 3, 3 and 1
    monitor = Monitor(sink, poll_interval=0.002, queue_size=20, max_batch=3, batch_wait=60)
    monitor.watch(target, name="c")
    async with monitor:
        await wait_until(lambda: len(sink.batches) >= 8)
        assert sink.batches[:8] == [3, 3, 3, 1, 3, 3, 3, 1]
    # stop wrote the rest, in order, without waiting a minute for a batch to fill
    assert [r.metrics["c/frames"] for r in sink.records] == [10.0 * i for i in range(1, target.calls + 1)]
    assert max(sink.batches) == 3


async def test_a_lone_record_is_written_once_batch_wait_has_passed() -> None:
    sink = RecordingSink("rec")
    monitor = Monitor(sink, poll_interval=3600, batch_wait=0.3)
    monitor.watch(Counter(), name="c")
    started = time.monotonic()
    async with monitor:
        await wait_until(lambda: len(sink.records) == 1)
        waited = time.monotonic() - started
        assert not sink.flushes, "written by the writer's timer, not by a flush at stop"
    assert waited >= 0.25, f"the record was written after {waited:.3f}s, before batch_wait"


async def test_batch_wait_zero_writes_each_poll_as_it_comes() -> None:
    sink = RecordingSink("rec")
    target = Counter()
    monitor = Monitor(sink, poll_interval=0.02, batch_wait=0)
    monitor.watch(target, name="c")
    async with monitor:
        await wait_until(lambda: len(sink.records) >= 5)
        assert set(sink.batches) == {1}


async def test_gathering_never_makes_a_small_queue_drop() -> None:
    sink = RecordingSink("rec")
    target = Counter()
    # a batch would be 256 records, the queue holds 4: a write starts once 2 wait
    monitor = Monitor(sink, poll_interval=0.001, queue_size=4, batch_wait=60)
    monitor.watch(target, name="c")
    async with monitor:
        await wait_until(lambda: target.calls >= 200)
        assert monitor.stats()["sink/rec/dropped"] == 0
    assert len(sink.records) == target.calls
    assert monitor.stats()["sink/rec/dropped"] == 0


async def test_step_and_flush_write_at_once_while_a_batch_is_gathering() -> None:
    sink = RecordingSink("rec")
    monitor = Monitor(sink, poll_interval=3600, batch_wait=3600)
    monitor.watch(Counter(), name="c")
    async with monitor:
        await wait_until(lambda: monitor.stats()["polls"] == 1)
        await asyncio.wait_for(monitor.flush(), 5)
        assert len(sink.records) == 1
        await asyncio.wait_for(monitor.step(), 5)
        assert len(sink.records) == 2
        assert sink.flushes == 1


def test_sync_monitor_rows_reach_the_csv_file_within_batch_wait(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    monitor = SyncMonitor(CSVSink(path), poll_interval=3600, batch_wait=0.1, close_sinks=True)
    monitor.watch(Counter(), name="c")
    with monitor:
        deadline = time.monotonic() + 10
        rows: list[str] = []
        while len(rows) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
            rows = path.read_text().splitlines() if path.exists() else []
        assert len(rows) == 2, "the row reached the file while the monitor was running"
        assert rows[1].split(",")[1:4] == ["c", "", "c/frames"]


async def test_a_record_gathered_by_a_cancelled_writer_stays_queued_and_is_written_later() -> None:
    sink = RecordingSink("rec")
    channel = Channel(sink, "rec", 16, 8, ErrorPolicy("warn"), batch_wait=3600)
    channel.start()
    channel.put(Record("c", None, time.time(), {"c/x": 1.0}))
    await asyncio.sleep(0.05)  # the writer gathers a batch around it
    await channel.halt()
    figures: dict[str, float] = {}
    channel.report(figures)
    assert figures["sink/rec/queued"] == 1 and figures["sink/rec/dropped"] == 0 and not sink.records
    assert await channel.settle(5), "nothing is left unaccounted for: the next settle writes it"
    assert len(sink.records) == 1


class TimedSink(RecordingSink):
    """A RecordingSink that notes when each write began and ended (``time.monotonic()``)."""

    def __init__(self, delay: float) -> None:
        super().__init__("timed", delay=delay)
        self.spans: list[tuple[float, float]] = []

    async def _write(self, records: Sequence[Record]) -> None:
        began = time.monotonic()
        await super()._write(records)
        self.spans.append((began, time.monotonic()))


async def test_a_record_that_waited_out_batch_wait_behind_a_slow_write_is_written_next() -> None:
    sink = TimedSink(delay=1.2)
    monitor = Monitor(sink, poll_interval=3600, max_batch=2, batch_wait=1.0)
    for i in range(3):  # polled together at start: a full batch of two, and one left over
        monitor.watch(Counter(), name=f"c{i}", log_on_close=False)
    async with monitor:
        await wait_until(lambda: len(sink.records) == 3)
    assert sink.batches == [2, 1]
    (_, first_end), (second_begin, _) = sink.spans
    # the left-over record was polled over batch_wait ago: no second wait for a batch to fill
    assert second_begin - first_end < 0.5, f"held {second_begin - first_end:.2f}s more"


# ------------------------------------------------- a gathered run in one call: write_batches
class RunSink(RecordingSink):
    """Notes the batch sizes of every ``write_batches`` call; ``fail_first`` makes the first one raise."""

    def __init__(self, fail_first: bool = False) -> None:
        super().__init__("run")
        self.runs: list[list[int]] = []
        self.fail_first = fail_first

    async def _write_batches(self, batches: Sequence[Sequence[Record]]) -> None:
        self.runs.append([len(b) for b in batches])
        if self.fail_first and len(self.runs) == 1:
            raise OSError(28, "No space left on device")
        for records in batches:
            self.records.extend(records)


class PlainSink:
    """A sink with only the protocol's three calls: no write_batches."""

    name = "plain"

    def __init__(self) -> None:
        self.batches: list[int] = []

    async def write(self, records: Sequence[Record]) -> None:
        self.batches.append(len(records))

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        return None


async def test_a_gathered_run_goes_to_write_batches_in_one_call_and_batch_by_batch_elsewhere() -> None:
    run, plain = RunSink(), PlainSink()
    target = Counter()
    monitor = Monitor([run, plain], poll_interval=0.002, queue_size=20, max_batch=3, batch_wait=60)
    monitor.watch(target, name="c")
    async with monitor:
        await wait_until(lambda: len(run.runs) >= 2 and len(plain.batches) >= 8)
        assert run.runs[:2] == [[3, 3, 3, 1], [3, 3, 3, 1]]  # each batch still at most max_batch
        assert plain.batches[:8] == [3, 3, 3, 1, 3, 3, 3, 1]
    assert [r.metrics["c/frames"] for r in run.records] == [10.0 * i for i in range(1, target.calls + 1)]
    assert sum(plain.batches) == target.calls


async def test_a_failed_run_is_counted_and_reported_naming_the_sink_and_its_size(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = RunSink(fail_first=True)
    target = Counter()
    monitor = Monitor(sink, poll_interval=0.002, queue_size=20, max_batch=3, batch_wait=60)
    monitor.watch(target, name="c")
    async with monitor:
        await wait_until(lambda: len(sink.runs) >= 2)
    stats = monitor.stats()
    assert stats["sink/run/errors"] == 1
    assert stats["sink/run/written"] == target.calls - 10 == len(sink.records)
    assert any("sink 'run' failed to write 10 records" in r.getMessage() for r in caplog.records)


def _records(n: int, offset: int = 0) -> list[Record]:
    return [Record(f"w{i % 3}", i, 1.5 + i, {f"w{i % 3}/x": i * 0.1, f"w{i % 3}/y": -float(i)})
            for i in range(offset, offset + n)]


async def test_csv_write_batches_appends_the_rows_of_one_write_per_batch(tmp_path: Path) -> None:
    batches = [_records(3), _records(3, 3), _records(1, 6)]
    async with CSVSink(tmp_path / "one_by_one.csv") as sink:
        for batch in batches:
            await sink.write(batch)
    async with CSVSink(tmp_path / "run.csv") as sink:
        await sink.write_batches(batches)
    run = (tmp_path / "run.csv").read_text()
    assert run == (tmp_path / "one_by_one.csv").read_text()
    assert len(run.splitlines()) == 1 + 7 * 2
    with pytest.raises(RuntimeError, match="closed"):
        await sink.write_batches(batches)


class ThreadNotingSink(ThreadedSink):
    def __init__(self) -> None:
        self.calls: list[tuple[threading.Thread, list[float]]] = []

    def write_blocking(self, records: Sequence[Record]) -> None:
        self.calls.append((threading.current_thread(), [r.time for r in records]))


async def test_a_threaded_sink_writes_a_run_on_its_own_thread_in_order() -> None:
    sink = ThreadNotingSink()
    batches = [_records(2), _records(2, 2)]
    async with sink:
        await sink.write_batches(batches)
    assert [times for _, times in sink.calls] == [[1.5, 2.5], [3.5, 4.5]]
    assert all(thread is not threading.current_thread() for thread, _ in sink.calls)
    assert sink.calls[0][0] is sink.calls[1][0]


async def test_the_writer_sleeps_from_one_write_to_the_next_batch_wait_without_waking_for_the_first_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from monitor_async._runtime.queue import RecordQueue

    idles: list[int] = []  # the writer's waits, each a pass of the loop (beside a busy thread, a GIL hand-off)
    idle = RecordQueue.idle

    async def noted(self: RecordQueue, count: int, *args: float | None) -> None:
        idles.append(count)
        await idle(self, count, *args)

    monkeypatch.setattr(RecordQueue, "idle", noted)
    sink = RecordingSink("rec")
    monitor = Monitor(sink, poll_interval=0.02, batch_wait=0.15)
    monitor.watch(Counter(), name="c")
    async with monitor:
        await wait_until(lambda: len(sink.batches) >= 4)
        batches, waits = len(sink.batches), len(idles)
    assert waits <= batches + 1, (waits, sink.batches)  # one wait a batch, not two
    assert min(sink.batches[:4]) >= 4, sink.batches  # and each batch still gathered for batch_wait
