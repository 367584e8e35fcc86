"""The drop-oldest channel between the poll tasks and one sink, and its writer.

Each sink gets one bounded queue (:class:`~monitor_async._runtime.queue.RecordQueue`:
``put`` never waits, a full queue drops its oldest record, every record is
accounted for). The writer task takes whatever is queued (up to
``max_batch`` records) and awaits one ``sink.write(batch)``; records of one
watch reach the sink in order, and a sink never has two writes in flight.
More than ``max_batch`` waiting (a backlog, or a gathered run) go out as
batches of ``max_batch`` in one ``sink.write_batches(batches)`` call when the
sink has it. Without a background writer (manual ``step()``), a drain task of
the channel's own does the writing, never the caller's task: a sink that
hangs or ignores its cancellation holds only that task.

In background mode the writer lets records gather first: it writes once
:attr:`Channel.gather` records wait (half the queue, so gathering never makes
the queue drop), or ``batch_wait`` seconds after the first one was polled,
whichever comes first, and then writes all of them in batches of
``max_batch`` records: in one ``sink.write_batches(batches)`` call when the
sink has that method (every built-in sink does; a file sink appends them
all at once), else one ``sink.write`` after another. ``step()``, ``flush()``
and ``stop()`` write at once. Fewer writes, made together, cost the rest of the
program less: every write through a worker thread wakes threads that must
each take the GIL from it, and a writer that runs between the poll tasks of
one tick makes the later ones late.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from .._core.exceptions import PartialWriteError, SinkError
from .._core.guard import as_error, call_guarded, must_propagate, wait_done
from .._core.loggers import as_sink, is_async_callable
from .._core.names import unique
from .._core.policy import ErrorPolicy, describe, log
from .._core.record import Record
from .._core.sink import ThreadedSink
from .queue import RecordQueue, wait_for_waiter

__all__ = ["Channel", "channels_for"]


def channels_for(
    sinks: Any, queue_size: int, max_batch: int, errors: ErrorPolicy, batch_wait: float = 0.0
) -> list[Channel]:
    """One channel per sink (a sink, a legacy logger, or a sequence of them), with unique labels.

    Each one is checked now (see :func:`as_sink`): a legacy (TorchRL / AgileRL
    style) logger is wrapped in ``LoggerSink``; a class, a file or stream, a
    path or anything else raises ``SinkTypeError`` naming it. A sink's label
    is its ``name`` when it has one, else its lowercase class name, made
    unique with ``_1``, ``_2``...
    """
    if sinks is None:
        sinks = []
    elif not isinstance(sinks, Sequence) or isinstance(sinks, (str, bytes)):
        sinks = [sinks]
    channels: list[Channel] = []
    taken: set[str] = set()
    for given in sinks:
        sink = as_sink(given)
        name = getattr(sink, "name", None)
        label = unique(name if isinstance(name, str) and name else type(sink).__name__.lower(), taken)
        taken.add(label)
        channels.append(Channel(sink, label, queue_size, max_batch, errors, batch_wait))
    return channels


class Channel(RecordQueue):
    """One sink, its queue, its writer task and its counters."""

    def __init__(
        self, sink: Any, label: str, queue_size: int, max_batch: int, errors: ErrorPolicy,
        batch_wait: float = 0.0,
    ) -> None:
        super().__init__(label, queue_size, max_batch)
        self.sink = sink
        self.batch_wait = batch_wait
        self.gather = max(1, queue_size // 2)
        """Records waiting that start writing at once."""
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

    # ------------------------------------------------------------------ writing
    async def _write(self, many: bool, left: int) -> int:
        """Takes the next batch (with ``many``, every batch of the next ``left`` records) and writes it.

        One ``sink.write`` (one batch) or one ``sink.write_batches``
        (several); counts and reports; returns how many records it took.
        """
        first = self.head
        batches = [self._take()]
        count = len(batches[0])
        while many and count < left and self.queue:
            batches.append(self._take())
            count += len(batches[-1])
        self.writing = first
        self.in_flight = count
        epoch = self.epoch
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
        if epoch != self.epoch:  # abandoned at stop meanwhile: counted there
            return
        self.writing = None
        self.in_flight = 0
        if cancelled:
            self.abandoned += count
            log.warning(
                "sink %r: a write of %d records was cancelled; they are counted as abandoned", self.label, count
            )
        elif error is None:
            self.written += count
            self.failing = False
        else:
            self.failures += 1
            # a partial failure: the sink stored all but `failed` records of the batch
            failed = error.failed if isinstance(error, PartialWriteError) and 0 <= error.failed <= count else count
            self.written += count - failed
            self.dropped += failed
            count = failed
            if not quiet:  # (quiet: it propagates, its caller sees it)
                message = f"sink {self.label!r} failed to write {count} records: {describe(error)}"
                self.errors.report(message, as_error(error, SinkError, message), first=not self.failing)
            self.failing = True
        if self._settlers:
            self._wake_settlers()

    async def run(self) -> None:
        """The writer task: gather records, write them all in batches, repeat until cancelled."""
        queue = self.queue
        many = self._write_batches is not None
        me = asyncio.current_task()
        while self.task is me:  # a writer halted while its sink ignored the cancel ends here
            if self.writing is not None:  # a drain of manual mode still writes: after it
                await self._after(self.writing + 1)
                continue
            if not queue:
                await self._idle(1, None)
                continue
            if self.batch_wait > 0 and not self._settlers and len(queue) < self.gather:
                # counted from the first record's poll, not from now: a record queued while a
                # slow write went on has waited already
                wait = min(self.batch_wait, self.batch_wait - (time.time() - queue[0].time))
                if wait > 0:
                    await self._idle(self.gather, wait)
            # everything gathered goes out now, max_batch records per batch: in one
            # sink.write_batches call when the sink has it, else one write after another
            left = len(queue)
            while left > 0 and queue and self.writing is None:
                left -= await self._write(many, left)

    async def _drain(self) -> None:
        """The writing of manual mode, in a task of its own: writes until nothing is queued, one batch per write."""
        me = asyncio.current_task()
        try:
            # a drain halted while its sink ignored the cancel ends here (it is no longer in _drains)
            while me in self._drains and (self.queue or self.writing is not None):
                if self.writing is not None:  # another write in flight (a writer left behind): after it
                    await self._after(self.writing + 1)
                else:
                    await self._write(False, len(self.queue))
        finally:
            # at once, not in a done callback: a request() right after this must start a new drain
            self._drains.discard(me)

    def writer_due(self) -> bool:
        """Whether a writer takes everything queued at its next turn: none is writing, and one is on its way.

        The background writer, when it is not writing, has been woken by the
        records that filled the queue and takes them all in one go; in manual
        mode a drain task is started here (it writes until the queue is
        empty). A write in flight means the sink is behind: ``False``, the
        queue drops its oldest record.
        """
        if self.writing is not None:
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

    def _start_drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Starts a drain task on ``loop``: the writing of manual mode (see :meth:`_drain`)."""
        self._drains.add(loop.create_task(self._drain(), name=f"monitor-async sink {self.label}"))

    def request(self) -> asyncio.Future[None] | None:
        """Asks for every record queued so far to be written now; returns a future done once they have left.

        With a background writer, the writer stops gathering and writes;
        without one (manual mode), a drain task writes them: never the
        caller's task, so a sink that hangs or ignores its cancellation holds
        only its own task, and the caller may stop waiting (a deadline, a
        cancel, ``stop()`` abandoning the sink). ``None``: nothing to wait for.
        """
        target = self.head + len(self.queue)
        if self._oldest() >= target:
            return None
        waiter = self._waiter(target)
        writer = self.task
        if writer is not None and not writer.done():
            self._release()  # a gathering writer writes now
        elif not self._drains:
            self._start_drain(asyncio.get_running_loop())
        return waiter

    async def settle(self, limit: float | None = None) -> bool:
        """Waits until every record queued so far has left the channel (written, failed or given up).

        Returns False when ``limit`` seconds passed first (the records stay
        queued or in the write under way).
        """
        return await wait_for_waiter(self.request(), limit)

    # ------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Starts the background writer on the running loop."""
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.run(), name=f"monitor-async sink {self.label}")

    def forget_loop(self) -> None:
        """The loop closed under a running monitor: its tasks died with it; what is queued waits for the next.

        A write that was in flight there never ends: its records are counted
        as abandoned.
        """
        self.task = None
        self._drains.clear()
        self._wake = None
        if self.writing is not None:
            self.abandoned += self.in_flight
            self.in_flight = 0
            self.writing = None
            self.epoch += 1
        self._settlers = []  # their futures belong to the closed loop

    async def halt(self, limit: float | None = None) -> bool:
        """Cancels the writer task and any drain task; waits at most ``limit`` seconds for them to end.

        Returns False when one did not end in time (its sink ignored the
        cancel): it is left behind. A write cancelled here has its records
        counted as abandoned.
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
            ended = await wait_done(task, left) and ended
        self._wake = None
        return ended

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
        """Runs ``sink.flush()`` or ``sink.close()`` within ``limit`` seconds; failures are counted and reported.

        The call runs in a task of its own: a sink that ignores the
        cancellation is left behind (with a warning) when ``limit`` passes.
        Returns whether it completed without error.
        """
        fn = getattr(self.sink, method, None)
        if not callable(fn):
            return True
        task = asyncio.get_running_loop().create_task(call_guarded(fn), name=f"monitor-async sink {self.label} {method}")
        try:
            done = await wait_done(task, limit)
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
        super().report(out)
        prefix = f"sink/{self.label}/"
        out[prefix + "errors"] = float(self.failures)
        out[prefix + "write_seconds"] = self.write_seconds
        counters = self._counters
        if counters is not None:
            try:
                figures = counters()
                for key, value in figures.items():
                    out.setdefault(prefix + key, float(value))
            except Exception:  # noqa: BLE001 - a sink's own figures never break monitor.stats()
                log.debug("sink %r: counters() failed", self.label, exc_info=True)
