"""When polling happens: the loop's shared timers, and the per-watch task that follows its `Slots`.

The k-th poll of a watch is due at ``start + k * interval``; a poll that
overruns skips the slots it missed (``polls_missed``) rather than bursting.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.guard import within_all
from .._core.record import Record

if TYPE_CHECKING:
    from .poll import Poller
    from .watch import Watch

__all__ = ["OWN", "PollTasks", "Ticks", "poll_forever"]


class Ticks:
    """The timers of one loop's poll tasks; the watches due at one instant are polled in one callback.

    Each distinct due time gets one ``call_at`` handle rather than a sleep per
    task. A watch whose ``stats()`` answers inline with a mapping is *carried*:
    its task waits on a future while the timer's callback polls it with the
    others due then, so a tick of many cheap targets is one callback. The task
    takes over for an awaitable answer or a move to a thread. Tasks started in
    one pass with one interval share their first slot, up to ``GROUP`` of them
    (see ``origin``). Each watch keeps its own task and slots: an overrun costs
    only its own slots, and cancelling its task ends its polling.
    """

    __slots__ = ("carried", "clock", "group", "loop", "poller", "waiting")

    GROUP = 256
    SPREAD = 64
    BESIDE = 256

    def __init__(self, loop: asyncio.AbstractEventLoop, poller: Poller) -> None:
        self.loop = loop
        # the loop's clock; time.monotonic itself when that is what it reads (one Python call less per poll)
        self.clock: Callable[[], float] = (
            time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time
        )
        self.poller = poller
        self.waiting: dict[float, asyncio.Future[None]] = {}
        self.carried: dict[float, list[Watch]] = {}
        self.group: list[float] | None = None  # [origin, interval, members] of this pass's group

    def origin(self, interval: float) -> float:
        """The first slot of a task starting now: its group's.

        The next full group of one interval starts ``interval / SPREAD`` later (or
        now, if starting took longer), so a crowd's first polls spread over the
        interval instead of one burst that makes every later poll late.
        """
        group = self.group
        if group is not None and group[1] == interval and group[2] < self.GROUP:
            group[2] += 1
            return group[0]
        now = self.loop.time()
        if group is None:
            self.loop.call_soon(self._end_group)
            origin = now
        elif group[1] == interval:
            origin = max(now, group[0] + interval / self.SPREAD)
        else:
            origin = now
        self.group = [origin, interval, 1]
        return origin

    def _end_group(self) -> None:
        self.group = None

    def beside(self, lo: float, hi: float) -> float | None:
        """The latest time in ``[lo, hi]`` when a timer of these ticks is due, or ``None``.

        ``None`` too with more than ``BESIDE`` timers ahead: the loop then wakes often anyway, and the look stays cheap.
        """
        carried, waiting = self.carried, self.waiting
        if len(carried) + len(waiting) > self.BESIDE:
            return None
        best = None
        for when in itertools.chain(carried, waiting):
            if lo <= when <= hi and (best is None or when > best):
                best = when
        return best

    def _timer(self, when: float) -> None:
        if when not in self.waiting and when not in self.carried:
            self.loop.call_at(when, self._fire, when)

    def at(self, when: float) -> asyncio.Future[None]:
        """The future that completes at ``when``, shared by every task due then."""
        fut = self.waiting.get(when)
        if fut is None:
            self._timer(when)
        elif not fut.cancelled():
            return fut
        # new, or cancelled along with a task that waited on it: a fresh one, same timer
        fut = self.waiting[when] = self.loop.create_future()
        return fut

    def carry(self, watch: Watch, when: float) -> asyncio.Future[Any]:
        """Polls ``watch`` at ``when`` and at its slots after that, without waking its task.

        The returned future completes when the task is needed again: with the
        awaitable a ``stats()`` returned, or with ``OWN``.
        """
        waiter = watch.slots.wait(self.loop)
        self._book(watch, when)
        return waiter

    def _book(self, watch: Watch, when: float) -> None:
        watch.slots.book(when)
        due = self.carried.get(when)
        if due is None:
            self._timer(when)
            due = self.carried[when] = []
        due.append(watch)

    def discard(self, watch: Watch) -> None:
        """Takes a carried watch off its next slot (its task was cancelled)."""
        due = self.carried.get(watch.slots.due)
        if due is not None:
            with contextlib.suppress(ValueError):
                due.remove(watch)

    def _fire(self, when: float) -> None:
        fut = self.waiting.pop(when, None)
        if fut is not None and not fut.done():
            fut.set_result(None)
        due = self.carried.pop(when, None)
        if due:
            self._poll(due)

    def _poll(self, due: list[Watch]) -> None:
        """One poll of each carried watch due now, in the order they were booked."""
        poller = self.poller
        poll = poller.poll_carried
        counters = poller.counters
        clock = self.clock
        booked = -1.0  # the last due time booked, and its list: the watches of a tick mostly share the next one
        following: list[Watch] = []
        for watch in due:
            slots = watch.slots
            waiter = slots.waiter
            if waiter is None or waiter.done():  # its task was cancelled: unwatch(), stop(), on_error="raise"
                continue
            try:
                if not watch.caller.inline:  # moved to a thread: its task polls it now
                    waiter.set_result(OWN)
                    continue
                result = poll(watch)
                if result is not None and type(result) is not Record:
                    waiter.set_result(result)  # an awaitable: its task awaits it under the watch's timeout
                    continue
                if not waiter.done():
                    # Slots.advance(), inline for the common case: the next slot is still ahead
                    slot = slots.slot + 1
                    when = slots.origin + slot * slots.interval
                    if clock() > when:
                        when = slots.advance(clock(), counters)
                    else:
                        slots.slot = slot
                    if when == booked:
                        slots.due = when
                        following.append(watch)
                    else:
                        self._book(watch, when)
                        booked, following = when, self.carried[when]
            except BaseException as exc:  # noqa: BLE001 - a bug, or KeyboardInterrupt in stats(): its task raises it
                if not waiter.done():
                    waiter.set_exception(exc)


OWN: Any = object()
"""What a carried watch's future gives its task when the task is to poll the watch itself."""


