"""Per-worker stats of TorchRL's multiprocess collectors, polled the safe way: on the training thread."""

from __future__ import annotations

from typing import Any

import pytest

from monitor_async import SyncMonitor
from monitor_async.backends import MemorySink

pytest.importorskip("torchrl")
pytest.importorskip("gymnasium")


def make_env() -> Any:
    from torchrl.envs import GymEnv

    return GymEnv("CartPole-v1")


@pytest.mark.timeout(300)
def test_manual_mode_polls_per_worker_stats_between_iterations() -> None:
    from torchrl.collectors import MultiSyncCollector

    collector = MultiSyncCollector([make_env, make_env], policy=None, frames_per_batch=100, total_frames=600)
    sink = MemorySink()
    monitor = SyncMonitor(sink, background=False)
    monitor.watch(collector, name="collector", stats_kwargs={"workers": "both"})
    try:
        with monitor:
            for _ in collector:
                monitor.step()  # stats() runs here, on the thread that iterates the collector
    finally:
        collector.shutdown()
    polled = [r for r in sink.records if r.name == "collector"]
    assert len(polled) >= 6
    last = polled[-1].metrics
    assert last["collector/worker_0/frames"] + last["collector/worker_1/frames"] >= 500
