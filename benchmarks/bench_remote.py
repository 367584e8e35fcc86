"""Scenario "remote": 20 targets at 10 Hz into a real MLflow tracking server killed for 10 s.

A local ``mlflow server`` (SQLite store in a temporary folder) runs on
127.0.0.1. Each side runs 30 s: 20 targets of 12 scalars each
(``TwelveKeys``, step = their ``frames`` counter), polled every 100 ms. The
server is killed with SIGKILL early enough that, 10 s later, it is started
again on the same store and answers a while before the run ends (its first
start-up time, measured before the run, decides when); the note gives the
time it was away, its restart included.

- Ours: ``Monitor`` (the async core, on ``asyncio.run``) with
  ``MLflowSink``; after the 30 s the loop stays up until the spool is
  empty. TorchRL: ``LoggerMonitor`` with its ``MLFlowLogger`` (MLflow's
  fluent API, MLflow's own retries), the same targets and timeline; its
  polling thread is given up to 5 minutes after ``stop()`` to finish a call
  that is still retrying.
- Records lost: snapshots taken (``stats()`` calls that logged) minus the
  distinct steps found in MLflow afterwards (``get_metric_history`` of
  every target's ``frames``, over every run the side logged to).
- Polling slots kept during the outage: from the kill until the server
  answers again (or the run ends), the share of 100 ms slots in which a
  ``stats()`` call began (see ``slot_share``), over all targets.
- Spool drained: from the moment the server answers again until every
  record that had to wait was delivered (``replayed == spooled``).
- Longest polling gap: the longest time between two polls of one target.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.support.mlflow_server import MlflowServer

from ._common import ClockedKeys, Row, quiet, slot_share, torchrl_monitor

__all__ = ["run"]


class Timeline:
    """Kills the server ``kill_at`` seconds into the run, waits ``outage`` seconds, starts it again."""

    def __init__(self, server: MlflowServer, kill_at: float, outage: float) -> None:
        self.server, self.kill_at, self.outage = server, kill_at, outage
        self.down = self.back = 0.0

    def play(self, start: float, sleep: Callable[[float], None] = time.sleep) -> None:
        sleep(max(0.0, start + self.kill_at - time.monotonic()))
        self.server.kill()
        self.down = time.monotonic()
        sleep(max(0.0, self.down + self.outage - time.monotonic()))
        self.server.start()
        self.back = time.monotonic()

    def window(self, end: float) -> tuple[float, float]:
        """From the kill until the server answered again, or until the run ended if that came first."""
        return self.down, min(self.back, end)


def _share(targets: Sequence[ClockedKeys], start: float, end: float, interval: float) -> float:
    hit = slots = 0
    for target in targets:
        h, s = slot_share(target.times, start, end, interval)
        hit, slots = hit + h, slots + s
    return hit / slots if slots else 0.0


def _gap(targets: Sequence[ClockedKeys]) -> float:
    return max((max(b - a for a, b in zip(t.times, t.times[1:], strict=False)) for t in targets if len(t.times) > 1),
               default=0.0)


def _stored(url: str, run_ids: Sequence[str], count: int) -> int:
    """Distinct (target, step) pairs present in MLflow over ``run_ids``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(url)
    found: set[tuple[int, int]] = set()
    for run_id in run_ids:
        for i in range(count):
            found.update((i, m.step) for m in client.get_metric_history(run_id, f"t{i}/frames"))
    return len(found)


def _ours(server: MlflowServer, timeline: Timeline, targets: Sequence[ClockedKeys], seconds: float,
          interval: float, folder: Path) -> dict[str, float]:
    from monitor_async import Monitor
    from monitor_async.backends import MLflowSink

    sink = MLflowSink(server.url, experiment="ours", run_name="monitor-async", spool_dir=folder / "spool",
                      name="mlflow")
    monitor = Monitor(sink, poll_interval=interval)
    for i, target in enumerate(targets):
        monitor.watch(target, name=f"t{i}", step="frames")

    delivered: list[float] = []  # records delivered when the server came back, and when the spool was empty

    async def main() -> tuple[float, float, dict[str, float]]:
        drained = 0.0
        async with sink:
            await monitor.start()
            start = time.monotonic()
            outage = asyncio.create_task(asyncio.to_thread(timeline.play, start))
            while not drained and time.monotonic() < start + seconds + 600:
                figures = sink.counters()
                if outage.done() and not delivered:
                    delivered.append(figures["delivered"])
                if outage.done() and figures["spooled"] and figures["replayed"] == figures["spooled"]:
                    drained = time.monotonic()
                    delivered.append(figures["delivered"])
                await asyncio.sleep(0.01 if outage.done() else 0.1)
                if time.monotonic() >= start + seconds and monitor.running:
                    await monitor.stop()
            await outage
            await monitor.stop()
            await sink.flush()
            stats = monitor.stats()
        return start, drained, stats

    start, drained, stats = asyncio.run(main())
    records = stats["records"]
    stored = _stored(server.url, [sink.run_id or ""], len(targets))
    return {
        "lost": records - stored,
        "records": records,
        "share": _share(targets, *timeline.window(start + seconds), interval),
        "drain": drained - timeline.back if drained else float("nan"),
        "rate": (delivered[-1] - delivered[0]) / (drained - timeline.back) if drained and len(delivered) == 2 else 0.0,
        "gap": _gap(targets),
        "spooled": stats["sink/mlflow/spooled"],
        "duplicates": stats["sink/mlflow/duplicates"],
        "dropped": stats["sink/mlflow/dropped"],
        "start": start,
    }


