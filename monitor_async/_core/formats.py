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
mark says is changed here, for both formats and both directions.
"""

from __future__ import annotations

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
    "csv_launch_row",
    "distribution_json",
    "finite",
    "jsonl_launch",
    "jsonl_launch_line",
    "launch_info",
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


def launch_info() -> dict[str, object]:
    """What a launch mark says: when, which process on which host, and the package version."""
    return {"time": time.time(), "pid": os.getpid(), "host": socket.gethostname(), "version": __version__}


def csv_launch_row(info: Mapping[str, object], *, source: bool) -> str:
    """The CSV row marking the launch ``info`` describes (``time`` and ``pid``), with an empty source cell if ``source``."""
    pid = info["pid"]
    value = float(pid) if isinstance(pid, int) else 0.0
    return f"{info['time']!r},{LAUNCH},,{LAUNCH_PID},{value!r}{',' if source else ''}\n"


def csv_launch(fields: Sequence[str]) -> dict[str, Any] | None:
    """``{"time", "pid"}`` of a CSV launch row (its name already checked), or None when it is malformed."""
    try:
        return {"time": float(fields[0]), "pid": int(float(fields[4]))}
    except (ValueError, IndexError, OverflowError):
        return None


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
