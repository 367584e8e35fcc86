"""Where a target's stats() runs: inline, on a worker thread, awaited; hung and slow targets."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from monitor_async import Monitor, SyncMonitor
from monitor_async._core.threads import WorkerPool
from monitor_async.backends import MemorySink


class Polled:
    """A cheap in-process target; remembers which thread each call ran on."""

    def __init__(self) -> None:
        self.calls = 0
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def stats(self) -> dict[str, int]:
        with self._lock:
            self.calls += 1
            self.threads.append(threading.current_thread())
            return {"calls": self.calls}


class Sleeper(Polled):
    """A sync stats() with blocking latency (a lock, an IPC round trip)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def stats(self) -> dict[str, int]:
        time.sleep(self.seconds)
        return super().stats()


class Hung(Polled):
    """A sync stats() that blocks until released, like a call to a dead server."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.returned = threading.Event()
        self.entered = threading.Event()

    def stats(self) -> dict[str, int]:
        snapshot = super().stats()
        self.entered.set()
        self.release.wait()
        self.returned.set()
        return snapshot


@pytest.fixture
def hung() -> Iterator[Hung]:
    target = Hung()
    yield target
    target.release.set()


async def ticker(done: asyncio.Event, period: float = 0.01) -> float:
    """The event loop's worst lateness, in seconds, while ``done`` is not set."""
    worst = 0.0
    while not done.is_set():
        start = time.perf_counter()
        await asyncio.sleep(period)
        worst = max(worst, time.perf_counter() - start - period)
    return worst


# ---------------------------------------------------------------- the policy
async def test_watches_shows_the_policy_each_target_got() -> None:
    class Async:
        async def stats(self) -> dict[str, int]:
            return {"x": 1}

    monitor = Monitor(MemorySink())
    monitor.watch(Polled(), name="plain")
    monitor.watch(Polled(), name="pinned", offload="inline")
    monitor.watch(Polled(), name="threaded", offload="thread")
    monitor.watch(Async(), name="async_auto")
    monitor.watch(Async(), name="async_thread", offload="thread")
    assert monitor.watches() == {
        "plain": "inline",
        "pinned": "inline",
        "threaded": "thread",
        "async_auto": "inline",
        "async_thread": "inline",  # an async def always runs on the loop
    }
    with pytest.raises(ValueError, match="offload"):
        monitor.watch(Polled(), name="bad", offload="process")  # type: ignore[arg-type]


async def test_thread_offload_runs_on_a_daemon_worker_inline_on_the_loop() -> None:
    inline, threaded = Polled(), Polled()
    monitor = Monitor(MemorySink())
    monitor.watch(inline, name="inline", offload="inline")
    monitor.watch(threaded, name="threaded", offload="thread")
    logged = await monitor.step()
    assert logged == {"inline": {"inline/calls": 1.0}, "threaded": {"threaded/calls": 1.0}}
    assert inline.threads == [threading.current_thread()]
    (worker,) = threaded.threads
    assert worker is not threading.current_thread()
    assert worker.daemon
    assert worker.name.startswith("monitor-async-stats")


async def test_thread_limit_bounds_concurrent_stats_calls() -> None:
    running = 0
    peak = 0
    lock = threading.Lock()

    class Slow:
        def stats(self) -> dict[str, int]:
            nonlocal running, peak
            with lock:
                running += 1
                peak = max(peak, running)
            time.sleep(0.05)
            with lock:
                running -= 1
            return {"x": 1}

    monitor = Monitor(MemorySink(), thread_limit=2, poll_timeout=5)
    for i in range(6):
        monitor.watch(Slow(), name=f"slow{i}", offload="thread")
    logged = await monitor.step()
    assert len(logged) == 6
    assert peak == 2


async def test_slow_sync_target_on_a_thread_leaves_the_loop_responsive() -> None:
    slow = Sleeper(0.3)
    monitor = Monitor(MemorySink(), poll_interval=0.4, poll_timeout=2)
    monitor.watch(slow, name="slow", offload="thread")
    done = asyncio.Event()
    tick = asyncio.create_task(ticker(done))
    await monitor.start()
    await asyncio.sleep(1.5)  # polls at 0, 0.4, 0.8 and 1.2 s: the last one returns as stop() begins
    start = time.perf_counter()
    await monitor.stop()
    assert time.perf_counter() - start < 1.0
    calls = slow.calls
    await asyncio.sleep(0.5)
    assert slow.calls == calls, "a poll task outlived stop()"
    done.set()
    worst = await tick
    assert calls >= 3
    assert worst < 0.1, f"loop was late by {worst * 1000:.0f} ms with stats() on a thread"

    # The contrast that proves the measurement: the same target inline stalls the loop.
    inline = Monitor(MemorySink())
    inline.watch(Sleeper(0.3), name="slow", offload="inline")
    done = asyncio.Event()
    tick = asyncio.create_task(ticker(done))
    await asyncio.sleep(0.02)
    await inline.step()
    done.set()
    assert await tick >= 0.25


