"""``monitor-async export --wide``: a run as one row per (watch, step or time), one column per metric."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import TextIO

from .._core.record import Record

__all__ = ["write_wide"]


def wide_rows(records: Iterable[Record]) -> tuple[list[str], list[dict[str, float | int | str]]]:
    """The metric columns (full keys, by watch, each in order of first appearance) and the merged rows.

    Records of one watch with the same step (or, without a step, the same
    time) become one row; a later record's values win, and the row keeps the
    later time.

    Args:
        records: the run's records, in time order.

    Returns:
        ``(metric_columns, rows)``; each row maps ``watch``, ``step``, ``time``
        and metric keys to values.
    """
    columns: dict[str, dict[str, None]] = {}
    rows: dict[tuple[str, object], dict[str, float | int | str]] = {}
    for r in records:
        key = (r.name, ("step", r.step) if r.step is not None else ("time", r.time))
        row = rows.get(key)
        if row is None:
            row = rows[key] = {"watch": r.name, "step": "" if r.step is None else r.step}
        row["time"] = r.time
        mine = columns.setdefault(r.name, {})
        for metric, value in r.metrics.items():
            mine.setdefault(metric, None)
            row[metric] = value
    return [metric for mine in columns.values() for metric in mine], list(rows.values())


def write_wide(records: Iterable[Record], out: TextIO) -> int:
    """Writes ``records`` to ``out`` as a wide CSV; returns the number of rows.

    Columns: ``watch``, ``step`` (empty when the watch has none), ``time``
    (unix seconds), then one column per metric key (``"<watch>/<metric>"``, so
    two watches' ``batches`` never collide), empty where a row has no value.
    Values are written with ``repr``, so they read back exactly. This is
    the shape AgileRL's CSV logger writes and ``pandas.read_csv`` reads.

    Args:
        records: the run's records, in time order.
        out: a text stream opened with ``newline=""``.

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
    columns, rows = wide_rows(records)
    writer = csv.DictWriter(out, fieldnames=["watch", "step", "time", *columns], restval="")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
    return len(rows)
