"""The files CSVSink and JSONLSink write and the run readers read: each format defined once.

The sinks in ``monitor_async.backends`` write with these definitions and the
readers of ``monitor-async show | tail | export | plot`` parse with them, so a
column, a key or the launch mark changes in one place. What each format looks
like is in [the CLI guide](cli.md#what-a-run-is).

Examples:
    >>> csv_launch_row({"time": 1.5, "pid": 42}, source=False)
    '1.5,__launch__,,__launch__/pid,42.0\\n'
    >>> csv_launch(["1.5", "__launch__", "", "__launch__/pid", "42.0"])
    {'time': 1.5, 'pid': 42}

A launch mark is written by ``csv_launch_row`` and ``jsonl_launch_line`` from
``launch_info()``, and read by ``csv_launch`` and ``jsonl_launch``: what a
mark says is changed here, for both formats and both directions. The mark of
a resumed launch also says which launch it resumes and where (``resumes``:
written by the same two, read by ``csv_launch_more`` and ``launch_resumes``).
"""

from __future__ import annotations

import csv
import io
import math
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._version import __version__
from .distribution import Summary

__all__ = [
    "CSV_COLUMNS",
    "CSV_HEADER",
    "CSV_HEADER_SOURCE",
    "CSV_SOURCE_COLUMNS",
    "JSONL_ALERT",
    "JSONL_DISTRIBUTIONS",
    "JSONL_LAUNCH",
    "JSONL_METRICS",
    "JSONL_NAME",
    "JSONL_RECORD_PARTS",
    "JSONL_SOURCE",
    "JSONL_STEP",
    "JSONL_TIME",
    "LAUNCH",
    "LAUNCH_PID",
    "csv_launch",
    "csv_launch_more",
    "csv_launch_row",
    "distribution_json",
    "finite",
    "jsonl_launch",
    "jsonl_launch_line",
    "launch_info",
    "launch_resumes",
    "parse_distribution",
    "parse_source",
    "source_text",
]

# ------------------------------------------------------------------- the CSV file
CSV_COLUMNS: tuple[str, ...] = ("time", "name", "step", "metric", "value")
"""The long format's columns: one row per value."""
CSV_SOURCE_COLUMNS: tuple[str, ...] = (*CSV_COLUMNS, "source")
"""The columns with the sixth, ``source`` (see `source_text`)."""
CSV_HEADER = ",".join(CSV_COLUMNS) + "\n"
CSV_HEADER_SOURCE = ",".join(CSV_SOURCE_COLUMNS) + "\n"

# ------------------------------------------------------------------ the JSONL file
JSONL_TIME, JSONL_NAME, JSONL_STEP, JSONL_METRICS, JSONL_SOURCE = "time", "name", "step", "metrics", "source"
"""The keys of a record's line: ``{"time", "name", "step", "metrics"}`` and, when it has one, ``"source"``."""
JSONL_LAUNCH = "launch"
"""The key of a launch line: ``{"launch": launch_info()}``."""
JSONL_ALERT = "alert"
"""The key of an alert line: ``{"time": ..., "alert": AlertEvent.to_dict()}``."""
JSONL_DISTRIBUTIONS = "distributions"
"""The key of a record's distributions, when it has some: ``{"<watch>/<key>": distribution_json(summary)}``."""
JSONL_RECORD_PARTS: tuple[str, str, str, str, str] = (
    f'{{"{JSONL_TIME}":', f',"{JSONL_NAME}":', f',"{JSONL_STEP}":', f',"{JSONL_METRICS}":', f',"{JSONL_SOURCE}":',
)
"""The text before each value of a record's line, in order (the writer's fast path joins them with the values)."""

# ------------------------------------------------------------------ the launch mark
LAUNCH = "__launch__"
"""The watch name of the CSV row that marks a new launch appending to a file."""
LAUNCH_PID = f"{LAUNCH}/pid"
"""The metric of that row; its value is the process id."""
RESUMES = f"{LAUNCH}/resumes"
"""The metric prefix of the rows that follow it in a resumed launch's mark (``/time``, ``/pid``, ``/at``, ``/watch/<name>``)."""


def launch_info() -> dict[str, object]:
    """What a launch mark says: when, which process on which host, and the package version."""
    return {"time": time.time(), "pid": os.getpid(), "host": socket.gethostname(), "version": __version__}


