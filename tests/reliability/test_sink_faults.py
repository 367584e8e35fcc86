"""Sinks that raise, recover, hang, crawl, or sit on a full disk.

Holds "Sink faults stay local": docs/guarantees.md#sink-faults-stay-local-test_sink_faultspy

Each failure is reported once per streak on the ``monitor_async`` logger,
naming the sink; it is counted in ``monitor.stats()["sink/<label>/errors"]``;
the other sinks and the polling carry on untouched.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from monitor_async import Monitor
from monitor_async.backends import CSVSink, JSONLSink, MemorySink
from tests.support.checks import monitor_warnings, wait_until
from tests.support.sinks import FailingSink, FlakySink, HungAsyncSink, HungThreadSink, RecordingSink
from tests.support.targets import Ticker


async def test_a_sink_raising_on_every_write_is_reported_once_and_the_rest_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad, good = FailingSink(name="bad"), MemorySink()
    target = Ticker()
    monitor = Monitor([bad, good], poll_interval=0.02, batch_wait=0)  # one write per poll
    monitor.watch(target, name="t")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with monitor:
            await wait_until(lambda: bad.attempts >= 10)
    stats = monitor.stats()
    assert stats["sink/bad/errors"] == bad.attempts
    assert stats["sink/bad/written"] == 0
    assert stats["polls_failed"] == 0
    assert [r.metrics["t/n"] for r in good.records] == [float(i) for i in range(1, target.calls + 1)]
    (warning,) = [w for w in monitor_warnings(caplog) if "sink 'bad'" in w]
    assert "failed to write" in warning and "disk on fire" in warning


async def test_a_sink_that_raises_once_then_recovers_starts_a_new_streak_each_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flaky, good = FlakySink("flaky", fail_on={1, 5}), MemorySink()
    monitor = Monitor([flaky, good])
    monitor.watch(Ticker(), name="t")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        for _ in range(6):
            await monitor.step()
    stats = monitor.stats()
    assert stats["sink/flaky/errors"] == 2
    assert stats["sink/flaky/written"] == 4
    # the failed batches are not retried; every other record arrives in order
    assert [r.metrics["t/n"] for r in flaky.records] == [2.0, 3.0, 4.0, 6.0]
    assert len(good.records) == 6
    warnings = [w for w in monitor_warnings(caplog) if "sink 'flaky'" in w]
    assert len(warnings) == 2, "a recovered sink that fails again is reported again"
    assert "backend refused write #1" in warnings[0] and "backend refused write #5" in warnings[1]


@pytest.mark.parametrize("kind", ["async", "thread"])
async def test_a_hung_sink_drops_its_oldest_records_while_polling_and_other_sinks_go_on(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    hung = HungAsyncSink("stuck") if kind == "async" else HungThreadSink("stuck")
    good = MemorySink()
    target = Ticker()
    monitor = Monitor([hung, good], poll_interval=0.01, queue_size=8, stop_timeout=0.5, batch_wait=0)
    monitor.watch(target, name="t")
    try:
        with caplog.at_level(logging.WARNING, logger="monitor_async"):
            await monitor.start()
            await wait_until(lambda: target.calls >= 40)
            stats = monitor.stats()
            assert stats["sink/stuck/queued"] == 8
            assert stats["sink/stuck/dropped"] >= target.calls - 8 - 1 - 5
            assert len(good.records) >= target.calls - 1, "the healthy sink keeps up"
            started = time.monotonic()
            await monitor.stop()
        assert time.monotonic() - started < 1.5
    finally:
        if isinstance(hung, HungThreadSink):
            hung.release.set()
    warnings = monitor_warnings(caplog)
    assert sum("sink 'stuck' is falling behind" in w for w in warnings) == 1
    assert any("sink 'stuck' did not drain within stop_timeout=0.5s" in w for w in warnings)
    assert not any("sink 'memory'" in w for w in warnings), "the healthy sink drained: nothing to report"
    assert good.records[-1].metrics["t/n"] == target.calls, "the final snapshot reached the healthy sink"
    assert good.flushes == 1, "the healthy sink is flushed at stop even though another sink hangs"


async def test_a_slow_sink_gets_batches_while_polling_and_a_fast_sink_keep_their_pace() -> None:
    slow, fast = RecordingSink("slow", delay=0.2), RecordingSink("fast")
    targets = [Ticker() for _ in range(10)]
    # batch_wait=0: each sink writes whatever is queued as soon as it can, so only the
    # slow sink's own pace makes its batches grow
    monitor = Monitor([slow, fast], poll_interval=0.02, queue_size=10_000, batch_wait=0)
    for i, target in enumerate(targets):
        monitor.watch(target, name=f"t{i}")
    await monitor.start()
    await wait_until(lambda: len(slow.batches) >= 1)
    await asyncio.sleep(0.8)
    in_flight = len(fast.records) - len(slow.records)
    await monitor.stop()
    assert all(t.calls >= 30 for t in targets), "a slow sink never slows polling down"
    assert in_flight > 50, "the fast sink is not held back by the slow one"
    assert len(slow.batches) <= 8, "200 ms per write: records arrive in a few large batches"
    assert max(slow.batches) > 20
    assert monitor.stats()["sink/slow/dropped"] == 0
    slow_series = {name: [r.metrics[f"{name}/n"] for r in rs] for name, rs in slow.by_name().items()}
    fast_series = {name: [r.metrics[f"{name}/n"] for r in rs] for name, rs in fast.by_name().items()}
    assert slow_series == fast_series, "both sinks hold every record, in poll order per target"
    assert all(s == sorted(s) for s in slow_series.values())


async def test_file_sinks_on_a_full_disk_report_enospc_once_and_the_rest_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    csv_sink, jsonl_sink = CSVSink("/dev/full", name="csv"), JSONLSink("/dev/full", name="jsonl")
    good = MemorySink()
    target = Ticker()
    monitor = Monitor([csv_sink, jsonl_sink, good], poll_interval=0.02)
    monitor.watch(target, name="t")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.start()
        await wait_until(lambda: monitor.stats()["sink/jsonl/errors"] >= 5 and monitor.stats()["sink/csv/errors"] >= 5)
        await monitor.stop()
    stats = monitor.stats()
    assert stats["sink/csv/written"] == stats["sink/jsonl/written"] == 0
    assert stats["polls_failed"] == 0
    assert len(good.records) == target.calls
    warnings = monitor_warnings(caplog)
    for label, owner in (("csv", "CSVSink"), ("jsonl", "JSONLSink")):
        (warning,) = [w for w in warnings if f"sink '{label}'" in w]
        assert f"{owner} cannot append to '/dev/full'" in warning
        assert "No space left on device" in warning
