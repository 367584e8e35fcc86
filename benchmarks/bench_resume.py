"""Resuming a run: what a checkpoint's ``state_dict()`` costs, and reading a run of resumed launches.

``resume_state``: a ``SyncMonitor`` with 1,000 watches of 10 keys (CSV, JSONL
and TensorBoard sinks, each watch logged once) takes ``state_dict()`` on the
training thread: the median time of a call and the size of the state pickled.
Goals: under 5 ms and under 1 MB.

``resume_readers``: the same number of records in a JSONL file written by one
launch, and by 10 launches each resumed from a checkpoint of the one before
(a tenth of each launch's records superseded). ``show`` (``describe``) and
``export --wide`` (``write_wide``) read both; goal: the resumed run within
1.5x the plain one's time. The heap's peak while ``show`` reads (tracemalloc,
on a tenth of the records) says memory stays bounded by the metrics: the
resumed run's peak over the plain one's is reported.
"""

from __future__ import annotations

import io
import json
import pickle
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from monitor_async import SyncMonitor
from monitor_async._cli.export import write_wide
from monitor_async._cli.runs import load_run
from monitor_async._cli.show import describe
from monitor_async.backends import CSVSink, JSONLSink, TensorBoardSink

from ._common import Row, quiet

__all__ = ["run_readers", "run_state"]

WATCHES = 10
"""Watches of the generated runs (each with five metrics)."""


class Keys:
    """A target with ten keys, a step among them."""

    def __init__(self) -> None:
        self.n = 0

    def stats(self) -> dict[str, float]:
        self.n += 1
        return {"step": self.n, **{f"k{i}": float(i + self.n) for i in range(9)}}


def run_state(*, watches: int = 1000, calls: int = 50, baseline: bool = True) -> list[Row]:
    """``state_dict()`` of a monitor with ``watches`` watches: median time of ``calls`` calls, and its size."""
    quiet()
    folder = Path(tempfile.mkdtemp())
    sinks = [CSVSink(folder / "m.csv"), JSONLSink(folder / "m.jsonl"), TensorBoardSink(folder / "tb")]
    monitor = SyncMonitor(sinks, background=False)
    for i in range(watches):
        monitor.watch(Keys(), name=f"w{i:04d}", step="step")
    monitor.step()
    monitor.flush()
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        state = monitor.state_dict()
        times.append(time.perf_counter() - began)
    monitor.close()
    size = len(pickle.dumps(state)) / 1e6
    note = f"{watches} watches of 10 keys, CSV + JSONL + TensorBoard sinks; json {len(json.dumps(state)) / 1e6:.2f} MB"
    return [
        Row("resume_state", f"state_dict(), {watches} watches", statistics.median(times) * 1e6, unit="us",
            goal=("max", 5000.0), note=note),
        Row("resume_state", f"state size, {watches} watches", size, unit="MB", goal=("below", 1.0), note=note),
    ]


def _write(path: Path, records: int, launches: int) -> None:
    """A JSONL run of ``records`` records by ``launches`` launches, each resuming the one before."""
    per = records // launches
    steps = per // WATCHES
    keep = steps - steps // 10  # a tenth of each launch is superseded by the next
    encode = json.JSONEncoder(separators=(",", ":")).encode
    now, start = 1.7e9, 0
    previous = now  # when the launch before began
    with path.open("w") as f:
        for launch in range(launches):
            began = now
            if launch:
                points = {f"w{w}": [start - 1, now - 1.0] for w in range(WATCHES)}
                resumes = {"id": f"l{launch - 1}", "time": previous, "pid": launch, "at": now - 1.0, "by": now,
                           "watches": points}
                f.write(encode({"launch": {"time": now, "pid": launch + 1, "host": "h", "version": "0",
                                           "resumes": resumes}}) + "\n")
            lines = []
            for step in range(start, start + steps):
                now += 0.001
                for w in range(WATCHES):
                    metrics = {f"w{w}/m{i}": float(step + i) for i in range(5)}
                    lines.append(encode({"time": now, "name": f"w{w}", "step": step, "metrics": metrics}))
                if len(lines) > 10_000:
                    f.write("\n".join(lines) + "\n")
                    lines = []
            if lines:
                f.write("\n".join(lines) + "\n")
            previous, start = began, start + keep
            now += 10.0


def _timed(path: Path) -> tuple[float, float]:
    began = time.perf_counter()
    describe(load_run(path))
    shown = time.perf_counter() - began
    began = time.perf_counter()
    write_wide(load_run(path), io.StringIO())
    return shown, time.perf_counter() - began


def _peak(path: Path) -> float:
    tracemalloc.start()
    describe(load_run(path))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1e6


def run_readers(*, records: int = 1_000_000, launches: int = 10, repeat: int = 1, baseline: bool = True) -> list[Row]:
    """``show`` and ``export --wide`` of ``records`` records in one launch, and in ``launches`` resumed ones."""
    quiet()
    folder = Path(tempfile.mkdtemp())
    plain, resumed = folder / "plain" / "metrics.jsonl", folder / "resumed" / "metrics.jsonl"
    for path, n in ((plain, 1), (resumed, launches)):
        path.parent.mkdir()
        _write(path, records, n)
    rounds = [(_timed(plain), _timed(resumed)) for _ in range(repeat)]
    show = statistics.median(r[1][0] / r[0][0] for r in rounds)
    export = statistics.median(r[1][1] / r[0][1] for r in rounds)
    show_s = statistics.median(r[1][0] for r in rounds)
    export_s = statistics.median(r[1][1] for r in rounds)
    small = folder / "small"
    small.mkdir()
    _write(small / "plain.jsonl", records // 10, 1)
    _write(small / "resumed.jsonl", records // 10, launches)
    peak_plain, peak_resumed = _peak(small / "plain.jsonl"), _peak(small / "resumed.jsonl")
    note = f"{records:,} records of {WATCHES} watches x 5 metrics; {launches} launches, a tenth of each superseded"
    return [
        Row("resume_readers", f"show, {launches} resumed launches / 1", show, unit="x", goal=("max", 1.5),
            note=f"{note}; {show_s:.2f} s"),
        Row("resume_readers", f"export --wide, {launches} resumed launches / 1", export, unit="x", goal=("max", 1.5),
            note=f"{note}; {export_s:.2f} s"),
        Row("resume_readers", "show's heap peak, resumed / 1 launch", peak_resumed / peak_plain, unit="x",
            goal=("max", 1.5), note=f"{records // 10:,} records: {peak_resumed:.1f} MB against {peak_plain:.1f} MB"),
    ]
