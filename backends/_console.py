"""ConsoleSink: a live rich table on a terminal, compact throttled lines anywhere else."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from monitor_async._core import AlertEvent, Ranks, Record, ThreadedAlertSink, check_ranks
from monitor_async._core.checks import number
from monitor_async._core.text import clock

from ._table import WatchTable, alert_line, eng, is_monitor, monitor_items, short, split_rates

__all__ = ["ConsoleSink"]


def line(record: Record) -> str:
    """One compact line: ``HH:MM:SS name [step=N] metric=value ... rate/s=value``, numbers as ``eng`` writes them.

    A monitor watching itself gets its one-line summary instead:
    ``HH:MM:SS monitor: polls 309 · records 222 · dropped 0 · errors 0``.
    """
    when = clock(record.time)
    metrics = short(record)
    if is_monitor(metrics):
        items, _ = monitor_items(metrics)
        return f"{when} {record.name}: {' · '.join(items)}".replace("\n", "\\n")
    parts = [when, record.name]
    if record.step is not None:
        parts.append(f"step={record.step}")
    values, lone = split_rates(metrics)
    parts.extend(f"{m}={eng(v)}" for m, v, _ in values)
    parts.extend(f"{m}/s={eng(r)}" for m, _, r in values if r is not None)
    parts.extend(f"{m}/s={eng(r)}" for m, r in lone)
    return " ".join(parts).replace("\n", "\\n")


def _tqdm_bar_active() -> Any:
    """tqdm's class when a tqdm bar is open (never imports tqdm), else None."""
    module = sys.modules.get("tqdm")
    cls = getattr(module, "tqdm", None)
    return cls if cls is not None and getattr(cls, "_instances", None) else None


class ConsoleSink(ThreadedAlertSink):
    """Shows the latest metrics of every watch on the console.

    A live table on a terminal with rich, else one compact line per record.
    What it promises: [Sinks: The console](sinks.md#the-console-consolesink).

    Args:
        stream: the text stream to write to; ``None`` (default): ``sys.stdout``
            as it is when the sink opens.
        min_interval: line mode: the fewest seconds between two lines of one
            watch (default 1.0); a number >= 0.
        refresh: live mode: seconds between two redraws (default 0.5); a number > 0.
        live: ``True``: the live table (needs rich); ``False``: lines;
            ``None`` (default): the table on a terminal with rich and no tqdm bar.
        title: live mode: the table's title (default ``"monitor-async"``).
        name: the sink's label in ``Monitor.stats()`` and in messages;
            ``None`` (default) or ``""``: ``"console"``.
        ranks: ``"main"`` (default): only rank 0 prints; ``"all"``: every rank.

    Attributes:
        table: the live table (a ``WatchTable``): the latest record of every
            watch, laid out for the console at each redraw.

    Raises:
        ValueError: ``min_interval`` or ``refresh`` out of range.
        ImportError: ``live=True`` without rich installed.
        ConfigError: ``ranks`` is neither ``"main"`` nor ``"all"``.

    Examples:
        >>> import asyncio, io
        >>> from monitor_async import Monitor
        >>> out = io.StringIO()
        >>> class Buffer:
        ...     def stats(self):
        ...         return {"size": 3}
        >>> async def main():
        ...     async with ConsoleSink(out) as sink:
        ...         monitor = Monitor(sink)
        ...         monitor.watch(Buffer(), name="rb")
        ...         await monitor.step()
        >>> asyncio.run(main())
        >>> out.getvalue().split()[1:]
        ['rb', 'size=3']
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        min_interval: float = 1.0,
        refresh: float = 0.5,
        live: bool | None = None,
        title: str = "monitor-async",
        name: str | None = None,
        ranks: Ranks = "main",
    ) -> None:
        self.ranks = check_ranks(ranks, "ConsoleSink")
        number("ConsoleSink", "min_interval", min_interval, low=0, above=False, unit="seconds")
        number("ConsoleSink", "refresh", refresh, unit="seconds")
        if live and importlib.util.find_spec("rich") is None:
            raise ImportError("ConsoleSink(live=True) needs rich: pip install rich (or the extra: monitor-async[console])")
        self.stream = stream
        self.min_interval = float(min_interval)
        self.refresh = float(refresh)
        self.live = live
        self.name = name
        self.table = WatchTable(title)
        self._shown: dict[str, float] = {}
        self._pending: dict[str, Record] = {}
        self._live: Any = None

    # ----------------------------------------------------------- worker thread
    def open_blocking(self) -> None:
        if self.stream is None:
            self.stream = sys.stdout
        live = self.live
        if live is None:
            live = (
                importlib.util.find_spec("rich") is not None
                and bool(getattr(self.stream, "isatty", lambda: False)())
                and _tqdm_bar_active() is None
            )
        if live:
            self._start_live()

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        stream = self.stream
        redirect = stream is sys.stdout or stream is sys.stderr
        self._live = Live(
            self.table,
            console=Console(file=stream, force_terminal=True),
            refresh_per_second=1.0 / self.refresh,
            redirect_stdout=redirect,
            redirect_stderr=redirect,
        )
        self._live.start()

    def write_blocking(self, records: Sequence[Record]) -> None:
        if self._live is not None:
            self.table.update(records)
            return
        now = time.monotonic()
        lines = []
        for r in records:
            last = self._shown.get(r.name)
            if last is None or now - last >= self.min_interval:
                self._shown[r.name] = now
                self._pending.pop(r.name, None)
                lines.append(line(r))
            else:
                self._pending[r.name] = r
        self._emit(lines)

    def alert_blocking(self, event: AlertEvent) -> None:
        """Shows an alert event above the live table while it fires, or as one line (see [Alerts](alerts.md#consolesink))."""
        if self._live is not None:
            self.table.alert(event)
            self._live.refresh()
            return
        self._emit([f"{clock(event.time)} {alert_line(event)}"])

    def _emit(self, lines: list[str]) -> None:
        if not lines:
            return
        stream = self.stream
        assert stream is not None
        bars = _tqdm_bar_active()
        if bars is not None:
            for text in lines:
                bars.write(text, file=stream)
        else:
            stream.write("\n".join(lines) + "\n")
            stream.flush()

    def flush_blocking(self) -> None:
        if self._live is not None:
            self._live.refresh()
            return
        pending, self._pending = self._pending, {}
        now = time.monotonic()
        for name in pending:
            self._shown[name] = now
        self._emit([line(r) for r in pending.values()])

    def close_blocking(self) -> None:
        self.flush_blocking()
        if self._live is not None:
            self._live.stop()
