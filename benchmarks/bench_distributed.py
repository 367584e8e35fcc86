"""Scenarios 9-11: distributed runs, on a real two-node Ray cluster and a real gloo job on this machine.

9. **Ray actor targets on two nodes**: ``ray.cluster_utils.Cluster`` with a
   head and a second raylet; 16 actors (8 pinned to each node) are watched by
   one async ``Monitor`` in the driver at 10 Hz into a no-op sink. Each
   actor notes the ``time.monotonic()`` of its ``stats()`` calls (one clock
   for every process of this machine). After ``warmup`` seconds, for
   ``seconds``: the share of 100 ms slots with a call (goal >= 0.95) and the
   driver's CPU time over the window's wall time (1.0 = one core). Beside
   it, the floor: a bare asyncio loop in the same driver calling
   ``stats.remote()`` on the same actors at the same rate and awaiting the
   refs, with no monitor at all: what Ray's calls alone cost the driver.
10. **One RaySink fed by four processes**: four Ray tasks (two per node) each
   run a ``Monitor`` whose 100 targets are polled every 50 ms (2,000
   records/s per process) into one ``RaySink(JSONLSink)`` whose actor is
   pinned to the second node. End to end: the JSONL lines written, divided by
   the time from the first sender's start to the last sender's ``stop()``
   (which returns once its records are in the file); drops are the senders'
   ``sink/<label>/dropped`` and must be 0 (goal >= 8,000 records/s).
11. **Reduction across four gloo ranks**: four processes join a gloo job
   (``torch.distributed`` on 127.0.0.1) and poll a learner-like target every
   ``interval``; the same job runs twice, without and with
   ``reduce={"loss": "mean", "frames": "sum", "step_time": "max"}``. The
   figure is the main rank's process CPU time with the reduction minus
   without, divided by the reduction's polls in the window: the main rank's
   added CPU per reduced poll (the other ranks' publishing, the main rank's
   own, its reads of the store, the extra record).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from monitor_async import Monitor
from tests.support.network import free_port

from ._common import NoopSink, Row, loop_window, quiet, slot_share

__all__ = ["run_ray_sink", "run_ray_targets", "run_reduce"]

ROOT = Path(os.path.abspath(__file__)).parent.parent  # unresolved: the tree this suite was imported from


# ------------------------------------------------------------------ the cluster
class _Cluster:
    """A head (resource ``head``) and a second raylet (resource ``node2``), connected; one CPU each by default."""

    def __init__(self, cpus: int = 1) -> None:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        import ray
        from ray.cluster_utils import Cluster

        self.ray = ray
        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": cpus, "resources": {"head": 100}, "include_dashboard": False},
        )
        self.cluster.add_node(num_cpus=cpus, resources={"node2": 100})
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, log_to_driver=False)
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    def close(self) -> None:
        self.ray.shutdown()
        self.cluster.shutdown()


NODES = ({"head": 1}, {"node2": 1})


class TimedActor:
    """A Ray actor body: notes the time of each ``stats()`` call, answers 12 scalars."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def stats(self) -> dict[str, float]:
        self.times.append(time.monotonic())
        n = float(len(self.times))
        return {
            "frames": 64 * n, "write_count": 32 * n, "size": 5e4, "capacity": 1e5, "loss": 0.43, "lr": 3e-4,
            "queue_depth": 3, "workers": 4, "latency_ms": 1.25, "ok": 1.0, "reward_mean": -12.5, "reward_std": 3.75,
        }

    def calls(self) -> list[float]:
        return self.times


# ------------------------------------------------------------------ 9. actor targets
async def _ours(actors: list[Any], interval: float, warmup: float, seconds: float) -> tuple[float, float, float]:
    monitor = Monitor(NoopSink(), poll_interval=interval)
    for i, actor in enumerate(actors):
        monitor.watch(actor, name=f"actor{i}")
    await monitor.start()
    wall0, wall1, cpu0, cpu1 = await loop_window(warmup, seconds)
    await monitor.stop(log_final=False)
    return wall0, wall1, (cpu1 - cpu0) / (wall1 - wall0)


async def _bare(actors: list[Any], interval: float, warmup: float, seconds: float) -> tuple[float, float, float]:
    """The floor: one loop calls every actor each interval and awaits the refs; nothing else."""

    async def tick() -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            await asyncio.gather(*(actor.stats.remote() for actor in actors))
            due += interval
            await asyncio.sleep(max(0.0, due - loop.time()))

    task = asyncio.create_task(tick())
    wall0, wall1, cpu0, cpu1 = await loop_window(warmup, seconds)
    task.cancel()
    return wall0, wall1, (cpu1 - cpu0) / (wall1 - wall0)


