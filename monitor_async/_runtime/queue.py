"""Where a record is dropped: one sink's bounded queue, and the count of every record it was given.

A `RecordQueue` belongs to no event loop; `offer` decides when a full
queue drops its oldest, asking its `Channel` only whether a writer is due. Outside a write,
``written + dropped + queued + abandoned == delivered``
([the accounting](guarantees.md#the-accounting-closes-test_accountingpy));
a write that returns after its records were abandoned changes nothing (`epoch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable

from .._core.policy import log
from .._core.record import Record

__all__ = ["RecordQueue"]


class RecordQueue:
    """One sink's queue and its accounting; futures for "records arrived" and "records left".

    Args:
        label: the sink's label, for counters and warnings.
        size: records kept before the oldest is dropped (when the sink is behind).
        max_batch: the most records one batch takes.
        writer_due: whether a writer takes everything queued at its next turn: a full
            queue then keeps the whole burst rather than dropping (see `offer`).
    """

    __slots__ = (
        "_settlers", "abandoned", "dropped", "dropping", "epoch", "head", "in_flight", "items", "label", "linger",
        "lingering", "max_batch", "size", "wake", "wake_at", "writer_due", "writing", "written",
    )

    def __init__(self, label: str, size: int, max_batch: int, writer_due: Callable[[], bool] = bool) -> None:
        self.label = label
        self.writer_due = writer_due
        self.items: deque[Record] = deque()
        self.size = size
        self.max_batch = max_batch
        self.head = 0  # records that ever left (taken by a write, or dropped): the next one's number
        self.written = 0
        self.dropped = 0
        self.abandoned = 0
        self.dropping = False
        self.writing: int | None = None  # the number of the first record of the write in flight
        self.in_flight = 0
        self.epoch = 0  # moves on at each abandon(): a write from before it counts for nothing
        self.wake: asyncio.Future[None] | None = None  # a writer waits on it for records
        self.wake_at = 1
        self.linger: float | None = None  # with a writer waiting on an empty queue: how long the first record gathers
        self.lingering: asyncio.TimerHandle | None = None
        self._settlers: list[tuple[int, asyncio.Future[None]]] = []

    def offer(self, record: Record) -> None:
        """Queues ``record``; never waits. A full queue drops its oldest record unless a writer is due.

        A writer that has not had its turn yet (many polls in one pass) keeps the whole burst.
        """
        items = self.items
        if len(items) >= self.size and not self.writer_due():
            self.drop_oldest()
        items.append(record)
        if self.wake is not None:
            if len(items) >= self.wake_at:
                self.release()
            elif self.linger is not None and len(items) == 1:
                self._linger(self.wake, self.linger - max(0.0, time.time() - record.time))

    def _linger(self, waiter: asyncio.Future[None], wait: float) -> None:
        """The first record came to an empty queue: the waiting writer wakes ``wait`` seconds from now."""
        self.linger = None
        if wait <= 0:
            self.release()
        else:
            self.lingering = waiter.get_loop().call_later(wait, self.release)

    def drop_oldest(self) -> None:
        """Makes room in a full queue: the oldest record goes, counted (and warned of once per episode)."""
        self.items.popleft()
        self.head += 1
        self.dropped += 1
        if not self.dropping:
            self.dropping = True
            log.warning(
                "sink %r is falling behind: dropping its oldest queued records "
                "(queue_size=%d); drops are counted in monitor.stats()['sink/%s/dropped']",
                self.label, self.size, self.label,
            )
        if self._settlers:
            self.wake_settlers()

    def release(self) -> None:
        """Wakes a writer waiting in `idle`."""
        waiter, self.wake = self.wake, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def idle(self, count: int, wait: float | None, linger: float | None = None) -> None:
        """Returns once ``count`` records wait, ``wait`` seconds have passed, or `release` is called.

        With ``linger`` (on an empty queue), also ``linger`` seconds after the
        first record's poll: the writer sleeps through the first record's
        arrival instead of waking to start that wait (one pass of the loop,
        and a GIL hand-off beside a busy thread, less per batch).
        """
        loop = asyncio.get_running_loop()
        self.wake_at = count
        self.wake = waiter = loop.create_future()
        self.linger = linger
        timer = None if wait is None else loop.call_later(wait, self.release)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            lingering, self.lingering, self.linger = self.lingering, None, None
            if lingering is not None:
                lingering.cancel()
            if self.wake is waiter:
                self.wake = None

    def take(self) -> list[Record]:
        """The next batch: up to ``max_batch`` records from the front of the queue."""
        items = self.items
        if len(items) <= self.max_batch:
            batch = list(items)
            items.clear()
            self.dropping = False
        else:
            popleft = items.popleft
            batch = [popleft() for _ in range(self.max_batch)]
        self.head += len(batch)
        return batch

    def oldest(self) -> int:
        """The number of the oldest record that has not left yet (queued, or in the write in flight)."""
        writing = self.writing
        return self.head if writing is None else writing

    def begin(self, first: int, count: int) -> int:
        """Marks a write of ``count`` records, numbered from ``first``, as in flight; returns its epoch."""
        self.writing = first
        self.in_flight = count
        return self.epoch

    def end(self, epoch: int, count: int, outcome: str, stored: int = 0) -> bool:
        """Counts a write that ended: ``count`` records ``"written"``, ``"dropped"`` or ``"abandoned"``.

        ``stored``: records of a partly failed write that reached the sink (counted
        as written). ``False``, counting nothing, when the records were abandoned meanwhile.
        """
        if epoch != self.epoch:
            return False
        self.writing = None
        self.in_flight = 0
        self.written += stored
        if outcome == "written":
            self.written += count
        elif outcome == "dropped":
            self.dropped += count
        else:
            self.abandoned += count
        if self._settlers:
            self.wake_settlers()
        return True

    def waiter(self, target: int) -> asyncio.Future[None]:
        """A future done once every record numbered below ``target`` has left."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._settlers.append((target, waiter))
        return waiter

    def wake_settlers(self) -> None:
        oldest = self.oldest()
        waiting = []
        for target, waiter in self._settlers:
            if waiter.done():
                continue
            if target <= oldest:
                with contextlib.suppress(RuntimeError):  # its loop closed (a caller that gave up)
                    waiter.set_result(None)
            else:
                waiting.append((target, waiter))
        self._settlers = waiting

    @property
    def settling(self) -> bool:
        """Whether someone waits for records to leave (a writer then writes at once)."""
        return bool(self._settlers)

    async def after(self, target: int) -> None:
        """Returns once every record numbered below ``target`` has left."""
        waiter = self.waiter(target)
        try:
            await waiter
        finally:
            if not waiter.done():
                waiter.cancel()

    def abandon(self) -> int:
        """Gives up on what is queued and on the write in flight (a hung sink at stop); returns how many."""
        items = self.items
        lost = len(items) + self.in_flight
        self.head += len(items)
        items.clear()
        self.abandoned += lost
        self.in_flight = 0
        self.writing = None
        self.epoch += 1
        self.dropping = False
        self.wake_settlers()
        return lost

    def forget_loop(self) -> None:
        """The loop closed: a write in flight there never ends (its records count as abandoned), waiters go."""
        self.wake = self.linger = self.lingering = None
        if self.writing is not None:
            self.abandoned += self.in_flight
            self.in_flight = 0
            self.writing = None
            self.epoch += 1
        self._settlers = []  # their futures belong to the closed loop

    def report(self, out: dict[str, float]) -> None:
        """Adds ``sink/<label>/queued``, ``written``, ``dropped``, ``abandoned`` and ``delivered`` to ``out``."""
        prefix = f"sink/{self.label}/"
        queued = len(self.items)
        out[prefix + "queued"] = float(queued)
        out[prefix + "written"] = float(self.written)
        out[prefix + "dropped"] = float(self.dropped)
        out[prefix + "abandoned"] = float(self.abandoned)
        out[prefix + "delivered"] = float(self.head + queued)
