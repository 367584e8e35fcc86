"""RaySink: a sink hosted in a real local Ray actor, written to by monitors in other processes."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

from monitor_async import Monitor, Record
from monitor_async.backends import JSONLSink, MemorySink, RaySink

STEPS = 25


class Steps:
    """A fake target whose counter ``i`` goes up by one per poll."""

    def __init__(self) -> None:
        self.i = 0

    def stats(self) -> dict[str, int]:
        self.i += 1
        return {"i": self.i, "pid": os.getpid()}


def monitor_job(sink: RaySink | str, name: str) -> int:
    """Runs in a Ray worker process: one monitor writing STEPS records through the shared sink."""
    handle = RaySink.connect(sink) if isinstance(sink, str) else sink

    async def main() -> None:
        monitor = Monitor(handle, on_error="raise")
        monitor.watch(Steps(), name=name, step="i")
        for _ in range(STEPS):
            await monitor.step()
            await asyncio.sleep(0.005)
        await handle.close()  # not the owner: flushes, leaves the shared sink open

    asyncio.run(main())
    return os.getpid()


@pytest.fixture
def ray(ray_local: Any) -> Any:
    # Ray workers cannot import this test module by name; ship its functions by value.
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray_local


async def test_two_monitors_in_two_ray_tasks_write_one_jsonl_file(ray: Any, tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    sink = RaySink(JSONLSink, path)
    job = ray.remote(num_cpus=0.5)(monitor_job)
    pids = await asyncio.gather(job.remote(sink, "collector_a"), job.remote(sink, "collector_b"))
    assert os.getpid() not in pids
    await sink.close()  # the owner closes the hosted JSONLSink

    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2 * STEPS
    for name in ("collector_a", "collector_b"):
        steps = [line["step"] for line in lines if line["name"] == name]
        assert steps == list(range(1, STEPS + 1)), f"{name}: records missing or out of order: {steps}"
        values = [line["metrics"][f"{name}/i"] for line in lines if line["name"] == name]
        assert values == [float(s) for s in steps]


async def test_named_sink_is_reachable_with_connect_from_another_process(ray: Any) -> None:
    sink = RaySink(MemorySink, actor_options={"name": "test-shared-memory"})
    assert sink.label == "ray_test-shared-memory"
    job = ray.remote(num_cpus=0.5)(monitor_job)
    await job.remote("test-shared-memory", "remote")
    records: list[Record] = await sink.call("records")
    assert [r.step for r in records] == list(range(1, STEPS + 1))
    assert all(r.name == "remote" for r in records)
    assert await sink.call("series", "remote/i") == [float(i) for i in range(1, STEPS + 1)]
    await sink.close()
    with pytest.raises(ValueError, match="no Ray actor named 'no-such-sink'"):
        RaySink.connect("no-such-sink")


async def test_only_the_owner_closes_the_hosted_sink(ray_local: Any) -> None:
    owner = RaySink(MemorySink)
    copy = pickle.loads(pickle.dumps(owner))
    record = Record("w", 1, 0.0, {"w/x": 1.0})
    await copy.write([record])
    await copy.close()  # a copy only flushes
    assert await owner.call("flushes") >= 1
    await owner.write([record])  # the hosted sink is still open
    assert len(await owner.call("records")) == 2

    other = pickle.loads(pickle.dumps(owner))
    await owner.close()
    with pytest.raises(RuntimeError, match=r"closed|unavailable"):
        await other.write([record])


async def test_errors_of_the_hosted_sink_come_back_with_their_type(ray_local: Any) -> None:
    sink = RaySink(JSONLSink, "/dev/full")
    monitor = Monitor(sink, on_error="raise")
    monitor.watch(Steps(), name="w")
    with pytest.raises(OSError, match="No space left"):
        await monitor.step()
    await sink.close()


async def test_a_sink_that_cannot_be_built_is_reported_by_name(ray_local: Any) -> None:
    sink = RaySink(JSONLSink, 42)  # JSONLSink raises TypeError for a non-path, inside the actor
    with pytest.raises(RuntimeError, match=r"'ray_jsonl'.*JSONLSink: path must be"):
        await sink.write([Record("w", None, 0.0, {"w/x": 1.0})])