def _theirs(server: MlflowServer, timeline: Timeline, targets: Sequence[ClockedKeys], seconds: float,
            interval: float) -> dict[str, float]:
    from mlflow.tracking import MlflowClient
    from torchrl.record.loggers.mlflow import MLFlowLogger

    logger = MLFlowLogger(exp_name="torchrl", tracking_uri=server.url)
    monitor = torchrl_monitor()(logger, poll_interval=interval)
    for i, target in enumerate(targets):
        monitor.watch(target, name=f"t{i}", step="frames")
    monitor.start()
    thread: threading.Thread = monitor._thread
    start = time.monotonic()
    timeline.play(start)
    time.sleep(max(0.0, start + seconds - time.monotonic()))
    monitor.stop()
    thread.join(timeout=300)  # a log_metrics call may still be retrying inside MLflow's client
    import mlflow

    mlflow.end_run()
    records = sum(len(t.times) for t in targets)
    client = MlflowClient(server.url)
    experiments = [e.experiment_id for e in client.search_experiments() if e.name != "ours"]
    runs = [r.info.run_id for r in client.search_runs(experiments)]
    stored = _stored(server.url, runs, len(targets))
    return {
        "lost": records - stored,
        "records": records,
        "share": _share(targets, *timeline.window(start + seconds), interval),
        "gap": _gap(targets),
        "stuck": float(thread.is_alive()),
    }


def run(*, seconds: float = 30.0, outage: float = 10.0, targets: int = 20, interval: float = 0.1,
        baseline: bool = True) -> list[Row]:
    """The remote-tracker scenario; see the module docstring."""
    quiet()
    logging.getLogger("mlflow").setLevel(logging.ERROR)
    scenario = f"12. {targets} targets at {1 / interval:g} Hz into MLflow, server killed for {outage:g} s"
    folder = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    server = MlflowServer(folder / "server")
    startup = server.start()
    try:
        # early enough that the server is back (outage + its start-up) a while before the run ends
        kill_at = max(2.0, (seconds - outage - startup) / 2)
        timeline = Timeline(server, kill_at, outage)
        ours = _ours(server, timeline, [ClockedKeys() for _ in range(targets)], seconds, interval, folder)
        ours_outage = timeline.back - timeline.down
        theirs: dict[str, float] | None = None
        if baseline and torchrl_monitor() is not None:
            timeline = Timeline(server, kill_at, outage)
            theirs = _theirs(server, timeline, [ClockedKeys() for _ in range(targets)], seconds, interval)
    finally:
        server.kill()
    window = (f"{seconds:g} s run, {targets} targets every {interval * 1000:g} ms, server killed at "
              f"{kill_at:.1f} s, started again {outage:g} s later and answering {ours_outage:.1f} s after the kill "
              f"(its first start-up took {startup:.1f} s)")
    stuck = " (its polling thread was still stuck after 5 min)" if theirs and theirs["stuck"] else ""
    return [
        Row(scenario, "records lost", ours["lost"], None if theirs is None else theirs["lost"], unit="records",
            goal=("max", 0.0),
            note=f"{window}; ours: {ours['records']:.0f} snapshots, {ours['spooled']:.0f} spooled, "
                 f"{ours['duplicates']:.0f} counted duplicates, {ours['dropped']:.0f} dropped from the queue"
                 + ("" if theirs is None else f"; TorchRL: {theirs['records']:.0f} snapshots{stuck}")),
        Row(scenario, "polling slots kept during the outage", ours["share"],
            None if theirs is None else theirs["share"], unit="share", goal=("min", 0.95),
            note="from the kill until the server answered again (or the run ended), 100 ms slots with a "
                 "stats() call, all targets"),
        Row(scenario, "spool drained after the server returned", ours["drain"], unit="s",
            note="seconds from the server answering again until every record that waited was delivered; "
                 f"the server took {ours['rate']:,.0f} records/s meanwhile, while the run added "
                 f"{targets / interval:,.0f}/s until it stopped"),
        Row(scenario, "longest polling gap of a target", ours["gap"], None if theirs is None else theirs["gap"],
            unit="s", note="the longest time between two stats() calls of one target over the whole run"),
    ]