def csv_launch_row(info: Mapping[str, object], *, source: bool) -> str:
    """The CSV row marking the launch ``info`` describes (``time`` and ``pid``), with an empty source cell if ``source``.

    A resumed launch (``info["resumes"]``, see ``launch_resumes``) gets more
    rows after it: the resumed launch's ``time`` and ``pid``, the checkpoint's
    time ``at``, when the resuming launch began (``by``), and per watch its
    step (in the step column) and time.

    Examples:
        >>> print(csv_launch_row({"time": 9.0, "pid": 42, "resumes": {"time": 1.0, "pid": 7, "at": 5.0,
        ...                       "watches": {"rb": [300, 4.5]}}}, source=False), end="")
        9.0,__launch__,,__launch__/pid,42.0
        9.0,__launch__,,__launch__/resumes/time,1.0
        9.0,__launch__,,__launch__/resumes/pid,7.0
        9.0,__launch__,,__launch__/resumes/at,5.0
        9.0,__launch__,,__launch__/resumes/by,nan
        9.0,__launch__,300,__launch__/resumes/watch/rb,4.5
    """
    pid = info["pid"]
    value = float(pid) if isinstance(pid, int) else 0.0
    end = "," if source else ""
    when = f"{info['time']!r}"
    text = f"{when},{LAUNCH},,{LAUNCH_PID},{value!r}{end}\n"
    resumes = info.get("resumes")
    if not isinstance(resumes, Mapping):
        return text
    buf = io.StringIO()
    rows = csv.writer(buf, lineterminator="\n")
    for key in ("time", "pid", "at", "by"):
        number = finite(resumes.get(key))
        rows.writerow([when, LAUNCH, "", f"{RESUMES}/{key}", repr(number if number is not None else math.nan),
                       *([""] if source else [])])
    watches = resumes.get("watches")
    for name, (step, at) in (watches.items() if isinstance(watches, Mapping) else ()):
        number = finite(at)
        rows.writerow([when, LAUNCH, "" if step is None else str(step), f"{RESUMES}/watch/{name}",
                       repr(number if number is not None else math.nan), *([""] if source else [])])
    return text + buf.getvalue()


def csv_launch(fields: Sequence[str]) -> dict[str, Any] | None:
    """``{"time", "pid"}`` of a CSV launch row (its name already checked), or None when it is malformed."""
    try:
        return {"time": float(fields[0]), "pid": int(float(fields[4]))}
    except (ValueError, IndexError, OverflowError):
        return None


def csv_launch_more(info: dict[str, Any], fields: Sequence[str]) -> bool:
    """Adds a ``__launch__/resumes/...`` row (``fields``, its name already checked) to ``info``, the mark it follows.

    Returns False when the row is not one of them, or is malformed.
    """
    try:
        metric, value = fields[3], float(fields[4])
        step = int(fields[2]) if fields[2] else None
    except (ValueError, IndexError, OverflowError):
        return False
    if not metric.startswith(RESUMES + "/"):
        return False
    resumes = info.setdefault("resumes", {"watches": {}})
    key = metric[len(RESUMES) + 1 :]
    number = value if math.isfinite(value) else None
    if key.startswith("watch/"):
        resumes["watches"][key[len("watch/") :]] = [step, number]
    elif key in ("time", "pid", "at", "by"):
        resumes[key] = int(value) if key == "pid" and number is not None else number
    else:
        return False
    return True


