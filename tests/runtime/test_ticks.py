"""Background polling when the loop's timer polls inline targets itself (``Ticks``).

A watch whose ``stats()`` answers inline with a mapping is polled in the
timer's callback together with every other watch due then; its task takes
over when an answer must be awaited or the watch moves to a thread. These
tests hold the hand-overs to what a user sees: every poll logged, in order,
on its own slots, and one watch's trouble never costing another its polls.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

from monitor_async import Monitor
from monitor_async.backends import MemorySink
from tests.support.checks import wait_until
from tests.support.targets import Counter
from tests.support.timing import Clocked


class Shifting:
    """Answers with a dict, then (calls 4 to 6) from ``async def``-style coroutines, then a dict again."""

    def __init__(self) -> None:
        self.calls = 0

    def stats(self) -> Any:
        self.calls += 1
        n = self.calls
        if 4 <= n <= 6:
            async def later() -> dict[str, int]:
                await asyncio.sleep(0)
                return {"n": n}

            return later()
        return {"n": n}


async def test_a_target_that_turns_async_is_awaited_then_polled_inline_again() -> None:
    sink = MemorySink()
    target, steady = Shifting(), Counter()
    monitor = Monitor(sink, poll_interval=0.02)
    monitor.watch(target, name="shift")
    monitor.watch(steady, name="steady")
    await monitor.start()
    await wait_until(lambda: target.calls >= 10)
    await monitor.stop(log_final=False)
    logged = [r.metrics["shift/n"] for r in sink.records if r.name == "shift"]
    assert logged == [float(n) for n in range(1, len(logged) + 1)]  # every answer, awaited or not, in order
    assert len(logged) >= 10
    assert steady.calls >= 8  # the neighbour kept its cadence all along


class Slow(Counter):
    """An inline ``stats()`` that takes 20 ms and notes the thread it ran on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[threading.Thread] = []

    def stats(self) -> dict[str, Any]:
        self.threads.append(threading.current_thread())
        time.sleep(0.02)
        return super().stats()


async def test_a_slow_target_moved_to_a_thread_in_background_keeps_being_polled() -> None:
    sink = MemorySink()
    slow = Slow()
    monitor = Monitor(sink, poll_interval=0.05)
    monitor.watch(slow, name="slow")
    await monitor.start()
    await wait_until(lambda: monitor.watches()["slow"] == "thread" and len(sink.records) >= 8)
    await monitor.stop(log_final=False)
    loop_thread = threading.current_thread()
    assert slow.threads[0] is loop_thread
    assert slow.threads[-1] is not loop_thread
    frames = [r.metrics["slow/frames"] for r in sink.records]
    assert frames == [10.0 * n for n in range(1, len(frames) + 1)], "every answer, in order"
    # a poll on its thread when stop() came may answer after it: that answer is left out
    assert slow.calls - len(frames) in (0, 1)


async def test_a_restarted_monitor_polls_each_target_once_per_slot() -> None:
    target = Clocked()
    monitor = Monitor(MemorySink(), poll_interval=0.2)
    monitor.watch(target, name="c", log_on_close=False)
    await monitor.start()
    await asyncio.sleep(0.05)  # the next slot is booked, not yet due
    await monitor.stop()
    await monitor.start()  # the same watch, booked again from a new first slot
    restarted = len(target.times)
    await wait_until(lambda: len(target.times) >= restarted + 5)
    await monitor.stop()
    times = target.times[restarted:]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) > 0.1, gaps  # one poll per 0.2 s slot: the slot booked before stop() is gone


class Fatal(BaseException):
    """Not an ``Exception``: the monitor does not report it, it ends the watch's task."""


class Crashing(Counter):
    def stats(self) -> dict[str, Any]:
        snapshot = super().stats()
        if self.calls == 3:
            raise Fatal("stats() blew up")
        return snapshot


async def test_a_poll_that_raises_past_the_monitor_ends_only_its_own_watch() -> None:
    crashing, after = Crashing(), Counter()
    monitor = Monitor(MemorySink(), poll_interval=0.02)
    monitor.watch(crashing, name="crashing")  # polled first in each tick
    monitor.watch(after, name="after")
    await monitor.start()
    await wait_until(lambda: after.calls >= 10)
    await monitor.stop(log_final=False)
    assert crashing.calls == 3  # its task ended with the error ...
    assert after.calls >= 10  # ... and the watch due in the same tick, after it, was still polled


