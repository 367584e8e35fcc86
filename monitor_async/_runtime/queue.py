"""Where a record is dropped: one sink's bounded queue, and the count of every record it was given.

:class:`RecordQueue` is a deque that belongs to no event loop (a monitor
restarted on another loop keeps it). :meth:`RecordQueue.put` never waits:
when the queue is full while its sink is busy writing (the sink is behind),
the *oldest* queued record is dropped and counted, so polling never waits
for a sink and memory stays bounded. A queue that fills while no write is in
flight is a burst the writer has not had its turn for yet (many watches
polled in one pass of the loop): it is kept whole for that turn.

Records are numbered in the order they were put. Every record is
*delivered*; it then waits in the queue (*queued*), is in the write under
way, or has left for good: *written*, *dropped* (pushed out of a full queue,
or lost with a write that raised) or *abandoned* (still queued or being
written when ``stop()`` gave up on a hung sink). Outside a write,
``written + dropped + queued + abandoned == delivered``. A write that returns
after its records were abandoned changes nothing (:attr:`epoch`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from .._core.policy import log
from .._core.record import Record

__all__ = ["RecordQueue"]


class RecordQueue:
    """One sink's queue and its accounting; waiters for "records arrived" and "records left"."""

    def __init__(self, label: str, size: int, max_batch: int) -> None:
        self.label = label
        self.queue: deque[Record] = deque()
        self.size = size
        self.max_batch = max_batch
        self.head = 0
        """Records that ever left the queue (taken by a write, or dropped): the next one's number."""
        self.written = 0
        self.dropped = 0
        self.abandoned = 0
        self.dropping = False
        self.writing: int | None = None
        """The number of the first record of the write in flight, if one is."""
        self.in_flight = 0
        self.epoch = 0  # moves on at each abandon(): a write from before it counts for nothing
        self._wake: asyncio.Future[None] | None = None  # a writer waits for records on it
        self._wake_at = 1
        self._settlers: list[tuple[int, asyncio.Future[None]]] = []

    # ------------------------------------------------------------------ putting
    def put(self, record: Record) -> None:
        """Queues ``record``, dropping the oldest queued record when full and the sink is behind. Never waits.

        A full queue whose writer is not writing (it has not had its turn
        yet: many polls in one pass of the loop) keeps the record: the writer
        takes the whole queue at its next turn (:meth:`writer_due`).
        """
        queue = self.queue
        if len(queue) >= self.size and not self.writer_due():
            self._drop_oldest()
        queue.append(record)
        if self._wake is not None and len(queue) >= self._wake_at:
            self._release()

    def writer_due(self) -> bool:
        """Whether a writer takes everything queued at its next turn, with no write in flight now.

        Only then may the queue hold more than ``size`` records, until that
        turn: what one pass of the loop queues (many watches due at once,
        a ``step()``, the final snapshots). The queue alone has no writer.
        """
        return False

    def _drop_oldest(self) -> None:
        """Makes room in a full queue: the oldest record goes, counted (and warned of once per episode)."""
        self.queue.popleft()
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
            self._wake_settlers()

    def _release(self) -> None:
        waiter, self._wake = self._wake, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _idle(self, count: int, wait: float | None) -> None:
        """Returns once ``count`` records wait, ``wait`` seconds have passed, or :meth:`_release` is called."""
        loop = asyncio.get_running_loop()
        self._wake_at = count
        self._wake = waiter = loop.create_future()
        timer = None if wait is None else loop.call_later(wait, self._release)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if self._wake is waiter:
                self._wake = None

    # ------------------------------------------------------------------ taking
    def _take(self) -> list[Record]:
        """The next batch: up to ``max_batch`` records from the front of the queue."""
        queue = self.queue
        if len(queue) <= self.max_batch:
            batch = list(queue)
            queue.clear()
            self.dropping = False
        else:
            popleft = queue.popleft
            batch = [popleft() for _ in range(self.max_batch)]
        self.head += len(batch)
        return batch

    def _oldest(self) -> int:
        """The number of the oldest record that has not left yet (queued, or in the write in flight)."""
        writing = self.writing
        return self.head if writing is None else writing

    # ---------------------------------------------------------------- settling
    def _waiter(self, target: int) -> asyncio.Future[None]:
        """A future done once every record numbered below ``target`` has left."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._settlers.append((target, waiter))
        return waiter

    def _wake_settlers(self) -> None:
        oldest = self._oldest()
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

    async def _after(self, target: int) -> None:
        waiter = self._waiter(target)
        try:
            await waiter
        finally:
            if not waiter.done():
                waiter.cancel()

    def abandon(self) -> int:
        """Gives up on what is queued and on the write in flight (a hung sink at stop); returns how many.

        They are counted as abandoned; if the write in flight returns later,
        it changes no counter.
        """
        queue = self.queue
        lost = len(queue) + self.in_flight
        self.head += len(queue)
        queue.clear()
        self.abandoned += lost
        self.in_flight = 0
        self.writing = None
        self.epoch += 1
        self.dropping = False
        self._wake_settlers()
        return lost

    def report(self, out: dict[str, float]) -> None:
        """Adds ``sink/<label>/queued``, ``written``, ``dropped``, ``abandoned`` and ``delivered`` to ``out``."""
        prefix = f"sink/{self.label}/"
        queued = len(self.queue)
        out[prefix + "queued"] = float(queued)
        out[prefix + "written"] = float(self.written)
        out[prefix + "dropped"] = float(self.dropped)
        out[prefix + "abandoned"] = float(self.abandoned)
        out[prefix + "delivered"] = float(self.head + queued)


async def wait_for_waiter(waiter: asyncio.Future[None] | None, limit: float | None = None) -> bool:
    """Awaits a "records left" future at most ``limit`` seconds; False when the time ran out first."""
    if waiter is None:
        return True
    try:
        async with asyncio.timeout(limit):
            await waiter
    except TimeoutError:
        return False
    finally:
        if not waiter.done():
            waiter.cancel()
    return True