# -------------------------------------------------------------- hung targets
async def test_hung_thread_target_is_abandoned_and_neighbour_keeps_its_cadence(
    hung: Hung, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="monitor_async")
    healthy = Polled()
    sink = MemorySink()
    monitor = Monitor(sink, poll_interval=0.05)
    monitor.watch(hung, name="hung", offload="thread", poll_interval=0.2)
    monitor.watch(healthy, name="healthy")
    start = time.perf_counter()
    await monitor.start()
    await asyncio.sleep(2.0)
    expected = (time.perf_counter() - start) / 0.05
    polled = healthy.calls
    stop_start = time.perf_counter()
    await monitor.stop()
    stop_seconds = time.perf_counter() - stop_start

    assert polled >= 0.9 * expected, f"healthy neighbour polled {polled} times, expected ~{expected:.0f}"
    assert hung.calls == 1, "a hung call must not be called again until it returns"
    stats = monitor.stats()
    assert stats["polls_timed_out"] == 1
    assert stats["polls_missed"] >= 5  # the hung watch's skipped polls
    assert stop_seconds < 2.0
    assert "hung" not in {r.name for r in sink.records}
    assert sum(r.name == "healthy" for r in sink.records) == polled + 1  # + the final snapshot
    messages = [r.getMessage() for r in caplog.records]
    assert any("'hung'" in m and "did not return within 0.2s" in m for m in messages)
    assert any("final snapshot of watch 'hung' skipped" in m for m in messages)


async def test_hung_target_is_busy_until_it_returns_then_polled_again(hung: Hung) -> None:
    monitor = Monitor(MemorySink(), on_error="ignore")
    monitor.watch(hung, name="hung", offload="thread", timeout=0.1)
    assert await monitor.step() == {}
    assert monitor.stats()["polls_timed_out"] == 1
    assert await monitor.step() == {}  # still running: skipped, not called again
    assert hung.calls == 1
    assert monitor.stats()["polls_missed"] == 1
    hung.release.set()
    assert hung.returned.wait(5)
    await asyncio.sleep(0.05)  # let the worker hand its result back
    assert await monitor.step() == {"hung": {"hung/calls": 2.0}}


async def test_stop_joins_a_thread_call_in_flight_for_the_final_snapshot() -> None:
    slow = Sleeper(0.3)
    sink = MemorySink()
    monitor = Monitor(sink, poll_interval=10, poll_timeout=2)
    monitor.watch(slow, name="slow", offload="thread")
    await monitor.start()
    await asyncio.sleep(0.1)  # the first poll is now sleeping on its thread
    start = time.perf_counter()
    assert await monitor.step() == {}  # a manual step meanwhile does not start a second call
    assert time.perf_counter() - start < 0.1
    assert monitor.stats()["polls_missed"] == 1
    await monitor.stop()
    assert 0.1 < time.perf_counter() - start < 1.5
    assert slow.calls == 1, "the call in flight is joined, not started again"
    assert [r.metrics for r in sink.records] == [{"slow/calls": 1.0}]


async def test_stop_ends_the_poll_task_even_when_a_result_lands_with_the_cancel() -> None:
    """stop() while a thread call returns: the cancel must win (3.11's wait_for could swallow it)."""

    class Quick:
        def stats(self) -> dict[str, int]:
            time.sleep(0.02)
            return {"x": 1}

    leaked = 0
    for i in range(40):  # sweep stop() across the moment the call returns
        monitor = Monitor(MemorySink(), poll_interval=10, poll_timeout=2, stop_timeout=0.3)
        monitor.watch(Quick(), name="quick", offload="thread")
        await monitor.start()
        await asyncio.sleep(0.02 + (i - 20) * 0.0002)
        await monitor.stop()
        alive = [t for t in asyncio.all_tasks() if t.get_name().startswith("monitor-async poll")]
        leaked += bool(alive)
        for task in alive:
            task.cancel()
    assert leaked == 0, f"{leaked} of 40 poll tasks survived stop()"


async def test_pool_threads_do_not_pile_up_behind_hung_targets() -> None:
    targets = [Hung() for _ in range(3)]
    before = set(threading.enumerate())
    try:
        monitor = Monitor(MemorySink(), on_error="ignore", thread_limit=2)
        for i, target in enumerate(targets):
            monitor.watch(target, name=f"hung{i}", offload="thread", timeout=0.05)
        for _ in range(20):
            await monitor.step()
        assert [t.calls for t in targets] == [1, 1, 1]
        started = set(threading.enumerate()) - before
        # one stuck thread per hung target, plus at most thread_limit live ones
        assert len(started) <= 3 + 2
    finally:
        for target in targets:
            target.release.set()