def run_ray_targets(
    *, actors: int = 16, interval: float = 0.1, warmup: float = 3.0, seconds: float = 15.0, baseline: bool = True
) -> list[Row]:
    """Share of slots kept and the driver's CPU for ``actors`` Ray actors on two nodes (and the floor)."""
    quiet()
    cluster = _Cluster()
    ray = cluster.ray
    try:
        cls = ray.remote(num_cpus=0)(TimedActor)
        results = {}
        for who, measure in (("ours", _ours), ("floor", _bare)):
            handles = [cls.options(resources=NODES[i % 2]).remote() for i in range(actors)]
            ray.get([h.__ray_ready__.remote() for h in handles])
            wall0, wall1, cpu = asyncio.run(measure(handles, interval, warmup, seconds))
            kept = slots = 0
            for times in ray.get([h.calls.remote() for h in handles]):
                hit, n = slot_share(times, wall0, wall1, interval)
                kept += hit
                slots += n
            results[who] = (kept / slots if slots else 0.0, cpu)
            for h in handles:
                ray.kill(h)
    finally:
        cluster.close()
    scenario = f"9. {actors} Ray actors on two nodes at {1 / interval:g} Hz"
    note = f"{seconds:g} s window after {warmup:g} s warm-up; cluster_utils.Cluster, head + second raylet"
    return [
        Row(scenario, "share of poll slots kept", results["ours"][0], None, unit="share", goal=("min", 0.95), note=note),
        Row(scenario, "driver CPU share of one core", results["ours"][1], None, unit="share"),
        Row(scenario, "floor: a bare loop awaiting the same actor calls, slots kept", results["floor"][0], None,
            unit="share", who="floor"),
        Row(scenario, "floor: driver CPU share of one core", results["floor"][1], None, unit="share", who="floor",
            note="what Ray's calls alone cost the driver at this rate, measured in the same run"),
    ]


# ------------------------------------------------------------------ 10. RaySink
class Tick:
    """A cheap target: four scalars."""

    def __init__(self) -> None:
        self.n = 0

    def stats(self) -> dict[str, float]:
        self.n += 1
        return {"n": float(self.n), "queue_depth": 3.0, "latency_ms": 1.5, "ok": 1.0}


def _ready() -> float:
    return time.time()


def _sender(sink: Any, index: int, targets: int, interval: float, seconds: float) -> dict[str, float]:
    """One feeding process (a Ray task): a monitor of ``targets`` targets through the shared sink."""
    quiet()

    async def main() -> dict[str, float]:
        monitor = Monitor(sink, poll_interval=interval)
        for i in range(targets):
            monitor.watch(Tick(), name=f"p{index}_{i}")
        start = time.time()
        await monitor.start()
        await asyncio.sleep(seconds)
        stopping = time.time()
        await monitor.stop(log_final=False)  # drains, then flushes: the records are in the file
        stats = monitor.stats()
        return {
            "start": start, "stopping": stopping, "end": time.time(), "records": stats["records"],
            "dropped": stats[f"sink/{sink.label}/dropped"], "errors": stats[f"sink/{sink.label}/errors"],
        }

    return asyncio.run(main())


