"""Sinks are checked when the monitor is built.

Holds "Sinks are checked at construction": docs/guarantees.md#sinks-are-checked-at-construction-test_sink_checkspy

A class instead of an instance, a file or stream (``sys.stdout``, an open
file), a path: a ``SinkTypeError`` (a ``TypeError``) naming what was passed,
raised by the constructor. A logger whose methods are coroutine functions,
or a sink whose ``async def write`` hides behind a sync decorator, is
awaited: nothing counts as written that was not written.
"""

from __future__ import annotations

import functools
import io
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from monitor_async import LoggerSink, Monitor, Record, SinkTypeError, SyncMonitor
from monitor_async.backends import CSVSink, MemorySink
from tests.support.targets import Ticker


@pytest.mark.parametrize("wrap", [False, True], ids=["alone", "in-a-list"])
def test_a_sink_class_instead_of_an_instance_is_refused(wrap: bool) -> None:
    with pytest.raises(SinkTypeError, match=r"class MemorySink.*instance.*MemorySink\(") as caught:
        Monitor([MemorySink] if wrap else MemorySink)
    assert isinstance(caught.value, TypeError)


def test_a_class_of_a_logger_is_refused_too() -> None:
    class TorchRLishLogger:
        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...

    with pytest.raises(SinkTypeError, match="class TorchRLishLogger"):
        SyncMonitor(TorchRLishLogger, background=False)


def test_standard_output_is_refused_by_name() -> None:
    with pytest.raises(SinkTypeError, match="stdout") as caught:
        Monitor(sys.stdout)
    assert "ConsoleSink" in str(caught.value), "the error says what to use instead"


def test_an_open_file_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "metrics.txt"
    with open(path, "w") as f, pytest.raises(SinkTypeError, match=r"metrics\.txt"):
        Monitor([MemorySink(), f])
    with pytest.raises(SinkTypeError, match="file or stream"):
        LoggerSink(io.StringIO())


def test_a_path_is_refused_with_the_file_sinks_named(tmp_path: Path) -> None:
    for path in (str(tmp_path / "m.csv"), tmp_path / "m.csv"):
        with pytest.raises(SinkTypeError, match="CSVSink"):
            Monitor(path)


def test_an_object_that_is_no_sink_is_refused_by_name() -> None:
    with pytest.raises(SinkTypeError, match="int"):
        Monitor([MemorySink(), 42])


class AsyncLogger:
    """A TorchRL-shaped logger whose methods are coroutine functions."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int | None]] = []
        self.flushed = 0

    async def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.calls.append((dict(metrics), step))

    async def flush(self) -> None:
        self.flushed += 1


class AsyncScalarLogger:
    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int | None]] = []

    async def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        self.scalars.append((name, value, step))


def sync_wrapper(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A tracing decorator written for sync code: it hides that ``fn`` is a coroutine function."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


def bare_wrapper(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The same without functools.wraps: nothing is left to tell it is async."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


class DecoratedSink:
    """A third-party sink whose ``async def write`` went through a sync decorator."""

    name = "decorated"

    def __init__(self) -> None:
        self.records: list[Record] = []

    @sync_wrapper
    async def write(self, records: Sequence[Record]) -> None:
        self.records.extend(records)

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        return None


class BareDecoratedLogger:
    """A logger whose ``async def log_metrics`` went through a decorator without functools.wraps."""

    def __init__(self) -> None:
        self.calls: list[dict[str, float]] = []

    @bare_wrapper
    async def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.calls.append(dict(metrics))


def steps(sink: Any, n: int = 3) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "coroutine ... was never awaited" fails the test
        monitor = SyncMonitor(sink, background=False)
        monitor.watch(Ticker(), name="t")
        for _ in range(n):
            monitor.step()
        monitor.close()
        return monitor.stats()


def test_a_logger_with_coroutine_methods_is_awaited() -> None:
    logger = AsyncLogger()
    stats = steps(logger)
    assert [c[0]["t/n"] for c in logger.calls] == [1.0, 2.0, 3.0, 4.0]
    assert logger.flushed >= 1
    assert stats["sink/asynclogger/written"] == 4


def test_an_async_log_scalar_is_awaited() -> None:
    logger = AsyncScalarLogger()
    steps(logger, 2)
    assert [(name, value) for name, value, _ in logger.scalars] == [("t/n", 1.0), ("t/n", 2.0), ("t/n", 3.0)]


def test_a_sink_whose_async_write_hides_behind_a_sync_decorator_is_a_sink() -> None:
    sink = DecoratedSink()
    stats = steps(sink)
    assert [r.metrics["t/n"] for r in sink.records] == [1.0, 2.0, 3.0, 4.0]
    assert stats["sink/decorated/written"] == 4


def test_a_logger_method_that_returns_a_coroutine_is_awaited() -> None:
    logger = BareDecoratedLogger()
    stats = steps(logger)
    assert [c["t/n"] for c in logger.calls] == [1.0, 2.0, 3.0, 4.0]
    assert stats["sink/baredecoratedlogger/written"] == 4


def test_a_file_sink_is_still_a_sink(tmp_path: Path) -> None:
    monitor = Monitor(CSVSink(tmp_path / "m.csv"))
    assert isinstance(monitor.sinks[0], CSVSink)
