"""LoggerSink: a TorchRL or AgileRL logger as a sink; `as_sink`, how the monitor takes what it is given."""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from monitor_async._core import Ranks, Record, SinkTypeError, ThreadedSink, check_ranks
from monitor_async._core.distribution import Summary
from monitor_async._core.loggers import is_async_callable, refuse_non_instances, shown
from monitor_async._core.names import DEFAULT_RATE_NAMES, sink_label
from monitor_async._core.policy import log

__all__ = ["GLOBAL_STEP", "LoggerSink", "Report", "WideReports", "as_sink", "values_of"]

_STYLES = ("log_metrics", "log_scalar", "write")


def as_sink(obj: object) -> Any:
    """``obj`` as a sink: itself when it has an async ``write``, else wrapped in [LoggerSink][monitor_async.LoggerSink].

    Raises ``SinkTypeError`` naming ``obj`` when it is a class, a file or
    stream, a path, or neither a sink nor a logger.
    """
    refuse_non_instances(obj)
    if is_async_callable(getattr(obj, "write", None)):
        return obj
    return LoggerSink(obj)


def _collect(calls: Iterable[Any]) -> list[Awaitable[Any]]:
    """Makes ``calls`` (an iterator of the logger calls' results); returns the awaitables some of them gave back."""
    pending: list[Awaitable[Any]] = []
    try:
        for result in calls:
            if inspect.isawaitable(result):
                pending.append(result)
    except BaseException:
        _discard(pending)
        raise
    return pending


def _discard(pending: list[Awaitable[Any]]) -> None:
    """Closes coroutines that will not be awaited (no "never awaited" warning for them)."""
    for item in pending:
        close = getattr(item, "close", None)
        if inspect.iscoroutine(item) and callable(close):
            close()
    pending.clear()


class Report:
    """What an AgileRL-style ``logger.write(report)`` receives: one wide row of the run.

    ``to_dict()`` holds the sink's fixed key set ([the rule](integrations/agilerl.md#the-rule));
    ``to_nonscalar_dict()`` the latest distribution of each key in ``records`` (those since the
    previous report) as values its `TensorboardLogger` draws a histogram of.

    Args:
        metrics: the report's values, in column order.
        records: the records it was made from.

    Examples:
        >>> report = Report({"train/global_step": 1.0, "rb/size": 3.0})
        >>> report.to_dict()["rb/size"]
        3.0
    """

    __slots__ = ("metrics", "records")

    def __init__(self, metrics: Mapping[str, float], records: Sequence[Record] = ()) -> None:
        self.metrics = dict(metrics)
        self.records = tuple(records)

    def to_dict(self) -> dict[str, float]:
        return dict(self.metrics)

    def to_nonscalar_dict(self) -> dict[str, Any]:
        """``{"<watch>/<key>": values}`` for each distribution of the report's records (the latest per key).

        The values are made from the histogram: each bucket's count of values spread evenly inside
        it, the smallest and largest exact (a numpy array, or a list without numpy).
        """
        latest: dict[str, Summary] = {}
        for record in self.records:
            latest.update(record.distributions)
        return {key: values_of(summary) for key, summary in latest.items() if summary.count}

    def __str__(self) -> str:
        rows = self.metrics
        width = max((len(k) for k in rows), default=0)
        step = rows.get(GLOBAL_STEP)
        title = f"report (train/global_step {step:.0f})" if step is not None else "report"
        return "\n".join([title, *(f"  {k:<{width}}  {v:.6g}" for k, v in rows.items())])

    __repr__ = __str__


MAX_VALUES = 100_000
"""The most values `values_of` makes of one distribution."""


def values_of(summary: Summary) -> Any:
    """Values whose histogram is ``summary``'s: each bucket's count spread evenly in it, ``min`` and ``max`` exact.

    For a logger that takes values, not a histogram (AgileRL's ``TensorboardLogger`` bins them again).
    Past ``MAX_VALUES`` values every bucket's count is scaled down alike (at least one each).

    Examples:
        >>> from monitor_async._core.distribution import summarize
        >>> [float(v) for v in values_of(summarize([1.0, 2.0, 3.0, 10.0], bounds=[2.5]))]
        [1.0, 2.125, 4.375, 10.0]
    """
    low, high = summary.min, summary.max
    shrink = min(1.0, MAX_VALUES / summary.count)
    values: list[float] = []
    for lower, upper, count in summary.buckets():
        lower, upper = max(lower, low), min(upper, high)
        count = max(1, round(count * shrink))
        values += [lower + (upper - lower) * (k + 0.5) / count for k in range(count)]
    values[0], values[-1] = low, high
    try:
        import numpy
    except ImportError:
        return values
    return numpy.asarray(values)


GLOBAL_STEP = "train/global_step"
"""The report key AgileRL's `TensorboardLogger` takes as its x-axis."""

