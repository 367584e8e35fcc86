"""How many bytecodes scenario 6's pollers run per poll: ``python -m benchmarks.probes.bytecodes``.

A probe, not a scenario of the suite (it reaches into the scenario's private
helpers). Timing figures on a shared machine drift by a fifth from one hour to
the next; a count of the bytecodes the loop thread runs does not. For ours,
the bare loop and the queued floor (see ``python -m benchmarks.probes.queued``)
it runs the scenario's 100 targets at 20 Hz into CSV, with the main thread
asleep instead of training, and after a warm-up counts, with
``threading.settrace``, every bytecode the loop thread runs until the window
ends: the count per ``stats()`` call begun in the window, and the functions
that ran the most. Tracing makes each bytecode far slower, so the counts say
how much Python work a poll is, not how long it takes: a poll's C calls (a
dict copy, the ``repr`` of a float) count only as the bytecodes that make them.
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from .. import bench_trainer
from .._common import quiet
from ..bench_trainer import _floor, _ours
from .queued import LOOPS as TIMED
from .queued import _queued

LOOPS = (*TIMED, "floor")
"""The loop threads counted: ours and the queued floor (those ``queued --split`` times), and the bare loop."""


def count(run: Any, warm: float, window: float, top: int) -> tuple[float, list[tuple[str, float]]]:
    """Runs ``run`` and counts its loop thread's bytecodes over ``window`` seconds after ``warm``.

    Returns the bytecodes per ``stats()`` call begun in the window and the ``top`` functions (per poll).
    """
    counts: collections.Counter[str] = collections.Counter()
    polls = [0]
    counting = threading.Event()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if not counting.is_set() or threading.current_thread().name not in LOOPS:
            return None
        code = frame.f_code
        if code.co_qualname == "ClockedKeys.stats":
            polls[0] += 1
        key = f"{code.co_qualname} ({code.co_filename.rsplit('/', 1)[-1]})"
        frame.f_trace_opcodes = True

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode" and counting.is_set():
                counts[key] += 1
            return local

        return local

    def asleep(seconds: float) -> tuple[float, float]:
        time.sleep(warm)
        counting.set()
        time.sleep(window)
        counting.clear()
        return 1.0, 0.0

    train, bench_trainer.train = bench_trainer.train, asleep
    threading.settrace(tracer)
    try:
        with tempfile.TemporaryDirectory(prefix="monitor-async-probe-") as tmp:
            run(Path(tmp), 0, 100, warm + window, 0.05)
    finally:
        threading.settrace(None)  # type: ignore[arg-type]
        bench_trainer.train = train
    n = max(1, polls[0])
    return sum(counts.values()) / n, [(key, value / n) for key, value in counts.most_common(top)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", type=float, default=2.0, help="seconds before counting (first polls, templates)")
    parser.add_argument("--window", type=float, default=3.0, help="seconds counted")
    parser.add_argument("--top", type=int, default=12, help="functions listed for each")
    args = parser.parse_args()
    quiet()
    runs = {"ours": _ours, "bare loop": _floor, "queued floor": _queued}
    totals: dict[str, float] = {}
    for name, run in runs.items():
        totals[name], functions = count(run, args.warm, args.window, args.top)
        print(f"{name}: {totals[name]:.0f} bytecodes a poll")
        for key, value in functions:
            print(f"  {value:7.1f}  {key}")
    print(f"ours / bare loop {totals['ours'] / totals['bare loop']:.2f}, "
          f"queued floor / bare loop {totals['queued floor'] / totals['bare loop']:.2f}")


if __name__ == "__main__":
    main()
