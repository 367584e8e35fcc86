"""Real TorchRL objects as targets: a ReplayBuffer and a single-process Collector over a counting env."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")

from torchrl.collectors import Collector, MultiSyncCollector  # noqa: E402
from torchrl.data import LazyTensorStorage, ReplayBuffer  # noqa: E402
from torchrl.envs.utils import RandomPolicy  # noqa: E402
from torchrl.testing.mocking_classes import CountingEnv  # noqa: E402

from monitor_async import Every, Monitor, SyncMonitor  # noqa: E402
from monitor_async.backends import MemorySink  # noqa: E402

FRAMES_PER_BATCH = 16
TOTAL_FRAMES = 160


@pytest.fixture
def collector() -> Iterator[Any]:
    env = CountingEnv(max_steps=10_000)  # a torchrl test env: no gym needed
    coll = Collector(
        env, RandomPolicy(env.action_spec), frames_per_batch=FRAMES_PER_BATCH, total_frames=TOTAL_FRAMES
    )
    yield coll
    coll.shutdown()


@pytest.fixture
def buffer() -> Any:
    return ReplayBuffer(storage=LazyTensorStorage(1_000), batch_size=8)


async def test_collector_and_buffer_stepped_by_hand(collector: Any, buffer: Any) -> None:
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(collector, name="collector", schedule=Every.counter("frames", 32))
    monitor.watch(buffer, name="rb", schedule=Every.counter("write_count", 32))
    assert monitor.watches() == {"collector": "inline", "rb": "inline"}
    await monitor.step()
    for batch in collector:
        buffer.extend(batch.reshape(-1))
        buffer.sample()
        await monitor.step()

    coll = [r for r in sink.records if r.name == "collector"]
    assert [r.step for r in coll] == [0, 32, 64, 96, 128, 160]
    for record in coll[1:]:
        assert record.metrics["collector/frames_per_second"] > 0
        assert record.metrics["collector/batches_per_second"] > 0
    assert coll[-1].metrics["collector/completed"] == 1.0
    assert coll[-1].metrics["collector/total_frames"] == TOTAL_FRAMES
    assert coll[-1].metrics["collector/batches"] == TOTAL_FRAMES / FRAMES_PER_BATCH

    rb = [r for r in sink.records if r.name == "rb"]
    assert [r.step for r in rb] == [0, 32, 64, 96, 128, 160]
    assert all(r.metrics["rb/writes_per_second"] > 0 for r in rb[1:])
    assert rb[-1].metrics["rb/size"] == TOTAL_FRAMES
    assert rb[-1].metrics["rb/capacity"] == 1_000
    assert rb[-1].metrics["rb/utilization"] == pytest.approx(0.16)


def test_training_script_with_a_background_sync_monitor(buffer: Any) -> None:
    env = CountingEnv(max_steps=10_000)
    total = 1_600
    collector = Collector(
        env, RandomPolicy(env.action_spec), frames_per_batch=FRAMES_PER_BATCH, total_frames=total
    )
    sink = MemorySink()
    try:
        with SyncMonitor(sink, poll_interval=0.01) as monitor:
            monitor.watch(collector, name="collector", schedule=Every.counter("frames", 160))
            monitor.watch(buffer, name="rb", schedule=Every.counter("write_count", 160))
            for batch in collector:  # the training loop runs here; polling runs on the monitor's thread
                buffer.extend(batch.reshape(-1))
                buffer.sample()
    finally:
        collector.shutdown()

    coll = [r for r in sink.records if r.name == "collector"]
    steps = [r.step for r in coll]
    assert len(steps) >= 3
    assert steps == sorted(steps)
    assert steps[-1] == total  # the final snapshot at stop
    assert all(s % 16 == 0 for s in steps if s is not None)
    assert any("collector/frames_per_second" in r.metrics for r in coll[1:])
    # every counter crossing moved the counter; only the final snapshot may repeat the last step
    assert all(r.metrics.get("collector/frames_per_second", 1.0) > 0 for r in coll[1:-1])
    rb = [r for r in sink.records if r.name == "rb"]
    assert rb[-1].step == total
    assert rb[-1].metrics["rb/size"] == 1_000  # capacity reached: the buffer wrapped around


async def test_multiprocess_collector_with_per_worker_stats_kwargs() -> None:
    make_env = functools.partial(CountingEnv, max_steps=10_000)
    env = make_env()
    collector = MultiSyncCollector(
        [make_env], RandomPolicy(env.action_spec), frames_per_batch=FRAMES_PER_BATCH, total_frames=64
    )
    try:
        sink = MemorySink()
        monitor = Monitor(sink)
        # "both" queries each worker process through the collector's control pipes, so it is
        # polled between batches (step()), never concurrently with the collector's own calls.
        monitor.watch(
            collector,
            name="collector",
            schedule=Every.counter("frames", 32),
            stats_kwargs={"workers": "both"},
        )
        await monitor.step()
        for _batch in collector:
            await monitor.step()
    finally:
        collector.shutdown()
    assert [r.step for r in sink.records] == [0, 32, 64]
    last = sink.records[-1].metrics
    assert last["collector/workers_alive"] == 1.0
    assert last["collector/worker_0/frames"] == 64.0
    assert last["collector/frames_per_second"] > 0
