"""``monitor-async show``: a run as text, one block per watch, every metric's first and last value."""

from __future__ import annotations

import time
from collections.abc import Sequence

from .._core.names import RATE, split_rates
from .._core.record import Record
from .._core.text import count, eng
from .runs import Run

__all__ = ["describe", "duration"]


def duration(seconds: float) -> str:
    """A duration for people: ``2.0 s``, ``4m 05s``, ``3h 02m``.

    Args:
        seconds: the duration.

    Returns:
        The text.

    Examples:
        >>> [duration(s) for s in (2.04, 245, 3 * 3600 + 150)]
        ['2.0 s', '4m 05s', '3h 02m']
    """
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def _clock(t: float, date: bool = False) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S", time.localtime(t))


def _watch(name: str, records: Sequence[Record]) -> list[str]:
    cut = len(name) + 1
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for r in records:
        for key, value in r.metrics.items():
            metric = key[cut:] if key.startswith(name + "/") else key
            first.setdefault(metric, value)
            last[metric] = value
    steps = [r.step for r in records if r.step is not None]
    head = [count(len(records), "record")]
    if steps:
        head.append(f"step {steps[0]} → {steps[-1]}")
    head.append(f"{_clock(records[0].time)} → {_clock(records[-1].time)}")
    values, lone = split_rates(last)
    rows = [(k, eng(first[k]), eng(v), "" if rate is None else f"{eng(rate)}/s") for k, v, rate in values]
    rows += [(f"{k}/s", f"{eng(first[k + RATE])}/s", f"{eng(rate)}/s", "") for k, rate in lone]
    width = min(max([len("metric")] + [len(k) for k, *_ in rows]), 48)
    lines = [f"{name}  " + " · ".join(head), f"  {'metric':<{width}}  {'first':>9}  {'last':>9}  {'last rate':>10}"]
    for metric, a, b, rate in rows:
        text = metric if len(metric) <= width else metric[: width - 1] + "…"
        lines.append(f"  {text:<{width}}  {a:>9}  {b:>9}  {rate:>10}".rstrip())
    return lines


def describe(run: Run) -> list[str]:
    """The lines ``monitor-async show`` prints for ``run``.

    A header (the run's path and files, how many watches, metrics and
    records, its time span), then per watch: its record count, step range and
    time span, and for each metric its first and last value and, for a
    counter with a rate, the last rate. Numbers are in engineering notation
    (``88.6k``); ``export`` writes them exactly.

    Args:
        run: the run, read by :func:`monitor_async._cli.runs.load_run`.

    Returns:
        The lines, without line breaks.

    Examples:
        >>> from pathlib import Path
        >>> records = [Record("rb", 10, 0.0, {"rb/frames": 10.0}),
        ...            Record("rb", 30, 2.0, {"rb/frames": 30.0, "rb/frames_per_second": 10.0})]
        >>> print("\\n".join(describe(Run(Path("r"), "jsonl", [Path("r/m.jsonl")], records))[2:]))  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
        rb  2 records · step 10 → 30 · ... → ...
          metric      first       last   last rate
          frames         10         30        10/s
    """
    files = ", ".join(f.name for f in run.files)
    lines = [f"run: {run.path}  ({files})"]
    if not run.records:
        lines.append("no records yet" + (f" ({count(run.skipped, 'unreadable line')} skipped)" if run.skipped else ""))
        return lines
    watches = run.watches()
    metrics = {k for r in run.records for k in r.metrics}
    start, end = run.records[0].time, run.records[-1].time
    summary = (
        f"{count(len(watches), 'watch')} · {count(len(metrics), 'metric')} · {count(len(run.records), 'record')} · "
        f"{_clock(start, date=True)} → {_clock(end)} ({duration(end - start)})"
    )
    if run.skipped:
        summary += f" · {count(run.skipped, 'unreadable line')} skipped"
    lines.append(summary)
    for name, records in watches.items():
        lines.append("")
        lines += _watch(name, records)
    return lines
