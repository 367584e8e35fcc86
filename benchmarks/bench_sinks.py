"""Scenario 2: manual ``step()`` throughput into real files, CSV (durable per batch) and TensorBoard.

CSV, made fair on durability: TorchRL's ``CSVLogger`` writes one line per
value into one file per metric and calls ``flush()`` after every line, so
when ``LoggerMonitor.step()`` returns every value is in the OS (page cache;
no ``fsync``). Our ``CSVSink`` appends each batch as one block of whole
lines with one unbuffered ``write``; ``SyncMonitor.step()`` returns once the
sink has written, so every value is in the OS too. Same guarantee at the
same moment; neither side calls ``fsync`` (a row with ``CSVSink(fsync=True)``
shows what forcing every batch to disk costs us). Formats differ: TorchRL
writes ``step,value`` per metric file, we write ``time,name,step,metric,value``
rows in one file (more bytes per value).

The floor (:class:`~benchmarks._common.Bare`): the same targets polled into
the same rows with no monitor at all, appended per step through the same
locked aiofiles append our sink uses, on a private loop like
``SyncMonitor(background=False)``'s. It is about the best the contract
allows on this machine: a CSV goal that the floor misses is out of reach.

TensorBoard: ``TensorBoardSink`` (tensorboardX event writer on the sink's
thread) vs TorchRL's ``TensorboardLogger`` (``torch.utils.tensorboard``
``SummaryWriter``, its own writer thread). Both buffer; the timed span ends
with a flush of each (``monitor.flush()``, ``experiment.flush()``) so every
event is in the file.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from monitor_async import SyncMonitor
from monitor_async.backends import CSVSink, TensorBoardSink

from ._common import Bare, LineFile, Row, TwelveKeys, best_rate, torchrl_monitor

__all__ = ["run"]


def _measure(step: Callable[[], object], finish: Callable[[], object], steps: int, targets: int) -> float:
    step()  # opens the files, writes headers, primes caches: not measured
    started = time.perf_counter()
    for _ in range(steps):
        step()
    finish()
    return steps * targets / (time.perf_counter() - started)


def _ours(sink: Any, targets: int, steps: int) -> float:
    monitor = SyncMonitor(sink, background=False, close_sinks=True)
    for i in range(targets):
        monitor.watch(TwelveKeys(), name=f"t{i}")
    try:
        return _measure(monitor.step, monitor.flush, steps, targets)
    finally:
        monitor.close()


def _floor(path: Path, targets: int, steps: int) -> float:
    bare = Bare([TwelveKeys() for _ in range(targets)])
    file = LineFile(path, "floor", header=CSVSink.header)
    loop = asyncio.new_event_loop()

    async def step() -> None:
        await file.write(bare.rows())

    try:
        loop.run_until_complete(file.open())
        return _measure(lambda: loop.run_until_complete(step()), lambda: None, steps, targets)
    finally:
        loop.run_until_complete(file.close())
        loop.close()


def _torchrl(logger: Any, targets: int, steps: int, finish: Callable[[], object]) -> float:
    monitor = torchrl_monitor()(logger, background=False)
    for i in range(targets):
        monitor.watch(TwelveKeys(), name=f"t{i}")
    return _measure(monitor.step, finish, steps, targets)


def _torchrl_csv(root: Path, targets: int, steps: int) -> float:
    from torchrl.record.loggers.csv import CSVLogger

    logger = CSVLogger(exp_name="bench", log_dir=str(root))
    try:
        return _torchrl(logger, targets, steps, lambda: None)
    finally:
        for file in logger.experiment.files.values():
            file.close()


def _torchrl_tensorboard(root: Path, targets: int, steps: int) -> float:
    from torchrl.record.loggers.tensorboard import TensorboardLogger

    logger = TensorboardLogger(exp_name="bench", log_dir=str(root))
    try:
        return _torchrl(logger, targets, steps, logger.experiment.flush)
    finally:
        logger.experiment.close()


def run(
    *,
    targets: int = 100,
    steps: int = 1000,
    torchrl_steps: int = 150,
    repeat: int = 3,
    baseline: bool = True,
) -> list[Row]:
    """Durable CSV and TensorBoard snapshots per second, ours and TorchRL's, best of ``repeat``."""
    with_torchrl = baseline and torchrl_monitor() is not None
    runs: dict[str, list[float]] = {k: [] for k in ("csv", "floor", "fsync", "tb", "torchrl_csv", "torchrl_tb")}
    with tempfile.TemporaryDirectory(prefix="monitor-async-bench-") as tmp:
        root = Path(tmp)
        for n in range(repeat):
            runs["csv"].append(_ours(CSVSink(root / f"csv{n}" / "metrics.csv"), targets, steps))
            runs["floor"].append(_floor(root / f"floor{n}.csv", targets, steps))
            runs["fsync"].append(
                _ours(CSVSink(root / f"fsync{n}" / "metrics.csv", fsync=True), targets, max(1, steps // 4))
            )
            runs["tb"].append(_ours(TensorBoardSink(root / f"tb{n}"), targets, steps))
            if with_torchrl:
                runs["torchrl_csv"].append(_torchrl_csv(root / f"torchrl_csv{n}", targets, torchrl_steps))
                runs["torchrl_tb"].append(_torchrl_tensorboard(root / f"torchrl_tb{n}", targets, torchrl_steps))
    csv_theirs = best_rate(runs["torchrl_csv"]) if with_torchrl else None
    tb_theirs = best_rate(runs["torchrl_tb"]) if with_torchrl else None
    scenario = f"2. step() into files, {targets} targets x 12 keys"
    size = f"{steps} steps (TorchRL {torchrl_steps}), best of {repeat}"
    return [
        Row(
            scenario,
            "CSV, in the OS when step() returns, snapshots/s",
            best_rate(runs["csv"]),
            csv_theirs,
            goal=("ratio", 10.0),
            note=f"SyncMonitor(CSVSink) vs LoggerMonitor(CSVLogger), no fsync on either side; {size}",
        ),
        Row(
            scenario,
            "floor: the same rows and appends with no monitor, snapshots/s",
            best_rate(runs["floor"]),
            csv_theirs,
            note="stats(), float dicts and rates, CSVSink.format, one locked aiofiles append per step; "
            "nothing else (see Bare)",
            who="floor",
        ),
        Row(
            scenario,
            "CSV with fsync per batch (ours only), snapshots/s",
            best_rate(runs["fsync"]),
            csv_theirs,
            note="CSVSink(fsync=True): every batch forced to disk before step() returns; TorchRL cannot fsync",
        ),
        Row(
            scenario,
            "TensorBoard event files, snapshots/s",
            best_rate(runs["tb"]),
            tb_theirs,
            note="TensorBoardSink vs TensorboardLogger; timed span ends with a flush of each",
        ),
    ]
