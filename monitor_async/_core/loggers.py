"""What the monitor accepts as a sink: the checks that refuse a class, a stream or a path, naming it.

A legacy logger is wrapped in [LoggerSink][monitor_async.LoggerSink]
(``monitor_async.backends``); what a sink is lives in ``sink.py``.
"""

from __future__ import annotations

import inspect
import io
import os
import sys

from .exceptions import SinkTypeError

__all__ = ["is_async_callable", "refuse_non_instances", "shown"]


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


def shown(obj: object) -> str:
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
    return f"{type(obj).__name__} {shown(obj)}"


def refuse_non_instances(obj: object) -> None:
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
        raise SinkTypeError(f"got the path {shown(obj)} as a sink: pass CSVSink(path) or JSONLSink(path)")
