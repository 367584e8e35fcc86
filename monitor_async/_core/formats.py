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

__all__ = [
    "CSV_COLUMNS",
    "CSV_HEADER",
    "CSV_HEADER_SOURCE",
    "CSV_SOURCE_COLUMNS",
    "JSONL_ALERT",
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
    "finite",
    "jsonl_launch",
    "jsonl_launch_line",
    "launch_info",
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
