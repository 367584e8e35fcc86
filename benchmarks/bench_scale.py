"""Scenario 7: 10,000 targets at 1 Hz on one event loop.

An async ``Monitor`` in ``asyncio.run`` watches ``targets`` cheap targets
(each ``stats()`` notes the time of the call), every ``interval`` seconds,
into a no-op sink. Each target's slots are its own: slot 0 is its first
poll's due time (at ``start()``; tasks started together share their group's)
and the k-th slot lies k intervals after it, as the design says. The
benchmark reads slot 0 from the target's first polls (``origin``: the
earliest of ``times[j] - j * interval``; a poll never comes before its
slot), not from the first poll alone, which a start-up pause can make late.
After ``warmup`` seconds, for ``seconds``:

- on time: the share of slots in the window whose poll began within
  ``tolerance`` (50 ms) of the slot; a skipped slot or a poll further off
  counts as missed. How late the first polls came at start-up (a full
  garbage collection among 10,000 first polls) is in the row's note;
- CPU: the process CPU time over the wall time of the window (1.0 = one
  core busy), which includes the targets' own ``stats()`` calls;
- the garbage collector's work in the window (collections of the oldest
  generation and the longest pause) is reported too: the default GC
  settings are left alone, as in the user's program;
- records dropped: the sink's ``dropped`` counter over the whole run,
  start-up and the final snapshot of every watch at ``stop()`` included.
  The monitor runs with the default ``queue_size``, and a no-op sink keeps
  up with any rate: a record dropped here is lost to the monitor's own
  bursts, not to a slow sink.

The CPU share is held to 1.5 times the fourth floor below (the least
per-target bookkeeping), measured in the same process over the same warm-up
and window, in ``rounds`` rounds of one run of the floor and one of ours,
the order turning each round: the goal reads the median of the per-round
ratios (the machine's drift between rounds hits both sides of one; a single
run's CPU share moves by a fifth from one run to the next), the on-time
share and the drops the worst round. The first floor is a plain ``threading.Thread``
(no event loop) polling as many fresh targets in 40 groups a second (group
``g`` is ``targets[g::40]``; group ``k % 40`` is polled at ``start + k *
interval / 40``, waited for with ``Event.wait``), building each target's
``{"t<i>/" + key: float(value)}`` dict into a batch list that is dropped
after the group. That is the least any poller does for these targets at
this rate. A second floor does the same on a bare asyncio loop (one
``loop.call_at`` timer per group, re-armed each interval): what the event
loop adds to the plain thread. A third, the records floor, makes what a
monitor must make of each poll on that loop: each value checked and made a
float under its namespaced key, one ``Record`` per poll, the records kept
for a writer (a timer drops them every 0.25 s, the default ``batch_wait``).
Nothing else: no schedule, rates, counters, queue or sink. It shows how much
of the gap to the plain thread comes with records themselves (built, kept,
then freed from memory that has gone cold). A fourth, the bookkeeping floor,
adds to the records floor the least that the contract asks of any monitor
per target and poll, in one small object per target and one loop per group:
a private copy of the snapshot, the clock read for the rates' time span and
the next slot, the time of the log kept, and the next slot (slots already
past skipped). Still no rates (these targets have no counter), counters,
queue or checks: the goal's floor. Each floor's thread or loop has
ended before the next measurement starts.

TorchRL's ``LoggerMonitor`` has no per-target schedule (one thread polls
every target in turn, then waits ``poll_interval``), so it has no slots to
be on time for: no TorchRL figure here.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import statistics
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from monitor_async import Monitor, Record

from ._common import NoopSink, Row, loop_window, new_record, origin, share_on_time, window

__all__ = ["run"]


class Tiny:
    """A cheap target: four scalars, and the ``time.monotonic()`` of every call.

    The times go to an ``array`` (not a list of floats) so that the benchmark's
    own bookkeeping adds nothing for the garbage collector to walk.
    """

    __slots__ = ("times",)

    def __init__(self) -> None:
        self.times = array("d")

    def stats(self) -> dict[str, float]:
        times = self.times
        times.append(time.monotonic())
        return {"calls": len(times), "queue_depth": 3, "latency_ms": 1.5, "ok": True}


class GCWatch:
    """Times collections of the oldest generation (``gc.callbacks``) without changing any GC setting."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.pauses: list[tuple[float, float]] = []

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self.started = time.perf_counter()
        elif self.started is not None:
            self.pauses.append((time.monotonic(), time.perf_counter() - self.started))
            self.started = None