def _feed(ray: Any, processes: int, targets: int, interval: float, seconds: float) -> tuple[float, float, str]:
    """One run: ``processes`` senders into a fresh RaySink(JSONLSink) on the second node.

    Returns the sustained rate (0 when a record was dropped or went missing),
    the rate of lines that reached the file, and a note.
    """
    from monitor_async.backends import JSONLSink, RaySink

    path = Path(tempfile.mkdtemp(prefix="bench-raysink-")) / "shared.jsonl"
    sink = RaySink(JSONLSink, path, actor_options={"resources": NODES[1]})
    ray.get(sink.actor.ready.remote())
    job = ray.remote(num_cpus=0)(_sender)
    # the senders' worker processes start first, so that start-up is not in the window
    warm = ray.remote(num_cpus=0)(_ready)
    ray.get([warm.options(resources=NODES[i % 2]).remote() for i in range(processes)])
    got = ray.get([
        job.options(resources=NODES[i % 2]).remote(sink, i, targets, interval, seconds) for i in range(processes)
    ])
    asyncio.run(sink.close())
    lines = sum(1 for _ in path.open("rb"))
    window = sum(g["stopping"] - g["start"] for g in got) / len(got)  # each sender's own polling time
    drain = max(g["end"] - g["stopping"] for g in got)
    dropped = sum(g["dropped"] for g in got)
    produced = sum(g["records"] for g in got)
    # sustained: every record the senders polled in their windows is in the file, none dropped
    whole = dropped == 0 and lines == produced
    rate = sum(g["records"] / (g["stopping"] - g["start"]) for g in got) if whole else 0.0
    delivered = lines / window
    note = (
        f"{lines:,} lines for {window:.1f} s of polling on average (offered {processes * targets / interval:,.0f}/s); "
        f"the last sender's stop() (drain, then flush into the file) took {drain:.2f} s more; records produced "
        f"{produced:,.0f}, dropped {dropped:,.0f}, sink errors {sum(g['errors'] for g in got):,.0f}"
    )
    return rate, delivered, note


def run_ray_sink(
    *, processes: int = 4, targets: int = 100, interval: float = 0.05, seconds: float = 10.0,
    capacity_targets: int = 250, baseline: bool = True,
) -> list[Row]:
    """Records/s one RaySink(JSONLSink) takes end to end from ``processes`` senders, with no drops.

    The same at a heavier load (``capacity_targets`` per sender) shows the headroom.
    """
    quiet()
    cluster = _Cluster()
    try:
        rate, _, note = _feed(cluster.ray, processes, targets, interval, seconds)
        _, more, more_note = _feed(cluster.ray, processes, capacity_targets, interval, seconds)
    finally:
        cluster.close()
    scenario = f"10. one RaySink(JSONLSink) on the second node fed by {processes} processes (two per node)"
    return [
        Row(scenario, f"records/s into the JSONL file at {targets / interval:,.0f}/s per process, no drops", rate,
            None, goal=("min", 8000.0), note=note + "; 0 when a record went missing"),
        Row(scenario, f"headroom: records/s reaching the file at {capacity_targets / interval:,.0f}/s per process",
            more, None, note=more_note + " (drops are the per-sender queues' drop-oldest, by design)"),
    ]


# ------------------------------------------------------------------ 11. reduction
def _job(ranks: int, interval: float, warmup: float, seconds: float, reduce: bool) -> dict[str, float]:
    out = Path(tempfile.mkdtemp(prefix="bench-reduce-")) / "rank0.json"
    port = free_port()
    procs = []
    for rank in range(ranks):
        env = {
            **os.environ, "RANK": str(rank), "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "benchmarks._rank", str(out), str(interval), str(warmup), str(seconds),
             "1" if reduce else "0"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        ))
    errors = []
    for rank, proc in enumerate(procs):
        _, err = proc.communicate(timeout=warmup + seconds + 120)
        if proc.returncode:
            errors.append(f"rank {rank}: exit {proc.returncode}: {err.decode()[-500:]}")
    if errors:
        raise RuntimeError("; ".join(errors))
    data: dict[str, float] = json.loads(out.read_text())
    return data


def run_reduce(
    *, ranks: int = 4, interval: float = 0.01, warmup: float = 3.0, seconds: float = 15.0, baseline: bool = True
) -> list[Row]:
    """The main rank's added CPU per reduced poll across ``ranks`` gloo ranks (with minus without reduce=)."""
    plain = _job(ranks, interval, warmup, seconds, reduce=False)
    reduced = _job(ranks, interval, warmup, seconds, reduce=True)
    per_poll = (reduced["cpu"] - plain["cpu"]) / max(reduced["reduced"], 1)
    scenario = f"11. reduce= across {ranks} gloo ranks, polled at {1 / interval:g} Hz"
    return [
        Row(scenario, "main rank's added CPU per reduced poll, microseconds", per_poll * 1e6, None, unit="us",
            note=(
                f"main rank CPU {plain['cpu']:.3f} s without, {reduced['cpu']:.3f} s with reduce= over "
                f"{reduced['wall']:.1f} s; {reduced['reduced']:,.0f} reduced polls"
            )),
        Row(scenario, "main rank CPU share of one core with reduce=", reduced["cpu"] / reduced["wall"], None,
            unit="share", note=f"without: {plain['cpu'] / plain['wall']:.3f}"),
    ]
