"""Ray actor handles as targets: ``stats.remote(**kwargs)`` awaited on the loop, never ``ray.get``."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from monitor_async import Every, Monitor, SyncMonitor
from monitor_async.backends import MemorySink


def define_learner() -> type:
    """The actor class, defined in a function so that Ray ships it by value to its workers."""

    class Learner:
        def __init__(self) -> None:
            self.frames = 0
            self.stats_calls = 0

        def add(self, n: int) -> int:
            self.frames += n
            return self.frames

        def stats(self, workers: str = "aggregate", delay: float = 0.0) -> dict[str, Any]:
            self.stats_calls += 1
            time.sleep(delay)
            return {"frames": self.frames, "per_worker": workers != "aggregate"}

        def calls(self) -> int:
            return self.stats_calls

    return Learner


@pytest.fixture(scope="session")
def learner(ray_local: Any) -> Any:
    """The remote actor class; ``num_cpus=0`` so that it fits beside other actors on 1 CPU."""
    return ray_local.remote(num_cpus=0)(define_learner())


@pytest.fixture
def actor(ray_local: Any, learner: Any) -> Any:
    handle = learner.remote()
    yield handle
    ray_local.kill(handle)


async def ticker(done: asyncio.Event) -> float:
    worst = 0.0
    while not done.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.01)
        worst = max(worst, time.perf_counter() - start - 0.01)
    return worst


async def test_actor_handle_target_with_counter_schedule(actor: Any) -> None:
    sink = MemorySink()
    monitor = Monitor(sink, poll_timeout=30)
    monitor.watch(
        actor, name="learner", schedule=Every.counter("frames", 100), stats_kwargs={"workers": "both"}
    )
    assert monitor.watches() == {"learner": "remote"}

    first = await monitor.step()
    assert first == {"learner": {"learner/frames": 0.0, "learner/per_worker": 1.0}}
    await actor.add.remote(60)
    assert await monitor.step() == {}
    await actor.add.remote(60)
    logged = await monitor.step()
    assert logged["learner"]["learner/frames"] == 120.0
    assert logged["learner"]["learner/frames_per_second"] > 0
    assert [r.step for r in sink.records] == [0, 120]


async def test_remote_call_is_awaited_without_blocking_the_loop(actor: Any) -> None:
    monitor = Monitor(MemorySink(), poll_timeout=30)
    monitor.watch(actor, name="learner", stats_kwargs={"delay": 0.3})
    await monitor.step()  # warm the actor up
    done = asyncio.Event()
    tick = asyncio.create_task(ticker(done))
    start = time.perf_counter()
    logged = await monitor.step()
    took = time.perf_counter() - start
    done.set()
    worst = await tick
    assert logged["learner"]["learner/frames"] == 0.0
    assert took >= 0.3
    assert worst < 0.1, f"loop late by {worst * 1000:.0f} ms: the ObjectRef was waited on the loop"


async def test_hung_actor_call_is_abandoned_without_queueing_more_calls(actor: Any) -> None:
    monitor = Monitor(MemorySink(), on_error="ignore")
    monitor.watch(actor, name="learner", stats_kwargs={"delay": 1.0}, timeout=0.2)
    monitor.watch(object(), name="local", stats_fn=lambda: {"ok": 1})
    start = time.perf_counter()
    assert await monitor.step() == {"local": {"local/ok": 1.0}}
    assert time.perf_counter() - start < 0.8
    assert monitor.stats()["polls_timed_out"] == 1
    for _ in range(3):
        assert await monitor.step() == {"local": {"local/ok": 1.0}}  # busy: skipped at once
    assert monitor.stats()["polls_missed"] == 3
    assert await actor.calls.remote() == 1  # served after the slow call: nothing else was queued


async def test_killed_actor_is_reported_dead_once_and_then_retried_with_backoff(
    ray_local: Any, learner: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="monitor_async")
    doomed = learner.remote()
    monitor = Monitor(MemorySink(), poll_timeout=30)
    monitor.watch(doomed, name="doomed")
    monitor.watch(object(), name="local", stats_fn=lambda: {"ok": 1})
    assert "doomed" in await monitor.step()
    ray_local.kill(doomed)
    # ray.kill is asynchronous: wait until the actor is really gone before polling it
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            await doomed.calls.remote()
        except ray_local.exceptions.RayActorError:
            break
        await asyncio.sleep(0.05)
    for _ in range(3):
        assert list(await monitor.step()) == ["local"]
    # a dead actor is reported once, then retried with backoff (1 s, then up to 30 s apart), not at every poll
    assert monitor.stats()["polls_failed"] == 1
    assert monitor.stats()["polls_missed"] == 2
    assert monitor.stats()["targets_dead"] == 1
    warnings = [r.getMessage() for r in caplog.records if "'doomed'" in r.getMessage()]
    assert len(warnings) == 1
    assert "watch 'doomed': its target's process is gone" in warnings[0]
    assert "Actor" in warnings[0]

    raising = Monitor(MemorySink(), on_error="raise", poll_timeout=30)
    raising.watch(doomed, name="doomed")
    with pytest.raises(ray_local.exceptions.RayActorError):
        await raising.step()


async def test_remote_function_as_stats_fn(ray_local: Any) -> None:
    @ray_local.remote(num_cpus=0)
    def cluster_stats(scale: int) -> dict[str, float]:
        return {"cpus": ray_local.cluster_resources().get("CPU", 0.0) * scale}

    monitor = Monitor(MemorySink(), poll_timeout=30)
    monitor.watch(object(), name="cluster", stats_fn=cluster_stats, stats_kwargs={"scale": 2})
    assert monitor.watches() == {"cluster": "remote"}
    assert await monitor.step() == {"cluster": {"cluster/cpus": 2.0}}


def test_actor_handle_under_sync_monitor(actor: Any, ray_local: Any) -> None:
    with SyncMonitor(MemorySink(), background=False, poll_timeout=30) as monitor:
        monitor.watch(actor, name="learner")
        ray_local.get(actor.add.remote(5))
        assert monitor.step() == {"learner": {"learner/frames": 5.0, "learner/per_worker": 0.0}}


def test_ray_is_not_imported_for_other_targets() -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        from monitor_async import Monitor, SyncMonitor
        from monitor_async.backends import MemorySink

        class Plain:
            def stats(self):
                return {"x": 1}

        class Async:
            async def stats(self):
                return {"y": 2}

        async def main():
            monitor = Monitor(MemorySink())
            monitor.watch(Plain(), name="plain")
            monitor.watch(Plain(), name="thread", offload="thread")
            monitor.watch(Async(), name="async")
            assert len(await monitor.step()) == 3
            async with monitor:
                await asyncio.sleep(0.05)

        asyncio.run(main())
        print(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_default_name_of_an_actor_handle_is_its_class(actor: Any) -> None:
    from monitor_async import Monitor

    assert Monitor().watch(actor) == "learner"
