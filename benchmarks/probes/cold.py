"""How long 100 polls take right after the polling thread slept: ``python -m benchmarks.probes.cold``.

A probe, not a scenario of the suite (it reaches into private modules): behind the README's performance notes.
It polls 100 watches of 12-key targets (the poll path of a tick, sink
excluded: each round's records are thrown away) 60 times after sleeps of 50,
5, 0.5 and 0 ms, and prints the median time of one round of 100 polls, for
100 distinct watches and for one watch polled 100 times. When the one-watch
rounds slow down after a sleep as much as the distinct ones, what makes them
slow is not the watches' memory but the core itself, cold after sleeping.
"""

from __future__ import annotations

import statistics
import time

from monitor_async import Monitor

from .._common import NoopSink, TwelveKeys


def main() -> None:
    monitor = Monitor(NoopSink())
    for i in range(100):
        monitor.watch(TwelveKeys(), name=f"t{i}")
    poller = monitor._poller  # the poll path alone, without a loop or a sink
    queue = monitor._channels[0].records.items
    distinct = list(monitor._watches.values())
    rounds = {"100 watches": distinct, "1 watch x 100": [distinct[0]] * 100}
    for gap in (0.05, 0.005, 0.0005, 0.0):
        for label, watches in rounds.items():
            took = []
            for _ in range(60):
                if gap:
                    time.sleep(gap)
                started = time.perf_counter()
                for watch in watches:
                    poller.poll_once(watch)
                took.append(time.perf_counter() - started)
                queue.clear()
            print(f"after {gap * 1000:4.1f} ms asleep, {label:13s}: {statistics.median(took) * 1e6:6.0f} µs per 100 polls")


if __name__ == "__main__":
    main()
