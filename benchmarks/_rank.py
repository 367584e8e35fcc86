"""One rank of the reduction scenario (bench_distributed.run_reduce): a gloo job, a monitor, its own CPU.

Run as ``python -m benchmarks._rank OUT INTERVAL WARMUP SECONDS REDUCE`` with the
usual torchrun variables. Every rank watches a learner-like target every
``INTERVAL`` seconds (``reduce=`` across the ranks when ``REDUCE`` is 1);
rank 0 writes its process CPU time over the window and the reduction's
records written in it (counted by the sink) to ``OUT``.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._common import NoopSink


class Learner:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.steps = 0

    def stats(self) -> dict[str, float]:
        self.steps += 1
        return {"loss": 1.0 / (self.rank + 1), "frames": 64.0 * self.steps, "step_time": 0.01 * (self.rank + 1)}


class Counting(NoopSink):
    """A no-op sink that counts the records of one watch (the reduction's polls that reached a sink)."""

    def __init__(self, watch: str) -> None:
        self.watch = watch
        self.count = 0

    async def write(self, records: Sequence[Any]) -> None:
        self.count += sum(1 for record in records if record.name == self.watch)


async def main(out: Path, interval: float, warmup: float, seconds: float, reduce: bool) -> None:
    from monitor_async import Monitor
    from monitor_async.distributed import world

    me = world()
    sink = Counting("learner/all")
    monitor = Monitor(sink, poll_interval=interval)
    spec = {"loss": "mean", "frames": "sum", "step_time": "max"}
    monitor.watch(Learner(me.rank), name="learner", reduce=spec if reduce else None)
    await monitor.start()
    await asyncio.sleep(warmup)
    await monitor.flush()
    polls0, cpu0, wall0, reduced0 = monitor.stats()["polls"], time.process_time(), time.monotonic(), sink.count
    await asyncio.sleep(seconds)
    await monitor.flush()
    polls1, cpu1, wall1, reduced1 = monitor.stats()["polls"], time.process_time(), time.monotonic(), sink.count
    await monitor.stop(log_final=False)
    if me.rank == 0:
        out.write_text(json.dumps({
            "cpu": cpu1 - cpu0, "wall": wall1 - wall0, "polls": polls1 - polls0, "reduced": reduced1 - reduced0,
        }))


if __name__ == "__main__":
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    args = sys.argv[1:]
    asyncio.run(main(Path(args[0]), float(args[1]), float(args[2]), float(args[3]), args[4] == "1"))
