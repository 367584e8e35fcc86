"""``monitor-async export --wide``: a run as one row per (watch, step or time), one column per metric."""

from __future__ import annotations

import csv
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO

from .._core.record import Record
from .runs import Entry, Run

__all__ = ["columns", "wide_rows", "write_wide"]


PENDING = 10_000
"""Rows held open at most (a watch whose step never changes cannot hold the others back for ever)."""


def wide_rows(entries: Iterable[Entry]) -> Iterator[dict[str, float | int | str]]:
    """The merged rows, streamed: records of one watch and launch that follow each other with one step become one row.

    Without a step, the same time merges; later values win and the row keeps
    the later time. A row is handed on once its watch moves on; rows come in
    the order they began.

    Args:
        entries: the run's ``(launch, item)`` entries, in time order.

    Yields:
        Rows mapping ``launch``, ``watch``, ``step``, ``time`` and metric keys to values.
    """
    open_: dict[tuple[int, str], tuple[object, dict[str, float | int | str]]] = {}
    queue: deque[dict[str, float | int | str]] = deque()
    done: set[int] = set()
    for launch, r in entries:
        if not isinstance(r, Record):
            continue
        key = ("step", r.step) if r.step is not None else ("time", r.time)
        current = open_.get((launch, r.name))
        if current is not None and current[0] == key:
            row = current[1]
        else:
            if current is not None:
                done.add(id(current[1]))
            row = {"launch": launch, "watch": r.name, "step": "" if r.step is None else r.step}
            open_[(launch, r.name)] = (key, row)
            queue.append(row)
        row["time"] = r.time
        row.update(r.metrics)
        while queue and (id(queue[0]) in done or len(queue) > PENDING):
            first = queue.popleft()
            done.discard(id(first))
            yield first
    yield from queue


def columns(entries: Iterable[Entry]) -> tuple[list[str], int]:
    """The metric columns (full keys, by watch, each in order of first appearance) and the most launches of a file."""
    found: dict[str, dict[str, None]] = {}
    launches = 1
    for launch, r in entries:
        launches = max(launches, launch)
        if isinstance(r, Record):
            mine = found.setdefault(r.name, {})
            for metric in r.metrics:
                if metric not in mine:
                    mine[metric] = None
    return [metric for mine in found.values() for metric in mine], launches


def write_wide(records: Iterable[Record] | Run, out: TextIO, *, watches: set[str] | None = None) -> int:
    """Writes a run (or records) to ``out`` as a wide CSV; returns the number of rows.

    The columns and the merge rule are in [export --wide](cli.md#export-wide).
    A [Run][monitor_async._cli.runs.Run] is read twice (columns, then rows), streamed.

    Args:
        records: the run, or its records in time order.
        out: a text stream opened with ``newline=""``.
        watches: a set that receives the watch names written (for a summary line).

    Returns:
        How many rows were written (the header not counted).

    Examples:
        >>> import io
        >>> out = io.StringIO()
        >>> write_wide([Record("rb", 1, 0.5, {"rb/size": 3.0}), Record("rb", 2, 1.5, {"rb/size": 4.0}),
        ...             Record("learner", 1, 1.5, {"learner/loss": 0.25})], out)
        3
        >>> print(out.getvalue().replace("\\r", ""))
        watch,step,time,rb/size,learner/loss
        rb,1,0.5,3.0,
        rb,2,1.5,4.0,
        learner,1,1.5,,0.25
        <BLANKLINE>
    """
    if isinstance(records, Run):
        entries: Callable[[], Iterable[Entry]] = records.entries
    else:
        given = list(records)
        entries = lambda: ((1, r) for r in given)  # noqa: E731
    metric_columns, launches = columns(entries())
    lead = ["launch"] if launches > 1 else []
    writer = csv.DictWriter(out, fieldnames=[*lead, "watch", "step", "time", *metric_columns], restval="",
                            extrasaction="ignore")
    writer.writeheader()
    rows = 0
    for row in wide_rows(entries()):
        writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
        rows += 1
        if watches is not None:
            watches.add(str(row["watch"]))
    return rows
