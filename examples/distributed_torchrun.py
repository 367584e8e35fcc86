"""A torchrun job monitored on every rank, with no barrier anywhere in the monitoring.

Each rank trains a small DistributedDataParallel model on its own data and
keeps a :class:`~monitor_async.SyncMonitor` polling its learner in the
background:

- ``OUT/rank<r>.jsonl`` on every rank (``{rank}`` in the path), each record
  carrying ``"source": {"rank": r}``;
- ``OUT/tb``: TensorBoard on the main rank only (``ranks="main"`` is the
  default of trackers; the other ranks never open it);
- ``learner/all`` on the main rank: the loss averaged, the samples summed and
  the step time's maximum across the ranks, through the job's own
  ``torch.distributed`` store, plus ``ranks`` (how many went in).

Run::

    torchrun --standalone --nproc-per-node 2 examples/distributed_torchrun.py runs/ddp

and then ``tensorboard --logdir runs/ddp/tb``. The main rank prints the last
reduction when the job ends.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from monitor_async import SyncMonitor
from monitor_async.backends import JSONLSink, TensorBoardSink
from monitor_async.distributed import world


class Learner:
    """What the training loop updates and the monitor reads (``stats()`` is called on the monitor's thread)."""

    def __init__(self) -> None:
        self.loss = float("nan")
        self.samples = 0
        self.step_time = 0.0

    def stats(self) -> dict[str, float]:
        return {"loss": self.loss, "samples": self.samples, "step_time": self.step_time}


def main(out: Path, steps: int = 300) -> None:
    dist.init_process_group("gloo")
    me = world()  # found from the initialised process group
    torch.manual_seed(me.rank)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.05)
    target = torch.randn(8, 1)
    learner = Learner()

    monitor = SyncMonitor(
        [JSONLSink(out / "rank{rank}.jsonl"), TensorBoardSink(out / "tb")], poll_interval=0.05
    )
    monitor.watch(learner, name="learner", step="samples",
                  reduce={"loss": "mean", "samples": "sum", "step_time": "max"})
    monitor.start()
    for _ in range(steps):
        began = time.perf_counter()
        x = torch.randn(32, 8)
        loss = torch.nn.functional.mse_loss(model(x), x @ target)
        optimiser.zero_grad()
        loss.backward()  # DDP's all-reduce: the training's collective, not the monitor's
        optimiser.step()
        learner.loss, learner.samples = loss.item(), learner.samples + 32
        learner.step_time = time.perf_counter() - began
        time.sleep(0.002)
    monitor.close()  # final snapshots, files flushed; waits for no other rank
    if me.main:
        reduced = [json.loads(line) for line in (out / "rank0.jsonl").read_text().splitlines()]
        last = next(r for r in reversed(reduced) if r["name"] == "learner/all")
        print(json.dumps(last["metrics"], sort_keys=True))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/ddp"))
