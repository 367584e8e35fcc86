"""The sink protocol and the two bases every sink builds on.

[BaseSink][monitor_async.BaseSink] opens lazily on first write, so a sink
built in sync code works on whatever loop the monitor runs;
[ThreadedSink][monitor_async.ThreadedSink] runs a blocking library's hooks on
one daemon worker thread of its own, in order (the thread is `WorkerSink`'s,
which the network sinks build on too).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeVar, runtime_checkable

from .alerts import AlertEvent
from .exceptions import SinkClosedError
from .names import sink_label
from .record import Record
from .resume import ResumePoint
from .threads import WorkerPool

__all__ = ["BaseSink", "Sink", "ThreadedAlertSink", "ThreadedSink", "WorkerSink"]

T = TypeVar("T")
S = TypeVar("S", bound="BaseSink")


@runtime_checkable
class Sink(Protocol):
    """Anything the monitor can write to. All three calls run on the monitor's loop.

    Optional: ``async def write_batches(batches)`` (several batches in one
    call), ``counters()`` (figures reported as ``sink/<label>/<key>``; must not
    block), ``async def alert(event)`` (every [`AlertEvent`][monitor_async.AlertEvent],
    through a bounded queue of its own), and ``resume_state()`` with
    ``async def resume(point, state)`` (what it needs to continue a run after a
    restart, see [BaseSink][monitor_async.BaseSink] and [resuming](resuming.md)).
    See [sinks](sinks.md) and [alerts](alerts.md).
    """

    async def write(self, records: Sequence[Record]) -> None: ...

    async def flush(self) -> None: ...

    async def close(self) -> None: ...


class BaseSink:
    """Lazy open, async context manager, write-after-close error.

    Subclasses implement ``_open``, ``_write``, ``_flush`` and ``_close``
    (all async; ``_open``/``_flush``/``_close`` default to no-ops).
    """

    name: str | None = None
    resuming: ResumePoint | None = None
    """The launch this sink continues (set by `resume`), read when it opens; ``None``: a launch of its own."""
    resumed: dict[str, Any] | None = None
    """What this sink saved in the state it resumes from (its `resume_state()` then), or ``None``."""

    _opened = False
    _closed = False

    @property
    def label(self) -> str:
        return sink_label(type(self).__name__, self.name)

    async def write(self, records: Sequence[Record]) -> None:
        """Writes a batch of records (opening the sink first if needed)."""
        if self._closed:
            raise SinkClosedError(f"sink {self.label!r} is closed; it cannot write any more records")
        if not self._opened:
            await self.open()
        await self._write(records)

    async def write_batches(self, batches: Sequence[Sequence[Record]]) -> None:
        """Writes several batches, in order, as one call (see [Sink][monitor_async.Sink])."""
        if self._closed:
            raise SinkClosedError(f"sink {self.label!r} is closed; it cannot write any more records")
        if not self._opened:
            await self.open()
        await self._write_batches(batches)

    async def open(self) -> None:
        """Opens the sink now instead of at the first write. Idempotent."""
        if self._closed:
            raise SinkClosedError(f"sink {self.label!r} is closed; it cannot be opened again")
        if not self._opened:
            await self._open()
            self._opened = True

    async def flush(self) -> None:
        """Makes what was written so far durable / visible (no-op before the first write)."""
        if self._opened and not self._closed:
            await self._flush()

    async def close(self) -> None:
        """Flushes and releases the sink. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._opened:
            await self._close()

    def resume_state(self) -> dict[str, Any] | None:
        """What this sink needs to continue its run after a restart (plain values), saved by ``Monitor.state_dict()``.

        ``None`` (the default): nothing. Called on the monitor's loop; must not block.
        """
        return None

    async def resume(self, point: ResumePoint, state: Mapping[str, Any] | None) -> None:
        """Continues the launch ``point`` names, from ``state`` (what `resume_state` saved then, or ``None``).

        Called by a monitor given ``load_state_dict()`` before it first writes.
        Stores both (`resuming`, `resumed`); a sink reads them when it opens.
        A sink open already gets ``_resume_open()`` at once.
        """
        self.resuming = point
        self.resumed = dict(state) if state is not None else None
        if self._opened and not self._closed:
            await self._resume_open()

    async def _resume_open(self) -> None:
        """`resume` reached a sink open already (a no-op unless a subclass says what then)."""
        return None

    async def __aenter__(self: S) -> S:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _open(self) -> None:
        return None

    async def _write(self, records: Sequence[Record]) -> None:
        raise NotImplementedError

    async def _write_batches(self, batches: Sequence[Sequence[Record]]) -> None:
        for records in batches:
            await self._write(records)

    async def _flush(self) -> None:
        return None

    async def _close(self) -> None:
        await self._flush()


class WorkerSink(BaseSink):
    """A sink with a worker thread of its own, started at the first `run_blocking`: its blocking calls run there, in order.

    The base of [ThreadedSink][monitor_async.ThreadedSink] and of the network
    sinks' [ResilientSink][monitor_async.backends.ResilientSink].
    """

    _worker: WorkerPool | None = None

    async def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Runs ``fn(*args)`` on this sink's worker thread (one call at a time, in order) and returns its result."""
        if self._worker is None:
            self._worker = WorkerPool(1, f"monitor-async-{self.label}")
        return await asyncio.wrap_future(self._worker.submit(functools.partial(fn, *args)))

    def retire_worker(self) -> list[threading.Thread]:
        """Lets this sink's worker thread end once idle (a later call starts one); returns it when already idle, for joining."""
        return self._worker.retire() if self._worker is not None else []


class ThreadedSink(WorkerSink):
    """A sink whose work is blocking: every hook runs on the sink's own worker thread, in order.

    Subclasses implement ``open_blocking``, ``write_blocking(records)``,
    ``flush_blocking`` and ``close_blocking``.
    """

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Runs ``fn(*args)`` on this sink's worker thread and returns its result (`run_blocking`)."""
        return await self.run_blocking(fn, *args)

    async def _open(self) -> None:
        await self.call(self.open_blocking)

    async def _write(self, records: Sequence[Record]) -> None:
        await self.call(self.write_blocking, records)

    async def _write_batches(self, batches: Sequence[Sequence[Record]]) -> None:
        await self.call(self._write_all_blocking, batches)

    def _write_all_blocking(self, batches: Sequence[Sequence[Record]]) -> None:
        for records in batches:
            self.write_blocking(records)

    async def _flush(self) -> None:
        await self.call(self.flush_blocking)

    async def _close(self) -> None:
        try:
            await self.call(self.close_blocking)
        finally:
            self.retire_worker()

    def open_blocking(self) -> None:
        return None

    def write_blocking(self, records: Sequence[Record]) -> None:
        raise NotImplementedError

    def flush_blocking(self) -> None:
        return None

    def close_blocking(self) -> None:
        self.flush_blocking()


class ThreadedAlertSink(ThreadedSink):
    """A [ThreadedSink][monitor_async.ThreadedSink] that also takes alert events: ``alert_blocking(event)`` on its thread."""

    async def alert(self, event: AlertEvent) -> None:
        """Shows ``event`` (opening the sink first if needed) by running ``alert_blocking`` on the worker thread.

        Args:
            event: the event, firing or resolved.

        Raises:
            SinkClosedError: the sink is closed.
        """
        await self.open()  # idempotent; raises SinkClosedError once closed
        await self.call(self.alert_blocking, event)

    def alert_blocking(self, event: AlertEvent) -> None:
        raise NotImplementedError
