"""Dead targets: reported once by name, polled with backoff, back by themselves, delaying nothing else.

The real death: a multiprocessing manager whose process is killed (SIGKILL)
under a proxy the monitor watches. A Ray actor's death is tested with the
cluster in test_ray_cluster.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from multiprocessing.managers import BaseManager
from typing import Any

import pytest

from monitor_async import Monitor
from monitor_async._runtime.health import FIRST_RETRY, is_dead
from monitor_async.backends import MemorySink


class Shared:
    """Lives in the manager's process."""

    def stats(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "ok": 1}


class SharedManager(BaseManager):
    pass


SharedManager.register("Shared", Shared)


class Ticking:
    """A healthy target beside the dead one: notes the time of each call."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def stats(self) -> dict[str, float]:
        self.times.append(time.monotonic())
        return {"n": float(len(self.times))}


class Flaky:
    """A target whose process 'restarts': it refuses connections until ``back`` is set."""

    def __init__(self) -> None:
        self.back = False
        self.calls: list[float] = []

    def stats(self) -> dict[str, float]:
        self.calls.append(time.monotonic())
        if not self.back:
            raise ConnectionRefusedError(111, "Connection refused")
        return {"up": 1.0}


def test_process_deaths_are_told_from_other_errors() -> None:
    for exc in (EOFError(), ConnectionRefusedError(), ConnectionResetError(), BrokenPipeError(), FileNotFoundError()):
        assert is_dead(exc)
    assert not is_dead(RuntimeError("busy")) and not is_dead(TimeoutError())


async def test_a_killed_manager_is_reported_once_and_the_others_keep_their_cadence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    manager = SharedManager()
    manager.start()
    proxy = manager.Shared()  # type: ignore[attr-defined]
    healthy = Ticking()
    interval = 0.05
    monitor = Monitor(MemorySink(), poll_interval=interval)
    monitor.watch(proxy, name="remote")
    monitor.watch(healthy, name="healthy")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.start()
        assert (await asyncio.to_thread(proxy.stats))["ok"] == 1
        os.kill(manager._process.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        manager._process.join(10)  # type: ignore[attr-defined]
        deadline = time.monotonic() + 10
        while monitor.stats()["targets_dead"] < 1:
            assert time.monotonic() < deadline, "the dead manager was never noticed"
            await asyncio.sleep(0.02)
        start = time.monotonic()
        polls = monitor.stats()["polls_failed"]
        await asyncio.sleep(2.5)  # two backoff steps (1 s, then 2 s): the window this test measures
        failed = monitor.stats()["polls_failed"] - polls
        window = time.monotonic() - start
        await monitor.stop(log_final=False)
    about = [r.getMessage() for r in caplog.records if "'remote'" in r.getMessage()]
    assert len(about) == 1 and "process is gone" in about[0], about
    assert failed <= 2, f"a dead target was retried {failed} times in {window:.1f} s"
    in_window = [t for t in healthy.times if start <= t < start + window]
    assert len(in_window) >= 0.8 * window / interval, "the healthy target lost its cadence"
    stats = monitor.stats()
    assert stats["targets_dead"] == 1.0 and stats["targets_died"] == 1.0


async def test_a_dead_target_comes_back_by_itself(caplog: pytest.LogCaptureFixture) -> None:
    flaky = Flaky()
    sink = MemorySink()
    monitor = Monitor(sink, poll_interval=0.05, batch_wait=0)
    monitor.watch(flaky, name="flaky")
    with caplog.at_level(logging.INFO, logger="monitor_async"):
        await monitor.start()
        deadline = time.monotonic() + 10
        while monitor.stats()["targets_dead"] < 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        died = time.monotonic()
        flaky.back = True
        while not sink.records:
            assert time.monotonic() < deadline, "the target never came back"
            await asyncio.sleep(0.02)
        back = time.monotonic()
        await monitor.stop(log_final=False)
    assert back - died <= FIRST_RETRY + 1.0
    calls_while_dead = [t for t in flaky.calls if died <= t < back]
    assert len(calls_while_dead) <= 2, "a dead target was polled at its full rate"
    assert monitor.stats()["targets_dead"] == 0.0
    assert any("answers again" in r.getMessage() for r in caplog.records)
    assert len(sink.records) >= 1 and sink.records[0].metrics == {"flaky/up": 1.0}


async def test_on_error_raise_still_raises_a_death() -> None:
    monitor = Monitor(on_error="raise")
    monitor.watch(Flaky(), name="flaky")
    with pytest.raises(ConnectionRefusedError):
        await monitor.step()
