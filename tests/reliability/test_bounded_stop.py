"""Stopping is bounded, whatever hangs.

Holds "Bounded stop": docs/guarantees.md#bounded-stop-test_bounded_stoppy

``stop()``, cancelling ``run()``, ``async with``; ``SyncMonitor.stop()``,
``close()`` and ``with``: each returns within about the watch timeout plus
``stop_timeout`` (twice that with ``close_sinks=True``) with a hung target or a
hung sink, and the healthy sink still gets its final snapshot. A
``SyncMonitor`` left running does not keep the interpreter alive, and its
final snapshot still reaches the files at exit.
"""

from __future__ import annotations

import asyncio
import csv
import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor_async import Monitor, SyncMonitor
from monitor_async.backends import MemorySink
from tests.support.checks import wait_until, wait_until_sync
from tests.support.sinks import HungAsyncSink, HungThreadSink
from tests.support.targets import AsyncHung, BlockingHung, Ticker

TIMEOUT = 0.2  # the hung target's poll timeout
STOP_TIMEOUT = 0.3
BOUND = TIMEOUT + 2 * STOP_TIMEOUT + 1.0  # generous slack for a busy 2-core machine

FAULTS = ["async-target", "thread-target", "async-sink", "thread-sink"]


class Scenario:
    """One fault next to a healthy target and a healthy sink."""

    def __init__(self, fault: str) -> None:
        self.fault = fault
        self.healthy = Ticker()
        self.good = MemorySink(name="good")
        self.hung_target: AsyncHung | BlockingHung | None = None
        self.hung_sink: HungAsyncSink | HungThreadSink | None = None
        if fault == "async-target":
            self.hung_target = AsyncHung()
        elif fault == "thread-target":
            self.hung_target = BlockingHung()
        elif fault == "async-sink":
            self.hung_sink = HungAsyncSink()
        else:
            self.hung_sink = HungThreadSink()

    @property
    def sinks(self) -> list[Any]:
        return [self.good] + ([self.hung_sink] if self.hung_sink is not None else [])

    def watch(self, monitor: Monitor | SyncMonitor) -> None:
        monitor.watch(self.healthy, name="healthy")
        if isinstance(self.hung_target, AsyncHung):
            monitor.watch(self.hung_target, name="hung", timeout=TIMEOUT)
        elif isinstance(self.hung_target, BlockingHung):
            monitor.watch(self.hung_target, name="hung", timeout=TIMEOUT, offload="thread")

    def stuck(self) -> bool:
        """The fault is in effect: the hung call or write has started."""
        if isinstance(self.hung_target, AsyncHung):
            return self.hung_target.calls > 0
        if isinstance(self.hung_target, BlockingHung):
            return self.hung_target.entered.is_set()
        assert self.hung_sink is not None
        return self.hung_sink.entered.is_set()

    def release(self) -> None:
        if isinstance(self.hung_target, BlockingHung):
            self.hung_target.release.set()
        if isinstance(self.hung_sink, HungThreadSink):
            self.hung_sink.release.set()

    def check_final_snapshot(self, calls_before_stop: int) -> None:
        assert self.healthy.calls > calls_before_stop, "the healthy target got its final snapshot"
        assert self.good.records[-1].metrics["healthy/n"] == self.healthy.calls
        assert self.good.flushes >= 1, "the healthy sink was flushed"


@pytest.fixture(params=FAULTS)
def scenario(request: pytest.FixtureRequest) -> Iterator[Scenario]:
    s = Scenario(request.param)
    yield s
    s.release()


