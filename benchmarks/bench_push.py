"""Scenarios: what pushing values from the training loop costs the caller's thread, and the rate it carries.

13. ``SyncMonitor.log("learner", metrics, step=i)`` with a 10-key dict of floats,
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

15. A steady rate: the main thread pushes a 4-key dict at 10,000 to 200,000
pushes a second, paced by a busy wait on ``perf_counter`` against a
deadline per push (a late push is made at once, so the rate holds on
average), into a ``SyncMonitor`` with default settings and a no-op sink.
A rate is held when the pacer kept it and no push was dropped, neither
from the push buffer nor from the sink's queue: every one written. The
floor, the machine's limit, is the same pacer appending to a deque as long
as ours (16 x 1,024) that a plain thread empties every millisecond, making
a record of each push: the least any design with that bound drained on
another thread does, run just before ours at each rate. The CPU the
monitor costs is the process's CPU time less the pacer thread's own (the
busy wait is the pacer's), with the monitor, less the same with a pacer
calling a function that does nothing, per push; the caller's cost is the
time spent inside ``log()`` per push, GIL waits included.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from monitor_async import SyncMonitor

from ._common import NoopSink, Row, has_torchrl, new_record, quiet

__all__ = ["run", "run_rate"]

SCENARIO = "13. pushing values: log(), 10-key dict, caller's thread"
METRICS = {f"m{i}": 0.5 + i for i in range(10)}
RATES = (10_000, 25_000, 50_000, 100_000, 200_000)
BOUND = 16 * 1024
"""Pushes that may wait for the monitor's loop with the default ``queue_size`` (docs/guarantees.md)."""
HELD = 0.98
"""A pacer that made this share of its pushes' rate kept it (the rest is the last pushes' rounding)."""


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




def _nothing(name: str, metrics: Any, *, step: int | None = None) -> None:
    return None


def _paced(log: Callable[..., None], rate: float, seconds: float) -> tuple[int, float, float, float]:
    """Pushes a 4-key dict ``rate`` times a second for ``seconds``.

    Returns the pushes, the rate achieved, the seconds spent inside ``log()``
    and the CPU seconds of the other threads of the process meanwhile.
    """
    period = 1.0 / rate
    total = max(1, int(rate * seconds))
    clock = time.perf_counter
    cpu, own = time.process_time(), time.thread_time()
    start = now = clock()
    in_log = 0.0
    for i in range(total):
        due = start + i * period
        while now < due:
            now = clock()
        log("learner", {"loss": 0.5, "lr": 3e-4, "grad": 0.7, "i": i}, step=i)
        after = clock()
        in_log += after - now
        now = after
    took = now - start
    others = (time.process_time() - cpu) - (time.thread_time() - own)
    return total, total / took, in_log, others


def _monitored(rate: float, seconds: float) -> dict[str, float]:
    sink = NoopSink()
    monitor = SyncMonitor(sink)
    monitor.start()
    try:
        pushed, achieved, in_log, others = _paced(monitor.log, rate, seconds)
    finally:
        monitor.close()
    stats = monitor.stats()
    return {
        "pushed": pushed, "achieved": achieved, "in_log": in_log, "others": others,
        "dropped": stats["log_dropped"] + stats.get(f"sink/{sink.name}/dropped", 0.0),
        "written": stats.get(f"sink/{sink.name}/written", 0.0),
    }


def _bare(rate: float, seconds: float) -> dict[str, float]:
    pushed, achieved, in_log, others = _paced(_nothing, rate, seconds)
    return {"pushed": pushed, "achieved": achieved, "in_log": in_log, "others": others}


def _plain(rate: float, seconds: float, size: int = BOUND, every: float = 0.001) -> dict[str, float]:
    """The machine's limit: the same pacer into a bounded deque a plain thread makes records of every ``every`` s."""
    buffer: deque[tuple[str, dict[str, Any], int | None, float]] = deque(maxlen=size)
    done = threading.Event()
    taken = 0

    def drain() -> None:
        nonlocal taken
        popleft = buffer.popleft
        while True:
            stopping = done.is_set()
            for _ in range(len(buffer)):
                name, metrics, step, when = popleft()
                new_record(name, step, when, {f"{name}/{key}": float(value) for key, value in metrics.items()})
                taken += 1
            if stopping:
                return
            time.sleep(every)

    def push(name: str, metrics: Any, *, step: int | None = None) -> None:
        buffer.append((name, metrics.copy(), step, time.time()))

    thread = threading.Thread(target=drain)
    thread.start()
    try:
        pushed, achieved, in_log, others = _paced(push, rate, seconds)
    finally:
        done.set()
        thread.join()
    return {"pushed": pushed, "achieved": achieved, "in_log": in_log, "others": others, "dropped": pushed - taken}