_HOLD = 64
"""Reports held at most before the key set is fixed (a run whose first name never reports again)."""


class WideReports:
    """Turns the records a sink receives into wide reports under one fixed key set (AgileRL's loggers).

    Implements [the rule](integrations/agilerl.md#the-rule): a report per batch,
    held until the first name reports again; later keys are warned about and
    left out, or added with ``grow``.

    Args:
        label: the sink's label, for the warning.
        keys: keys to put in the key set however late they appear.
        grow: add later keys to the reports instead of leaving them out.
    """

    def __init__(self, label: str, keys: Iterable[str] = (), grow: bool = False) -> None:
        self.label = label
        self.declared = [str(k) for k in keys]
        self.grow = grow
        self.latest: dict[str, float] = {}
        self.columns: dict[str, None] | None = None  # the fixed key set, in order
        self.predicted: dict[str, None] = {}
        self.held: list[Report] = []
        self.since: list[Record] = []  # records since the previous report
        self.names_since: set[str] = set()
        self.first_name: str | None = None
        self.reports = 0
        self.values_left_out = 0
        self.keys_left_out: set[str] = set()

    def add(self, records: Sequence[Record]) -> list[Report]:
        """The reports ready once ``records`` (one batch) are taken in."""
        out: list[Report] = []
        settle = False
        for record in records:
            name = record.name
            if name in self.names_since:
                out += self._cut(settle)
            if self.first_name is None:
                self.first_name = name
            elif name == self.first_name and self.columns is None:
                settle = True
            self._take(record)
        out += self._cut(settle)
        return out

    def drain(self) -> list[Report]:
        """The held reports and the records not reported yet (at flush and close): fixes the key set."""
        return self._cut(True) + self._release()

    def _take(self, record: Record) -> None:
        latest = self.latest
        latest.update(record.metrics)
        prefix = record.name + "/"
        if record.step is not None:
            latest[prefix + "step"] = float(record.step)
        if self.columns is None:
            for key in record.metrics:
                rate = DEFAULT_RATE_NAMES.get(key[len(prefix):]) if key.startswith(prefix) else None
                if rate is not None:
                    self.predicted[prefix + rate] = None
        self.since.append(record)
        self.names_since.add(record.name)

    def _cut(self, settle: bool) -> list[Report]:
        """The report of the records since the previous one (none when there are none)."""
        out: list[Report] = []
        if self.since:
            self.reports += 1
            values = dict(self.latest)
            values.setdefault(GLOBAL_STEP, float(self.reports))
            if self.columns is None:
                self.held.append(Report(values, self.since))
            else:
                out.append(self._fitted(values, self.since))
            self.since = []
            self.names_since = set()
        if self.columns is None and (settle or len(self.held) >= _HOLD):
            out = self._release() + out
        return out

    def _release(self) -> list[Report]:
        """Fixes the key set (if not yet) and gives the held reports under it."""
        if self.columns is None:
            if not self.held:
                return []
            columns: dict[str, None] = {GLOBAL_STEP: None}
            for report in self.held:
                columns.update(dict.fromkeys(report.metrics))
            columns.update(self.predicted)
            columns.update(dict.fromkeys(self.declared))
            self.columns = columns
        held, self.held = self.held, []
        return [self._fitted(r.metrics, r.records) for r in held]

    def _fitted(self, values: Mapping[str, float], records: Sequence[Record]) -> Report:
        columns = self.columns
        assert columns is not None
        late = [k for k in values if k not in columns]
        if late:
            if self.grow:
                columns.update(dict.fromkeys(late))
            else:
                fresh = {k for r in records for k in r.metrics}
                self._left_out(late, sum(k in fresh for k in late))
        nan = math.nan
        return Report({k: values.get(k, nan) for k in columns}, records)

    def _left_out(self, late: list[str], values: int) -> None:
        self.values_left_out += values
        new = [k for k in late if k not in self.keys_left_out]
        if new:
            log.warning(
                "sink %r: %s appeared after the report's key set was fixed; a fixed-header logger "
                "(AgileRL's CSVLogger) cannot take new columns, so they are left out of its reports and "
                "counted in monitor.stats()['sink/%s/values_left_out']. Name them ahead with "
                "LoggerSink(logger, keys=[...]), or pass grow=True for a logger that takes new keys",
                self.label, ", ".join(repr(k) for k in new), self.label,
            )
            self.keys_left_out.update(new)