# ------------------------------------------------------------- auto promotion
async def test_auto_moves_a_slow_inline_target_to_a_thread_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="monitor_async")
    slow = Sleeper(0.02)
    monitor = Monitor(MemorySink())
    monitor.watch(slow, name="slow")
    modes = []
    for _ in range(6):
        await monitor.step()
        modes.append(monitor.watches()["slow"])
    assert modes == ["inline", "inline", "thread", "thread", "thread", "thread"]
    loop_thread = threading.current_thread()
    assert all(t is loop_thread for t in slow.threads[:3])
    assert all(t is not loop_thread for t in slow.threads[3:])
    promotions = [r for r in caplog.records if "worker thread" in r.getMessage()]
    assert len(promotions) == 1
    assert promotions[0].levelno == logging.INFO
    assert "'slow'" in promotions[0].getMessage()


async def test_auto_keeps_a_fast_target_with_rare_hiccups_inline() -> None:
    class Hiccup(Polled):
        def stats(self) -> dict[str, int]:
            snapshot = super().stats()
            if self.calls % 5 == 0:  # a GC pause now and then
                time.sleep(0.01)
            return snapshot

    monitor = Monitor(MemorySink())
    monitor.watch(Hiccup(), name="hiccup")
    monitor.watch(Polled(), name="fast")
    for _ in range(30):
        await monitor.step()
    assert monitor.watches() == {"hiccup": "inline", "fast": "inline"}


async def test_pinned_inline_target_is_never_moved() -> None:
    monitor = Monitor(MemorySink())
    monitor.watch(Sleeper(0.01), name="slow", offload="inline")
    for _ in range(4):
        await monitor.step()
    assert monitor.watches() == {"slow": "inline"}


# ---------------------------------------------------------------- awaitables
class AsyncTarget:
    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.calls = 0
        self.cancelled = 0

    async def stats(self, scale: int = 1) -> dict[str, int]:
        self.calls += 1
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return {"calls": self.calls * scale}


async def test_async_stats_is_awaited_and_cancelled_on_timeout() -> None:
    monitor = Monitor(MemorySink(), on_error="ignore")
    monitor.watch(AsyncTarget(0.01), name="fast")
    slow = AsyncTarget(10)
    monitor.watch(slow, name="slow", timeout=0.1)
    start = time.perf_counter()
    assert await monitor.step() == {"fast": {"fast/calls": 1.0}}
    assert time.perf_counter() - start < 1
    assert slow.cancelled == 1
    assert monitor.stats()["polls_timed_out"] == 1
    await monitor.step()  # a cancelled coroutine is not busy: the next poll calls again
    assert slow.calls == 2


async def test_a_returned_awaitable_is_awaited_under_the_timeout() -> None:
    loop = asyncio.get_running_loop()
    pending: list[asyncio.Future[dict[str, int]]] = []

    def returns_future() -> asyncio.Future[dict[str, int]]:
        fut: asyncio.Future[dict[str, int]] = loop.create_future()
        loop.call_later(0.02, fut.set_result, {"ready": 1})
        pending.append(fut)
        return fut

    async def produce() -> dict[str, int]:
        return {"made": 2}

    def never() -> asyncio.Future[dict[str, int]]:
        return loop.create_future()

    monitor = Monitor(MemorySink(), on_error="ignore")
    monitor.watch(object(), name="future", stats_fn=returns_future)
    # a sync stats() on a thread that hands back a coroutine: awaited on the loop
    monitor.watch(object(), name="coroutine", stats_fn=lambda: produce(), offload="thread")
    monitor.watch(object(), name="never", stats_fn=never, timeout=0.1)
    logged = await monitor.step()
    assert logged == {"future": {"future/ready": 1.0}, "coroutine": {"coroutine/made": 2.0}}
    assert monitor.stats()["polls_timed_out"] == 1


@pytest.mark.parametrize("offload", ["inline", "thread", "auto"])
async def test_stats_fn_and_stats_kwargs_reach_every_kind_of_call(offload: str) -> None:
    class Collector:
        def report(self, workers: str = "aggregate") -> dict[str, Any]:
            return {"frames": 10, "on_thread": threading.current_thread() is not loop_thread, workers: 1}

    loop_thread = threading.current_thread()
    target = Collector()
    async_target = AsyncTarget()
    monitor = Monitor(MemorySink())
    monitor.watch(
        target, name="sync", stats_fn=target.report, stats_kwargs={"workers": "both"}, offload=offload
    )  # type: ignore[arg-type]
    monitor.watch(async_target, name="async", stats_kwargs={"scale": 7}, offload=offload)  # type: ignore[arg-type]
    logged = await monitor.step()
    assert logged["sync"] == {
        "sync/frames": 10.0,
        "sync/on_thread": float(offload == "thread"),
        "sync/both": 1.0,
    }
    assert logged["async"] == {"async/calls": 7.0}