@pytest.mark.parametrize("how", ["stop", "cancel-run", "async-with"])
@pytest.mark.parametrize("close_sinks", [False, True])
async def test_monitor_stops_in_bounded_time(scenario: Scenario, how: str, close_sinks: bool) -> None:
    monitor = Monitor(
        scenario.sinks, poll_interval=0.05, stop_timeout=STOP_TIMEOUT, on_error="ignore", close_sinks=close_sinks
    )
    scenario.watch(monitor)
    if how == "stop":
        await monitor.start()
        await wait_until(scenario.stuck)
        calls, started = scenario.healthy.calls, time.monotonic()
        await asyncio.wait_for(monitor.stop(), 10)
    elif how == "cancel-run":
        task = asyncio.create_task(monitor.run())
        await wait_until(scenario.stuck)
        calls, started = scenario.healthy.calls, time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
    else:
        async with monitor:
            await wait_until(scenario.stuck)
            calls, started = scenario.healthy.calls, time.monotonic()
    elapsed = time.monotonic() - started
    assert elapsed < BOUND, f"{how} took {elapsed:.2f}s with a hung {scenario.fault}"
    assert not monitor.running
    scenario.check_final_snapshot(calls)


@pytest.mark.parametrize("how", ["stop", "close", "with"])
def test_sync_monitor_stops_in_bounded_time(scenario: Scenario, how: str) -> None:
    monitor = SyncMonitor(scenario.sinks, poll_interval=0.05, stop_timeout=STOP_TIMEOUT, on_error="ignore")
    scenario.watch(monitor)
    if how == "with":
        with monitor:
            wait_until_sync(scenario.stuck)
            calls, started = scenario.healthy.calls, time.monotonic()
    else:
        monitor.start()
        wait_until_sync(scenario.stuck)
        calls, started = scenario.healthy.calls, time.monotonic()
        monitor.stop() if how == "stop" else monitor.close()
    elapsed = time.monotonic() - started
    assert elapsed < BOUND + STOP_TIMEOUT, f"{how} took {elapsed:.2f}s with a hung {scenario.fault}"
    assert not any(t.name == "monitor-async-loop" and t.is_alive() for t in threading.enumerate()), (
        "the loop thread ended"
    )
    scenario.check_final_snapshot(calls)
    monitor.close()  # idempotent after stop()


EXIT_SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from collections.abc import Sequence
    from monitor_async import SyncMonitor
    from monitor_async.backends import CSVSink, JSONLSink, ThreadedSink

    class Hung:
        def stats(self):
            threading.Event().wait()

    class HungSink(ThreadedSink):
        name = "hung"
        def write_blocking(self, records):
            threading.Event().wait()

    class Fine:
        n = 0
        def stats(self):
            self.n += 1
            return {"n": self.n}

    folder = sys.argv[1]
    fine = Fine()
    monitor = SyncMonitor(
        [CSVSink(folder + "/m.csv"), JSONLSink(folder + "/m.jsonl"), HungSink()],
        poll_interval=0.05, stop_timeout=1, on_error="ignore",
    )
    monitor.watch(Hung(), name="hung", offload="thread", timeout=0.2)
    monitor.watch(fine, name="fine")
    monitor.start()
    while monitor.stats()["polls_timed_out"] < 1:
        time.sleep(0.02)
    print("leaving", fine.n, flush=True)
    # no stop(): the exit hook stops it, bounded, and the files get the final snapshot
    """
)


def test_interpreter_exits_promptly_and_flushes_with_a_sync_monitor_left_running(tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=30
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert elapsed < 15, f"the interpreter took {elapsed:.1f}s to exit"
    assert "failed to write" not in done.stderr, done.stderr
    polls_before_exit = int(done.stdout.split()[1])
    with open(tmp_path / "m.csv", newline="") as f:
        csv_values = [float(row[4]) for row in list(csv.reader(f))[1:] if row[3] == "fine/n"]
    with open(tmp_path / "m.jsonl") as f:
        jsonl_values = [json.loads(line)["metrics"]["fine/n"] for line in f]
    assert csv_values == jsonl_values == [float(i) for i in range(1, len(csv_values) + 1)]
    assert len(csv_values) > polls_before_exit, "the final snapshot taken at exit reached both files"
