"""Scenario: what pushing values from the training loop costs the caller's thread.

``SyncMonitor.log("learner", metrics, step=i)`` with a 10-key dict of floats,
called from the main thread while the monitor runs in the background into a
no-op sink, side by side with what the peers cost on the caller's thread for
the same dict: TorchRL's ``CSVLogger.log_metrics`` (when torchrl is
importable), ``wandb.log`` in offline mode, and tensorboardX's
``SummaryWriter.add_scalar`` once per value. Each is timed over bursts of
calls (``perf_counter`` around the burst, divided by its size); between
bursts the caller sleeps a little, as a training step would, so the
monitor's loop drains the pushes without dropping any. The figure is the
median over the bursts. After the run every pushed record must have been
written by the sink: the row says how many were.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable

from monitor_async import SyncMonitor

from ._common import NoopSink, Row, has_torchrl, quiet

__all__ = ["run"]

SCENARIO = "13. pushing values: log(), 10-key dict, caller's thread"
METRICS = {f"m{i}": 0.5 + i for i in range(10)}


def _per_call(call: Callable[[int], object], bursts: int, size: int, pause: float) -> float:
    """Median seconds per call over ``bursts`` bursts of ``size`` calls."""
    samples = []
    step = 0
    for _ in range(bursts):
        started = time.perf_counter()
        for _ in range(size):
            call(step)
            step += 1
        samples.append((time.perf_counter() - started) / size)
        if pause:
            time.sleep(pause)
    return statistics.median(samples)


def _ours(bursts: int, size: int) -> tuple[float, int, float]:
    sink = NoopSink()
    monitor = SyncMonitor(sink)
    monitor.start()
    log = monitor.log
    try:
        seconds = _per_call(lambda i: log("learner", METRICS, step=i), bursts, size, 0.03)
    finally:
        monitor.close()
    stats = monitor.stats()
    written = stats.get(f"sink/{sink.name}/written", 0.0)
    return seconds, bursts * size, written


def _torchrl_csv(bursts: int, size: int) -> float | None:
    if not has_torchrl():
        return None
    from torchrl.record.loggers.csv import CSVLogger

    logger = CSVLogger(exp_name="push", log_dir=tempfile.mkdtemp())
    return _per_call(lambda i: logger.log_metrics(METRICS, step=i), bursts, size, 0.0)


def _wandb(bursts: int, size: int) -> float | None:
    try:
        import wandb
    except ImportError:
        return None
    run = wandb.init(mode="offline", dir=tempfile.mkdtemp(), project="push-bench")
    try:
        return _per_call(lambda i: run.log(METRICS), bursts, size, 0.0)
    finally:
        run.finish()


def _tensorboardx(bursts: int, size: int) -> float:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(tempfile.mkdtemp())

    def call(i: int) -> None:
        for key, value in METRICS.items():
            writer.add_scalar(key, value, i)

    try:
        return _per_call(call, bursts, size, 0.0)
    finally:
        writer.close()


def run(
    *, bursts: int = 40, size: int = 500, peer_bursts: int = 10, peer_size: int = 100, baseline: bool = True
) -> list[Row]:
    """Ours and each peer's calls per second; the ratio against the cheapest peer (``baseline``: with TorchRL's)."""
    quiet()
    ours, pushed, written = _ours(bursts, size)
    peers: dict[str, float | None] = {
        "TorchRL CSVLogger.log_metrics": _torchrl_csv(peer_bursts, peer_size) if baseline else None,
        "wandb.log (offline)": _wandb(peer_bursts, peer_size),
        "tensorboardX add_scalar x10": _tensorboardx(peer_bursts, peer_size),
    }
    measured = {name: s for name, s in peers.items() if s is not None}
    rows = [
        Row(SCENARIO, "SyncMonitor.log() calls/s on the caller's thread (goal: <= 2 us a call)",
            1 / ours, goal=("min", 500_000.0), extra={"us_per_call": ours * 1e6}),
        Row(SCENARIO, "records written by the sink / records pushed", written / pushed, unit="share",
            goal=("min", 1.0), extra={"pushed": float(pushed), "written": written}),
    ]
    for name, seconds in measured.items():
        rows.append(Row(SCENARIO, f"peer: {name}, calls/s", 1 / seconds, who="peer",
                        extra={"us_per_call": seconds * 1e6}))
    if measured:
        cheapest = min(measured, key=lambda name: measured[name])
        rows.append(Row(SCENARIO, f"ours vs the cheapest peer ({cheapest}), calls/s", 1 / ours,
                        torchrl=1 / measured[cheapest], goal=("ratio", 50.0)))
    return rows


