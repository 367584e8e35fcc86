"""Threads and loops are released.

Holds "Threads and loops are released": docs/guarantees.md#threads-and-loops-are-released-test_threads_releasedpy

``SyncMonitor.close()`` joins the monitor's threads (its loop thread, the
worker threads of thread-offloaded targets and of the loggers it wrapped, the
loop's executor threads behind file sinks): none lingers for an idle
timeout. Sixty monitors built and closed in a loop leave at most a handful
of threads. ``Monitor.stop()`` lets its idle worker threads end at once.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from monitor_async import Monitor, SyncMonitor
from monitor_async._core.threads import WorkerPool, join_all
from monitor_async.backends import CSVSink
from tests.support.checks import wait_until, wait_until_sync
from tests.support.sinks import RecordingLogger
from tests.support.targets import Ticker

MONITORS = 60
HANDFUL = 5


def names(threads: list[threading.Thread]) -> list[str]:
    return sorted(t.name for t in threads)


def new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.is_alive()]


def build(tmp_path: Path, i: int, background: bool) -> tuple[SyncMonitor, RecordingLogger]:
    logger = RecordingLogger()  # a sync logger: wrapped in a LoggerSink with a worker thread
    monitor = SyncMonitor(
        [CSVSink(tmp_path / f"m{i}.csv"), logger], background=background, poll_interval=0.01, stop_timeout=2
    )
    monitor.watch(Ticker(), name="t", offload="thread")
    return monitor, logger


@pytest.mark.parametrize("background", [True, False])
def test_close_joins_the_monitors_threads(tmp_path: Path, background: bool) -> None:
    before = set(threading.enumerate())
    monitor, logger = build(tmp_path, 0, background)
    if background:
        monitor.start()
        wait_until_sync(lambda: len(logger.calls) >= 2)
    else:
        monitor.step()
        monitor.step()
    assert new_threads(before), "the monitor did start threads"
    monitor.close()
    left = new_threads(before)
    assert not left, f"close() left threads behind: {names(left)}"


def test_sixty_monitors_built_and_closed_leave_a_handful_of_threads(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    for i in range(MONITORS):
        monitor, logger = build(tmp_path, i, background=True)
        monitor.start()
        wait_until_sync(lambda logger=logger: len(logger.calls) >= 1)
        monitor.close()
    left = new_threads(before)
    assert len(left) <= HANDFUL, f"{len(left)} threads left: {names(left)}"
    rows = (tmp_path / f"m{MONITORS - 1}.csv").read_text().splitlines()
    assert len(rows) >= 3, "each monitor wrote its file"


async def test_stop_lets_the_idle_worker_threads_end_at_once() -> None:
    before = set(threading.enumerate())
    logger = RecordingLogger()
    monitor = Monitor(logger, poll_interval=0.01)
    monitor.watch(Ticker(), name="t", offload="thread")
    async with monitor:
        await wait_until(lambda: len(logger.calls) >= 2)
        assert new_threads(before)
    # well under the 10 s that an idle worker used to linger
    await wait_until(lambda: not new_threads(before), timeout=2)


async def test_stop_ends_the_publishing_thread_of_a_reduction_at_once() -> None:
    """A rank that publishes its snapshots to the job's store keeps no idle publishing thread after ``stop()``."""
    dist = pytest.importorskip("torch.distributed")
    from datetime import timedelta

    from monitor_async.backends import MemorySink
    from monitor_async.distributed import Reduce, World

    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=10))  # a real store, served here
    # rank 1 of 2: not the main rank, so its snapshots go to the store on the board's own thread
    monitor = Monitor(MemorySink(), world=World(rank=1, world_size=2))
    monitor.watch(Ticker(), name="learner", reduce=Reduce({"n": "sum"}, store=store))
    await monitor.step()
    await wait_until(lambda: store.check(["monitor_async/learner/1"]))  # published, through that thread
    publishing = [t for t in threading.enumerate() if t.name.startswith("monitor-async-publish-learner")]
    assert publishing
    await monitor.stop()
    for thread in publishing:
        thread.join(timeout=3.0)  # retired by stop(): ends at once, not after the pool's 10 s idle timeout
    assert not [t.name for t in publishing if t.is_alive()]


def test_a_worker_whose_result_is_out_is_joined_by_the_retire_that_follows() -> None:
    """A call's result is seen (here a done callback still runs on the worker) before the thread is idle again.

    The retire that follows must count that thread among those to join, not as one inside a call.
    """
    pool = WorkerPool(1, "test-retire")
    before = set(threading.enumerate())
    gate = threading.Event()
    fut = pool.submit(lambda: gate.wait(5) and 42)
    fut.add_done_callback(lambda _: time.sleep(0.2))  # the worker delivers, then lingers in the callback
    gate.set()
    assert fut.result(timeout=5) == 42
    join_all(pool.retire(), 5.0)
    assert not new_threads(before), "retire() left the thread that had just answered"