def _groups(targets: Sequence[Tiny], groups: int) -> list[list[tuple[str, Tiny]]]:
    """``targets[g::groups]`` for each group ``g``, each target with its key prefix ``"t<i>/"``."""
    return [[(f"t{i}/", targets[i]) for i in range(g, len(targets), groups)] for g in range(groups)]


def _poll_group(group: list[tuple[str, Tiny]]) -> None:
    """Polls one group into a batch of float dicts, dropped at once (no sink)."""
    batch = [{prefix + key: float(value) for key, value in target.stats().items()} for prefix, target in group]
    del batch


def _plain_floor(
    targets: int, interval: float, groups: int, warmup: float, seconds: float
) -> tuple[float, float, float, float, int]:
    """The plain-thread floor: ``(wall0, wall1, cpu0, cpu1, polls in the window)`` on fresh targets."""
    watched = [Tiny() for _ in range(targets)]
    parts = _groups(watched, groups)
    step = interval / groups
    done = threading.Event()

    def poll() -> None:
        start = time.monotonic()
        k = 0
        while not done.wait(max(0.0, start + k * step - time.monotonic())):
            _poll_group(parts[k % groups])
            k += 1

    thread = threading.Thread(target=poll, name="plain-floor", daemon=True)
    thread.start()
    try:
        wall0, wall1, cpu0, cpu1 = window(warmup, seconds)
    finally:
        done.set()
        thread.join()
    return wall0, wall1, cpu0, cpu1, _polls(watched, wall0, wall1)


async def _on_timers(
    poll: Callable[[int], None], groups: int, interval: float, warmup: float, seconds: float,
    every: Callable[[], None] | None = None,
) -> tuple[float, float, float, float]:
    """``poll(g)`` for each group from its own ``loop.call_at`` timer, re-armed each ``interval``; the window's figures.

    Group ``g``'s first slot is ``g * interval / groups`` after the start.
    ``every``, when given, runs every 0.25 s (the default ``batch_wait``).
    """
    loop = asyncio.get_running_loop()
    step = interval / groups
    start = loop.time()
    handles: list[asyncio.TimerHandle] = []

    def fire(g: int, when: float) -> None:
        poll(g)
        handles[g] = loop.call_at(when + interval, fire, g, when + interval)

    def again() -> None:
        assert every is not None
        every()
        handles[-1] = loop.call_later(0.25, again)

    for g in range(groups):
        handles.append(loop.call_at(start + g * step, fire, g, start + g * step))
    if every is not None:
        handles.append(loop.call_later(0.25, again))
    try:
        return await loop_window(warmup, seconds)
    finally:
        for handle in handles:
            handle.cancel()


def _loop_floor(
    targets: int, interval: float, groups: int, warmup: float, seconds: float
) -> tuple[float, float, float, float, int]:
    """The bare-loop floor: the same polls from ``loop.call_at`` timers, one per group, on fresh targets."""
    watched = [Tiny() for _ in range(targets)]
    parts = _groups(watched, groups)
    wall0, wall1, cpu0, cpu1 = asyncio.run(
        _on_timers(lambda g: _poll_group(parts[g]), groups, interval, warmup, seconds)
    )
    return wall0, wall1, cpu0, cpu1, _polls(watched, wall0, wall1)


def _checked(snapshot: dict[str, Any], names: dict[str, str]) -> dict[str, float]:
    """A snapshot's values as the monitor keeps them: each checked and made a float, under its namespaced key."""
    metrics: dict[str, float] = {}
    for key, value in snapshot.items():
        kind = type(value)
        if kind is float:
            if value - value != 0.0:  # inf or nan: left out
                continue
        elif kind is int or kind is bool:
            value = value + 0.0
        else:
            continue
        metrics[names[key]] = value
    return metrics


