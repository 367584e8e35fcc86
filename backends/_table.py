"""The console table: the latest record of every watch, laid out to fit the terminal it is drawn on.

``WatchTable`` is what ``ConsoleSink`` shows in live mode and what
``monitor-async tail`` shows for a run on disk; how it lays itself out is in
[Sinks: The console](sinks.md#the-console-consolesink). rich is imported
only when a table is drawn.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor_async._core import AlertEvent, Record
from monitor_async._core.names import split_rates
from monitor_async._core.text import age, clock, count, eng

from ._alerts import episode

__all__ = [
    "WIDE", "WIDER", "WatchTable", "age", "alert_line", "count", "eng", "is_monitor", "monitor_items", "short",
    "split_rates",
]

MONITOR_KEYS = frozenset({"polls", "records", "values_dropped", "watches"})
WIDE = 110
"""From this many columns on, rates have a column of their own."""
WIDER = 150
"""From this many columns on, each watch's clock time and record count are shown too."""
_CHROME = 5  # title, top border, header, header rule, bottom border


def short(record: Record) -> dict[str, float]:
    """The record's metrics, ``{metric: value}``, without the ``"<name>/"`` prefix of their keys.

    Examples:
        >>> short(Record("rb", None, 0.0, {"rb/size": 3.0}))
        {'size': 3.0}
    """
    cut = len(record.name) + 1
    prefix = record.name + "/"
    return {(k[cut:] if k.startswith(prefix) else k): v for k, v in record.metrics.items()}


def is_monitor(metrics: Mapping[str, float]) -> bool:
    """Whether short ``metrics`` are a monitor's own counters (``Monitor.stats()`` watched)."""
    return metrics.keys() >= MONITOR_KEYS


def monitor_items(metrics: Mapping[str, float]) -> tuple[list[str], bool]:
    """A monitor's counters as short phrases, and whether something is wrong (drops or errors).

    Args:
        metrics: a monitor's short metrics (see ``is_monitor``).

    Returns:
        ``(phrases, wrong)``: ``polls``, ``records``, ``dropped`` (all sinks),
        ``errors`` (failed polls and sink errors), then missed polls and
        values left out when there are any, then each sink that dropped
        records or failed, by its label.

    Examples:
        >>> monitor_items({"polls": 9.0, "records": 7.0, "values_dropped": 0.0, "watches": 2.0,
        ...                "sink/csv/dropped": 2.0})
        (['polls 9', 'records 7', 'dropped 2', 'errors 0', 'csv: 2 dropped'], True)
    """
    sinks: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        if key.startswith("sink/") and key.count("/") >= 2:
            label, field = key[5:].rsplit("/", 1)
            sinks.setdefault(label, {})[field] = value
    dropped = sum(s.get("dropped", 0.0) for s in sinks.values())
    errors = metrics.get("polls_failed", 0.0) + sum(s.get("errors", 0.0) for s in sinks.values())
    items = [
        f"polls {eng(metrics['polls'])}",
        f"records {eng(metrics['records'])}",
        f"dropped {eng(dropped)}",
        f"errors {eng(errors)}",
    ]
    if metrics.get("polls_missed"):
        items.append(f"missed {eng(metrics['polls_missed'])}")
    if metrics["values_dropped"]:
        items.append(f"{count(int(metrics['values_dropped']), 'value')} left out")
    for label, fields in sinks.items():
        wrong = [f"{eng(fields[f])} {f}" for f in ("dropped", "errors") if fields.get(f)]
        if wrong:
            items.append(f"{label}: {', '.join(wrong)}")
    return items, bool(dropped or errors)


def alert_line(event: AlertEvent) -> str:
    """One alert for a person, on one line: ``ALERT warning: <message>``, or ``resolved: <message>``.

    The rule's name stands in for an empty message; a source (``rank=1``)
    is added in brackets.

    Examples:
        >>> e = AlertEvent("stalled collector/frames", "firing", "critical", "collector", "collector/frames",
        ...                120.0, 0.0, 62.0, {"rank": 1}, "collector/frames has not increased for 62 s")
        >>> alert_line(e)
        'ALERT critical: collector/frames has not increased for 62 s [rank=1]'
    """
    head = f"ALERT {event.severity}" if event.state == "firing" else "resolved"
    where = " ".join(f"{k}={v}" for k, v in event.source.items())
    text = f"{head}: {event.message or event.rule}" + (f" [{where}]" if where else "")
    return text.replace("\n", "\\n")


def _wrap(items: Sequence[str], width: int, sep: str = "  ") -> list[list[str]]:
    """``items`` in lines of at most ``width`` characters, ``sep`` apart; an item is never split (a long one is cut)."""
    lines: list[list[str]] = []
    used = 0
    for item in items:
        if len(item) > width:
            item = item[: max(width - 1, 0)] + "…"
        if lines and used + len(sep) + len(item) <= width:
            lines[-1].append(item)
            used += len(sep) + len(item)
        else:
            lines.append([item])
            used = len(item)
    return lines


