"""Where polling happens: one call of a target's ``stats()``, and the per-target loop.

:class:`Poller` runs a watch's caller, awaits an awaitable result under the
watch's timeout, turns the snapshot into a Record and hands it to every
channel. It never waits on a sink. :func:`poll_forever` is the background
task of one watch: the k-th poll is due at ``start + k * interval``; a poll
that overruns skips the slots it missed (counted as ``polls_missed``) rather
than bursting to catch up.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ._callers import Busy, InlineCaller, ThreadCaller
from ._channel import Channel
from ._errors import ErrorPolicy, describe, log
from ._record import Record
from ._threads import WorkerPool
from ._watch import Watch

__all__ = ["SKIPPED", "Counters", "Poller", "Ticks", "poll_forever"]

SKIPPED: Any = object()
"""What :meth:`Poller.begin` returns when the poll failed or was skipped."""


class Counters:
    """The monitor's own cumulative poll counters (``Monitor.stats()``)."""

    __slots__ = ("polls", "polls_failed", "polls_missed", "polls_timed_out", "records", "values_dropped")

    def __init__(self) -> None:
        self.polls = 0
        self.polls_failed = 0
        self.polls_timed_out = 0
        self.polls_missed = 0
        self.records = 0
        self.values_dropped = 0


class Poller:
    """What a poll needs from the monitor: counters, channels, error policy, threads."""

    __slots__ = ("channels", "counters", "errors", "pool", "ticks")

    def __init__(
        self,
        counters: Counters,
        channels: Sequence[Channel],
        errors: ErrorPolicy,
        pool: Callable[[], WorkerPool],
    ) -> None:
        self.counters = counters
        self.channels = channels
        self.errors = errors
        self.pool = pool
        self.ticks: Ticks | None = None

    def begin(self, watch: Watch) -> Any:
        """Calls ``stats()``; returns the raw result, or :data:`SKIPPED`."""
        self.counters.polls += 1
        try:
            return watch.caller.call()
        except Busy:
            self.counters.polls_missed += 1
        except Exception as exc:  # noqa: BLE001 - reported through on_error
            self.fail(watch, f"stats() of watch {watch.name!r} raised {describe(exc)}", exc)
        return SKIPPED

    async def complete(self, watch: Watch, pending: Awaitable[Any], force: bool = False) -> Record | None:
        """Awaits an awaitable ``stats()`` result under the watch's timeout, then finishes the poll."""
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for returns the result
            # and swallows a cancel (stop()) that lands as the result arrives.
            async with asyncio.timeout(watch.timeout):
                raw = await pending
        except TimeoutError:
            watch.caller.timed_out()
            self.counters.polls_timed_out += 1
            self.fail(
                watch,
                f"stats() of watch {watch.name!r} did not return within {watch.timeout:g}s "
                f"(timeout=, poll_timeout=)",
                TimeoutError(f"stats() of watch {watch.name!r} timed out after {watch.timeout:g}s"),
            )
            return None
        except Exception as exc:  # noqa: BLE001
            self.fail(watch, f"stats() of watch {watch.name!r} raised {describe(exc)}", exc)
            return None
        return self.finish(watch, raw, force)

    def finish(self, watch: Watch, raw: Any, force: bool = False) -> Record | None:
        """Turns a ``stats()`` result into a Record and fans it out when due."""
        try:
            record, dropped = watch.snapshot(raw, force=force)
        except Exception as exc:  # noqa: BLE001
            self.fail(watch, str(exc) if isinstance(exc, TypeError) else f"watch {watch.name!r}: {describe(exc)}", exc)
            return None
        watch.failing = False
        counters = self.counters
        if dropped:
            counters.values_dropped += dropped
        if watch.caller.wants_thread:
            self.promote(watch)
        if record is not None:
            counters.records += 1
            for channel in self.channels:
                channel.put(record)
        return record

    def fail(self, watch: Watch, message: str, exc: BaseException) -> None:
        self.counters.polls_failed += 1
        self.errors.report(message, exc, first=not watch.failing)
        watch.failing = True

    def promote(self, watch: Watch) -> None:
        caller = watch.caller
        if isinstance(caller, InlineCaller):
            watch.caller = ThreadCaller(caller.fn, self.pool())
            log.info(
                "stats() of watch %r was slow inline several times; it now runs on a worker thread",
                watch.name,
            )

    async def poll(self, watch: Watch, force: bool = False) -> Record | None:
        raw = self.begin(watch)
        if raw is SKIPPED:
            return None
        if type(raw) is not dict and inspect.isawaitable(raw):
            return await self.complete(watch, raw, force)
        return self.finish(watch, raw, force)


