"""What a timer tick costs per poll at 10,000 watches: ``python -m benchmarks.probes.ticks``.

A probe, not a scenario of the suite (it reaches into private modules): behind scenario 7's figures, steadier
than a timed run (a few percent from run to run, where scenario 7's CPU share
moves by a fifth). It makes a monitor of ``--targets`` cheap targets (a no-op
sink, never started) and calls the timers' tick itself (``Ticks._poll``, the
path of every background poll) on the watches in 40 groups, as scenario 7's
ticks poll them; each group is timed with ``perf_counter``. Scenario 7's
floors are timed the same way, each group's work without its thread or loop
and on targets of their own: the plain thread's (float dicts built and
dropped), the records floor's (each value checked, one ``Record`` per poll)
and the bookkeeping floor's (the records floor with the least per-target
bookkeeping the contract asks). Each runs twice: with the caches as the
previous group left them (*warm*), and with a 48 MiB buffer written over
before each group (*cold*: what a second of other work does to the memory of
a target polled once a second). It prints the best round of each, in µs per
poll, and each over the plain thread's.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence

from monitor_async import Monitor, Record
from monitor_async._runtime.timers import Ticks
from monitor_async._runtime.watch import Watch

from .._common import NoopSink
from ..bench_scale import Tiny, _booked_group, _groups, _poll_group, _record_group, _record_parts, _slot_parts

GROUPS = 40
_FLUSH = bytearray(48 << 20)
_LINES = b"\x01" * (len(_FLUSH) // 64)


def _flush() -> None:
    """Writes one byte of every cache line of a buffer larger than the caches."""
    _FLUSH[::64] = _LINES


def _best(tick: Callable[[int], None], groups: int, polls: int, rounds: int, cold: bool) -> float:
    """µs per poll of the best of ``rounds`` rounds, each ``tick(g)`` for every group ``g``."""
    best = float("inf")
    for _ in range(rounds):
        took = 0.0
        for g in range(groups):
            if cold:
                _flush()
            started = time.perf_counter()
            tick(g)
            took += time.perf_counter() - started
        best = min(best, took)
    return best / polls * 1e6


async def _measure(targets: int, rounds: int) -> list[tuple[str, list[tuple[str, float]]]]:
    loop = asyncio.get_running_loop()
    monitor = Monitor(NoopSink(), poll_interval=3600.0)  # no slot of the probe falls due by itself
    for i in range(targets):
        monitor.watch(Tiny(), name=f"t{i}")
    ticks = Ticks(loop, monitor._poller)
    watches: list[Watch] = list(monitor._watches.values())
    now = loop.time()
    for watch in watches:  # carried by the timers, as a started monitor's watches are
        watch.slots.start(now)
        watch.slots.running = False  # as a monitor never started: every call of the probe logs a record
        watch.slots.waiter = loop.create_future()
    ours = [watches[g::GROUPS] for g in range(GROUPS)]
    queue = monitor._channels[0].records.items

    def tick(g: int) -> None:
        ticks._poll(ours[g])
        queue.clear()  # what the writer does: the records go

    plain = _groups([Tiny() for _ in range(targets)], GROUPS)
    parts = _record_parts([Tiny() for _ in range(targets)], GROUPS)
    slots = _slot_parts([Tiny() for _ in range(targets)], GROUPS, time.monotonic(), 3600.0)
    kept: deque[Record] = deque()

    def records(g: int) -> None:
        _record_group(parts[g], kept)
        kept.clear()

    def booked(g: int) -> None:
        _booked_group(slots[g], kept, 3600.0)
        kept.clear()

    work: list[tuple[str, Callable[[int], None]]] = [
        ("plain thread", lambda g: _poll_group(plain[g])),
        ("records floor", records),
        ("bookkeeping floor", booked),
        ("a tick of the timers", tick),
    ]
    for g in range(GROUPS):  # the first polls (keys named, baselines kept) and the first steady one
        tick(g)
        tick(g)
    return [
        ("cold" if cold else "warm", [(label, _best(fn, GROUPS, targets, rounds, cold)) for label, fn in work])
        for cold in (False, True)
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.probes.ticks", description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=10_000, help="watches (default 10,000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every group; the best is kept (default 5)")
    args = parser.parse_args(argv)
    for label, figures in asyncio.run(_measure(args.targets, args.rounds)):
        plain = figures[0][1]
        print(f"{label}: " + ", ".join(
            f"{name} {us:.2f} µs" + ("" if name == "plain thread" else f" ({us / plain:.2f}x)") for name, us in figures
        ))


if __name__ == "__main__":
    main()
