"""Alerts: how fast a rule notices, that it does not cry wolf, and what the rules cost at scale.

- Detection (``trials`` watches in one monitor, each a trial, polled every
  ``interval`` with ``after`` seconds): a counter that stops (``stalled``), a
  ``stats()`` that hangs (``quiet`` and ``stalled``) and a value that turns
  NaN (``nonfinite``). Each trial stops at its own phase of the poll
  interval; its latency runs from the target's last answer that moved (or
  the NaN's first answer) to the event's ``time``. The worst trial is
  reported, held to ``after + 2 * interval`` (a NaN: one poll interval,
  plus 20 ms for the loop's own timer resolution).
- No false alarms: a collector that finishes (``completed=1``), a full
  replay buffer still written, a counter that moves once per ``after / 2``,
  with their rules and `Alert.defaults()`, over ``intervals`` poll
  intervals; then a monitor stopped and started again mid-run. Events:
  held to zero.
- Cost: scenario 7's setting (``targets`` cheap targets at 1 Hz into a
  no-op sink, measured as :mod:`benchmarks.bench_scale` measures it), in
  ``rounds`` rounds of one run without rules and one with `Alert.defaults()`
  in this process, the order turning each round: the CPU share with rules,
  as the median of the per-round ratios, is held to 1.15 times the one
  without; with rules, the share of polls on time is held to 0.99 and the
  records dropped to zero. Twice: with scenario 7's targets, whose keys
  none of the default rules watch, and with targets that look like RL
  targets (`Learner`: ``frames`` and ``write_count``, two counters the
  default ``stalled`` rules track per watch, at every record), whose
  rules' events (``blocked`` aside: a loaded machine does block the loop)
  are held to zero.

No peer has rules to compare with (TorchRL's ``LoggerMonitor`` notices
nothing), so no TorchRL figure here.
"""

from __future__ import annotations

import asyncio
import gc
import math
import statistics
import time
from typing import Any

from monitor_async import Alert, AlertEvent, Monitor

from ._common import NoopSink, Row, loop_window, share_on_time
from .bench_scale import Tiny

__all__ = ["main", "run"]


class _Trial:
    """One detection trial: a target that moves until ``stop_at``, then stops, hangs or gives NaN."""

    def __init__(self, how: str, stop_at: float) -> None:
        self.how = how
        self.stop_at = stop_at
        self.frames = 0
        self.last_move: float | None = None  # unix time of the last answer that moved
        self.first_nan: float | None = None
        self.release = asyncio.Event()

    async def stats(self) -> dict[str, Any]:
        now = time.monotonic()
        if now < self.stop_at:
            self.frames += 1
            self.last_move = time.time()
            return {"frames": self.frames, "loss": 0.5}
        if self.how == "hang":
            await self.release.wait()
        if self.how == "nan":
            if self.first_nan is None:
                self.first_nan = time.time()
            self.frames += 1
            return {"frames": self.frames, "loss": math.nan}
        return {"frames": self.frames, "loss": 0.5}


async def _detect(trials: int, interval: float, after: float) -> dict[str, float]:
    """The worst latency (seconds) of each detection, over ``trials`` trials each."""
    events: list[AlertEvent] = []
    monitor = Monitor(NoopSink(), poll_interval=interval, notify=events.append, on_error="ignore", alerts=[
        Alert.stalled("stop_*/frames", after=after, name="stalled"),
        Alert.stalled("hang_*/frames", after=after, name="hung stalled"),
        Alert.quiet("hang_*", after=after, name="hung quiet"),
        Alert.nonfinite("nan_*", name="nan"),
    ])
    start = time.monotonic() + 0.5
    made: dict[str, _Trial] = {}
    for how in ("stop", "hang", "nan"):
        for i in range(trials):
            trial = made[f"{how}_{i}"] = _Trial(how, start + interval * i / trials)  # each at its own phase
            monitor.watch(stats_fn=trial.stats, name=f"{how}_{i}", offload="inline")
    async with monitor:
        deadline = time.monotonic() + 0.5 + after + 10 * interval + 5.0
        while time.monotonic() < deadline and len(events) < 4 * trials:
            await asyncio.sleep(0.02)
        for trial in made.values():
            trial.release.set()
    worst: dict[str, float] = {}
    seen: dict[str, int] = {}
    for event in events:
        if event.state != "firing":
            continue
        trial = made[event.watch]
        began = trial.first_nan if event.rule == "nan" else trial.last_move
        if began is None:
            continue
        worst[event.rule] = max(worst.get(event.rule, 0.0), event.time - began)
        seen[event.rule] = seen.get(event.rule, 0) + 1
    for rule in ("stalled", "hung stalled", "hung quiet", "nan"):
        if seen.get(rule, 0) < trials:
            worst[rule] = math.inf  # a trial that never fired: not detected
    return worst