def _held(rate: float, run: dict[str, float]) -> bool:
    kept = run["achieved"] >= HELD * rate
    return kept and run.get("dropped", 0.0) == 0 and run.get("written", run["pushed"]) == run["pushed"]


def run_rate(
    *, rates: Sequence[float] = RATES, seconds: float = 3.0, goal_rate: float = 100_000, goal_seconds: float = 5.0,
    baseline: bool = True,
) -> list[Row]:
    """The highest steady push rate with no drop, beside the machine's; the CPU the drain costs per push.

    ``goal_rate`` runs ``goal_seconds``, the other ``rates`` ``seconds`` each.
    """
    quiet()
    load = os.getloadavg()[0]
    ours: dict[float, dict[str, float]] = {}
    floor: dict[float, dict[str, float]] = {}
    plain: dict[float, dict[str, float]] = {}
    for rate in sorted({*rates, goal_rate}):
        length = goal_seconds if rate == goal_rate else seconds
        floor[rate] = _bare(rate, length)
        plain[rate] = _plain(rate, length)
        ours[rate] = _monitored(rate, length)
    load_end = os.getloadavg()[0]
    held = max((rate for rate, run in ours.items() if _held(rate, run)), default=0.0)
    limit = max((rate for rate, run in plain.items() if _held(rate, run)), default=0.0)
    goal = ours[goal_rate]
    name = f"15. pushing at a steady rate: log(), 4-key dict, {goal_seconds:g} s at {goal_rate:,.0f}/s"
    ladder = ", ".join(f"{rate / 1000:g}k" for rate in sorted(ours))
    below = limit < goal_rate
    note = (
        f"load average {load:.2f} at start, {load_end:.2f} at end; a plain thread draining the same buffer "
        + (f"held {limit:,.0f}/s at most: the machine's limit is below the goal's rate" if below
           else f"held {limit:,.0f}/s")
    )
    rows = [
        Row(name, f"pushes dropped at {goal_rate:,.0f}/s for {goal_seconds:g} s (goal: 0)", goal["dropped"],
            unit="records", goal=("max", 0.0), note=note,
            extra={"pushed": goal["pushed"], "written": goal["written"], "achieved": goal["achieved"],
                   "floor_achieved": floor[goal_rate]["achieved"]}),
        Row(name, f"highest steady rate with no drop, of {ladder}/s", held,
            extra={f"dropped_at_{rate:.0f}": run["dropped"] for rate, run in ours.items()}
            | {f"achieved_at_{rate:.0f}": run["achieved"] for rate, run in ours.items()}),
        Row(name, f"floor: the same pacer into a {BOUND:,} deque a plain thread makes records of every 1 ms, "
            f"highest rate with no drop, of {ladder}/s", limit, who="floor",
            extra={f"dropped_at_{rate:.0f}": run["dropped"] for rate, run in plain.items()}
            | {f"bare_pacer_achieved_at_{rate:.0f}": run["achieved"] for rate, run in floor.items()}),
    ]
    for rate in (10_000, goal_rate):
        if rate not in ours:
            continue
        run, bare = ours[rate], floor[rate]
        drain = (run["others"] - bare["others"]) / run["pushed"]
        rows.append(Row(name, f"CPU of the monitor's thread per push at {rate:,.0f}/s (process CPU less the "
                        "pacer's, less the same without a monitor)", drain * 1e6, unit="us",
                        extra={"cpu_seconds": run["others"], "floor_cpu_seconds": bare["others"]}))
        rows.append(Row(name, f"caller's time in log() per push at {rate:,.0f}/s, GIL waits included",
                        run["in_log"] / run["pushed"] * 1e6, unit="us",
                        extra={"floor_us": bare["in_log"] / bare["pushed"] * 1e6}))
    return rows
