"""reduce= within one process: a group of targets watched as one, and the reductions themselves."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from monitor_async import ConfigError, Monitor
from monitor_async._runtime.reduce import reduce_values
from monitor_async.backends import MemorySink
from monitor_async.distributed import Reduce, World


class Worker:
    """A fake collector whose figures are set by the test."""

    def __init__(self, loss: float, frames: int) -> None:
        self.loss = loss
        self.frames = frames
        self.fail = False

    def stats(self) -> dict[str, Any]:
        if self.fail:
            raise RuntimeError("worker busy")
        return {"loss": self.loss, "frames": self.frames, "step_time": self.loss * 10}


def test_reductions_match_numpy() -> None:
    numpy = pytest.importorskip("numpy")
    values = [0.3, 9.0, 1.5, 4.0, 2.25, 7.0, 0.0]
    for how, expected in [
        ("sum", sum(values)), ("mean", numpy.mean(values)), ("min", 0.0), ("max", 9.0),
        ("p50", numpy.percentile(values, 50)), ("p90", numpy.percentile(values, 90)),
        ("p99", numpy.percentile(values, 99)),
    ]:
        assert reduce_values(values, how) == pytest.approx(expected), how
    assert reduce_values([5.0], "p99") == 5.0


async def test_a_group_of_targets_is_reduced_into_one_record() -> None:
    sink = MemorySink()
    monitor = Monitor(sink)
    workers = [Worker(loss=float(i), frames=100 * i) for i in range(4)]
    name = monitor.watch(
        workers, name="collectors",
        reduce={"loss": ["mean", "p50"], "frames": "sum", "step_time": "max"},
    )
    assert name == "collectors"
    logged = await monitor.step()
    assert set(logged) == {"collectors/0", "collectors/1", "collectors/2", "collectors/3", "collectors/all"}
    assert logged["collectors/all"] == {
        "collectors/all/loss/mean": 1.5,
        "collectors/all/loss/p50": 1.5,
        "collectors/all/frames": 600.0,
        "collectors/all/step_time": 30.0,
        "collectors/all/targets": 4.0,
        "collectors/all/stale": 0.0,
    }
    assert [r.name for r in sink.records][-1] == "collectors/all"
    monitor.unwatch("collectors")
    assert monitor.watches() == {}


async def test_a_member_that_stops_answering_is_left_out_once_stale_and_counted() -> None:
    workers = [Worker(1.0, 10), Worker(3.0, 30)]
    monitor = Monitor(MemorySink(), on_error="ignore")
    monitor.watch(workers, name="g", reduce=Reduce({"loss": "mean"}, stale=0.2))
    assert (await monitor.step())["g/all"]["g/all/loss"] == 2.0
    workers[1].fail = True
    first = (await monitor.step())["g/all"]
    assert first["g/all/targets"] == 2.0, "not stale yet: its latest snapshot still counts"
    deadline = time.monotonic() + 10
    while True:
        got = (await monitor.step())["g/all"]
        if got["g/all/stale"] == 1.0 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert got == {"g/all/loss": 1.0, "g/all/targets": 1.0, "g/all/stale": 1.0}
    workers[1].fail = False
    assert (await monitor.step())["g/all"]["g/all/targets"] == 2.0


async def test_one_rank_alone_logs_its_own_reduction() -> None:
    monitor = Monitor(MemorySink(), world=World())
    monitor.watch(Worker(0.5, 7), name="learner", reduce={"loss": "mean", "frames": "sum"})
    logged = await monitor.step()
    assert logged["learner/all"] == {
        "learner/all/loss": 0.5, "learner/all/frames": 7.0, "learner/all/ranks": 1.0, "learner/all/stale": 0.0,
    }


async def test_background_group_reduction_keeps_up() -> None:
    sink = MemorySink()
    async with Monitor(sink, poll_interval=0.02, batch_wait=0) as monitor:
        monitor.watch([Worker(1.0, 1), Worker(2.0, 2)], name="g", reduce={"loss": "max"})
        deadline = time.monotonic() + 10
        while sum(r.name == "g/all" and r.metrics.get("g/all/targets") == 2.0 for r in sink.records) < 5:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
    assert {r.metrics["g/all/loss"] for r in sink.records if r.name == "g/all" and "g/all/loss" in r.metrics} == {2.0}


def test_bad_reductions_are_refused_naming_the_watch() -> None:
    monitor = Monitor()
    with pytest.raises(ConfigError, match=r"watch 'learner'.*unknown reduction 'median' for key 'loss'"):
        monitor.watch(Worker(0, 0), name="learner", reduce={"loss": "median"})
    with pytest.raises(ConfigError, match="non-empty mapping"):
        monitor.watch(Worker(0, 0), name="learner", reduce={})
    with pytest.raises(ConfigError, match="stale must be"):
        Reduce({"loss": "mean"}, stale=0)
    # in a fresh interpreter: this one may run Ray for other tests, and Ray would carry the reduction
    code = (
        "from monitor_async import ConfigError, Monitor\n"
        "from monitor_async.distributed import World\n"
        "class T:\n    def stats(self):\n        return {'loss': 1.0}\n"
        "try:\n"
        "    Monitor(world=World(rank=0, world_size=2)).watch(T(), name='x', reduce={'loss': 'mean'})\n"
        "except ConfigError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert re.search(r"watch 'x'.*needs torch\.distributed", done.stdout), done.stdout + done.stderr
    monitor.watch(Worker(0, 0), name="learner", reduce={"loss": "mean"})
    with pytest.raises(ConfigError, match="already registered"):
        monitor.watch(Worker(0, 0), name="learner", reduce={"loss": "mean"})
    assert sorted(monitor.watches()) == ["learner", "learner/all"]
