"""A burst the monitor makes itself is never lost by a sink that keeps up.

Holds "Bursts are not drops": docs/guarantees.md#bursts-are-not-drops-test_burstspy

Polling many watches in one pass of the loop (the first polls after
``start()``, a ``step()``, the final snapshots at ``stop()``) can queue more
records than ``queue_size`` before the sink's writer has had a turn. Such a
queue goes to the writer whole at its next turn: records are dropped only
while the sink is still busy with a write when its queue fills (a sink that
is behind), as ``tests/reliability/test_bounded_memory.py`` checks.
"""

from __future__ import annotations

from collections import Counter

from monitor_async import Monitor, SyncMonitor
from monitor_async.backends import MemorySink
from tests.support.checks import wait_until, wait_until_sync
from tests.support.targets import Counter as Target


def _every_record_arrived(monitor: Monitor | SyncMonitor, sink: MemorySink) -> None:
    stats = monitor.stats()
    assert stats["sink/memory/dropped"] == 0
    assert stats["sink/memory/written"] == stats["records"] == len(sink.records)


async def test_first_polls_of_more_watches_than_the_queue_holds_are_all_written() -> None:
    # 256 watches start together and are polled in one pass: four times what the queue holds
    sink = MemorySink()
    targets = [Target(depth=3) for _ in range(600)]
    monitor = Monitor(sink, poll_interval=30.0, queue_size=64)
    for i, target in enumerate(targets):
        monitor.watch(target, name=f"t{i}")
    await monitor.start()
    try:
        await wait_until(lambda: len(sink.records) >= len(targets))
    finally:
        await monitor.stop()
    _every_record_arrived(monitor, sink)
    per_watch = Counter(record.name for record in sink.records)
    assert set(per_watch.values()) == {2}, "each watch: its first poll and its final snapshot"


async def test_final_snapshots_of_thousands_of_watches_fit_the_default_queue() -> None:
    sink = MemorySink()
    monitor = Monitor(sink, poll_interval=30.0)
    targets = [Target(depth=3) for _ in range(3000)]
    for i, target in enumerate(targets):
        monitor.watch(target, name=f"t{i}")
    await monitor.start()
    await wait_until(lambda: all(t.calls for t in targets))
    await monitor.stop()
    _every_record_arrived(monitor, sink)
    assert len(sink.records) == 2 * len(targets)


async def test_a_step_of_thousands_of_watches_is_written_whole() -> None:
    sink = MemorySink()
    monitor = Monitor(sink)
    for i in range(3000):
        monitor.watch(Target(depth=3), name=f"t{i}")
    logged = await monitor.step()
    assert len(logged) == 3000
    _every_record_arrived(monitor, sink)
    await monitor.stop(log_final=False)


def test_sync_monitor_start_up_and_stop_of_thousands_of_watches() -> None:
    sink = MemorySink()
    targets = [Target(depth=3) for _ in range(2500)]
    with SyncMonitor(sink, poll_interval=30.0) as monitor:
        for i, target in enumerate(targets):
            monitor.watch(target, name=f"t{i}")
        monitor.start()
        wait_until_sync(lambda: all(t.calls for t in targets))
    _every_record_arrived(monitor, sink)
    assert len(sink.records) == 2 * len(targets)
