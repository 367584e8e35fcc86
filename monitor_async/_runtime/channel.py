"""One sink's channel: the bounded queue it owns, its writer task, and its alert events.

``put`` never waits: a sink that is behind loses its oldest queued record
(counted). The writer makes one ``sink.write`` (or ``write_batches``) at a
time, each watch's records in poll order. In background mode it lets
records gather for ``batch_wait`` or until half the queue waits, because
fewer writes through a worker thread cost the program less; ``step()``,
``flush()`` and ``stop()`` write at once, in a task of the channel's own.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from .._core.alerts import AlertEvent
from .._core.exceptions import PartialWriteError, SinkError
from .._core.guard import as_error, call_guarded, must_propagate, within
from .._core.loggers import is_async_callable
from .._core.names import sink_label, unique
from .._core.policy import ErrorPolicy, describe, log
from .._core.record import Record
from .._core.sink import ThreadedSink
from ..backends._logger import as_sink
from .queue import RecordQueue

__all__ = ["EVENTS", "Channel", "channels_for", "flush_all", "write_all"]

EVENTS = 256
"""Alert events one sink's queue holds; past that the oldest is dropped and counted."""


def channels_for(
    sinks: Any, queue_size: int, max_batch: int, errors: ErrorPolicy, batch_wait: float = 0.0
) -> list[Channel]:
    """One checked channel per sink (see ``as_sink``), labelled by ``sink_label`` and made unique with ``_1``, ``_2``..."""
    if sinks is None:
        sinks = []
    elif not isinstance(sinks, Sequence) or isinstance(sinks, (str, bytes)):
        sinks = [sinks]
    channels: list[Channel] = []
    taken: set[str] = set()
    for given in sinks:
        sink = as_sink(given)
        label = unique(sink_label(type(sink).__name__, getattr(sink, "name", None)), taken)
        taken.add(label)
        channels.append(Channel(sink, label, queue_size, max_batch, errors, batch_wait))
    return channels


async def write_all(channels: Sequence[Channel]) -> None:
    """Every channel writes what it holds now, each in a task of its own; returns when all have."""
    waiters = [channel.request() for channel in channels]
    try:
        for waiter in waiters:
            if waiter is not None:
                await waiter
    finally:
        for waiter in waiters:
            if waiter is not None and not waiter.done():
                waiter.cancel()


