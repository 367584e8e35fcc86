"""What formatting a tick's records later costs scenario 6's bare loop: ``python -m benchmarks.probes.queued``.

A probe beside the suite (it reaches into the scenario's private helpers;
scenario 6 measures the queued floor too, as one of its floors, in its own
rounds). Scenario 6's bare loop formats each tick's CSV rows in the tick,
while its records are fresh in the cache, and appends five ticks' text at
once. A monitor cannot: its writer formats what its queue gathered, after
the polls that made it (formatting in the poll would make a slow sink delay
polling). The *queued* floor does what such a writer does and nothing more:
each tick's records are kept, and every fifth tick they are formatted and
appended at once. By rounds (the order turning each round), beside the same
CPU-bound trainer, it prints the CPU per background poll of ours, the bare
loop and the queued floor, and the medians of the per-round ratios.

With ``--split`` it times instead, on the loop thread of ours and of the
queued floor, each callback the loop runs and ``CSVSink.format`` (CPU time of
the thread, medians over the rounds, in ms a second): where ours spends what
it spends over the floor. ``--split`` reads each thread's CPU from ``/proc``
(Linux only).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from monitor_async import Record
from monitor_async.backends import CSVSink

from .. import bench_trainer
from .._common import quiet
from ..bench_trainer import Run, _floor, _ours, train

LOOPS = ("monitor-async-loop", "queued")
"""The loop threads ``--split`` times."""


def _queued(root: Path, n: int, targets: int, seconds: float, interval: float) -> Run:
    """The queued floor's run: scenario 6's bare loop, its records formatted at the append."""
    return _floor(root, n, targets, seconds, interval, queued=True)


def _split(rounds: int, seconds: float) -> None:
    """Times each callback of the loop thread, and ``format()``, for ours and the queued floor."""
    spent: collections.Counter[str] = collections.Counter()
    run_handle = asyncio.events.Handle._run
    csv_format = CSVSink.format

    def timed_run(handle: asyncio.events.Handle) -> None:
        started = time.thread_time()
        run_handle(handle)
        callback = handle._callback  # type: ignore[attr-defined]
        spent[getattr(callback, "__qualname__", None) or "a task's step"] += time.thread_time() - started

    def timed_format(sink: CSVSink, records: Sequence[Record]) -> str:
        started = time.thread_time()
        try:
            return csv_format(sink, records)
        finally:
            spent["(CSVSink.format, within the above)"] += time.thread_time() - started

    figures: dict[str, collections.defaultdict[str, list[float]]] = {}

    def timed_train(length: float) -> tuple[float, float]:
        (thread,) = [t for t in threading.enumerate() if t.name in LOOPS]
        stat = Path(f"/proc/self/task/{thread.native_id}/schedstat")
        spent.clear()
        before = int(stat.read_text().split()[0])
        result = train(length)
        total = (int(stat.read_text().split()[0]) - before) / 1e9
        for key, value in [*spent.items(), ("(the loop thread in all)", total)]:
            figures[thread.name][key].append(value / length * 1e3)
        return result

    asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]
    CSVSink.format = timed_format  # type: ignore[method-assign]
    bench_trainer.train = timed_train
    runs = {"monitor-async-loop": _ours, "queued": _queued}
    for name in runs:
        figures[name] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="monitor-async-probe-") as tmp:
        for n in range(rounds):
            order = list(runs.items()) if n % 2 == 0 else list(runs.items())[::-1]
            for _, run in order:
                run(Path(tmp), n, 100, seconds, 0.05)
    for name, times in figures.items():
        print(f"{'ours' if name == LOOPS[0] else 'the queued floor'} (loop thread, ms a second, medians):")
        for key, values in sorted(times.items(), key=lambda kv: -statistics.median(kv[1])):
            if statistics.median(values) >= 0.05:
                print(f"  {statistics.median(values):7.2f}  {key}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--split", action="store_true", help="time each callback of the loop threads instead")
    args = parser.parse_args()
    quiet()
    train(0.5)
    if args.split:
        _split(args.rounds, args.seconds)
        return
    runs = {"ours": _ours, "bare loop": _floor, "queued": _queued}
    per_poll: dict[str, list[float]] = {name: [] for name in runs}
    with tempfile.TemporaryDirectory(prefix="monitor-async-probe-") as tmp:
        for n in range(args.rounds):
            order = list(runs.items()) if n % 2 == 0 else list(runs.items())[::-1]
            for name, run in order:
                figure = run(Path(tmp), n, 100, args.seconds, 0.05).per_poll
                per_poll[name].append(float("inf") if figure is None else figure)
            print(f"round {n}: " + ", ".join(f"{name} {values[-1]:.1f} us" for name, values in per_poll.items()))

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(per_poll[a], per_poll[b], strict=True))

    print(", ".join(f"{name} {statistics.median(values):.1f} us" for name, values in per_poll.items()))
    print(f"ours / bare loop {ratio('ours', 'bare loop'):.3f}, queued / bare loop {ratio('queued', 'bare loop'):.3f}, "
          f"ours / queued {ratio('ours', 'queued'):.3f} (medians of the per-round ratios)")


if __name__ == "__main__":
    main()
