"""Background writes gather batches: ``max_batch`` records, or ``batch_wait`` seconds, whichever comes first.

``step()``, ``flush()`` and ``stop()`` never wait for a batch to fill, and
gathering never makes a queue drop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

from monitor_async import Monitor, Record, SyncMonitor
from monitor_async._channel import Channel
from monitor_async._errors import ErrorPolicy
from monitor_async.backends import CSVSink
from tests.helpers import Counter
from tests.reliability.faults import RecordingSink, wait_until


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


async def test_a_record_held_by_a_cancelled_writer_is_counted_as_dropped() -> None:
    sink = RecordingSink("rec")
    channel = Channel(sink, "rec", 16, 8, ErrorPolicy("warn"), batch_wait=3600)
    channel.start()
    channel.put(Record("c", None, time.time(), {"c/x": 1.0}))
    await wait_until(lambda: channel.queue.empty())  # the writer holds it, gathering a batch
    await channel.halt()
    assert channel.dropped == 1 and not sink.records
    await asyncio.wait_for(channel.queue.join(), 5)  # nothing is left unaccounted for


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