async def poll_forever(ticks: Ticks, watch: Watch) -> None:
    """The background task of one watch, until cancelled: carried by ``Ticks``, or polling and waiting itself."""
    loop = asyncio.get_running_loop()
    poller = ticks.poller
    task = asyncio.current_task()
    slots = watch.slots
    counters = poller.counters
    due = slots.first(ticks.origin(watch.interval), counters)
    # poller.answer(...), not a bound method kept in a local: with 10,000 suspended tasks,
    # every object a task's frame holds is one more for each full garbage collection to walk;
    # a later group of a crowd started together waits for its first slot
    polled = due <= loop.time()
    pending = poller.answer(watch) if polled else None
    while True:
        if polled:
            if pending is not None:
                await poller.complete(watch, pending)
            due = slots.advance(loop.time(), counters)
        polled = True
        if pending is None and watch.caller.inline:
            # carried: polled in the timer's callback from now on; back here when an answer
            # must be awaited (the tick hands it over) or the watch moved to a thread (OWN)
            waiter = ticks.carry(watch, due)
            try:
                got = await waiter
            except BaseException:
                ticks.discard(watch)
                raise
            pending = poller.answer(watch) if got is OWN else got
            continue
        slots.book(due)
        while True:
            try:
                await ticks.at(due)
                break
            except asyncio.CancelledError:
                # the shared future is cancelled with any task that waits on it: only
                # a task that was itself cancelled stops; its neighbours wait again
                if task is None or task.cancelling():
                    raise
        pending = poller.answer(watch)


class PollTasks:
    """A monitor's background poll tasks: one per watch, on the loop the monitor runs on, with its timers.

    Args:
        poller: what polls a watch when its slot comes.
    """

    __slots__ = ("poller", "tasks", "ticks")

    def __init__(self, poller: Poller) -> None:
        self.poller = poller
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.ticks: Ticks | None = None  # the running loop's timers

    def spawn(self, watch: Watch, loop: asyncio.AbstractEventLoop) -> None:
        """Starts polling ``watch`` on ``loop``: its slots start now, not when its task first runs."""
        if self.ticks is None or self.ticks.loop is not loop:
            self.ticks = Ticks(loop, self.poller)
        watch.slots.start(loop.time())  # a loop blocked before the task runs misses them
        self.tasks[watch.name] = loop.create_task(poll_forever(self.ticks, watch), name=f"monitor-async poll {watch.name}")

    def beside(self, lo: float, hi: float) -> float | None:
        """The latest time in ``[lo, hi]`` when a poll timer of the running loop is due, or ``None``."""
        ticks = self.ticks
        if ticks is None:
            return None
        try:
            if asyncio.get_running_loop() is not ticks.loop:
                return None
        except RuntimeError:
            return None
        return ticks.beside(lo, hi)

    def end(self, name: str) -> None:
        """Ends the polling of watch ``name`` (removed), if it had a task."""
        task = self.tasks.pop(name, None)
        if task is not None:
            task.cancel()

    def halt(self) -> None:
        """Cancels every task now, the one that is failing included (it ends at its next await)."""
        for task in self.tasks.values():
            task.cancel()

    def missed(self, watches: dict[str, Watch], loop: asyncio.AbstractEventLoop | None) -> int:
        """The slots a blocked loop skipped that no timer will count, as the polls stop now."""
        if loop is None:
            return 0
        now = loop.time()
        return sum(watches[name].slots.missed(now) for name in self.tasks if name in watches)

    def forget(self, watches: dict[str, Watch]) -> None:
        """The loop closed under the tasks: they died with it, and no watch polls in the background."""
        self.tasks.clear()
        for watch in watches.values():
            watch.slots.stop()

    async def cancel(self, watches: dict[str, Watch], stop_timeout: float) -> None:
        """Cancels every task and waits for them at most the longest watch timeout (or ``stop_timeout``).

        A task cancelled while it awaits ``stats()`` ends at once unless that
        ``stats()`` ignores the cancel: such a task is left behind.
        """
        tasks = list(self.tasks.values())
        self.tasks.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            longest = max((w.timeout for w in watches.values()), default=stop_timeout)
            await within_all(tasks, min(stop_timeout, longest))