class LoggerSink(ThreadedSink):
    """Adapts a TorchRL (``log_metrics``/``log_scalar``) or AgileRL (``write(report)``) logger as a sink.

    A blocking logger's calls run on the sink's worker thread, in order; an
    ``async def`` one is awaited on the loop. The user's logger is flushed,
    never closed. How ``write(report)`` rows are built is in
    [AgileRL's loggers](integrations/agilerl.md#the-rule).

    Args:
        logger: the logger to adapt.
        name: the sink's label in ``Monitor.stats()`` (default: the logger's
            lowercase class name, ``"csvlogger"``).
        ranks: ``"all"`` (default) or ``"main"`` (rank 0 only), as for every sink.
        keys: for ``write(report)`` loggers, full keys (``"learner/loss"``) in
            the key set even when they first appear late.
        grow: for ``write(report)`` loggers, add late keys instead of leaving them out.

    Raises:
        SinkTypeError: ``logger`` is a class, a file or stream, a path, or has
            none of the methods above.

    Examples:
        >>> class PrintLogger:
        ...     def log_metrics(self, metrics, step=None):
        ...         print(step, metrics)
        >>> sink = LoggerSink(PrintLogger())
    """

    def __init__(
        self,
        logger: Any,
        *,
        name: str | None = None,
        ranks: Ranks = "all",
        keys: Iterable[str] = (),
        grow: bool = False,
    ) -> None:
        self.ranks = check_ranks(ranks, "LoggerSink")
        refuse_non_instances(logger)
        style = next((s for s in _STYLES if callable(getattr(logger, s, None))), None)
        if style is None:
            raise SinkTypeError(
                f"got {shown(logger)} ({type(logger).__name__}) as a sink: it is neither a sink nor a logger; "
                "expected async write(records), log_metrics(dict, step=), log_scalar(name, value, step=) "
                "or write(report)"
            )
        if isinstance(keys, str):
            raise SinkTypeError(f"LoggerSink: keys must be a list of keys, got the string {keys!r}")
        self._style = style
        self._on_loop = is_async_callable(getattr(logger, style))
        self.logger = logger
        self.name = sink_label(type(logger).__name__, name)
        self._wide = WideReports(self.name, keys, grow) if style == "write" else None

    def counters(self) -> dict[str, float]:
        """``values_left_out``: values of keys that came after the reports' key set was fixed."""
        wide = self._wide
        return {"values_left_out": float(wide.values_left_out)} if wide is not None else {}

    def _each_call(self, records: Sequence[Record]) -> Iterator[Any]:
        """Makes the logger's calls for ``records``, one by one, in order; yields what each returned."""
        logger = self.logger
        if self._wide is not None:
            for report in self._wide.add(records):
                yield logger.write(report)
        elif self._style == "log_metrics":
            for r in records:
                yield logger.log_metrics(r.metrics, step=r.step)
        else:
            for r in records:
                for key, value in r.metrics.items():
                    yield logger.log_scalar(key, value, step=r.step)

    def _held_calls(self) -> Iterator[Any]:
        """Writes the held reports (at flush); yields what each call returned."""
        if self._wide is not None:
            for report in self._wide.drain():
                yield self.logger.write(report)

    def _batch_calls(self, batches: Sequence[Sequence[Record]]) -> Iterator[Any]:
        for records in batches:
            yield from self._each_call(records)

    async def _run(self, calls: Iterator[Any]) -> None:
        """Makes ``calls``: on the loop one at a time (a coroutine runs when awaited), else on the worker thread,
        awaiting on the loop what some of them gave back."""
        if self._on_loop:
            for result in calls:
                if inspect.isawaitable(result):
                    await result
            return
        pending = await self.call(_collect, calls)
        try:
            while pending:
                await pending.pop(0)
        finally:
            _discard(pending)

    async def _open(self) -> None:
        return None  # nothing to open: the user's logger is ready (and no thread is needed for that)

    async def _write(self, records: Sequence[Record]) -> None:
        await self._write_batches([records])

    async def _write_batches(self, batches: Sequence[Sequence[Record]]) -> None:
        await self._run(self._batch_calls(batches))

    def write_blocking(self, records: Sequence[Record]) -> None:
        pending = _collect(self._each_call(records))
        if pending:
            _discard(pending)
            raise SinkTypeError(
                f"{type(self.logger).__name__}.{self._style}() returned an awaitable: it has to be awaited "
                "on the monitor's loop (write through LoggerSink.write, not write_blocking)"
            )

    async def _flush(self) -> None:
        if self._wide is not None:
            await self._run(self._held_calls())
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
        pending = _collect(self._held_calls())
        if pending:
            _discard(pending)
            raise SinkTypeError(
                f"{type(self.logger).__name__}.{self._style}() returned an awaitable: it has to be awaited "
                "on the monitor's loop (flush through LoggerSink.flush, not flush_blocking)"
            )
        flush = getattr(self.logger, "flush", None)
        if callable(flush):
            flush()

    async def _close(self) -> None:
        await self._flush()
        self.retire_worker()

    def close_blocking(self) -> None:
        self.flush_blocking()