async def flush_all(channels: Sequence[Channel], stop_timeout: float) -> None:
    """``Monitor.flush()``: every channel writes its queue, then each that did flushes its sink, within ``stop_timeout``.

    A sink that does not write its queue in time is not flushed; its records stay queued, with a warning.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + stop_timeout
    waiters = [channel.request() for channel in channels]
    settled = [await within(waiter, max(0.0, deadline - loop.time()), cancel=True) for waiter in waiters]
    for channel, done in zip(channels, settled, strict=True):
        if not done:
            log.warning(
                "flush(): sink %r did not write its queued records within stop_timeout=%gs; "
                "they stay queued", channel.label, stop_timeout,
            )
    left = max(0.0, deadline - loop.time())
    await asyncio.gather(*(c.call("flush", left) for c, done in zip(channels, settled, strict=True) if done))


class Channel:
    """One sink, the queue it owns, its writer task and its counters.

    Args:
        sink: the sink (already checked by `as_sink`).
        label: its unique label (``sink/<label>/...`` counters).
        queue_size: records queued before the oldest is dropped, when the sink is behind.
        max_batch: the most records one ``sink.write`` gets.
        errors: the monitor's ``on_error`` policy.
        batch_wait: seconds the background writer lets records gather.
    """

    def __init__(
        self, sink: Any, label: str, queue_size: int, max_batch: int, errors: ErrorPolicy,
        batch_wait: float = 0.0,
    ) -> None:
        self.records = RecordQueue(label, queue_size, max_batch, self.writer_due)
        self.put: Callable[[Record], None] = self.records.offer
        """Queues a record; never waits. A full queue drops its oldest unless a writer is due (`RecordQueue.offer`)."""
        self.label = label
        self.sink = sink
        self.batch_wait = batch_wait
        self.gather = max(1, queue_size // 2)  # records waiting that start a write at once
        self.errors = errors
        self.failures = 0
        self.write_seconds = 0.0
        self.failing = False
        self.task: asyncio.Task[None] | None = None  # the background writer
        self._drains: set[asyncio.Task[None]] = set()  # the writing of manual mode (no background writer)
        # a sink's own figures (a network sink's retries, spool size...), added to monitor.stats()
        counters = getattr(sink, "counters", None)
        self._counters: Callable[[], Mapping[str, float]] | None = counters if callable(counters) else None
        many = getattr(sink, "write_batches", None)
        self._write_batches: Callable[[list[list[Record]]], Awaitable[None]] | None = (
            many if is_async_callable(many) else None
        )
        alert = getattr(sink, "alert", None)
        self._alert: Callable[[AlertEvent], Awaitable[None]] | None = alert if is_async_callable(alert) else None
        self.events: deque[AlertEvent] = deque()
        self.events_written = 0
        self.events_dropped = 0
        self._events_sent: list[asyncio.Future[None]] = []

    # ------------------------------------------------------------------ putting
    def put_event(self, event: AlertEvent) -> None:
        """Queues an alert event for ``sink.alert``; never waits. A sink without ``alert()`` takes none."""
        if self._alert is None:
            return
        events = self.events
        if len(events) >= EVENTS:
            events.popleft()
            self.events_dropped += 1
        events.append(event)
        self._kick()

    def _kick(self) -> None:
        """Gets a writer to write now: the background one stops gathering; else a drain task starts."""
        writer = self.task
        if writer is not None and not writer.done():
            self.records.release()
        elif not self._drains:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop here: written at the next step(), flush() or stop()
                return
            self._start_drain(loop)

    def writer_due(self) -> bool:
        """Whether a writer takes everything queued at its next turn (none is writing, one is on its way).

        ``False`` while a write is in flight: the queue drops its oldest. In manual mode this starts a drain task.
        """
        if self.records.writing is not None:
            return False
        writer = self.task
        if writer is not None:
            return not writer.done()
        if not self._drains:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop to write on here: the queue stays bounded
                return False
            self._start_drain(loop)
        return True

    def room(self) -> int:
        """Records the queue takes now without dropping one: any number between two writes, the free room during one."""
        queue = self.records
        writer = self.task
        if queue.writing is None and writer is not None and not writer.done():
            return sys.maxsize  # the writer takes the whole burst at its turn
        return queue.size - len(queue.items)

    # ------------------------------------------------------------------ writing
    async def _write(self, many: bool, left: int) -> int:
        """Writes the next batch (with ``many``, the batches of the next ``left`` records); returns how many it took."""
        queue = self.records
        first = queue.head
        batches = [queue.take()]
        count = len(batches[0])
        while many and count < left and queue.items:
            batches.append(queue.take())
            count += len(batches[-1])
        epoch = queue.begin(first, count)
        start = time.perf_counter()
        error: BaseException | None = None
        try:
            if len(batches) > 1:
                assert self._write_batches is not None
                await self._write_batches(batches)
            else:
                await self.sink.write(batches[0])
        except Exception as exc:  # noqa: BLE001 - reported through on_error
            error = exc
        except BaseException as exc:
            if must_propagate(exc):  # a real cancel abandons the records; anything else loses them
                cancelled = isinstance(exc, asyncio.CancelledError)
                self._account(epoch, count, start, None if cancelled else exc, cancelled, quiet=True)
                raise
            error = exc  # KeyboardInterrupt, SystemExit, a stray CancelledError: this write failed
        self._account(epoch, count, start, error)
        return count

    def _account(
        self, epoch: int, count: int, start: float, error: BaseException | None, cancelled: bool = False,
        quiet: bool = False,
    ) -> None:
        self.write_seconds += time.perf_counter() - start
        outcome = "abandoned" if cancelled else "written" if error is None else "dropped"
        if isinstance(error, PartialWriteError) and 0 <= error.failed <= count:
            count, stored = error.failed, count - error.failed  # the sink stored all but `failed` records
        else:
            stored = 0
        if not self.records.end(epoch, count, outcome, stored):  # abandoned at stop meanwhile: counted there
            return
        if cancelled:
            log.warning(
                "sink %r: a write of %d records was cancelled; they are counted as abandoned", self.label, count
            )
        elif error is None:
            self.failing = False
        else:
            self.failures += 1
            if not quiet:  # (quiet: it propagates, its caller sees it)
                message = f"sink {self.label!r} failed to write {count} records: {describe(error)}"
                self.errors.report(message, as_error(error, SinkError, message), first=not self.failing)
            self.failing = True

    async def _send_events(self) -> None:
        """Hands every queued alert event to ``sink.alert``, one call each, in order."""
        events = self.events
        alert = self._alert
        while events and alert is not None:
            event = events.popleft()
            try:
                await alert(event)
                self.events_written += 1
            except Exception as exc:  # noqa: BLE001 - reported through on_error
                self._event_failed(exc)
            except BaseException as exc:
                self.events_dropped += 1
                if must_propagate(exc):
                    raise
                self._event_failed(exc, counted=True)
        self._events_done()

    def _event_failed(self, exc: BaseException, counted: bool = False) -> None:
        if not counted:
            self.events_dropped += 1
        self.failures += 1
        message = f"sink {self.label!r}: alert() raised {describe(exc)}"
        self.errors.report(message, as_error(exc, SinkError, message), first=not self.failing)

    def _events_done(self) -> None:
        sent, self._events_sent = self._events_sent, []
        for waiter in sent:
            if not waiter.done():
                waiter.set_result(None)

    async def run(self) -> None:
        """The writer task: gather records, write them all in batches, repeat until cancelled."""
        queue = self.records
        items = queue.items
        many = self._write_batches is not None
        me = asyncio.current_task()
        while self.task is me:  # a writer halted while its sink ignored the cancel ends here
            if queue.writing is not None:  # a drain of manual mode still writes: after it
                await queue.after(queue.writing + 1)
                continue
            if self.events:
                await self._send_events()
                continue
            if not items:
                if self.batch_wait > 0:  # the first record to come starts the wait without waking this task
                    await queue.idle(self.gather, None, self.batch_wait)
                else:
                    await queue.idle(1, None)
                continue
            if self.batch_wait > 0 and not queue.settling and len(items) < self.gather:
                # counted from the first record's poll, not from now: a record queued while a
                # slow write went on has waited already
                wait = min(self.batch_wait, self.batch_wait - (time.time() - items[0].time))
                if wait > 0:
                    await queue.idle(self.gather, wait)
            # everything gathered goes out now, max_batch records per batch: in one
            # sink.write_batches call when the sink has it, else one write after another
            left = len(items)
            while left > 0 and items and queue.writing is None:
                left -= await self._write(many, left)

    async def _drain(self) -> None:
        """The writing of manual mode, in a task of its own: writes until nothing is queued, one batch per write."""
        me = asyncio.current_task()
        queue = self.records
        try:
            # a drain halted while its sink ignored the cancel ends here (it is no longer in _drains)
            while me in self._drains and (queue.items or queue.writing is not None or self.events):
                if queue.writing is not None:  # another write in flight (a writer left behind): after it
                    await queue.after(queue.writing + 1)
                elif self.events:
                    await self._send_events()
                else:
                    await self._write(False, len(queue.items))
        finally:
            # at once, not in a done callback: a request() right after this must start a new drain
            self._drains.discard(me)

    def _start_drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Starts a drain task on ``loop``: the writing of manual mode (see `_drain`)."""
        self._drains.add(loop.create_task(self._drain(), name=f"monitor-async sink {self.label}"))

    def request(self) -> asyncio.Future[Any] | None:
        """Asks for everything queued to be written now; returns a future done once it has left, or ``None``.

        The write runs in the writer or a drain task, never the caller's, so a hung sink holds only its own task.
        """
        queue = self.records
        target = queue.head + len(queue.items)
        waiters: list[asyncio.Future[Any]] = []
        if queue.oldest() < target:
            waiters.append(queue.waiter(target))
        if self.events:
            sent: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._events_sent.append(sent)
            waiters.append(sent)
        if not waiters:
            return None
        self._kick()
        return waiters[0] if len(waiters) == 1 else asyncio.gather(*waiters)

    async def settle(self, limit: float | None = None) -> bool:
        """Waits until everything queued so far has left (written, failed or given up); False when ``limit`` passed."""
        return await within(self.request(), limit, cancel=True)

    # ------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Starts the background writer on the running loop."""
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.run(), name=f"monitor-async sink {self.label}")

    def forget_loop(self) -> None:
        """The loop closed under a running monitor: its tasks died; the queue waits, an in-flight write counts as abandoned."""
        self.task = None
        self._drains.clear()
        self._events_sent = []  # their futures belong to the closed loop
        self.records.forget_loop()

    async def halt(self, limit: float | None = None) -> bool:
        """Cancels the writer and any drain task, waiting at most ``limit`` s; ``False`` when one was left behind.

        A write cancelled here has its records counted as abandoned.
        """
        tasks = [t for t in (self.task, *self._drains) if t is not None and not t.done()]
        self.task = None
        self._drains.clear()
        for task in tasks:
            task.cancel()
        loop = asyncio.get_running_loop()
        deadline = None if limit is None else loop.time() + limit
        ended = True
        for task in tasks:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            ended = await within(task, left) and ended
        self.records.wake = None
        return ended

    def abandon(self) -> int:
        """Gives up on every queued record and event (a hung sink at stop); returns the records lost."""
        self.events_dropped += len(self.events)
        self.events.clear()
        self._events_done()
        return self.records.abandon()

    async def finish(self, stop_timeout: float) -> bool:
        """At stop: write what is queued, then flush, within ``stop_timeout``; else abandon, with a warning.

        Returns False when the sink was abandoned.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + stop_timeout
        if await self.settle(stop_timeout):
            await self.call("flush", max(0.0, deadline - loop.time()))
            return True
        await self.halt(max(0.05, deadline - loop.time()))
        lost = self.abandon()
        log.warning(
            "sink %r did not drain within stop_timeout=%gs; abandoned %d records (queued or being written), "
            "counted in monitor.stats()['sink/%s/abandoned']",
            self.label, stop_timeout, lost, self.label,
        )
        return False

    async def call(self, method: str, limit: float | None = None) -> bool:
        """Runs ``sink.flush()`` or ``sink.close()`` in a task of its own within ``limit`` s; returns whether it completed.

        Failures are counted and reported; a sink that ignores the cancellation is left behind with a warning.
        """
        fn = getattr(self.sink, method, None)
        if not callable(fn):
            return True
        task = asyncio.get_running_loop().create_task(call_guarded(fn), name=f"monitor-async sink {self.label} {method}")
        try:
            done = await within(task, limit)
        except BaseException:
            task.cancel()
            raise
        if not done:
            task.cancel()
            self.failures += 1
            log.warning("sink %r: %s() did not return within %gs; abandoned", self.label, method, limit)
            return False
        error = task.result()
        if error is None:
            return True
        self.failures += 1
        message = f"sink {self.label!r}: {method}() raised {describe(error)}"
        self.errors.report(message, as_error(error, SinkError, message), first=True)
        return False

    def retire_threads(self) -> list[Any]:
        """Lets the idle worker thread of a blocking sink end now (it starts again when needed)."""
        sink = self.sink
        return sink.retire_worker() if isinstance(sink, ThreadedSink) else []

    def report(self, out: dict[str, float]) -> None:
        """Adds this sink's ``sink/<label>/...`` figures to ``out`` (``Monitor.stats()``)."""
        self.records.report(out)
        prefix = f"sink/{self.label}/"
        out[prefix + "errors"] = float(self.failures)
        out[prefix + "write_seconds"] = self.write_seconds
        if self.events_written or self.events_dropped or self.events:
            out[prefix + "alerts_written"] = float(self.events_written)
            out[prefix + "alerts_dropped"] = float(self.events_dropped)
        counters = self._counters
        if counters is not None:
            try:
                figures = counters()
                for key, value in figures.items():
                    out.setdefault(prefix + key, float(value))
            except Exception:  # noqa: BLE001 - a sink's own figures never break monitor.stats()
                log.debug("sink %r: counters() failed", self.label, exc_info=True)