async def test_a_crowd_started_together_is_polled_in_groups_spread_over_the_interval() -> None:
    targets = [Clocked() for _ in range(600)]  # groups of 256, 256 and 88
    monitor = Monitor(MemorySink(), poll_interval=0.64)  # later groups start 0.64 / 64 = 10 ms apart
    for n, target in enumerate(targets):
        monitor.watch(target, name=f"t{n}", log_on_close=False)
    await monitor.start()
    await wait_until(lambda: all(len(t.times) >= 2 for t in targets))
    await monitor.stop()
    firsts = [t.times[0] for t in targets]
    groups = [firsts[:256], firsts[256:512], firsts[512:]]
    assert max(groups[0]) - min(groups[0]) < 0.2  # the first group at once, at start()
    # each group's timer is due 10 ms after the one before; one that fires late (a loop still busy
    # with the crowd's first steps) brings the next group closer to it, never the next group earlier
    assert min(groups[1]) - min(groups[0]) >= 0.009
    assert min(groups[2]) - min(groups[0]) >= 0.019
    for target in targets:  # each target then keeps its own group's beat
        assert abs(target.times[1] - target.times[0] - 0.64) < 0.2


async def test_an_inline_target_slower_than_its_interval_skips_the_slots_it_missed() -> None:
    """The timers book a carried watch's next slot themselves: an overrun skips slots, counted, never a burst."""

    class Slow:
        calls = 0

        def stats(self) -> dict[str, int]:
            self.calls += 1
            time.sleep(0.12)  # blocks the loop: offload="inline" keeps it there
            return {"x": 1}

    slow = Slow()
    monitor = Monitor(MemorySink(), poll_interval=0.05)
    monitor.watch(slow, name="slow", offload="inline", log_on_close=False)
    await monitor.start()
    await asyncio.sleep(1.0)
    await monitor.stop()
    assert 3 <= slow.calls <= 9  # about 1 s / 0.15 s, never catching up on the 20 slots
    assert monitor.stats()["polls_missed"] >= 8


async def _lag_looks(monkeypatch: Any, interval: float, seconds: float) -> tuple[list[float], set[float]]:
    """The times the loop-lag probe's timer was set for, and the times a poll timer fired, over ``seconds``."""
    from monitor_async._runtime.alerts.lag import LoopLag
    from monitor_async._runtime.timers import Ticks

    looks: list[float] = []
    fired: set[float] = set()
    tick, fire = LoopLag._tick, Ticks._fire

    def noted_tick(self: LoopLag) -> None:
        looks.append(self.expected)
        tick(self)

    def noted_fire(self: Ticks, when: float) -> None:
        fired.add(when)
        fire(self, when)

    monkeypatch.setattr(LoopLag, "_tick", noted_tick)
    monkeypatch.setattr(Ticks, "_fire", noted_fire)
    monitor = Monitor(MemorySink(), poll_interval=interval)
    monitor.watch(Counter(), name="c")
    async with monitor:
        await asyncio.sleep(seconds)
    return looks, fired


async def test_the_loop_lag_probe_looks_in_the_passes_of_polls_due_at_least_every_tenth_of_a_second(
    monkeypatch: Any,
) -> None:
    looks, fired = await _lag_looks(monkeypatch, 0.05, 1.0)
    assert len(looks) >= 8, looks  # still at least ten looks a second (here one a poll tick)
    # its first looks are set before the polls' timers are; from then on it rides on them (a loop late by
    # more than a quarter of its period may leave no poll timer ahead to ride on: a look of its own)
    later = looks[2:]
    assert later and sum(when in fired for when in later) >= 0.8 * len(later), (looks, sorted(fired))


async def test_the_loop_lag_probe_keeps_its_own_timer_beside_polls_due_less_often(monkeypatch: Any) -> None:
    looks, fired = await _lag_looks(monkeypatch, 1.0, 1.0)
    assert len(looks) >= 8, looks
    assert sum(when in fired for when in looks) <= 2, (looks, sorted(fired))  # the one a second that falls near


def test_the_poll_timers_offer_the_latest_due_time_in_a_window_and_none_past_beside_timers_ahead() -> None:
    from monitor_async._runtime.timers import Ticks

    loop = asyncio.new_event_loop()
    try:
        ticks = Ticks(loop, None)  # type: ignore[arg-type]  # only its timers' due times are read
        ticks.carried.update({10.0: [], 10.05: [], 10.2: []})
        ticks.waiting[10.08] = loop.create_future()
        assert ticks.beside(10.025, 10.1) == 10.08
        assert ticks.beside(10.1, 10.15) is None
        ticks.carried.update({20.0 + i: [] for i in range(Ticks.BESIDE)})  # a loop woken this often anyway
        assert ticks.beside(10.025, 10.1) is None
    finally:
        loop.close()
