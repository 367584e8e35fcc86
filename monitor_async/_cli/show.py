"""``monitor-async show``: a run as text, one block per watch, every metric's first and last value."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._core.alerts import AlertEvent
from .._core.formats import source_text
from .._core.names import RATE, split_rates
from .._core.record import Record
from .._core.text import clock, count, eng
from .runs import Launch, Resume, Run

__all__ = ["MONITOR", "Summary", "alert_line", "describe", "distributions", "duration", "episodes", "resumed_line"]


def duration(seconds: float) -> str:
    """A duration for people: ``2.0 s``, ``4m 05s``, ``3h 02m``.

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


@dataclass
class WatchSummary:
    """What ``show`` keeps of one watch while the run streams by: counts, spans, first and last values."""

    name: str
    records: int = 0
    first_step: int | None = None
    last_step: int | None = None
    first_time: float = 0.0
    last_time: float = 0.0
    first: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)

    def add(self, r: Record) -> None:
        if not self.records:
            self.first_time = r.time
        self.records += 1
        self.last_time = r.time
        if r.step is not None:
            if self.first_step is None:
                self.first_step = r.step
            self.last_step = r.step
        for key, value in r.metrics.items():
            if key not in self.first:
                self.first[key] = value
            self.last[key] = value


@dataclass
class Summary:
    """A run read once, in memory bounded by its metrics: per watch, launches, alert events.

    Attributes:
        watches: per name, in order of first appearance.
        launches: the launches marked in the files (a file's first launch has no mark).
        alerts: the alert events, in time order.
        files_launches: the most launches one file holds (1 when none was marked).
    """

    watches: dict[str, WatchSummary] = field(default_factory=dict)
    launches: list[Launch] = field(default_factory=list)
    alerts: list[AlertEvent] = field(default_factory=list)
    files_launches: int = 1
    records: int = 0
    start: float = math.inf
    end: float = -math.inf

    @classmethod
    def of(cls, run: Run) -> Summary:
        out = cls()
        watches = out.watches
        for launch, item in run.entries():
            if isinstance(item, Record):
                w = watches.get(item.name)
                if w is None:
                    w = watches[item.name] = WatchSummary(item.name)
                w.add(item)
                out.records += 1
                out.start = min(out.start, item.time)
                out.end = max(out.end, item.time)
            elif isinstance(item, Launch):
                if not any(r.file == item.file and r.time == item.time for r in run.resumes):
                    out.launches.append(item)  # a resumed launch is said apart (see `resumed_line`)
            else:
                out.alerts.append(item)
            out.files_launches = max(out.files_launches, launch)
        return out

    def polled(self) -> int | None:
        """How many names were watches, from the monitor's own ``monitor/watches`` (None without it)."""
        mine = self.watches.get(MONITOR)
        value = None if mine is None else mine.last.get(f"{MONITOR}/watches")
        return None if value is None else int(value)


MONITOR = "monitor"
"""The name of the watch of the monitor's own counters (``monitor.watch(monitor)``, as the demo does)."""


_SUMMARY_FIELD = re.compile(r"^(.+)/(count|mean|min|max|nan_count|inf_count|p\d+(?:[._]\d+)?)$")