def _cut(lines: list[list[str]], most: int, width: int) -> list[str]:
    """``lines`` joined, at most ``most`` of them; the last one says how many items were cut (``+N more``)."""
    if len(lines) <= most:
        return ["  ".join(line) for line in lines]
    kept = [list(line) for line in lines[:most]]
    hidden = sum(len(line) for line in lines[most:])
    last = kept[-1]
    while len(last) > 1 and len("  ".join([*last, f"+{hidden} more"])) > width:
        last.pop()
        hidden += 1
    text = "  ".join(last)
    more = f"  +{hidden} more"
    return ["  ".join(line) for line in kept[:-1]] + [_fit(text, width - len(more)) + more]


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with ``…`` when cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _summary(name: str, items: Sequence[str], width: int) -> list[str]:
    """``name: a · b · c`` in lines of at most ``width`` characters, the next ones indented under ``a``."""
    indent = " " * min(len(name) + 2, width // 4)
    lines = [f"{name}:"]
    for item in items:
        item = _fit(item, width - len(indent))
        if len(lines[-1]) + 3 + len(item) <= width:
            lines[-1] += (" · " if lines[-1] != f"{name}:" else " ") + item
        else:
            lines.append(indent + item)
    return [_fit(line, width) for line in lines]


@dataclass
class Layout:
    """What a `WatchTable` shows at one size: made by ``layout``, drawn by ``render``."""

    width: int
    now: float
    watches: int
    counts: dict[str, int]
    rows: list[tuple[Record, dict[str, float]]] = field(default_factory=list)
    """Each watch's last record and its short metrics (the monitor's own go to ``notes``)."""
    notes: list[tuple[list[str], bool]] = field(default_factory=list)
    """The monitor's summary lines under the table, and whether they report something wrong."""
    steps: list[str] = field(default_factory=list)
    cells: list[tuple[list[list[str]], list[list[str]]]] = field(default_factory=list)
    """Each row's value lines and rate lines, wrapped to their columns."""
    wide: bool = False
    wider: bool = False
    name_w: int = 0
    step_w: int = 0
    rate_w: int = 0
    room: int = 0
    """The width of the values column."""
    between: bool = False
    """Whether lines are drawn between rows."""
    most: int = 1
    """Lines shown of each row at most."""
    shown: list[int] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


class WatchTable:
    """The latest record of every watch, drawn as a rich table that fits the console it is drawn on.

    ``update``, ``alert`` and drawing may run on different threads. What it
    promises: [Sinks: The console](sinks.md#the-console-consolesink).

    Args:
        title: the text before the table's watch count and clock.
        clock: returns the current unix time (for the ``age`` column).

    Examples:
        >>> import io
        >>> from rich.console import Console
        >>> table = WatchTable(clock=lambda: 12.0)
        >>> table.update([Record("rb", 3, 10.0, {"rb/size": 3.0, "rb/write_count": 4e5,
        ...                                      "rb/writes_per_second": 88612.0})])
        >>> console = Console(width=60, height=10, file=io.StringIO(), record=True)
        >>> console.print(table)
        >>> print(console.export_text().splitlines()[4])
        │ rb    │    3 │   2s │ size 3  write_count 400k (88.6k/s) │
    """

    def __init__(self, title: str = "monitor-async", *, clock: Callable[[], float] = time.time) -> None:
        self.title = title
        self.clock = clock
        self._lock = threading.Lock()
        self._rows: dict[str, Record] = {}
        self._counts: dict[str, int] = {}
        self._alerts: dict[tuple[Any, ...], AlertEvent] = {}

    def alert(self, event: AlertEvent) -> None:
        """Shows a firing alert above the table from the next redraw on; a resolved one takes it away.

        Args:
            event: the alert event; its rule, watch, metric and source name the episode.
        """
        key = episode(event)
        with self._lock:
            if event.state == "firing":
                self._alerts[key] = event
            else:
                self._alerts.pop(key, None)

    def firing(self) -> list[AlertEvent]:
        """The alerts shown now, oldest first."""
        with self._lock:
            return list(self._alerts.values())

    def update(self, records: Iterable[Record]) -> None:
        """Keeps each watch's newest record of ``records`` (by arrival order) for the next redraw.

        Args:
            records: records of any watches.
        """
        with self._lock:
            for r in records:
                self._rows[r.name] = r
                self._counts[r.name] = self._counts.get(r.name, 0) + 1

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        width, height = options.max_width, options.max_height
        alerts = self.firing()
        room = max(height // 3, 1)
        lines: list[AlertEvent | None] = [*alerts[: room - 1], None] if len(alerts) > room else [*alerts]
        for event in lines:
            if event is None:
                yield Text(_fit(f"+{count(len(alerts) - room + 1, 'more alert')}", width), style="bold red")
            else:
                style = "bold red" if event.severity == "critical" else "bold yellow"
                yield Text(_fit(alert_line(event), width), style=style, no_wrap=True)
        yield self.render(width, height - len(lines))

    def render(self, width: int, height: int) -> Any:
        """The ``rich.table.Table`` for a console of ``width`` x ``height`` cells.

        Args:
            width: columns available.
            height: lines available.

        Returns:
            A ``rich.table.Table`` (its title and caption included) of at
            most ``width`` columns and ``height`` lines.
        """
        return self._draw(self.layout(width, height))

    def layout(self, width: int, height: int) -> Layout:
        """What the table shows in ``width`` x ``height`` cells: columns, each row's lines, what gives way."""
        with self._lock:
            records = list(self._rows.values())
            counts = dict(self._counts)
        out = Layout(width=width, now=self.clock(), watches=len(records), counts=counts)
        for r in records:
            m = short(r)
            if is_monitor(m):
                items, wrong = monitor_items(m)
                out.notes.append((_summary(r.name, items, width), wrong))
            else:
                out.rows.append((r, m))
        rows = out.rows
        out.wide, out.wider = width >= WIDE, width >= WIDER
        out.name_w = min(max([5] + [len(r.name) for r, _ in rows]), max(8, min(24, width // 5)))
        out.steps = ["" if r.step is None else (str(r.step) if abs(r.step) < 1_000_000 else eng(r.step)) for r, _ in rows]
        out.step_w = max([4] + [len(s) for s in out.steps])
        fixed = [out.name_w, out.step_w, 4] + ([8, 7] if out.wider else [])
        room = max(width - sum(w + 3 for w in fixed) - 4, 12)  # "│ x " per column, then the last "│"
        prepared: list[tuple[list[str], list[str]]] = []
        for _, m in rows:
            values, lone = split_rates(m)
            rates = [f"{k} {eng(rate)}/s" for k, _, rate in values if rate is not None]
            rates += [f"{k} {eng(rate)}/s" for k, rate in lone]
            if out.wide:
                prepared.append(([f"{k} {eng(v)}" for k, v, _ in values], rates))
            else:
                items = [f"{k} {eng(v)}" + ("" if rate is None else f" ({eng(rate)}/s)") for k, v, rate in values]
                prepared.append((items + [f"{k} {eng(rate)}/s" for k, rate in lone], []))
        if out.wide:
            out.rate_w = min(max([5] + [len("  ".join(rt)) for _, rt in prepared]), max(20, room // 3))
            room -= out.rate_w + 3
        out.room = room
        out.cells = [(_wrap(v, room), _wrap(rt, out.rate_w)) for v, rt in prepared]
        self._give_way(out, height)
        return out

    @staticmethod
    def _give_way(out: Layout, height: int) -> None:
        """What gives way to the height: lines between rows, then lines of each row, then rows."""
        below = sum(len(lines) for lines, _ in out.notes)

        def fits(tall: list[int], between: bool = False, more: int = 0) -> bool:
            return _CHROME + below + more + sum(tall) + (len(tall) - 1 if between else 0) <= height

        tall = [max(len(v), len(rt), 1) for v, rt in out.cells]
        out.between = fits(tall, between=True)
        most = max(tall, default=1)
        while most > 1 and not fits([min(t, most) for t in tall]):
            most -= 1
        shown = list(range(len(out.rows)))
        if not fits([min(t, most) for t in tall]):
            while shown and not fits([min(tall[i], most) for i in shown], more=1):
                shown.pop()
        out.most, out.shown = most, shown
        out.left_out = [r.name for r, _ in out.rows[len(shown):]]

    def _draw(self, out: Layout) -> Any:
        """The ``rich.table.Table`` of a layout."""
        from rich import box
        from rich.table import Table
        from rich.text import Text

        width = out.width
        caption = Text()
        for lines, wrong in out.notes:
            caption.append("\n".join(lines) + "\n", style="bold red" if wrong else "")
        if out.left_out:
            more = f"+{count(len(out.left_out), 'more watch')}: {', '.join(out.left_out)}"
            caption.append(_fit(more, width) + "\n", style="yellow")
        caption.rstrip()
        title = f"{self.title} · {count(out.watches, 'watch')} · {clock(out.now)}"
        table = Table(
            title=Text(_fit(title, width), style="bold"),
            title_justify="left",
            caption=caption if caption else None,
            caption_justify="left",
            box=box.ROUNDED,
            show_lines=out.between,
            expand=True,
            header_style="bold",
        )
        table.add_column("watch", width=out.name_w, no_wrap=True, overflow="ellipsis", style="cyan")
        table.add_column("step", width=out.step_w, justify="right", no_wrap=True)
        table.add_column("age", width=4, justify="right", no_wrap=True)
        if out.wider:
            table.add_column("time", width=8, justify="right", no_wrap=True)
            table.add_column("records", width=7, justify="right", no_wrap=True)
        table.add_column("values", ratio=1, no_wrap=True, overflow="ellipsis")
        if out.wide:
            table.add_column("rates", width=out.rate_w, no_wrap=True, overflow="ellipsis")
        for i in out.shown:
            r = out.rows[i][0]
            value_lines, rate_lines = out.cells[i]
            row: list[Any] = [Text(r.name), out.steps[i], age(out.now - r.time)]
            if out.wider:
                row += [clock(r.time), eng(out.counts.get(r.name, 0))]
            row.append(Text("\n".join(_cut(value_lines, out.most, out.room))))
            if out.wide:
                row.append(Text("\n".join(_cut(rate_lines, out.most, out.rate_w))))
            table.add_row(*row)
        return table
