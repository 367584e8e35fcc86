"""ResilientSink: the base of the network sinks; their batches wait out an outage in a disk spool.

How a batch travels: ``write`` appends it to the sink's spool (one file),
the sink's delivery task sends the spool oldest first, and a batch's file is
deleted once the server acknowledged it. A failure worth another try stops
the task for a :class:`~monitor_async.backends.Backoff` wait, while new
batches keep joining the spool behind the one that failed; a refusal drops
the batch and moves on. ``_delivery.py`` holds that policy, ``_spool.py``
the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from monitor_async import BaseSink, ConfigError, DeliveryError, Record, ThreadedSink

from ._delivery import Backoff, Failure, classify
from ._spool import Batch, Spool

__all__ = ["DEFAULT_SPOOL_BYTES", "ResilientSink"]

log = logging.getLogger("monitor_async")

DEFAULT_SPOOL_BYTES = 64 << 20
"""64 MiB: the default bound of a sink's spool."""

T = TypeVar("T")


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
        self.waiting = True
        try:
            await asyncio.wait_for(asyncio.shield(self.future), limit)
        except TimeoutError:
            return
        finally:
            self.waiting = False


class ResilientSink(BaseSink):
    """The base of sinks that deliver over a network: retries, a disk spool, replay, at-least-once.

    Guarantees:
        - Every batch handed to ``write`` goes to the sink's spool first (one
          file under ``spool_dir``), then out, oldest first, one request at
          a time, from the sink's own delivery task. Its file is deleted only
          once the server acknowledged it: delivery is at-least-once.
        - A failure worth another try (no connection, a timeout, 408, 429,
          5xx) keeps the batch, and all after it, in the spool; the next try
          comes after a :class:`Backoff` wait (``Retry-After`` obeyed). The
          monitor's queue keeps draining into the spool meanwhile, so an
          outage never fills it and polling goes on.
        - Any other failure (a 4xx: the server refuses the batch) is not
          retried: the batch is dropped and counted (``rejected``). A
          ``write`` still waiting for that batch raises the error (so the
          monitor counts and reports it); otherwise the sink logs it, with
          the status and the server's message, once per streak.
        - When the server answers again the spool goes out in order, before
          anything newer. Batches that an earlier process left in the same
          ``spool_dir`` (a crash, ``kill -9``, a preemption) go out first
          once the sink opens.
        - The spool holds at most ``spool_bytes``; past that the oldest
          batches are dropped and counted (``spool_dropped``).
        - A batch goes out twice only when no reply came for it (a timeout,
          a dropped connection, a process killed mid-request): the server
          may then hold it twice. Such records are counted (``duplicates``).
        - ``write`` waits for its batches (at most :attr:`ack_wait` seconds)
          only when nothing else waits in the spool; it never waits for a
          server that is away.
        - ``flush()`` and ``close()`` try at once instead of waiting out the
          backoff, and return once everything handed over is delivered, or
          as soon as a try fails (the server is away; the rest stays in the
          spool, on disk). ``close()`` then logs how many records remain and
          where. Under a monitor, ``stop()`` bounds both by ``stop_timeout``.
        - :meth:`counters` (``Monitor.stats()`` reports them as
          ``sink/<label>/<key>``), in records unless said: ``retries`` (tries
          that failed and will be made again), ``spooled`` (records that
          could not go out at once), ``replayed`` (of those, delivered
          later, by this process or from an earlier one's spool),
          ``spool_bytes`` (bytes now in the spool), ``spool_dropped``,
          ``rejected``, ``duplicates``, ``delivered``, ``pending`` (not yet
          acknowledged).

    For sink authors: implement ``send_blocking(records, destination)``,
    which runs on the sink's worker thread (a daemon thread of its own, one
    call at a time, as in :class:`~monitor_async.ThreadedSink`) and raises on
    failure (a :class:`~monitor_async.DeliveryError`, or the client's own
    errors: see :func:`~monitor_async.backends.classify`), or override the
    coroutine :meth:`send` for an async client. Optional hooks:
    ``open_blocking`` / ``close_blocking`` (worker thread: build the client
    without needing the server; release it), :meth:`destination`,
    :meth:`prepare` and :meth:`classify`.

    Args:
        spool_dir: the folder of the spool. A sink opened on a folder that a
            previous run left batches in sends them first. ``None``: a
            private temporary folder (removed when the sink closes empty).
            One sink per folder at a time (``ConfigError`` otherwise).
        spool_bytes: the most bytes the spool may take (default 64 MiB).
        backoff: the waits between tries (default ``Backoff()``).
        name: the sink's label in ``Monitor.stats()`` and in messages.

    Raises:
        ConfigError: a bad ``spool_dir``, ``spool_bytes`` or ``backoff``.

    Example:
        >>> import asyncio
        >>> from monitor_async import DeliveryError, Record
        >>> class Flaky(ResilientSink):
        ...     '''A "server" that is busy at the first request, then keeps what it gets.'''
        ...     def __init__(self):
        ...         super().__init__(backoff=Backoff(first=0.01))
        ...         self.calls, self.received = 0, []
        ...     def send_blocking(self, records, destination):
        ...         self.calls += 1
        ...         if self.calls == 1:
        ...             raise DeliveryError("busy", status=503)
        ...         self.received.extend(records)
        >>> async def main():
        ...     async with Flaky() as sink:
        ...         await sink.write([Record("rb", 1, 0.0, {"rb/size": 3.0})])
        ...         await sink.flush()
        ...         return [r.step for r in sink.received], sink.counters()["retries"]
        >>> asyncio.run(main())
        ([1], 1.0)
    """

    ack_wait: float | None = 1.0
    """How long ``write`` waits for its batches when nothing else waits (``None``: until their outcome)."""

    def __init__(
        self,
        *,
        spool_dir: str | os.PathLike[str] | None = None,
        spool_bytes: int = DEFAULT_SPOOL_BYTES,
        backoff: Backoff | None = None,
        name: str | None = None,
    ) -> None:
        kind = type(self).__name__
        if isinstance(spool_bytes, bool) or not isinstance(spool_bytes, int) or spool_bytes <= 0:
            raise ConfigError(f"{kind}: spool_bytes must be a positive number of bytes, got {spool_bytes!r}")
        if spool_dir is not None:
            if not isinstance(spool_dir, (str, os.PathLike)):
                raise ConfigError(f"{kind}: spool_dir must be a folder path or None, got {spool_dir!r}")
            if Path(spool_dir).exists() and not Path(spool_dir).is_dir():
                raise ConfigError(f"{kind}: spool_dir {os.fspath(spool_dir)!r} exists and is not a folder")
        if backoff is not None and not isinstance(backoff, Backoff):
            raise ConfigError(f"{kind}: backoff must be a Backoff(...), got {backoff!r}")
        if name is not None:
            self.name = name
        self.backoff = backoff if backoff is not None else Backoff()
        self._spool_dir = None if spool_dir is None else Path(spool_dir)
        self._spool_bytes = spool_bytes
        self._spool: Spool | None = None
        self._sender: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._watchers: list[asyncio.Future[None]] = []
        self._stopped = False
        self._away_since: float | None = None
        self._failures = 0
        self._refusing = False
        self._full = False
        self._worker = ThreadedSink()  # only its worker thread is used: blocking hooks run there, in order
        self.retries = self.spooled = self.replayed = self.spool_dropped = 0
        self.rejected = self.duplicates = self.delivered = 0

    # ---------------------------------------------------------------- hooks
    async def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Runs ``fn(*args)`` on this sink's worker thread (one call at a time, in order); returns its result."""
        self._worker.name = self.label
        return await self._worker.call(fn, *args)

    async def open_client(self) -> None:
        """Sets the client up when the sink opens (default: ``open_blocking`` on the worker thread)."""
        await self.run_blocking(self.open_blocking)

    async def send(self, records: Sequence[Record], destination: str | None) -> None:
        """Sends one batch; returns once the server acknowledged it (default: ``send_blocking`` on the worker thread)."""
        await self.run_blocking(self.send_blocking, records, destination)

    async def close_client(self) -> None:
        """Releases the client when the sink closes (default: ``close_blocking`` on the worker thread)."""
        await self.run_blocking(self.close_blocking)

    def open_blocking(self) -> None:
        """Builds the client, on the worker thread; must not need the server (it may be away)."""
        return None

    def send_blocking(self, records: Sequence[Record], destination: str | None) -> None:
        """Sends one batch from the worker thread; raises on failure. Subclasses implement it (or :meth:`send`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement send_blocking() or send()")

    def flush_blocking(self) -> None:
        """Called by ``flush()`` once the spool is settled, on the worker thread (default: nothing)."""
        return None

    def close_blocking(self) -> None:
        """Releases the client, on the worker thread, after the delivery task stopped (default: nothing)."""
        return None

    def destination(self) -> str | None:
        """A string kept with each batch written now and handed back to :meth:`send` (default ``None``).

        A batch replayed by a later process goes where it was meant to go
        (MLflowSink: the run it was logged for), not where that process logs.
        """
        return None

    def prepare(self, records: Sequence[Record]) -> list[list[Record]]:
        """Cuts a batch into the parts sent in one request each (default: the batch whole).

        Runs on the monitor's loop as the batch arrives, before it is spooled.
        """
        return [list(records)]

    def classify(self, exc: BaseException) -> Failure:
        """Whether a failure of :meth:`send` is worth another try (default: :func:`classify`)."""
        return classify(exc)

    # -------------------------------------------------------------- figures
    @property
    def spool_dir(self) -> Path | None:
        """The spool's folder: the one given, or the temporary one once the sink opened."""
        return self._spool.path if self._spool is not None else self._spool_dir

    def counters(self) -> dict[str, float]:
        """The sink's delivery figures (see the class docstring); cheap, for ``Monitor.stats()``."""
        spool = self._spool
        return {
            "retries": float(self.retries),
            "spooled": float(self.spooled),
            "replayed": float(self.replayed),
            "spool_bytes": float(spool.bytes if spool is not None else 0),
            "spool_dropped": float(self.spool_dropped),
            "rejected": float(self.rejected),
            "duplicates": float(self.duplicates),
            "delivered": float(self.delivered),
            "pending": float(spool.records if spool is not None else 0),
        }

    # ------------------------------------------------------------ lifecycle
    async def _open(self) -> None:
        if self._spool is None:
            spool = Spool(self._spool_dir, self._spool_bytes, self.label)
            left = spool.open()
            self._spool = spool
            if left:
                log.info(
                    "sink %r: %d records that an earlier run left in the spool at %s go out first",
                    self.label, spool.records, spool.path,
                )
        await self.open_client()
        self._wake()

    async def _write(self, records: Sequence[Record]) -> None:
        await self._accept([records])

    async def _write_batches(self, batches: Sequence[Sequence[Record]]) -> None:
        await self._accept(batches)

    async def _flush(self) -> None:
        await self._settled()
        if type(self).flush_blocking is not ResilientSink.flush_blocking:
            await self.run_blocking(self.flush_blocking)

    async def _close(self) -> None:
        try:
            await self._settled()
        finally:
            await self._stop_sending()
        await self.close_client()

    async def close(self) -> None:
        """Delivers what it can now, stops, and says in the log what stays in the spool. Idempotent."""
        opened = self._opened
        await super().close()
        if not opened and self._spool is not None:  # the spool opened, open_client() failed
            self._spool.close()

    # ------------------------------------------------------------- delivery
    async def _accept(self, batches: Sequence[Sequence[Record]]) -> None:
        spool = self._spool
        assert spool is not None
        ack = _Ack() if not spool.batches and self.ack_wait != 0 else None
        destination = self.destination()
        away = self._away_since is not None
        for records in batches:
            for part in self.prepare(records):
                if not part:
                    continue
                batch, dropped = spool.append(destination, part)
                if dropped or batch is None:
                    self._dropped(dropped, 0 if batch is not None else len(part))
                if batch is None:
                    continue
                if away:
                    batch.waited = True
                    self.spooled += batch.count
                if ack is not None:
                    ack.add(batch)
        self._wake()
        if ack is not None and ack.pending > 0:
            await ack.wait(self.ack_wait)

    def _wake(self) -> None:
        """Starts the delivery task if batches wait and none runs."""
        spool = self._spool
        if spool is None or not spool.batches or self._stopped:
            return
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(
                self._deliver(), name=f"monitor-async delivery {self.label}"
            )

    async def _deliver(self) -> None:
        spool = self._spool
        assert spool is not None
        attempt = 0
        try:
            while spool.batches and not self._stopped:
                batch = spool.batches[0]
                try:
                    destination, records = spool.load(batch)
                except (OSError, ValueError, TypeError, KeyError) as exc:
                    log.warning("sink %r: a spooled batch is unreadable (%s); dropped", self.label, exc)
                    self._dropped([batch], 0)
                    spool.remove(batch)
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
                self._closing_line()
            raise

    def _delivered(self, batch: Batch) -> None:
        self.delivered += batch.count
        if batch.waited:
            self.replayed += batch.count
        if batch.unsure:
            self.duplicates += batch.count
        self._refusing = self._full = False
        ack = batch.ack
        assert self._spool is not None
        self._spool.remove(batch)
        if ack is not None:
            ack.done(batch)
        if self._away_since is not None:
            log.info(
                "sink %r: the server answers again after %.1f s; the %d records that waited go out now",
                self.label, time.monotonic() - self._away_since, self._spool.records,
            )
            self._away_since = None

    def _failed(self, failure: Failure) -> None:
        """A try failed and will be made again: everything waiting now counts as spooled."""
        spool = self._spool
        assert spool is not None
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
        assert self._spool is not None
        self.rejected += batch.count
        ack = batch.ack
        self._spool.remove(batch)
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

    def _dropped(self, batches: Sequence[Batch], unwritten: int) -> None:
        """Batches dropped from a full spool (and ``unwritten`` records that never fit in it)."""
        self.spool_dropped += sum(batch.count for batch in batches) + unwritten
        for batch in batches:
            if batch.ack is not None:
                batch.ack.done(batch)
        if not self._full:
            self._full = True
            spool = self._spool
            assert spool is not None
            log.warning(
                "sink %r: the spool at %s is full (spool_bytes=%d); its oldest batches are dropped, "
                "counted in monitor.stats()['sink/%s/spool_dropped']",
                self.label, spool.path, spool.limit, self.label,
            )

    # ------------------------------------------------------- waiting, ending
    async def _pause(self, seconds: float) -> None:
        """The backoff wait; :meth:`_hurry` cuts it short."""
        loop = asyncio.get_running_loop()
        self._wakeup = wake = loop.create_future()
        timer = loop.call_later(seconds, self._hurry)
        try:
            await wake
        finally:
            timer.cancel()
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

    async def _settled(self) -> None:
        """Returns once what was handed over so far is delivered (or refused), or a try failed."""
        spool = self._spool
        if spool is None or not spool.batches:
            return
        newest = spool.batches[-1].seq
        failures = self._failures
        self._wake()
        self._hurry()
        loop = asyncio.get_running_loop()
        while spool.batches and spool.batches[0].seq <= newest and self._failures == failures:
            if self._sender is None or self._sender.done():
                return  # stopped, or ended by a bug: nothing will make progress
            fut = loop.create_future()
            self._watchers.append(fut)
            await fut

    async def _stop_sending(self) -> None:
        """Stops the delivery task; says in the log what stays in the spool, and where."""
        self._stopped = True
        task, self._sender = self._sender, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        spool = self._spool
        if spool is None:
            return
        for batch in spool.batches:
            if batch.ack is not None:
                batch.ack.release()
        self._closing_line()
        spool.close()

    def _closing_line(self) -> None:
        spool = self._spool
        if spool is None or not spool.records:
            return
        later = (
            "a temporary folder: give the sink a spool_dir to have a later run send them"
            if spool.temporary
            else f"a sink opened with spool_dir={str(spool.path)!r} sends them first"
        )
        log.warning(
            "sink %r closed with %d records (%d bytes) not delivered; they stay in the spool at %s (%s)",
            self.label, spool.records, spool.bytes, spool.path, later,
        )