def distributions(last: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """The distributions among a watch's latest values: ``{key: {"count": ..., "p50": ...}}``.

    A key is one when ``<key>/count`` and at least one quantile ``<key>/pNN`` are there.

    Examples:
        >>> distributions({"lat/count": 9.0, "lat/p50": 0.2, "lat/p99": 0.9, "size": 3.0})
        {'lat': {'count': 9.0, 'p50': 0.2, 'p99': 0.9}}
    """
    found: dict[str, dict[str, float]] = {}
    for key, value in last.items():
        match = _SUMMARY_FIELD.match(key)
        if match:
            found.setdefault(match.group(1), {})[match.group(2)] = value
    return {
        key: fields for key, fields in found.items()
        if "count" in fields and any(f.startswith("p") for f in fields)
    }


def _quantile_order(field: str) -> float:
    return float(field[1:].replace("_", "."))


def _distribution_lines(found: dict[str, dict[str, float]]) -> list[str]:
    """The latest summary of each distribution: count, mean, its quantiles (p50, p90, p99...), NaN and inf left out."""
    quantiles = sorted({f for fields in found.values() for f in fields if f.startswith("p")}, key=_quantile_order)
    heads = ["count", "mean", *quantiles]
    width = min(max([len("distribution")] + [len(k) for k in found]), 48)
    lines = [f"  {'distribution':<{width}}  " + "  ".join(f"{h:>9}" for h in heads)]
    for key, fields in found.items():
        text = key if len(key) <= width else key[: width - 1] + "…"
        cells = [eng(fields[h]) if h in fields else "" for h in heads]
        left_out = int(fields.get("nan_count", 0) + fields.get("inf_count", 0))
        extra = f"  ({left_out} NaN/inf left out)" if left_out else ""
        lines.append((f"  {text:<{width}}  " + "  ".join(f"{c:>9}" for c in cells)).rstrip() + extra)
    return lines


def _watch(w: WatchSummary, timed: bool) -> list[str]:
    name = w.name
    cut = len(name) + 1
    first = {(k[cut:] if k.startswith(name + "/") else k): v for k, v in w.first.items()}
    last = {(k[cut:] if k.startswith(name + "/") else k): v for k, v in w.last.items()}
    found = distributions(last)
    if found:  # their summaries get a table of their own, their latest values
        summarised = {f"{key}/{f}" for key, fields in found.items() for f in fields}
        last = {k: v for k, v in last.items() if k not in summarised}
    head = [count(w.records, "record")]
    if w.first_step is not None:
        head.append(f"step {w.first_step} → {w.last_step}")
    if timed:
        head.append(f"{clock(w.first_time)} → {clock(w.last_time)}")
    values, lone = split_rates(last)
    rows = [(k, eng(first[k]), eng(v), "" if rate is None else f"{eng(rate)}/s") for k, v, rate in values]
    rows += [(f"{k}/s", f"{eng(first[k + RATE])}/s", f"{eng(rate)}/s", "") for k, rate in lone]
    width = min(max([len("metric")] + [len(k) for k, *_ in rows]), 48)
    lines = [f"{name}  " + " · ".join(head), f"  {'metric':<{width}}  {'first':>9}  {'last':>9}  {'last rate':>10}"]
    for metric, a, b, rate in rows:
        text = metric if len(metric) <= width else metric[: width - 1] + "…"
        lines.append(f"  {text:<{width}}  {a:>9}  {b:>9}  {rate:>10}".rstrip())
    if found:
        lines += _distribution_lines(found)
    return lines


def episodes(alerts: Sequence[AlertEvent]) -> list[tuple[AlertEvent, AlertEvent | None]]:
    """Each firing event with the event that resolved it (``None`` while it fires), paired by rule, watch, metric and source."""
    open_: dict[tuple[Any, ...], int] = {}
    out: list[tuple[AlertEvent, AlertEvent | None]] = []
    for e in alerts:
        key = (e.rule, e.watch, e.metric, tuple(sorted(e.source.items())))
        if e.state == "firing":
            open_[key] = len(out)
            out.append((e, None))
        elif key in open_:
            at = open_.pop(key)
            out[at] = (out[at][0], e)
        else:  # resolved, its firing before the file began
            out.append((e, e))
    return out


def alert_line(firing: AlertEvent, resolved: AlertEvent | None) -> str:
    """One line for an alert episode (``resolved`` is ``None`` while it fires): when, for how long, its message.

    Examples:
        >>> e = AlertEvent("stalled rb/size", "firing", "warning", "rb", "rb/size", 3.0, 0.0, 100.0, {}, "stuck")
        >>> r = AlertEvent("stalled rb/size", "resolved", "warning", "rb", "rb/size", 4.0, 0.0, 165.0, {}, "moves")
        >>> alert_line(e, r)[8:]
        '  warning   stalled rb/size (rb) · firing → resolved after 1m 05s · stuck'
    """
    where = firing.watch + (f", {source_text(firing.source)}" if firing.source else "")
    if resolved is None:
        state = "firing, not resolved"
    elif resolved is firing:
        state = "resolved (fired before the file began)"
    else:
        state = f"firing → resolved after {duration(resolved.time - firing.time)}"
    message = f" · {firing.message}" if firing.message else ""
    return f"{clock(firing.time)}  {firing.severity:<8}  {firing.rule} ({where}) · {state}{message}"


def resumed_line(resume: Resume) -> str:
    """What ``show`` says of a resumed launch: which launch it resumed, from where, and what it superseded.

    Examples:
        >>> from pathlib import Path
        >>> r = Resume(Path("m.jsonl"), 100.0, 9, 0.0, 7, 50.0, 99.0, {"train": (300, 49.0)}, 42)
        >>> resumed_line(r)[:9], resumed_line(r)[18:]
        ('resumed: ', 'launch of pid 9 resumed the launch of pid 7 from its checkpoint at train step 300; 42 records it logged after the checkpoint are superseded (--launches all shows them)')
    """
    stepped = [f"{name} step {step}" for name, (step, _) in resume.watches.items() if step is not None]
    where = ", ".join(stepped[:3]) + (f" and {len(stepped) - 3} more" if len(stepped) > 3 else "")
    if not where:
        where = clock(resume.at)
    pid = "" if resume.pid is None else f" of pid {resume.pid}"
    old = "" if resume.resumed_pid is None else f" of pid {resume.resumed_pid}"
    return (
        f"resumed: {clock(resume.by)} launch{pid} resumed the launch{old} from its checkpoint at {where}; "
        f"{count(resume.superseded, 'record')} it logged after the checkpoint are superseded "
        "(--launches all shows them)"
    )


def describe(run: Run) -> list[str]:
    """The lines ``monitor-async show`` prints for ``run``, read in one pass (memory per metric); see [show](cli.md#show).

    Examples:
        >>> from pathlib import Path
        >>> records = [Record("rb", 10, 0.0, {"rb/frames": 10.0}),
        ...            Record("rb", 30, 2.0, {"rb/frames": 30.0, "rb/frames_per_second": 10.0})]
        >>> print("\\n".join(describe(Run(Path("r"), "jsonl", [Path("r/m.jsonl")], records))[2:]))  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
        rb  2 records · step 10 → 30 · ... → ...
          metric      first       last   last rate
          frames         10         30        10/s
    """
    summary = Summary.of(run)
    files = ", ".join(f.name for f in run.files[:6]) + (f" and {len(run.files) - 6} more" if len(run.files) > 6 else "")
    fmt = {"torchrl": "TorchRL CSVLogger", "tensorboard": "TensorBoard"}.get(run.kind)
    lines = [f"run: {run.path}  ({files})" + (f"  [{fmt}]" if fmt else "")]
    if not summary.records:
        lines.append("no records yet" + (f" ({count(run.skipped, 'unreadable line')} skipped)" if run.skipped else ""))
        return lines
    names = len(summary.watches)
    polled = summary.polled()
    pushed = 0 if polled is None else max(0, names - polled)
    head = [count(names - pushed, "watch")]
    if pushed:
        head[0] += f", {count(pushed, 'pushed name')}"
    head += [count(len({k for w in summary.watches.values() for k in w.first}), "metric"),
             count(summary.records, "record")]
    if run.timed:
        start, end = summary.start, summary.end
        head.append(f"{clock(start, date=True)} → {clock(end)} ({duration(end - start)})")
    text = " · ".join(head)
    if run.skipped:
        text += f" · {count(run.skipped, 'unreadable line')} skipped"
    lines.append(text)
    if summary.files_launches > 1:
        marks = ", ".join(
            f"{clock(launch.time)}" + (f" (pid {launch.info['pid']})" if "pid" in launch.info else "")
            for launch in summary.launches[:5]
        )
        lines.append(f"{summary.files_launches} launches appended to the same file: later ones began at {marks}")
    lines += [resumed_line(resume) for resume in run.resumes[:5]]
    if len(run.resumes) > 5:
        lines.append(f"and {count(len(run.resumes) - 5, 'more resumed launch')}")
    for firing, resolved in episodes(summary.alerts):
        lines.append("alert " + alert_line(firing, resolved))
    for w in summary.watches.values():
        lines.append("")
        lines += _watch(w, run.timed)
    return lines
