"""The delivery task of a network sink: its spool, sent oldest first, retried with backoff.

A `Courier` belongs to one `ResilientSink` and runs on the monitor's loop:
``accept`` appends batches to the spool, ``settled`` is what ``flush()`` waits
on, ``stop`` what ``close()`` ends with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from monitor_async._core import DeliveryError, Record
from monitor_async._core.guard import within

from .retry import Backoff, Failure
from .spool import Batch, Spool

__all__ = ["Courier"]

log = logging.getLogger("monitor_async")

Send = Callable[[Sequence[Record], "str | None"], Awaitable[None]]


class _Ack:
    """What one ``write`` waits on: its batches delivered, one of them refused, or the server found away."""

    def __init__(self) -> None:
        self.pending = 0
        self.waiting = False
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def add(self, batch: Batch) -> None:
        batch.ack = self
        self.pending += 1

    def done(self, batch: Batch) -> None:
        batch.ack = None
        self.pending -= 1
        if self.pending <= 0:
            self.release()

    def fail(self, batch: Batch, error: BaseException) -> bool:
        """Hands ``error`` to the waiting writer; ``False`` when nobody waits any more."""
        batch.ack = None
        self.pending -= 1
        if not self.waiting or self.future.done():
            return False
        self.future.set_exception(error)
        return True

    def release(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    async def wait(self, limit: float | None) -> None:
        """Waits for the outcome at most ``limit`` seconds; raises the refusal `fail` handed over."""
        self.waiting = True
        try:
            done = await within(self.future, limit)
        finally:
            self.waiting = False
        if done:
            self.future.result()


class Courier:
    """Sends one sink's spool, in order, and keeps the sink's delivery figures.

    Args:
        spool: the sink's open spool (batches an earlier process left go first).
        send: the sink's ``send(records, destination)``.
        classify: the sink's ``classify(exc)``.
        backoff: the waits between tries.
        label: the sink's label, for the log.
    """

    def __init__(
        self, spool: Spool, send: Send, classify: Callable[[BaseException], Failure], backoff: Backoff, label: str
    ) -> None:
        self.spool = spool
        self.send = send
        self.classify = classify
        self.backoff = backoff
        self.label = label
        self._sender: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._watchers: list[asyncio.Future[None]] = []
        self._stopped = False
        self._away_since: float | None = None
        self._failures = 0
        self._refusing = False
        self._full = False
        self._unwritable = False
        self.retries = self.spooled = self.replayed = self.spool_dropped = self.unspooled = 0
        self.rejected = self.duplicates = self.delivered = 0

    def counters(self) -> dict[str, float]:
        """The delivery figures (``ResilientSink.counters``)."""
        spool = self.spool
        return {
            "retries": float(self.retries),
            "spooled": float(self.spooled),
            "replayed": float(self.replayed),
            "spool_bytes": float(spool.bytes),
            "spool_dropped": float(self.spool_dropped),
            "rejected": float(self.rejected),
            "duplicates": float(self.duplicates),
            "delivered": float(self.delivered),
            "pending": float(spool.records),
            "unspooled": float(self.unspooled),
        }

    async def accept(self, parts: Sequence[Sequence[Record]], destination: str | None, ack_wait: float | None) -> None:
        """Spools ``parts`` (one request each) and waits for them up to ``ack_wait`` if nothing else waits.

        Raises what the server refused them with, if it did while the caller waited.
        """
        spool = self.spool
        ack = _Ack() if not spool.batches and ack_wait != 0 else None
        away = self._away_since is not None
        for part in parts:
            if part:
                batch, dropped = spool.append(destination, part)
                if dropped or batch is None:
                    self._dropped(dropped, 0 if batch is not None else len(part))
                if batch is None:
                    continue
                self._stored(batch)
                if away:
                    batch.waited = True
                    self.spooled += batch.count
                if ack is not None:
                    ack.add(batch)
        self.wake()
        if ack is not None and ack.pending > 0:
            await ack.wait(ack_wait)

    def wake(self) -> None:
        """Starts the delivery task if batches wait and none runs."""
        spool = self.spool
        if not spool.batches or self._stopped:
            return
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(
                self._deliver(), name=f"monitor-async delivery {self.label}"
            )

    async def _deliver(self) -> None:
        spool = self.spool
        attempt = 0
        try:
            while spool.batches and not self._stopped:
                batch = spool.batches[0]
                try:
                    destination, records = spool.load(batch)
                except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
                    self._damaged(batch, exc)
                    continue
                spool.busy = batch
                with contextlib.suppress(OSError):  # the mark only matters if the process dies now
                    spool.sending(batch)
                try:
                    await self.send(records, destination)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - every failure is classified
                    failure = self.classify(exc)
                    spool.busy = None
                    with contextlib.suppress(OSError):
                        if failure.retry and failure.sent:
                            batch.unsure = True
                            spool.mark_unsure(spool.unsure | {batch.seq})
                        spool.not_sending()
                    if not failure.retry:
                        self._refused(batch, exc, failure)
                        continue
                    self._failed(failure)
                    self._signal()
                    await self._pause(self.backoff.delay(attempt, failure.retry_after))
                    attempt += 1
                else:
                    spool.busy = None
                    attempt = 0
                    self._delivered(batch)
                finally:
                    spool.busy = None
                    self._signal()
        except asyncio.CancelledError:
            if not self._stopped:  # the loop is shutting down under an open sink
                self._closing_line("stopped sending (its event loop ended)")
            raise

    def _delivered(self, batch: Batch) -> None:
        self.delivered += batch.count
        if batch.waited:
            self.replayed += batch.count
        if batch.unsure:
            self.duplicates += batch.count
        self._refusing = self._full = False
        ack = batch.ack
        self.spool.remove(batch)
        if ack is not None:
            ack.done(batch)
        if self._away_since is not None:
            log.info(
                "sink %r: the server answers again after %.1f s; the %d records that waited go out now",
                self.label, time.monotonic() - self._away_since, self.spool.records,
            )
            self._away_since = None

    def _failed(self, failure: Failure) -> None:
        """A try failed and will be made again: everything waiting now counts as spooled."""
        spool = self.spool
        self.retries += 1
        self._failures += 1
        if self._away_since is not None:
            return
        self._away_since = time.monotonic()
        for batch in spool.batches:
            if not batch.waited:
                batch.waited = True
                self.spooled += batch.count
            if batch.ack is not None:  # its writer goes on: the batch waits in the spool
                batch.ack.release()
        log.warning(
            "sink %r: %s; records wait in the spool at %s and go out in order once the server answers "
            "(tries are counted in monitor.stats()['sink/%s/retries'])",
            self.label, failure.message, spool.path, self.label,
        )

    def _refused(self, batch: Batch, exc: BaseException, failure: Failure) -> None:
        self.rejected += batch.count
        ack = batch.ack
        self.spool.remove(batch)
        if failure.status is not None and not isinstance(exc, DeliveryError):  # say what the server said
            error: BaseException = DeliveryError(
                f"sink {self.label!r}: the server refused {batch.count} records: {failure.message}",
                status=failure.status, retryable=False,
            )
            error.__cause__ = exc
        else:
            error = exc
        if ack is not None and ack.fail(batch, error):
            return  # the waiting write raises it
        if not self._refusing:
            self._refusing = True
            log.warning(
                "sink %r: the server refused %d records (%s); they are dropped, not retried; further "
                "refusals are counted in monitor.stats()['sink/%s/rejected'] until a batch goes through",
                self.label, batch.count, failure.message, self.label,
            )

    def _stored(self, batch: Batch) -> None:
        """Says once per streak that the folder cannot be written, and when it can again."""
        spool = self.spool
        if not batch.stored:
            self.unspooled += batch.count
            if not self._unwritable:
                self._unwritable = True
                log.warning(
                    "sink %r: cannot write the spool at %s (%s); batches are held in memory and sent "
                    "directly while the server answers; those it cannot take before the sink closes are "
                    "lost, counted in monitor.stats()['sink/%s/spool_dropped']",
                    self.label, spool.path, spool.write_error, self.label,
                )
        elif self._unwritable:
            self._unwritable = False
            log.info("sink %r: the spool at %s can be written again", self.label, spool.path)

    def _damaged(self, batch: Batch, exc: BaseException) -> None:
        """A spool file that cannot be read back (cut, edited, not a batch): dropped, named, counted."""
        self.spool_dropped += batch.count
        if batch.ack is not None:
            batch.ack.done(batch)
        log.warning(
            "sink %r: the spool file %s is unreadable (%s: %s); its %d records are dropped, counted in "
            "monitor.stats()['sink/%s/spool_dropped']",
            self.label, self.spool.file(batch), type(exc).__name__, exc, batch.count, self.label,
        )
        self.spool.remove(batch)

    def _dropped(self, batches: Sequence[Batch], unwritten: int) -> None:
        """Batches dropped from a full spool (and ``unwritten`` records that never fit in it)."""
        self.spool_dropped += sum(batch.count for batch in batches) + unwritten
        for batch in batches:
            if batch.ack is not None:
                batch.ack.done(batch)
        if not self._full:
            self._full = True
            spool = self.spool
            log.warning(
                "sink %r: the spool at %s is full (spool_bytes=%d); its oldest batches are dropped, "
                "counted in monitor.stats()['sink/%s/spool_dropped']",
                self.label, spool.path, spool.limit, self.label,
            )

    # ------------------------------------------------------- waiting, ending
    async def _pause(self, seconds: float) -> None:
        """The backoff wait; `_hurry` cuts it short."""
        self._wakeup = wake = asyncio.get_running_loop().create_future()
        try:
            await within(wake, seconds)
        finally:
            self._wakeup = None

    def _hurry(self) -> None:
        wake = self._wakeup
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _signal(self) -> None:
        """Wakes whoever waits for the delivery task to make progress."""
        watchers, self._watchers = self._watchers, []
        for fut in watchers:
            if not fut.done():
                fut.set_result(None)

    async def settled(self) -> None:
        """Returns once what was handed over so far is delivered (or refused), or a try failed."""
        spool = self.spool
        if spool is None or not spool.batches:
            return
        newest = spool.batches[-1].seq
        failures = self._failures
        self.wake()
        self._hurry()
        loop = asyncio.get_running_loop()
        while spool.batches and spool.batches[0].seq <= newest and self._failures == failures:
            if self._sender is None or self._sender.done():
                return  # stopped, or ended by a bug: nothing will make progress
            fut = loop.create_future()
            self._watchers.append(fut)
            await fut

    async def stop(self, what: str = "closed") -> None:
        """Stops the delivery task; says in the log what stays in the spool, and where.

        The line is logged before the first await, so a close that is
        cancelled (a server that never answers, ``stop_timeout``) still says it.
        """
        self._stopped = True
        task, self._sender = self._sender, None
        if task is not None and not task.done():
            task.cancel()
        spool = self.spool
        for batch in spool.batches:
            if batch.ack is not None:
                batch.ack.release()
        self._closing_line(what)
        _, lost = spool.in_memory
        self.spool_dropped += lost
        try:
            if task is not None and not task.done():
                await asyncio.wait([task])
        finally:
            spool.close()

    def _closing_line(self, what: str) -> None:
        spool = self.spool
        _, lost = spool.in_memory
        kept = spool.records - lost
        if kept:
            later = (
                "a temporary folder: give the sink a spool_dir to have a later run send them"
                if spool.temporary
                else f"a sink opened with spool_dir={str(spool.path)!r} sends them first"
            )
            log.warning(
                "sink %r %s with %d records (%d bytes) not delivered; they stay in the spool at %s (%s)",
                self.label, what, kept, sum(b.size for b in spool.batches if b.stored), spool.path, later,
            )
        if lost:
            log.warning(
                "sink %r %s with %d records not delivered that the spool at %s could not be written with "
                "(%s); they are lost, counted in monitor.stats()['sink/%s/spool_dropped']",
                self.label, what, lost, spool.path, spool.write_error or "no longer writable", self.label,
            )