def _record_group(group: list[tuple[str, dict[str, str], Tiny]], kept: deque[Record]) -> None:
    """Polls one group into records kept for a writer: each value checked and made a float as the monitor does."""
    keep = kept.append
    for name, names, target in group:
        keep(new_record(name, None, time.time(), _checked(target.stats(), names)))


class _Slot:
    """One target of the bookkeeping floor: what a poll reads and keeps of it, in one small object."""

    __slots__ = ("name", "names", "origin", "since", "slot", "target")

    def __init__(self, name: str, names: dict[str, str], target: Tiny, origin: float) -> None:
        self.name = name
        self.names = names
        self.target = target
        self.origin = origin  # its k-th slot is origin + k * interval
        self.slot = 0
        self.since = origin  # the time of its last log, which its rates would be over


def _booked_group(group: list[_Slot], kept: deque[Record], interval: float) -> None:
    """:func:`_record_group` with the least per-target bookkeeping the contract asks of a monitor.

    A private copy of each snapshot (a target changing its dict cannot break
    the read), the clock read once for the rates' time span and the next
    slot, the time of this log kept, and the target's next slot, slots
    already past skipped. Nothing else: no rates (these targets have no
    counter), counters, queue bound, or check that the poll may go on.
    """
    keep = kept.append
    clock = time.monotonic
    for target in group:
        metrics = _checked(target.target.stats().copy(), target.names)
        now = clock()
        target.since = now
        keep(new_record(target.name, None, time.time(), metrics))
        slot = target.slot + 1
        due = target.origin + slot * interval
        if now > due:
            slot += int((now - due) // interval) + 1
        target.slot = slot


def _record_parts(watched: Sequence[Tiny], groups: int) -> list[list[tuple[str, dict[str, str], Tiny]]]:
    """The records floor's groups: ``watched[g::groups]``, each target with its name and namespaced keys."""
    keys = tuple(watched[0].stats())
    return [
        [(f"t{i}", {key: f"t{i}/{key}" for key in keys}, watched[i]) for i in range(g, len(watched), groups)]
        for g in range(groups)
    ]


def _slot_parts(watched: Sequence[Tiny], groups: int, start: float, interval: float) -> list[list[_Slot]]:
    """The bookkeeping floor's groups, as :func:`_record_parts`; group ``g``'s first slot ``g / groups`` of an interval in."""
    return [
        [_Slot(name, names, target, start + g * interval / groups) for name, names, target in part]
        for g, part in enumerate(_record_parts(watched, groups))
    ]


def _records_floor(
    targets: int, interval: float, groups: int, warmup: float, seconds: float, book: bool = False
) -> tuple[float, float, float, float, int]:
    """The records floor: the bare loop's polls made into checked records, kept until a timer drops them.

    With ``book``, the bookkeeping floor: the same with the least per-target
    bookkeeping of :func:`_booked_group`.
    """
    watched = [Tiny() for _ in range(targets)]
    kept: deque[Record] = deque()  # what a writer does with them: they go every 0.25 s
    poll: Callable[[int], None]
    if book:
        slots = _slot_parts(watched, groups, time.monotonic(), interval)
        poll = lambda g: _booked_group(slots[g], kept, interval)  # noqa: E731
    else:
        parts = _record_parts(watched, groups)
        poll = lambda g: _record_group(parts[g], kept)  # noqa: E731
    wall0, wall1, cpu0, cpu1 = asyncio.run(_on_timers(poll, groups, interval, warmup, seconds, kept.clear))
    return wall0, wall1, cpu0, cpu1, _polls(watched, wall0, wall1)


def _polls(targets: Sequence[Tiny], start: float, end: float) -> int:
    """``stats()`` calls begun in ``[start, end)``."""
    return sum(bisect.bisect_left(t.times, end) - bisect.bisect_left(t.times, start) for t in targets)


async def _measure(
    targets: list[Tiny], interval: float, warmup: float, seconds: float
) -> tuple[float, float, float, float, dict[str, float]]:
    monitor = Monitor(NoopSink(), poll_interval=interval)  # the default queue_size
    for n, target in enumerate(targets):
        monitor.watch(target, name=f"t{n}")
    await monitor.start()
    wall0, wall1, cpu0, cpu1 = await loop_window(warmup, seconds)
    stats = monitor.stats()
    await monitor.stop(log_final=True)  # every watch's final snapshot, all at once
    after = monitor.stats()  # the drops of the whole run: start-up, polling and the final snapshots
    stats["sink/noop/dropped"] = after["sink/noop/dropped"]
    stats["records_after_stop"] = after["records"]
    stats["written_after_stop"] = after["sink/noop/written"]
    return wall0, wall1, cpu0, cpu1, stats


def _ours(
    targets: int, interval: float, warmup: float, seconds: float, tolerance: float
) -> dict[str, Any]:
    """One run of the monitor on fresh targets: its CPU share, polls on time, the garbage collector's pauses."""
    watched = [Tiny() for _ in range(targets)]
    gcwatch = GCWatch()
    gc.callbacks.append(gcwatch)
    try:
        wall0, wall1, cpu0, cpu1, stats = asyncio.run(_measure(watched, interval, warmup, seconds))
    finally:
        gc.callbacks.remove(gcwatch)
    starts = [target.times[0] - origin(target.times, interval) for target in watched if target.times]
    return {
        "share": (cpu1 - cpu0) / (wall1 - wall0), "stats": stats,
        "on_time": share_on_time((t.times for t in watched), wall0, wall1, interval, tolerance),
        "window": (wall0, wall1), "starts": starts, "pauses": [p for t, p in gcwatch.pauses if wall0 <= t < wall1],
    }


def _share(floor: tuple[float, float, float, float, int]) -> float:
    return (floor[3] - floor[2]) / (floor[1] - floor[0])


def run(
    *,
    targets: int = 10_000,
    interval: float = 1.0,
    warmup: float = 3.0,
    seconds: float = 15.0,
    tolerance: float = 0.05,
    groups: int = 40,
    rounds: int = 3,
    baseline: bool = True,
) -> list[Row]:
    """On-time share, records dropped and CPU share for ``targets`` targets, beside the floors' CPU share."""
    # the floors first, each on its own fresh targets, each ended before the next starts
    plain = _plain_floor(targets, interval, groups, warmup, seconds)
    bare = _loop_floor(targets, interval, groups, warmup, seconds)
    records = _records_floor(targets, interval, groups, warmup, seconds)
    share_plain, share_bare, share_records = _share(plain), _share(bare), _share(records)
    # then the goal's floor and ours in rounds, the order turning each round: the median of the per-round
    # ratios, so that the machine's drift between rounds hits both sides of one
    booked_runs: list[tuple[float, float, float, float, int]] = []
    ours_runs: list[dict[str, Any]] = []
    for turn in range(rounds):
        for side in (("floor", "ours") if turn % 2 == 0 else ("ours", "floor")):
            if side == "floor":
                booked_runs.append(_records_floor(targets, interval, groups, warmup, seconds, book=True))
            else:
                ours_runs.append(_ours(targets, interval, warmup, seconds, tolerance))
    shares_booked = [_share(b) for b in booked_runs]
    ratios = [o["share"] / b for o, b in zip(ours_runs, shares_booked, strict=True) if b > 0]
    share = statistics.median(o["share"] for o in ours_runs)
    share_booked = statistics.median(shares_booked)
    booked = booked_runs[0]
    worst = min(ours_runs, key=lambda o: o["on_time"])  # its notes: the round with the fewest polls on time
    stats = worst["stats"]
    wall0, wall1 = worst["window"]
    starts, pauses = worst["starts"], worst["pauses"]
    late_starts = sum(late > tolerance for late in starts)
    start_note = (
        f"first polls at start-up: {late_starts:,} more than {tolerance * 1000:g} ms after their slot, "
        f"the latest {max(starts, default=0.0) * 1000:.0f} ms"
    )
    gc_note = (
        f"full GC collections in the window: {len(pauses)}, longest {max(pauses) * 1000:.0f} ms"
        if pauses
        else "no full GC collection in the window"
    )
    scenario = f"7. {targets:,} targets at {1 / interval:g} Hz on one loop"
    window = f"{seconds:g} s window after {warmup:g} s warm-up"
    expected = targets * (wall1 - wall0) / interval

    def polled(floor: tuple[float, float, float, float, int]) -> str:
        return f"{floor[4]:,} polls in the window ({floor[4] / expected:.1%} of the rate)"

    def over(floor: float) -> str:
        return f"ours {share / floor:.2f}x" if floor > 0 else "no CPU counted"

    dropped = max(o["stats"]["sink/noop/dropped"] for o in ours_runs)
    on_times = ", ".join(f"{o['on_time']:.4f}" for o in ours_runs)
    return [
        Row(scenario, f"share of polls within {tolerance * 1000:g} ms of their slot (worst round)", worst["on_time"],
            None, unit="share", goal=("min", 0.99), note=(
                f"{window}; per round {on_times}; in the worst, {gc_note}; {start_note}"
            )),
        Row(scenario, "records dropped by a sink that keeps up (most of a round)", dropped, None, unit="records",
            goal=("max", 0), note=(
                f"no-op sink, default queue_size; each whole run: start-up, polling and {targets:,} final "
                f"snapshots at stop(); {stats['written_after_stop']:,.0f} of {stats['records_after_stop']:,.0f} "
                "records written in the round with the fewest polls on time"
            )),
        Row(scenario, "process CPU share of one core (medians of rounds)",
            share, None, unit="share", goal=("floor", 1.5), floor=share_booked,
            floor_ratio=statistics.median(ratios) if ratios else None,
            note=(
                f"{window}; medians of {rounds} rounds, the floor and ours in each, the order turning each round; "
                f"per-round ratios {', '.join(f'{r:.2f}' for r in sorted(ratios))}; in the worst round polls "
                f"{stats['polls']:,.0f}, missed {stats['polls_missed']:,.0f}; "
                f"plain-thread floor {share_plain:.3f} ({over(share_plain)}), "
                f"bare-loop floor {share_bare:.3f} ({over(share_bare)}), bookkeeping floor {share_booked:.3f} "
                f"({over(share_booked)}); "
                "TorchRL has no per-target slots"
            )),
        Row(scenario, "floor: process CPU share, plain polling thread, no event loop", share_plain, unit="share",
            note=f"{groups} groups a second, float dicts built and dropped, no sink; {polled(plain)}", who="floor"),
        Row(scenario, "floor: process CPU share, bare asyncio loop, one timer per group", share_bare, unit="share",
            note=f"the same polls from loop.call_at callbacks; {polled(bare)}", who="floor"),
        Row(scenario, "floor: process CPU share, bare loop making checked records kept for a writer",
            share_records, unit="share", floor=share_plain, note=(
                "the bare loop's polls, each value checked and made a float as the monitor does, one Record "
                "per poll kept in a deque that a timer empties every 0.25 s; no schedule, rates, counters or "
                f"queue; {polled(records)}; {share_records / share_plain:.2f}x the plain thread, "
                f"ours {share / share_records:.2f}x this floor" if share_plain > 0 and share_records > 0
                else "no CPU counted"
            ), who="floor"),
        Row(scenario, "floor: process CPU share, the records floor with the least per-target bookkeeping",
            share_booked, unit="share", floor=share_plain, note=(
                "the records floor, each snapshot copied first and each target's next slot and last log time "
                "kept (one small object per target, one loop a group): what the contract asks of any monitor "
                f"per poll, with no rates, counters, queue or checks; {polled(booked)}; "
                f"{share_booked / share_plain:.2f}x the plain thread, ours {share / share_booked:.2f}x this floor"
                if share_plain > 0 and share_booked > 0 else "no CPU counted"
            ), who="floor"),
    ]
