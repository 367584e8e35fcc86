"""ConsoleSink: a live rich table on a terminal, compact throttled lines anywhere else."""

from __future__ import annotations

import importlib.util
import math
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

from monitor_async import Record, ThreadedSink
from monitor_async.distributed import Ranks, check_ranks

__all__ = ["ConsoleSink"]

_RATE = "_per_second"


def _number(value: float) -> str:
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def _short(record: Record) -> list[tuple[str, float, bool]]:
    """``(metric, value, is_rate)`` without the ``"<name>/"`` prefix; rates shown as ``<key>/s``."""
    cut = len(record.name) + 1
    out = []
    for key, value in record.metrics.items():
        metric = key[cut:] if key.startswith(record.name + "/") else key
        rate = metric.endswith(_RATE)
        if rate:
            metric = metric[: -len(_RATE)] + "/s"
        out.append((metric, value, rate))
    return out


def _drops(record: Record) -> float | None:
    """The sum of the record's ``.../dropped`` counters (e.g. ``sink/<label>/dropped``), if any."""
    found = [v for k, v in record.metrics.items() if k.endswith("/dropped")]
    return sum(found) if found else None


def line(record: Record) -> str:
    """One compact line: ``HH:MM:SS name [step N] metric=value ...``."""
    parts = [time.strftime("%H:%M:%S", time.localtime(record.time)), record.name]
    if record.step is not None:
        parts.append(f"step={record.step}")
    parts.extend(f"{m}={_number(v)}" for m, v, _ in _short(record))
    return " ".join(parts).replace("\n", "\\n")


def _tqdm_bar_active() -> Any:
    """tqdm's class when a tqdm bar is open (never imports tqdm), else None."""
    module = sys.modules.get("tqdm")
    cls = getattr(module, "tqdm", None)
    return cls if cls is not None and getattr(cls, "_instances", None) else None


class ConsoleSink(ThreadedSink):
    """Shows the latest metrics of every watch on the console.

    Guarantees:
        - Live mode (a terminal, rich installed, no tqdm bar open; or
          ``live=True``): one table row per watch with its step, last update
          age, drops (the sum of its ``*dropped`` counters, when it has any),
          latest values, and rates (``<key>/s``), redrawn every ``refresh``
          seconds by rich's refresh thread.
        - Line mode (anything else, or ``live=False``): one compact line per
          record, at most one line per watch every ``min_interval`` seconds;
          records in between are skipped, and ``flush()`` (called by
          ``monitor.stop()``) prints each watch's latest record not yet
          shown. While a tqdm bar is open, lines go through ``tqdm.write`` so
          bars stay intact.
        - Output happens on this sink's worker thread (and rich's refresh
          thread), never on the event loop, so a slow terminal never stalls
          polling. ``stream`` defaults to ``sys.stdout`` as it is at the first
          write. Constructing does no I/O and does not import rich.
        - Ranks: by default (``ranks="main"``) only the main rank of a
          distributed job prints; ``ranks="all"`` prints on every rank.

    Example:
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
        name: str | None = None,
        ranks: Ranks = "main",
    ) -> None:
        self.ranks = check_ranks(ranks, "ConsoleSink")
        if not (isinstance(min_interval, (int, float)) and min_interval >= 0):
            raise ValueError(f"ConsoleSink: min_interval must be a number of seconds >= 0, got {min_interval!r}")
        if not (isinstance(refresh, (int, float)) and refresh > 0):
            raise ValueError(f"ConsoleSink: refresh must be a strictly positive number of seconds, got {refresh!r}")
        if live and importlib.util.find_spec("rich") is None:
            raise ImportError("ConsoleSink(live=True) needs rich: pip install 'monitor-async[console]'")
        self.stream = stream
        self.min_interval = float(min_interval)
        self.refresh = float(refresh)
        self.live = live
        self.name = name
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[Record, float]] = {}
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
            console=Console(file=stream, force_terminal=True),
            get_renderable=self._table,
            refresh_per_second=1.0 / self.refresh,
            redirect_stdout=redirect,
            redirect_stderr=redirect,
        )
        self._live.start()

    def _table(self) -> Any:
        from rich.table import Table

        with self._lock:
            rows = list(self._rows.values())
        now = time.monotonic()
        table = Table(title="monitor-async", title_justify="left", expand=False)
        for column in ("watch", "step", "age", "drops"):
            table.add_column(column, justify="left" if column == "watch" else "right", no_wrap=True)
        table.add_column("latest values", overflow="fold")
        table.add_column("rates", overflow="fold")
        for record, seen in rows:
            drops = _drops(record)
            pairs = _short(record)
            table.add_row(
                record.name,
                "" if record.step is None else str(record.step),
                f"{now - seen:.0f}s",
                "" if drops is None else _number(drops),
                "  ".join(f"{m} {_number(v)}" for m, v, rate in pairs if not rate),
                "  ".join(f"{m} {_number(v)}" for m, v, rate in pairs if rate),
            )
        return table

    def write_blocking(self, records: Sequence[Record]) -> None:
        now = time.monotonic()
        if self._live is not None:
            with self._lock:
                for r in records:
                    self._rows[r.name] = (r, now)
            return
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