class Ticks:
    """Timers shared by the poll tasks of one loop: tasks due at the same instant wait on one future.

    ``asyncio.sleep`` costs one future, one timer handle and one timer-heap
    entry per task per tick, all living until the tick. Here each distinct
    due time gets one ``call_at`` handle and one future that every task due
    then awaits, so thousands of targets leave little behind per poll for the
    garbage collector and keep the timer heap short. Tasks that start in the
    same pass of the loop with the same interval (``start()``, or several
    ``watch()`` calls in a row) share their first slot, up to :attr:`GROUP`
    of them, so they are polled together in one pass and their records reach
    each sink as one batch; a larger crowd is split into groups whose slots
    follow each other as their first polls did. Each task still runs on its
    own, so a slow target delays no other.
    """

    __slots__ = ("group", "loop", "waiting")

    GROUP = 256

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: dict[float, asyncio.Future[None]] = {}
        self.group: list[float] | None = None  # [origin, interval, members] of this pass's group

    def origin(self, interval: float) -> float:
        """The first slot of a task starting now: its group's start."""
        group = self.group
        if group is not None and group[1] == interval and group[2] < self.GROUP:
            group[2] += 1
            return group[0]
        if group is None:
            self.loop.call_soon(self._end_group)
        now = self.loop.time()
        self.group = [now, interval, 1]
        return now

    def _end_group(self) -> None:
        self.group = None

    def at(self, when: float) -> asyncio.Future[None]:
        """The future that completes at ``when``, shared by every task due then."""
        fut = self.waiting.get(when)
        if fut is None:
            self.loop.call_at(when, self._fire, when)
        elif not fut.cancelled():
            return fut
        # new, or cancelled along with a task that waited on it: a fresh one, same timer
        fut = self.waiting[when] = self.loop.create_future()
        return fut

    def _fire(self, when: float) -> None:
        fut = self.waiting.pop(when, None)
        if fut is not None and not fut.done():
            fut.set_result(None)


async def poll_forever(poller: Poller, watch: Watch) -> None:
    """The background task of one watch; runs until cancelled.

    The k-th poll is due at ``origin + k * interval`` (computed, not summed,
    so tasks with the same origin and interval share their due times exactly).
    """
    loop = asyncio.get_running_loop()
    ticks = poller.ticks
    if ticks is None or ticks.loop is not loop:
        ticks = poller.ticks = Ticks(loop)
    task = asyncio.current_task()
    interval = watch.interval
    origin = ticks.origin(interval)
    slot = 0
    counters = poller.counters
    while True:
        # poller.begin(...), not a bound method kept in a local: with 10,000 suspended tasks,
        # every object a task's frame holds is one more for each full garbage collection to walk
        raw = poller.begin(watch)
        if raw is not SKIPPED:
            if type(raw) is not dict and inspect.isawaitable(raw):
                await poller.complete(watch, raw)
            else:  # a sync result: finished here, without a coroutine per poll
                poller.finish(watch, raw)
        slot += 1
        due = origin + slot * interval
        now = loop.time()
        if now > due:
            missed = int((now - due) // interval) + 1
            counters.polls_missed += missed
            slot += missed
            due = origin + slot * interval
        while True:
            try:
                await ticks.at(due)
                break
            except asyncio.CancelledError:
                # the shared future is cancelled with any task that waits on it: only
                # a task that was itself cancelled stops; its neighbours wait again
                if task is None or task.cancelling():
                    raise
