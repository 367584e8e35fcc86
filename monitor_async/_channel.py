"""The drop-oldest channel between the poll tasks and one sink, and its writer.

Each sink gets one bounded ``asyncio.Queue``. :meth:`Channel.put` never
waits: when the queue is full the *oldest* queued record is dropped and
counted, so polling never waits for a sink and memory stays bounded. The
writer task takes whatever is queued (up to ``max_batch`` records) and awaits
one ``sink.write(batch)``; records of one watch reach the sink in order. More
than ``max_batch`` waiting (a backlog, or a gathered run) go out as batches of
``max_batch`` in one ``sink.write_batches(batches)`` call when the sink has it.

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
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ._errors import ErrorPolicy, describe, log
from ._logger import LoggerSink
from ._record import Record

__all__ = ["Channel", "channels_for"]


def channels_for(
    sinks: Any, queue_size: int, max_batch: int, errors: ErrorPolicy, batch_wait: float = 0.0
) -> list[Channel]:
    """One channel per sink (a sink, a legacy logger, or a sequence of them), with unique labels.

    A legacy (TorchRL / AgileRL style) logger is wrapped in ``LoggerSink``. A
    sink's label is its ``name`` when it has one, else its lowercase class
    name, made unique with ``_1``, ``_2``...
    """
    if sinks is None:
        sinks = []
    elif not isinstance(sinks, Sequence) or isinstance(sinks, (str, bytes)):
        sinks = [sinks]
    channels: list[Channel] = []
    taken: set[str] = set()
    for sink in sinks:
        if not inspect.iscoroutinefunction(getattr(sink, "write", None)):
            sink = LoggerSink(sink)
        name = getattr(sink, "name", None)
        base = name if isinstance(name, str) and name else type(sink).__name__.lower()
        label, n = base, 0
        while label in taken:
            n += 1
            label = f"{base}_{n}"
        taken.add(label)
        channels.append(Channel(sink, label, queue_size, max_batch, errors, batch_wait))
    return channels


class Channel:
    """One sink, its queue, its writer task and its counters."""

    def __init__(
        self, sink: Any, label: str, queue_size: int, max_batch: int, errors: ErrorPolicy,
        batch_wait: float = 0.0,
    ) -> None:
        self.sink = sink
        self.label = label
        self.queue: asyncio.Queue[Record] = asyncio.Queue(queue_size)
        self.max_batch = max_batch
        self.batch_wait = batch_wait
        self.gather = max(1, queue_size // 2)
        """Records waiting (the writer's first one included) that start writing at once."""
        self.errors = errors
        self.written = 0
        self.dropped = 0
        self.failures = 0
        self.write_seconds = 0.0
        self.failing = False
        self.dropping = False
        self.task: asyncio.Task[None] | None = None
        self._gathering: asyncio.Future[None] | None = None
        self._hurry = 0  # settle() calls under way: the writer does not wait for a batch to fill
        # a sink's own figures (a network sink's retries, spool size...), added to monitor.stats()
        counters = getattr(sink, "counters", None)
        self._counters: Callable[[], Mapping[str, float]] | None = counters if callable(counters) else None
        many = getattr(sink, "write_batches", None)
        self._write_batches: Callable[[list[list[Record]]], Awaitable[None]] | None = (
            many if inspect.iscoroutinefunction(many) else None
        )

    def put(self, record: Record) -> None:
        """Queues ``record``, dropping the oldest queued record when full. Never waits."""
        queue = self.queue
        try:
            queue.put_nowait(record)
        except asyncio.QueueFull:
            self._drop_oldest(record)
        if self._gathering is not None and queue.qsize() + 1 >= self.gather:  # + the writer's first
            self._release()

    def _drop_oldest(self, record: Record) -> None:
        """Queues ``record`` in a full queue: the oldest record goes, counted (and warned of once per episode)."""
        queue = self.queue
        queue.get_nowait()
        queue.task_done()
        self.dropped += 1
        if not self.dropping:
            self.dropping = True
            log.warning(
                "sink %r is falling behind: dropping its oldest queued records "
                "(queue_size=%d); drops are counted in monitor.stats()['sink/%s/dropped']",
                self.label, queue.maxsize, self.label,
            )
        queue.put_nowait(record)

    def _take(self, first: Record) -> list[Record]:
        batch = [first]
        queue = self.queue
        limit = self.max_batch
        while len(batch) < limit and not queue.empty():
            batch.append(queue.get_nowait())
        if queue.empty():
            self.dropping = False
        return batch

    async def _write(self, batches: list[list[Record]]) -> None:
        """One ``sink.write`` (one batch) or one ``sink.write_batches`` (several); counts and reports."""
        start = time.perf_counter()
        count = sum(len(batch) for batch in batches)
        try:
            many = self._write_batches
            if many is not None and len(batches) > 1:
                await many(batches)
            else:  # one batch: only a sink with write_batches is handed several
                await self.sink.write(batches[0])
        except Exception as exc:  # noqa: BLE001 - reported through on_error
            self.failures += 1
            self.errors.report(
                f"sink {self.label!r} failed to write {count} records: {describe(exc)}",
                exc,
                first=not self.failing,
            )
            self.failing = True
        else:
            self.written += count
            self.failing = False
        finally:
            self.write_seconds += time.perf_counter() - start
            for _ in range(count):
                self.queue.task_done()

    async def run(self) -> None:
        """The writer task: gather records, write them all in batches, repeat until cancelled."""
        queue = self.queue
        while True:
            first = await queue.get()
            if self.batch_wait > 0 and not self._hurry and queue.qsize() + 1 < self.gather:
                # counted from the first record's poll, not from now: a record queued while a
                # slow write went on has waited already
                wait = min(self.batch_wait, self.batch_wait - (time.time() - first.time))
                if wait > 0:
                    try:
                        await self._gather(wait)
                    except asyncio.CancelledError:  # the record in hand is lost: counted, like a drop
                        self.dropped += 1
                        queue.task_done()
                        raise
            # everything gathered goes out now, max_batch records per batch: in one
            # sink.write_batches call when the sink has it, else one write after another
            left = queue.qsize() + 1
            many = self._write_batches is not None
            while True:
                batches = [self._take(first)]
                left -= len(batches[-1])
                while many and left > 0 and not queue.empty():
                    batches.append(self._take(queue.get_nowait()))
                    left -= len(batches[-1])
                await self._write(batches)
                if left <= 0 or queue.empty():
                    break
                first = queue.get_nowait()

    async def _gather(self, wait: float) -> None:
        """Returns once :attr:`gather` records wait, ``wait`` seconds have passed, or a settle() hurries."""
        loop = asyncio.get_running_loop()
        self._gathering = waiter = loop.create_future()
        timer = loop.call_later(wait, self._release)
        try:
            await waiter
        finally:
            timer.cancel()
            self._gathering = None

    def _release(self) -> None:
        waiter, self._gathering = self._gathering, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drain(self) -> None:
        """Writes everything queued now, in the calling task (manual mode)."""
        queue = self.queue
        while not queue.empty():
            await self._write([self._take(queue.get_nowait())])

    async def settle(self) -> None:
        """Returns once every record queued so far has been written (or failed)."""
        if self.task is not None and not self.task.done():
            self._hurry += 1
            try:
                self._release()
                await self.queue.join()
            finally:
                self._hurry -= 1
        else:
            await self.drain()

    def start(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(
                self.run(), name=f"monitor-async sink {self.label}"
            )

    async def halt(self) -> None:
        """Cancels the writer task and waits for it."""
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()
            # only a cancellation of *this* wait propagates: the caller may be
            # cleaning up after an earlier one (stop() in a cancelled run())
            current = asyncio.current_task()
            cancelling = current.cancelling() if current is not None else 0
            try:
                await task
            except asyncio.CancelledError:
                if current is not None and current.cancelling() > cancelling:
                    raise

    def abandon(self) -> int:
        """Forgets what is still queued (a hung sink at stop); returns how many."""
        lost = 0
        while not self.queue.empty():
            self.queue.get_nowait()
            self.queue.task_done()
            lost += 1
        self.dropped += lost
        return lost

    async def finish(self, stop_timeout: float) -> None:
        """At stop: write what is queued, then flush, within ``stop_timeout``; else abandon, with a warning."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + stop_timeout
        try:
            async with asyncio.timeout_at(deadline):
                await self.settle()
        except TimeoutError:
            await self.halt()
            lost = self.abandon()
            log.warning(
                "sink %r did not drain within stop_timeout=%gs; abandoned %d queued records",
                self.label, stop_timeout, lost,
            )
            return
        await self.call("flush", max(0.0, deadline - loop.time()))

    async def call(self, method: str, limit: float | None = None) -> None:
        """Awaits ``sink.flush()`` or ``sink.close()`` within ``limit`` seconds; failures are counted and reported."""
        try:
            async with asyncio.timeout(limit):
                await getattr(self.sink, method)()
        except TimeoutError:
            self.failures += 1
            log.warning("sink %r: %s() did not return within %gs; abandoned", self.label, method, limit)
        except Exception as exc:  # noqa: BLE001 - reported through on_error
            self.failures += 1
            self.errors.report(f"sink {self.label!r}: {method}() raised {describe(exc)}", exc, first=True)

    def report(self, out: dict[str, float]) -> None:
        """Adds this sink's ``sink/<label>/...`` figures to ``out`` (``Monitor.stats()``)."""
        prefix = f"sink/{self.label}/"
        out[prefix + "queued"] = float(self.queue.qsize())
        out[prefix + "written"] = float(self.written)
        out[prefix + "dropped"] = float(self.dropped)
        out[prefix + "errors"] = float(self.failures)
        out[prefix + "write_seconds"] = self.write_seconds
        counters = self._counters
        if counters is not None:
            for key, value in counters().items():
                out.setdefault(prefix + key, float(value))
