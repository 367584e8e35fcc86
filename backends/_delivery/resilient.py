"""ResilientSink: the base of the network sinks; their batches wait out an outage in a disk spool.

This module is the sink's face (its hooks, its lifecycle); ``courier.py`` is
the delivery task, ``retry.py`` the retry policy, ``spool.py`` the files.
What the delivery promises: docs/remote-trackers.md.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from monitor_async._core import ConfigError, Record, WorkerSink
from monitor_async._core.checks import number

from .courier import Courier
from .retry import Backoff, Failure, classify
from .spool import Spool

__all__ = ["DEFAULT_SPOOL_BYTES", "ResilientSink"]

log = logging.getLogger("monitor_async")

DEFAULT_SPOOL_BYTES = 64 << 20
"""64 MiB: the default bound of a sink's spool."""


_FIGURES = ("retries", "spooled", "replayed", "spool_bytes", "spool_dropped", "rejected", "duplicates",
            "delivered", "pending", "unspooled")


class ResilientSink(WorkerSink):
    """The base of sinks that deliver over a network: retries, a disk spool, replay, at-least-once.

    Each batch goes to a disk spool first and leaves it once the server
    acknowledged it. What it promises:
    [Remote trackers: the spool](remote-trackers.md#the-spool-and-what-at-least-once-means).

    Sink authors implement ``send_blocking(records, destination)`` or ``send``:
    [Your own network sink](remote-trackers.md#your-own-network-sink-resilientsink).

    Args:
        spool_dir: the folder of the spool, replayed first by a sink opened on
            it; ``None`` (default): a private temporary folder. One sink per folder.
        spool_bytes: the most bytes the spool's files may take (default
            64 MiB); a positive integer.
        backoff: the waits between tries (default ``Backoff()``); a `Backoff`.
        name: the sink's label in ``Monitor.stats()`` and in messages;
            ``None`` (default) or ``""``: the class name lowercased without ``Sink``.

    Args:
        spool_dir: the folder of the spool. A sink opened on a folder that a
            previous run left batches in sends them first. ``None``: a
            private temporary folder (removed when the sink closes empty).
            One sink per folder at a time (``ConfigError`` otherwise).
        spool_bytes: the most bytes the spool's files may take (default
            64 MiB); past it the oldest batches are dropped and counted in
            ``spool_dropped``. Must be a positive integer.
        backoff: the waits between tries of a delivery that failed but is
            worth another try (default ``Backoff()``); must be a
            `Backoff`.
        name: the sink's label in ``Monitor.stats()``
            (``sink/<label>/retries``...) and in messages. ``None``
            (default) or ``""``: the class name lowercased without ``Sink``; a monitor makes a
            repeated label unique with ``_1``, ``_2``...

    Raises:
        ConfigError: a bad ``spool_dir``, ``spool_bytes`` or ``backoff``.

    Examples:
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
        number(kind, "spool_bytes", spool_bytes, integer=True, unit="bytes")
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
        self._courier: Courier | None = None

    # ---------------------------------------------------------------- hooks
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
        """Sends one batch from the worker thread; raises on failure. Subclasses implement it (or `send`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement send_blocking() or send()")

    def flush_blocking(self) -> None:
        """Called by ``flush()`` once the spool is settled, on the worker thread (default: nothing)."""
        return None

    def close_blocking(self) -> None:
        """Releases the client, on the worker thread, after the delivery task stopped (default: nothing)."""
        return None

    def destination(self) -> str | None:
        """A string kept with each batch written now and handed back to `send` (default ``None``).

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
        """Whether a failure of `send` is worth another try (default: `classify`)."""
        return classify(exc)

    # -------------------------------------------------------------- figures
    @property
    def spool_dir(self) -> Path | None:
        """The spool's folder: the one given, or the temporary one once the sink opened."""
        return self._spool.path if self._spool is not None else self._spool_dir

    def counters(self) -> dict[str, float]:
        """The sink's delivery figures ([the figures](remote-trackers.md#the-figures)); cheap, for ``Monitor.stats()``."""
        if self._courier is None:
            return dict.fromkeys(_FIGURES, 0.0)
        return self._courier.counters()

    # ------------------------------------------------------------ lifecycle
    async def _open(self) -> None:
        if self._spool is None:
            spool = Spool(self._spool_dir, self._spool_bytes, self.label)
            left = spool.open()
            self._spool = spool
            self._courier = Courier(spool, self.send, self.classify, self.backoff, self.label)
            if left:
                log.info(
                    "sink %r: %d records that an earlier run left in the spool at %s go out first",
                    self.label, spool.records, spool.path,
                )
        await self.open_client()
        assert self._courier is not None
        self._courier.wake()

    async def _write(self, records: Sequence[Record]) -> None:
        await self._accept([records])

    async def _write_batches(self, batches: Sequence[Sequence[Record]]) -> None:
        await self._accept(batches)

    async def _accept(self, batches: Sequence[Sequence[Record]]) -> None:
        assert self._courier is not None
        parts = [part for records in batches for part in self.prepare(records)]
        await self._courier.accept(parts, self.destination(), self.ack_wait)

    async def deliver(self, parts: Sequence[Sequence[Record]], destination: str | None) -> None:
        """Hands ``parts`` (one request each) to the spool for ``destination``, as ``write`` does with its batches.

        For sinks that send something other than the records' metrics (a
        [Webhook][monitor_async.backends.Webhook] sends the message in
        ``destination``; its records stand for the events). Opens the sink
        first if needed.
        """
        if not self._opened:
            await self.open()
        assert self._courier is not None
        await self._courier.accept(parts, destination, self.ack_wait)

    async def _settled(self) -> None:
        """Returns once what was handed over so far is delivered (or refused), or a try failed."""
        if self._courier is not None:
            await self._courier.settled()

    async def _flush(self) -> None:
        await self._settled()
        if type(self).flush_blocking is not ResilientSink.flush_blocking:
            await self.run_blocking(self.flush_blocking)

    async def _close(self) -> None:
        try:
            await self._settled()
        except BaseException as exc:
            cancelled = isinstance(exc, asyncio.CancelledError)
            if self._courier is not None:
                await self._courier.stop("was stopped while a request was out (close() was cancelled)"
                                         if cancelled else "closed")
            self.retire_worker()
            raise
        if self._courier is not None:
            await self._courier.stop()
        try:
            await self.close_client()
        finally:
            self.retire_worker()

    async def close(self) -> None:
        """Delivers what it can now, stops, and says in the log what stays in the spool. Idempotent."""
        opened = self._opened
        await super().close()
        if not opened and self._spool is not None:  # the spool opened, open_client() failed
            self._spool.close()
