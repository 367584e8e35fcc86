"""One rank of the reduction scenario (bench_distributed.run_reduce): a gloo job, a monitor, its own CPU.

Run as ``python -m benchmarks._rank OUT INTERVAL WARMUP SECONDS REDUCE`` with the
usual torchrun variables. Every rank watches a learner-like target every
``INTERVAL`` seconds (``reduce=`` across the ranks when ``REDUCE`` is 1);
rank 0 writes its process CPU time over the window, the polls of the
reduction made in it and the time spent inside those polls to ``OUT``.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
import time
from pathlib import Path

from ._common import NoopSink


class Learner:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.steps = 0

    def stats(self) -> dict[str, float]:
        self.steps += 1
        return {"loss": 1.0 / (self.rank + 1), "frames": 64.0 * self.steps, "step_time": 0.01 * (self.rank + 1)}


async def main(out: Path, interval: float, warmup: float, seconds: float, reduce: bool) -> None:
    from monitor_async import Monitor
    from monitor_async._runtime.reduce import Reduction
    from monitor_async.distributed import world

    inside = [0.0, 0]  # thread CPU seconds spent in the reduction's stats(), calls

    if reduce:
        plain = Reduction.stats

        def timed(self: Reduction) -> object:
            begun = time.thread_time()
            try:
                return plain(self)
            finally:
                inside[0] += time.thread_time() - begun
                inside[1] += 1

        Reduction.stats = timed  # type: ignore[method-assign]

    me = world()
    monitor = Monitor(NoopSink(), poll_interval=interval)
    spec = {"loss": "mean", "frames": "sum", "step_time": "max"}
    monitor.watch(Learner(me.rank), name="learner", reduce=spec if reduce else None)
    await monitor.start()
    await asyncio.sleep(warmup)
    polls0, cpu0, wall0, in0 = monitor.stats()["polls"], time.process_time(), time.monotonic(), list(inside)
    await asyncio.sleep(seconds)
    polls1, cpu1, wall1, in1 = monitor.stats()["polls"], time.process_time(), time.monotonic(), list(inside)
    await monitor.stop(log_final=False)
    if me.rank == 0:
        out.write_text(json.dumps({
            "cpu": cpu1 - cpu0, "wall": wall1 - wall0, "polls": polls1 - polls0,
            "reduced": in1[1] - in0[1], "inside": in1[0] - in0[0],
        }))


if __name__ == "__main__":
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    args = sys.argv[1:]
    asyncio.run(main(Path(args[0]), float(args[1]), float(args[2]), float(args[3]), args[4] == "1"))
