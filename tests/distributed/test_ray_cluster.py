"""A real multi-node Ray cluster on one machine: ``ray.cluster_utils.Cluster``, a head and a second raylet.

One cluster serves the whole module. The head carries the custom resource
``head`` and the second raylet ``node2``, so actors, tasks and the sink's
actor are pinned to a node by asking for it. Ray's own session from
conftest (``ray_local``) is shut down while this module runs and brought
back after it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from monitor_async import Monitor  # noqa: E402
from monitor_async.backends import JSONLSink, MemorySink, RaySink  # noqa: E402

HEAD = {"head": 0.01}
NODE2 = {"node2": 0.01}


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    """The cluster, connected; yields ``{"head": node id, "node2": node id}``."""
    was_local = ray.is_initialized()
    if was_local:
        ray.shutdown()
    made = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"head": 1}, "include_dashboard": False},
    )
    try:
        made.add_node(num_cpus=1, resources={"node2": 1})
        made.wait_for_nodes()
        ray.init(address=made.address, log_to_driver=False)
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        nodes = {
            name: ray.get(where.options(resources=res).remote())
            for name, res in (("head", HEAD), ("node2", NODE2))
        }
        assert nodes["head"] != nodes["node2"]
        yield nodes
    finally:
        ray.shutdown()
        made.shutdown()
        if was_local:  # conftest's session-wide local Ray, as it was
            ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)


@ray.remote(num_cpus=0)
def where() -> str:
    return str(ray.get_runtime_context().get_node_id())


@ray.remote(num_cpus=0)
class Collector:
    """A collector actor: reports the node it runs on and a frame counter."""

    def __init__(self, frames_per_call: int) -> None:
        self.frames = 0
        self.step = frames_per_call

    def stats(self) -> dict[str, Any]:
        self.frames += self.step
        return {"frames": self.frames, "on_node2": ray.get_runtime_context().get_node_id() == NODE2_ID[0]}


NODE2_ID: list[str] = [""]


async def test_actors_on_both_nodes_are_watched_by_one_monitor_and_reduced(cluster: dict[str, str]) -> None:
    NODE2_ID[0] = cluster["node2"]
    head = Collector.options(resources=HEAD).remote(10)
    far = Collector.options(resources=NODE2).remote(30)
    await asyncio.gather(head.__ray_ready__.remote(), far.__ray_ready__.remote())  # workers started
    sink = MemorySink()
    monitor = Monitor(sink, on_error="raise", poll_timeout=30)
    monitor.watch(head, name="head")
    monitor.watch(far, name="far")
    monitor.watch([head, far], name="collectors", reduce={"frames": "sum"})
    # remote members answer during a step, after "collectors/all" read the board: it reduces the round before
    first = await monitor.step()
    logged = await monitor.step()
    assert monitor.watches()["head"] == "remote" and monitor.watches()["far"] == "remote"
    assert logged["head"]["head/on_node2"] == 0.0 and logged["far"]["far/on_node2"] == 1.0
    assert logged["collectors/all"]["collectors/all/targets"] == 2.0
    assert logged["collectors/all"]["collectors/all/frames"] == (
        first["collectors/0"]["collectors/0/frames"] + first["collectors/1"]["collectors/1/frames"]
    )
    for actor in (head, far):
        ray.kill(actor)


def system_monitor(sink: RaySink, steps: int) -> str:
    """Runs in a Ray task on one node: SystemStats through the shared sink."""
    from monitor_async.targets import SystemStats

    async def main() -> None:
        monitor = Monitor(sink, on_error="raise")
        monitor.watch(SystemStats(gpu=False), name="system")
        for _ in range(steps):
            await monitor.step()
        await sink.flush()

    asyncio.run(main())
    return str(ray.get_runtime_context().get_node_id())


async def test_system_stats_of_both_nodes_go_through_one_sink_and_keep_their_source(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "system.jsonl"
    sink = RaySink(JSONLSink, path, actor_options={"resources": NODE2})
    job = ray.remote(num_cpus=0)(system_monitor)
    ran_on = await asyncio.gather(
        job.options(resources=HEAD).remote(sink, 3), job.options(resources=NODE2).remote(sink, 3)
    )
    assert sorted(ran_on) == sorted(cluster.values())
    await sink.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 6 and all(line["name"] == "system" for line in lines)
    by_node: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        source = line["source"]
        assert set(source) == {"host", "pid", "node"}
        by_node.setdefault(source["node"], []).append(line)
    assert set(by_node) == set(cluster.values()), "the two nodes' records are told apart by source"
    assert all(len(records) == 3 for records in by_node.values())
    assert {line["source"]["pid"] for line in lines} != {os.getpid()}


async def test_a_killed_actor_is_reported_dead_once_and_delays_the_live_one(
    cluster: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    doomed = Collector.options(resources=NODE2).remote(1)
    alive = Collector.options(resources=HEAD).remote(1)
    await asyncio.gather(doomed.__ray_ready__.remote(), alive.__ray_ready__.remote())
    sink = MemorySink()
    monitor = Monitor(sink, poll_interval=0.05, batch_wait=0)
    monitor.watch(doomed, name="doomed")
    monitor.watch(alive, name="alive")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.start()
        deadline = time.monotonic() + 30
        while not any(r.name == "doomed" for r in sink.records):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        ray.kill(doomed, no_restart=True)
        while monitor.stats()["targets_dead"] < 1:
            assert time.monotonic() < deadline, "the killed actor was never noticed"
            await asyncio.sleep(0.02)
        died = time.monotonic()
        before = sum(r.name == "alive" for r in sink.records)
        await asyncio.sleep(1.5)
        after = sum(r.name == "alive" for r in sink.records)
        failed = monitor.stats()["polls_failed"]
        await monitor.stop(log_final=False)
    about = [r.getMessage() for r in caplog.records if "'doomed'" in r.getMessage()]
    assert len(about) == 1 and "process is gone" in about[0] and "ActorDiedError" in about[0]
    assert after - before >= 0.8 * 1.5 / 0.05, "the live actor lost its cadence"
    assert failed <= 3, f"the dead actor was polled {failed} times"
    assert time.monotonic() - died < 10
    ray.kill(alive)


@ray.remote(num_cpus=0)
class Flag:
    """Set by the driver when the ranks may stop."""

    def __init__(self) -> None:
        self.up = False

    def set(self) -> None:
        self.up = True

    def get(self) -> bool:
        return self.up


def rank_monitor(rank: int, done: Any) -> list[dict[str, float]]:
    """One 'rank' of a Ray job (an actor-less task): a monitor reducing across ranks through Ray."""
    from monitor_async.distributed import Reduce, World

    class Learner:
        def stats(self) -> dict[str, float]:
            return {"loss": float(rank), "frames": 10.0 * (rank + 1)}

    async def main() -> list[dict[str, float]]:
        sink = MemorySink()
        monitor = Monitor(sink, world=World(rank=rank, world_size=2), poll_interval=0.05, batch_wait=0)
        monitor.watch(Learner(), name="learner", reduce=Reduce({"loss": "mean", "frames": "sum"}, via="ray"))
        await monitor.start()
        deadline = time.monotonic() + 60
        if rank == 0:
            while not any(r.metrics.get("learner/all/ranks") == 2 for r in sink.records):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            await done.set.remote()
        while not await done.get.remote():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        await monitor.stop(log_final=False)
        return [r.metrics for r in sink.records if r.name == "learner/all"]

    return asyncio.run(main())


async def test_ranks_on_two_nodes_reduce_through_ray(cluster: dict[str, str]) -> None:
    job = ray.remote(num_cpus=0)(rank_monitor)
    done = Flag.remote()
    main, other = await asyncio.gather(
        job.options(resources=HEAD).remote(0, done), job.options(resources=NODE2).remote(1, done)
    )
    assert other == [], "only the main rank logs the reduction"
    full = next(m for m in main if m["learner/all/ranks"] == 2)
    assert full["learner/all/loss"] == 0.5 and full["learner/all/frames"] == 30.0
