"""What the monitor accepts as a sink, and LoggerSink: a legacy logger (TorchRL or AgileRL style) as a sink.

:func:`as_sink` checks each sink when the monitor is built: a sink (an
``async def write``, also behind a decorator that kept ``__wrapped__``) is
used as is, a legacy logger is wrapped in :class:`LoggerSink`, anything else
(a class instead of an instance, a file or stream, a path) raises
``SinkTypeError`` naming what was passed.
"""

from __future__ import annotations

import inspect
import io
import os
import sys
from collections.abc import Awaitable, Iterator, Sequence
from typing import Any

from .exceptions import SinkTypeError
from .record import Record
from .sink import ThreadedSink
from .world import Ranks, check_ranks

__all__ = ["LoggerSink", "Report", "as_sink", "is_async_callable"]

_STYLES = ("log_metrics", "log_scalar", "write")


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` gives a coroutine: an ``async def``, also behind ``functools.wraps`` decorators."""
    if not callable(fn):
        return False
    if inspect.iscoroutinefunction(fn):
        return True
    try:
        inner = inspect.unwrap(fn)
    except ValueError:  # a __wrapped__ cycle
        return False
    return inner is not fn and inspect.iscoroutinefunction(inner)


def _shown(obj: object) -> str:
    """``repr(obj)`` cut to one short line, for error messages."""
    text = repr(obj).replace("\n", " ")
    return text if len(text) <= 100 else text[:97] + "..."


def _is_stream(obj: object) -> bool:
    """A file or text stream: ``sys.stdout``, ``open(...)``, ``io.StringIO()``... (``write(str)``, not records)."""
    return isinstance(obj, io.IOBase) or (callable(getattr(obj, "write", None)) and callable(getattr(obj, "writelines", None)))


def _stream_name(obj: object) -> str:
    """``sys.stdout``, ``the open file '/path/m.txt'``, or the stream's type and repr."""
    for name in ("stdout", "stderr"):
        if obj is getattr(sys, name, None) or obj is getattr(sys, f"__{name}__", None):
            return f"sys.{name}"
    path = getattr(obj, "name", None)
    if isinstance(path, str):
        return f"the open file {path!r}"
    return f"{type(obj).__name__} {_shown(obj)}"


def _refuse_non_instances(obj: object) -> None:
    """Raises ``SinkTypeError`` for a class, a file or stream, or a path, naming what was passed."""
    if isinstance(obj, type):
        raise SinkTypeError(
            f"got the class {obj.__name__} as a sink, not an instance of it: pass {obj.__name__}(...)"
        )
    if _is_stream(obj):
        raise SinkTypeError(
            f"got {_stream_name(obj)} as a sink: a file or stream takes write(str), it is not a sink "
            "(async write(records)) nor a logger; use ConsoleSink() to print to the terminal, "
            "CSVSink(path) or JSONLSink(path) to write a file"
        )
    if isinstance(obj, (str, bytes, os.PathLike)):
        raise SinkTypeError(f"got the path {_shown(obj)} as a sink: pass CSVSink(path) or JSONLSink(path)")


def as_sink(obj: object) -> Any:
    """``obj`` as a sink: itself when it has an async ``write``, else wrapped in :class:`LoggerSink`.

    Raises ``SinkTypeError`` (a ``TypeError``) naming ``obj`` when it is a
    class, a file or stream, a path, or neither a sink nor a logger.
    """
    _refuse_non_instances(obj)
    if is_async_callable(getattr(obj, "write", None)):
        return obj
    return LoggerSink(obj)


def _discard(pending: list[Awaitable[Any]]) -> None:
    """Closes coroutines that will not be awaited (no "never awaited" warning for them)."""
    for item in pending:
        close = getattr(item, "close", None)
        if inspect.iscoroutine(item) and callable(close):
            close()
    pending.clear()


class Report:
    """What an AgileRL-style ``logger.write(report)`` receives for one record.

    ``to_dict()`` is the record's namespaced metrics plus ``"<name>/step"``
    when the step is known; ``to_nonscalar_dict()`` is empty; ``str(report)``
    is a small readable table.
    """

    __slots__ = ("record",)

    def __init__(self, record: Record) -> None:
        self.record = record

    def to_dict(self) -> dict[str, float]:
        out = dict(self.record.metrics)
        if self.record.step is not None:
            out[f"{self.record.name}/step"] = float(self.record.step)
        return out

    def to_nonscalar_dict(self) -> dict[str, Any]:
        return {}

    def __str__(self) -> str:
        rows = self.to_dict()
        width = max((len(k) for k in rows), default=0)
        title = f"{self.record.name} (step {self.record.step})" if self.record.step is not None else self.record.name
        return "\n".join([title, *(f"  {k:<{width}}  {v:.6g}" for k, v in rows.items())])

    __repr__ = __str__


class LoggerSink(ThreadedSink):
    """Adapts a legacy logger; a blocking one's calls run on the sink's worker thread, in order.

    - TorchRL style: ``log_metrics(metrics, step=step)`` when the logger has
      it, else one ``log_scalar(name, value, step=step)`` per value.
    - AgileRL style: ``write(report)`` with a :class:`Report`.

    When the logger's method is a coroutine function (``async def``), it is
    called on the monitor's loop and awaited, in order; when a plain method
    returns an awaitable, that is awaited on the loop too. A record counts as
    written only once its call (and what it returned) completed.
    ``flush()`` calls the logger's ``flush()`` when it has one; ``close()``
    never closes the user's logger (it is not ours).

    Args:
        logger: the logger to adapt.
        name: the sink's label in ``Monitor.stats()``; default: the logger's
            lowercase class name.
        ranks: in a distributed job, ``"all"`` (default) or ``"main"`` (rank
            0 only), as for every sink.

    Raises:
        SinkTypeError: ``logger`` is a class, a file or stream, a path, or
            has none of the methods above.

    Examples:
        >>> class PrintLogger:
        ...     def log_metrics(self, metrics, step=None):
        ...         print(step, metrics)
        >>> sink = LoggerSink(PrintLogger())
    """

    def __init__(self, logger: Any, *, name: str | None = None, ranks: Ranks = "all") -> None:
        self.ranks = check_ranks(ranks, "LoggerSink")
        _refuse_non_instances(logger)
        style = next((s for s in _STYLES if callable(getattr(logger, s, None))), None)
        if style is None:
            raise SinkTypeError(
                f"got {_shown(logger)} ({type(logger).__name__}) as a sink: it is neither a sink nor a logger; "
                "expected async write(records), log_metrics(dict, step=), log_scalar(name, value, step=) "
                "or write(report)"
            )
        self._style = style
        self._on_loop = is_async_callable(getattr(logger, style))
        self.logger = logger
        self.name = name or type(logger).__name__.lower()

    def _each_call(self, records: Sequence[Record]) -> Iterator[Any]:
        """Makes the logger's calls for ``records``, one by one, in order; yields what each returned."""
        logger = self.logger
        if self._style == "log_metrics":
            for r in records:
                yield logger.log_metrics(r.metrics, step=r.step)
        elif self._style == "log_scalar":
            for r in records:
                for key, value in r.metrics.items():
                    yield logger.log_scalar(key, value, step=r.step)
        else:
            for r in records:
                yield logger.write(Report(r))

    def _calls_blocking(self, batches: Sequence[Sequence[Record]]) -> list[Awaitable[Any]]:
        """The calls, on the worker thread; returns the awaitables some of them gave back (to await on the loop)."""
        pending: list[Awaitable[Any]] = []
        try:
            for records in batches:
                for result in self._each_call(records):
                    if inspect.isawaitable(result):
                        pending.append(result)
        except BaseException:
            _discard(pending)
            raise
        return pending

    async def _open(self) -> None:
        return None  # nothing to open: the user's logger is ready (and no thread is needed for that)

    async def _write(self, records: Sequence[Record]) -> None:
        await self._write_batches([records])

    async def _write_batches(self, batches: Sequence[Sequence[Record]]) -> None:
        if self._on_loop:
            for records in batches:
                for result in self._each_call(records):  # one call at a time: a coroutine runs when awaited
                    if inspect.isawaitable(result):
                        await result
            return
        pending = await self.call(self._calls_blocking, batches)
        try:
            while pending:
                await pending.pop(0)
        finally:
            _discard(pending)

    def write_blocking(self, records: Sequence[Record]) -> None:
        pending = self._calls_blocking([records])
        if pending:
            _discard(pending)
            raise SinkTypeError(
                f"{type(self.logger).__name__}.{self._style}() returned an awaitable: it has to be awaited "
                "on the monitor's loop (write through LoggerSink.write, not write_blocking)"
            )

    async def _flush(self) -> None:
        flush = getattr(self.logger, "flush", None)
        if not callable(flush):
            return
        if is_async_callable(flush):
            await flush()
            return
        result = await self.call(flush)
        if inspect.isawaitable(result):
            await result

    def flush_blocking(self) -> None:
        flush = getattr(self.logger, "flush", None)
        if callable(flush):
            flush()

    async def _close(self) -> None:
        await self._flush()
        self.retire_worker()

    def close_blocking(self) -> None:
        self.flush_blocking()