# ---------------------------------------------------------------- SyncMonitor
def test_async_stats_target_under_sync_monitor() -> None:
    target = AsyncTarget(0.01)
    sink = MemorySink()
    with SyncMonitor(sink, background=False) as monitor:
        monitor.watch(target, name="server", stats_kwargs={"scale": 3})
        assert monitor.step() == {"server": {"server/calls": 3.0}}
        assert monitor.step() == {"server": {"server/calls": 6.0}}

    background = SyncMonitor(sink, poll_interval=0.05)
    background.watch(AsyncTarget(0.01), name="bg")
    background.start()
    time.sleep(0.5)
    background.close()
    values = sink.series("bg/calls")
    assert len(values) >= 5
    assert values == sorted(values)


def test_hung_thread_target_under_sync_monitor(hung: Hung) -> None:
    healthy = Polled()
    sink = MemorySink()
    monitor = SyncMonitor(sink, poll_interval=0.05, on_error="ignore")
    monitor.watch(hung, name="hung", offload="thread", poll_interval=0.2)
    monitor.watch(healthy, name="healthy")
    start = time.perf_counter()
    monitor.start()
    time.sleep(1.5)
    expected = (time.perf_counter() - start) / 0.05
    polled = healthy.calls
    stop_start = time.perf_counter()
    monitor.close()
    assert time.perf_counter() - stop_start < 2.0
    assert polled >= 0.9 * expected
    assert hung.calls == 1
    assert monitor.stats()["polls_timed_out"] == 1


def test_a_hung_call_returning_after_the_loop_closed_is_ignored(
    hung: Hung, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    monitor = SyncMonitor(MemorySink(), background=False, on_error="ignore")
    monitor.watch(hung, name="hung", offload="thread", timeout=0.1)
    assert monitor.step() == {}
    monitor.close()  # closes the monitor's private loop; the call is still stuck
    hung.release.set()
    assert hung.returned.wait(5)
    time.sleep(0.2)  # the worker hands the late result to a loop that is gone
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


# --------------------------------------------------------------- WorkerPool
def test_worker_pool_abandon_frees_the_slot_and_cancels_queued_calls() -> None:
    pool = WorkerPool(1, "test-pool")
    gate = threading.Event()
    try:
        stuck = pool.submit(gate.wait)
        queued = pool.submit(lambda: "queued")
        pool.abandon(queued)
        assert queued.cancelled()
        behind = pool.submit(lambda: "behind")
        time.sleep(0.05)
        assert not behind.done()  # limit 1: waits behind the running call
        pool.abandon(stuck)
        assert behind.result(timeout=5) == "behind"
    finally:
        gate.set()
    assert stuck.result(timeout=5) is True
    order: list[int] = []
    futures = [pool.submit(lambda i=i: order.append(i)) for i in range(50)]
    for fut in futures:
        fut.result(timeout=5)
    assert order == list(range(50))


def test_worker_pool_rejects_a_zero_limit() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        WorkerPool(0, "bad")


# ------------------------------------------------------------ interpreter exit
EXIT_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, threading, time
    from monitor_async import Monitor, SyncMonitor
    from monitor_async.backends import MemorySink

    class Hung:
        def stats(self):
            threading.Event().wait()

    class Fine:
        def stats(self):
            return {"x": 1}

    async def main():
        monitor = Monitor(MemorySink(), poll_interval=0.1, on_error="ignore")
        monitor.watch(Hung(), name="hung", offload="thread")
        monitor.watch(Fine(), name="fine")
        await monitor.start()
        while monitor.stats()["polls_timed_out"] < 1:
            await asyncio.sleep(0.05)
        # leave without stop(): asyncio.run cancels the poll tasks and closes the loop

    if sys.argv[1] == "async":
        asyncio.run(main())
    else:
        monitor = SyncMonitor(MemorySink(), poll_interval=0.1, on_error="ignore", stop_timeout=1)
        monitor.watch(Hung(), name="hung", offload="thread")
        monitor.start()
        while monitor.stats()["polls_timed_out"] < 1:
            time.sleep(0.05)
        # leave without stop(): the atexit hook stops it, bounded
    print("leaving", flush=True)
    """
)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_interpreter_exits_promptly_with_a_hung_target_thread(mode: str) -> None:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, mode], capture_output=True, text=True, timeout=60
    )
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    assert "leaving" in done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    # Python start-up and imports take ~1 s here; a non-daemon worker would hang forever.
    assert elapsed < 15