class _Finishing:
    def __init__(self) -> None:
        self.frames = 0

    def stats(self) -> dict[str, int]:
        self.frames = min(self.frames + 50, 1000)
        return {"frames": self.frames, "completed": int(self.frames >= 1000)}


class _FullBuffer:
    def __init__(self) -> None:
        self.writes = 0

    def stats(self) -> dict[str, int]:
        self.writes += 10
        return {"size": 1000, "capacity": 1000, "write_count": self.writes}


class _Slow:
    def __init__(self, every: float) -> None:
        self.start = time.monotonic()
        self.every = every

    def stats(self) -> dict[str, int]:
        return {"frames": int((time.monotonic() - self.start) // self.every)}


async def _false_alarms(intervals: int, interval: float, after: float) -> tuple[int, int]:
    """(events over ``intervals`` poll intervals of healthy targets, events of a monitor stopped mid-run)."""
    events: list[AlertEvent] = []
    rules = [
        *Alert.defaults(),
        Alert.stalled("collector/frames", after=after, unless="completed"),
        Alert.stalled("rb/write_count", after=after),
        Alert.stalled("slow/frames", after=after),
        Alert.quiet("*", after=after),
    ]
    monitor = Monitor(NoopSink(), poll_interval=interval, notify=events.append, alerts=rules)
    monitor.watch(_Finishing(), name="collector")
    monitor.watch(_FullBuffer(), name="rb")
    monitor.watch(_Slow(after / 2), name="slow")
    async with monitor:
        await asyncio.sleep(intervals * interval)
    healthy = len(events)
    events.clear()
    stopped = Monitor(NoopSink(), poll_interval=interval, notify=events.append, alerts=rules)
    stopped.watch(_Slow(after / 2), name="slow")
    stopped.watch(_Finishing(), name="collector")
    for _ in range(3):
        await stopped.start()
        await asyncio.sleep(intervals * interval / 6)
        await stopped.stop()
        await asyncio.sleep(2 * after)  # stopped for longer than `after`: that time does not count
    return healthy, len(events)


class Learner(Tiny):
    """`Tiny`'s four scalars, two of them TorchRL's counters: `Alert.defaults()` tracks ``frames`` and ``write_count``."""

    __slots__ = ()

    def stats(self) -> dict[str, float]:
        times = self.times
        times.append(time.monotonic())
        calls = len(times)
        return {"frames": 64 * calls, "write_count": 8 * calls, "queue_depth": 3, "latency_ms": 1.5}


async def _scale(targets: list[Tiny], interval: float, warmup: float, seconds: float, rules: bool) -> tuple[
    float, float, float, float, dict[str, float]
]:
    events: list[AlertEvent] = []
    monitor = Monitor(NoopSink(), poll_interval=interval, alerts=Alert.defaults() if rules else None,
                      notify=events.append)
    for n, target in enumerate(targets):
        monitor.watch(target, name=f"t{n}")
    await monitor.start()
    wall0, wall1, cpu0, cpu1 = await loop_window(warmup, seconds)
    stats = monitor.stats()
    await monitor.stop(log_final=True)
    stats["sink/noop/dropped"] = monitor.stats()["sink/noop/dropped"]
    stats["blocked"] = sum(e.state == "firing" and e.rule == "blocked loop" for e in events)
    return wall0, wall1, cpu0, cpu1, stats


def _cost(
    targets: int, interval: float, warmup: float, seconds: float, tolerance: float, rounds: int,
    make: type[Tiny] = Tiny,
) -> list[dict[bool, dict[str, Any]]]:
    """``rounds`` rounds, each without and with rules, the order turning each round.

    The machine's drift between rounds hits both sides of a round, and one
    within a round hits each side first as often as second.
    """
    out: list[dict[bool, dict[str, Any]]] = []
    for turn in range(rounds):
        pair: dict[bool, dict[str, Any]] = {}
        for rules in ((False, True) if turn % 2 == 0 else (True, False)):
            watched = [make() for _ in range(targets)]
            wall0, wall1, cpu0, cpu1, stats = asyncio.run(_scale(watched, interval, warmup, seconds, rules))
            on_time = share_on_time((target.times for target in watched), wall0, wall1, interval, tolerance)
            pair[rules] = {"share": (cpu1 - cpu0) / (wall1 - wall0), "on_time": on_time,
                           "stats": stats}
            del watched
            gc.collect()
        out.append(pair)
    return out


def run(
    *,
    trials: int = 20,
    interval: float = 0.1,
    after: float = 1.0,
    intervals: int = 1000,
    quiet_interval: float = 0.01,
    quiet_after: float = 0.5,
    targets: int = 10_000,
    warmup: float = 3.0,
    seconds: float = 15.0,
    tolerance: float = 0.05,
    rounds: int = 4,
    baseline: bool = True,
) -> list[Row]:
    """Detection latency (worst of ``trials``), false alarms over ``intervals`` intervals, and the rules' CPU cost.

    No peer watches for stalls, so ``baseline`` (the suite's TorchRL switch) changes nothing here.
    """
    worst = asyncio.run(_detect(trials, interval, after))
    healthy, stopped = asyncio.run(_false_alarms(intervals, quiet_interval, quiet_after))
    plain_cost = _cost(targets, interval=1.0, warmup=warmup, seconds=seconds, tolerance=tolerance, rounds=rounds)
    learner_cost = _cost(targets, interval=1.0, warmup=warmup, seconds=seconds, tolerance=tolerance, rounds=rounds,
                         make=Learner)
    bound = after + 2 * interval
    detection = f"14. alerts: detection, {trials} trials each, after={after:g} s, poll every {interval:g} s"
    alarms = f"14. alerts: false alarms over {intervals:,} intervals of {quiet_interval * 1000:g} ms"
    return [
        Row(detection, "worst latency, a counter that stops (stalled)", worst["stalled"], unit="s",
            goal=("max", bound), note=f"from the last increase to the event; bound after + 2 * interval = {bound:g} s"),
        Row(detection, "worst latency, a hung stats() (quiet)", worst["hung quiet"], unit="s", goal=("max", bound),
            note="from the last answer to the event"),
        Row(detection, "worst latency, a hung stats() (stalled)", worst["hung stalled"], unit="s",
            goal=("max", bound), note="from the last increase to the event"),
        Row(detection, "worst latency, a NaN (nonfinite)", worst["nan"], unit="s", goal=("max", interval + 0.02),
            note="from the first answer with the NaN to the event: within one poll"),
        Row(alarms, "events: a finished collector, a full buffer still written, a slow steady counter", healthy,
            unit="records", goal=("max", 0), note=f"their stalled and quiet rules (after={quiet_after:g} s) and "
            "Alert.defaults(); the slow counter moves once per after/2"),
        Row(alarms, "events: a monitor stopped and started again mid-run", stopped, unit="records", goal=("max", 0),
            note=f"three runs, each followed by {2 * quiet_after:g} s stopped (longer than after)"),
        *_cost_rows(f"14. alerts: {targets:,} targets at 1 Hz with Alert.defaults()", plain_cost,
                    seconds, warmup, tolerance, alarms=False),
        *_cost_rows(f"14. alerts: {targets:,} RL-like targets (frames, write_count) at 1 Hz with Alert.defaults()",
                    learner_cost, seconds, warmup, tolerance, alarms=True),
    ]


def _cost_rows(
    scale: str, cost: list[dict[bool, dict[str, Any]]], seconds: float, warmup: float, tolerance: float, alarms: bool
) -> list[Row]:
    """The rows of one cost measurement: CPU over the monitor without rules, polls on time, drops (and events)."""
    ratios = sorted(pair[True]["share"] / pair[False]["share"] for pair in cost if pair[False]["share"] > 0)
    plain = {"share": statistics.median(p[False]["share"] for p in cost),
             "on_time": min(p[False]["on_time"] for p in cost)}
    ruled = {"share": statistics.median(p[True]["share"] for p in cost),
             "on_time": min(p[True]["on_time"] for p in cost),
             "dropped": max(p[True]["stats"]["sink/noop/dropped"] for p in cost),
             "fired": sum(p[True]["stats"]["alerts_fired"] for p in cost),
             "blocked": sum(p[True]["stats"]["blocked"] for p in cost)}
    rows = [
        Row(scale, "process CPU share with rules (over without: the median of per-round ratios)", ruled["share"],
            unit="share", goal=("floor", 1.15), floor=plain["share"],
            floor_ratio=statistics.median(ratios) if ratios else None, note=(
                f"{len(cost)} rounds of a {seconds:g} s window after {warmup:g} s warm-up each, measured as "
                f"scenario 7, without and with rules, the order turning each round; medians without {plain['share']:.3f}, with "
                f"{ruled['share']:.3f}; per-round ratios {', '.join(f'{r:.2f}' for r in ratios)}"
            )),
        Row(scale, f"share of polls within {tolerance * 1000:g} ms of their slot, with rules (worst round)",
            ruled["on_time"], unit="share", goal=("min", 0.99), note=f"without rules {plain['on_time']:.4f}"),
        Row(scale, "records dropped by a sink that keeps up, with rules", ruled["dropped"],
            unit="records", goal=("max", 0), note=f"alerts fired: {ruled['fired']:,.0f}"),
    ]
    if alarms:
        rows.append(Row(scale, "alert events of healthy targets (all rounds)", ruled["fired"] - ruled["blocked"],
                        unit="records", goal=("max", 0),
                        note=f"the blocked-loop rule's events, left out: {ruled['blocked']:,.0f}"))
    return rows


def main() -> None:
    """Runs the scenario at full size and prints its rows."""
    for row in run():
        print(f"{row.scenario} | {row.measure}: {row.ours:.4g} {row.unit} (goal {row.goal}) {row.note}")


if __name__ == "__main__":
    main()
