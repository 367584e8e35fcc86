"""What formatting a tick's records later costs scenario 6's bare loop: ``python -m benchmarks.probes.queued``.

A probe, not a scenario of the suite (it reaches into the scenario's private
helpers). Scenario 6's bare loop formats each tick's CSV rows in the tick,
while its records are fresh in the cache, and appends five ticks' text at
once. A monitor cannot: its writer formats what its queue gathered, after
the polls that made it (formatting in the poll would make a slow sink delay
polling). The *queued* floor does what such a writer does and nothing more:
each tick's records are kept, and every fifth tick they are formatted and
appended at once. By rounds (the order turning each round), beside the same
CPU-bound trainer, it prints the CPU per background poll of ours, the bare
loop and the queued floor, and the medians of the per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path

from monitor_async import Record
from monitor_async.backends import CSVSink

from .._common import Bare, ClockedKeys, LineFile, new_record, quiet
from ..bench_trainer import Run, _floor, _ours, _run_with, train


async def _queued_loop(bare: Bare, path: Path, interval: float, ready: threading.Event, done: threading.Event) -> None:
    """The bare loop's ticks, its records kept and formatted every fifth tick, as one append."""
    file = LineFile(path, "queued", header=CSVSink.header)
    try:
        await file.open()
    finally:
        ready.set()
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    kept: list[Record] = []
    writing: list[asyncio.Task[None]] = []
    start = loop.time()

    def tick(k: int) -> None:
        if done.is_set():
            finished.set_result(None)
            return
        kept.extend([new_record(name, None, time.time(), bare.metrics(name, prefix, target))
                     for name, prefix, target in bare.targets])
        if len(kept) >= 5 * len(bare.targets) and (not writing or writing[0].done()):
            writing[:] = [loop.create_task(file.write(bare.csv.format(kept).encode()))]
            kept.clear()
        loop.call_at(start + (k + 1) * interval, tick, k + 1)

    loop.call_at(start, tick, 0)
    try:
        await finished
        if writing:
            await writing[0]
    finally:
        await file.close()


def _queued(root: Path, n: int, targets: int, seconds: float, interval: float) -> Run:
    watched = [ClockedKeys() for _ in range(targets)]
    ready, done = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=asyncio.run, args=(_queued_loop(Bare(watched), root / f"queued{n}.csv", interval, ready, done),),
        name="queued", daemon=True,
    )

    def begin() -> None:
        thread.start()
        ready.wait()

    def end() -> None:
        done.set()
        thread.join()

    return _run_with(begin, end, watched, seconds, interval)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    quiet()
    train(0.5)
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
