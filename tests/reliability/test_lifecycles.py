"""A monitor outlives the loops, processes and watches around it without hanging or leaking.

Holds "Lifecycles": docs/guarantees.md#lifecycles-test_lifecyclespy
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc

import pytest

from monitor_async import Monitor, SyncMonitor
from monitor_async.backends import MemorySink
from monitor_async.distributed import Reduce
from tests.support.targets import Counter


def test_a_monitor_whose_loop_ended_without_stop_polls_in_the_next_loop() -> None:
    target = Counter()
    sink = MemorySink()
    monitor = Monitor(sink, poll_interval=0.02, batch_wait=0)
    monitor.watch(target, name="c")

    async def first() -> None:
        await monitor.start()
        await asyncio.sleep(0.05)  # the loop ends here, without stop()

    async def second() -> int:
        await monitor.start()
        calls = target.calls
        deadline = time.monotonic() + 10
        while target.calls < calls + 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await monitor.stop()
        return target.calls - calls

    asyncio.run(first())
    assert asyncio.run(second()) >= 3
    assert sink.records


def _child_exit_seconds(with_monitor: bool) -> float:
    code = textwrap.dedent(f"""
        import os, sys, time
        from monitor_async import SyncMonitor
        from monitor_async.backends import MemorySink
        if {with_monitor}:
            monitor = SyncMonitor(MemorySink(), poll_interval=0.05)
            monitor.watch(stats_fn=lambda: {{"x": 1}}, name="x")
            monitor.start()
            monitor.log("pushed", {{"y": 1}})
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        os.waitpid(pid, 0)
        print(time.monotonic() - start)
        if {with_monitor}:
            monitor.close()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() only")
def test_a_forked_child_of_a_running_sync_monitor_exits_promptly() -> None:
    bare = _child_exit_seconds(False)
    assert _child_exit_seconds(True) < bare + 3.0


@pytest.mark.parametrize("kind", ["SyncMonitor", "Monitor"])
def test_pickling_a_monitor_names_it_and_says_to_create_one_in_the_child(kind: str) -> None:
    monitor = SyncMonitor(MemorySink()) if kind == "SyncMonitor" else Monitor(MemorySink())
    with pytest.raises(TypeError, match=rf"{kind}.*create .* in the child"):
        pickle.dumps(monitor)
    process = multiprocessing.get_context("spawn").Process(target=print, args=(monitor,))
    with pytest.raises(TypeError, match=rf"{kind}.*create .* in the child"):
        process.start()
    if isinstance(monitor, SyncMonitor):
        monitor.close()


def test_unwatching_a_hung_target_frees_its_thread_slot_at_once() -> None:
    release = threading.Event()
    entered = threading.Event()

    def hung() -> dict[str, float]:
        entered.set()
        release.wait(30)
        return {"x": 1.0}

    other = Counter()
    sink = MemorySink()
    monitor = SyncMonitor(sink, thread_limit=1, poll_interval=0.05, poll_timeout=20)
    try:
        monitor.watch(stats_fn=hung, name="hung", offload="thread", log_on_close=False)
        monitor.start()
        assert entered.wait(10)
        monitor.unwatch("hung")
        monitor.watch(other, name="other", offload="thread")
        deadline = time.monotonic() + 10
        while other.calls < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert other.calls >= 3
        assert monitor.stats()["calls_abandoned"] == 1
    finally:
        release.set()
        monitor.close()


def test_a_group_member_that_never_answers_is_counted_stale() -> None:
    def silent() -> dict[str, float]:
        raise RuntimeError("never answers")

    sink = MemorySink()
    monitor = SyncMonitor(sink, background=False, on_error="ignore")
    monitor.watch(
        [Counter(), Counter(), type("Silent", (), {"stats": staticmethod(silent)})()],
        name="g", reduce=Reduce({"frames": "sum"}, stale=0.05),
    )
    monitor.step()
    time.sleep(0.1)
    logged = monitor.step()
    monitor.close()
    assert logged["g/all"]["g/all/targets"] == 2
    assert logged["g/all"]["g/all/stale"] == 1


def test_adding_and_removing_reduced_watches_leaves_no_state_behind() -> None:
    monitor = Monitor(MemorySink())

    def cycle(n: int) -> None:
        for i in range(n):
            name = monitor.watch(Counter(), name=f"r{i}", reduce={"frames": "sum"})
            monitor.unwatch(name)

    cycle(100)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    cycle(1000)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    print(f"memory grown by 1,000 reduced watches added and removed: {grown} bytes")
    assert grown < 50_000, grown
