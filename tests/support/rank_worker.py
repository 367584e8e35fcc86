"""One rank of a real torch.distributed (gloo) job with a monitor, for tests/distributed/test_distributed_ranks.py.

Run as ``python tests/support/rank_worker.py OUT INTERVAL`` with the usual
``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` variables. It joins
the process group, watches a fake learner with ``reduce=`` into a JSONL file
per rank and a main-rank TensorBoard folder, says it is ready (``OUT/ready<rank>``),
runs until ``OUT/stop`` exists, stops the monitor, writes the times of its
learner's ``stats()`` calls to ``OUT/times<rank>.json`` and exits 0. It never
calls a collective after joining.

The learner also reports ``returns``, 100 values per rank (``100 * rank .. 100 * rank + 99``), merged
across the ranks into one distribution (``reduce={"returns": "merge"}``).

With a third argument ``AFTER`` the learner's ``frames`` grows at each poll
until ``OUT/stall<rank>`` exists, and the monitor runs ``Alert.stalled`` and
``Alert.quiet`` rules on the reduced watch, their events going to the JSONL file.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import sys
import time
from pathlib import Path


class Learner:
    """A fake learner: its figures depend on the rank, so reductions are checkable."""

    def __init__(self, rank: int, stall: Path | None = None) -> None:
        self.rank = rank
        self.times: list[float] = []
        self.stall = stall
        self.frames = 100.0 * (rank + 1)

    def stats(self) -> dict[str, object]:
        self.times.append(time.monotonic())
        if self.stall is not None and not self.stall.exists():
            self.frames += 1.0
        returns = [float(100 * self.rank + i) for i in range(100)]
        return {"loss": float(self.rank), "frames": self.frames, "step_time": 0.01 * (self.rank + 1), "returns": returns}


async def main(out: Path, interval: float, after: float | None) -> None:
    from monitor_async import Alert, Monitor
    from monitor_async.backends import JSONLSink, TensorBoardSink
    from monitor_async.distributed import world

    me = world()
    learner = Learner(me.rank, None if after is None else out / f"stall{me.rank}")
    rules = [] if after is None else [Alert.stalled("learner/frames", after=after), Alert.quiet("learner", after=after)]
    monitor = Monitor(
        [JSONLSink(out / "rank{rank}.jsonl"), TensorBoardSink(out / "tb")],
        poll_interval=interval, batch_wait=0, close_sinks=True, alerts=rules,
    )
    monitor.watch(learner, name="learner", reduce={"loss": "mean", "frames": "sum", "step_time": "max", "returns": "merge"})
    await monitor.start()
    (out / f"ready{me.rank}").write_text(json.dumps({"pid": os.getpid(), "found": me.found}))
    stop = out / "stop"
    while not stop.exists():
        await asyncio.sleep(0.02)
    started = time.monotonic()
    await monitor.stop()
    (out / f"times{me.rank}.json").write_text(
        json.dumps({"times": learner.times, "stop_seconds": time.monotonic() - started})
    )


if __name__ == "__main__":
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    asyncio.run(main(Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else None))