def launch_resumes(info: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a launch mark says of the launch it resumes, or None (a launch of its own).

    ``{"time", "pid", "at", "by", "watches": {name: [step, time]}}``: the
    resumed launch began at ``time`` and the resuming one at ``by`` (the
    mark's own time when absent); of the records written between the two, a
    watch's with a step greater than its step here, or else later than its
    time here (``at`` for a name not listed), are superseded by this launch's.
    """
    resumes = info.get("resumes")
    if not isinstance(resumes, Mapping):
        return None
    began, at = finite(resumes.get("time")), finite(resumes.get("at"))
    watches = resumes.get("watches")
    if began is None or at is None or not isinstance(watches, Mapping):
        return None
    points: dict[str, list[Any]] = {}
    for name, entry in watches.items():
        if isinstance(entry, (list, tuple)) and len(entry) == 2:
            step = entry[0] if isinstance(entry[0], int) and not isinstance(entry[0], bool) else None
            points[str(name)] = [step, finite(entry[1])]
    by = finite(resumes.get("by"))
    if by is None:
        by = finite(info.get("time"))
    return {"time": began, "pid": resumes.get("pid"), "at": at, "by": by, "watches": points}


def jsonl_launch_line(info: Mapping[str, object], encode: Callable[[object], str]) -> str:
    """The JSONL line marking the launch ``info`` describes: ``{"launch": info}``, encoded with ``encode``."""
    return encode({JSONL_LAUNCH: info}) + "\n"


def jsonl_launch(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the launch line ``obj`` (a parsed JSONL line) says, or None when it is not one."""
    launch = obj.get(JSONL_LAUNCH)
    if isinstance(launch, dict) and finite(launch.get("time")) is not None:
        return launch
    return None


# ------------------------------------------------------------------ values and sources
def finite(value: object) -> float | None:
    """``value`` as a float when it is a finite int or float (not a bool), else None: what a reader keeps."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    out = float(value)
    return out if math.isfinite(out) else None


def source_text(source: Mapping[str, Any]) -> str:
    """``source`` as one cell of text, ``key=value`` pairs joined by ``;`` (CSVSink's ``source`` column).

    Examples:
        >>> source_text({"rank": 1, "host": "n1"})
        'rank=1;host=n1'
    """
    return ";".join(f"{key}={value}" for key, value in source.items())


def parse_source(text: str) -> dict[str, str]:
    """The ``source`` cell (``rank=1;host=n1``) as a mapping; the values stay text.

    Examples:
        >>> parse_source("rank=1;host=n1")
        {'rank': '1', 'host': 'n1'}
    """
    pairs = (part.partition("=") for part in text.split(";") if part)
    return {k: v for k, _, v in pairs}


# ------------------------------------------------------------------ distributions
def distribution_json(summary: Summary) -> dict[str, Any]:
    """``summary`` as a compact JSON object, the histogram itself included (JSONLSink, the network sinks' spool).

    ``count`` and ``sum``; ``min``, ``max`` and ``quantiles`` (``[[q, value], ...]``) when ``count`` is not 0;
    ``nan`` and ``inf`` when not 0; then either ``bounds`` and ``counts`` (explicit buckets) or ``scale``
    and, when not empty, ``zero`` (the zeros), ``positive`` and ``negative`` (``[offset, [counts...]]``:
    bucket ``offset + i`` holds magnitudes in ``(base**(offset + i), base**(offset + i + 1)]``,
    ``base = 2 ** 2 ** -scale``, OpenTelemetry's exponential histogram). A sum past the largest float
    is left out (strict JSON).

    Examples:
        >>> from monitor_async._core.distribution import summarize
        >>> distribution_json(summarize([0.0, 2.0, 2.0], quantiles=(0.5,)))
        {'count': 3, 'sum': 4.0, 'min': 0.0, 'max': 2.0, 'quantiles': [[0.5, 2.0]], 'scale': 20, 'zero': 1, 'positive': [1048575, [2]]}
        >>> distribution_json(summarize([0.5, 3.0], quantiles=(), bounds=[1.0]))
        {'count': 2, 'sum': 3.5, 'min': 0.5, 'max': 3.0, 'quantiles': [], 'bounds': [1.0], 'counts': [1, 1]}
        >>> parse_distribution(distribution_json(summarize([0.0, 1.0, 3.0]))) == summarize([0.0, 1.0, 3.0])
        True
    """
    out: dict[str, Any] = {"count": summary.count}
    if math.isfinite(summary.sum):
        out["sum"] = summary.sum
    if summary.count:
        out["min"], out["max"] = summary.min, summary.max
        out["quantiles"] = [[q, v] for q, v in summary.quantiles if math.isfinite(v)]
    if summary.nan_count:
        out["nan"] = summary.nan_count
    if summary.inf_count:
        out["inf"] = summary.inf_count
    if summary.bounds is not None:
        out["bounds"], out["counts"] = list(summary.bounds), list(summary.counts)
        return out
    out["scale"] = summary.scale
    if summary.zero_count:
        out["zero"] = summary.zero_count
    for field, (offset, counts) in (("positive", summary.positive), ("negative", summary.negative)):
        if counts:
            out[field] = [offset, list(counts)]
    return out


def parse_distribution(obj: object) -> Summary | None:
    """The `Summary` a `distribution_json` object describes, or None when it is not one (a reader skips it)."""
    if not isinstance(obj, dict):
        return None
    try:
        count = _count(obj["count"])
        nan = math.nan
        sides = [_side(obj.get(field)) for field in ("positive", "negative")]
        bounds = obj.get("bounds")
        figures = tuple((float(q), float(v)) for q, v in obj.get("quantiles", ()))
        summary = Summary(
            count, float(obj.get("sum", math.inf)), float(obj.get("min", nan)), float(obj.get("max", nan)), figures,
            _count(obj.get("nan", 0)), _count(obj.get("inf", 0)), int(obj.get("scale", 0)), _count(obj.get("zero", 0)),
            sides[0], sides[1],
            None if bounds is None else tuple(float(b) for b in bounds),
            tuple(_count(c) for c in obj.get("counts", ())),
        )
    except (KeyError, TypeError, ValueError):
        return None
    if summary.bounds is not None and len(summary.counts) != len(summary.bounds) + 1:
        return None
    return summary


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(value)
    return value


def _side(value: object) -> tuple[int, tuple[int, ...]]:
    if value is None:
        return (0, ())
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], int) or not isinstance(value[1], list):
        raise ValueError(value)
    return (value[0], tuple(_count(c) for c in value[1]))
