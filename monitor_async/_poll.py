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

__all__ = ["SKIPPED", "Counters", "Poller", "poll_forever"]

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

    __slots__ = ("channels", "counters", "errors", "pool")

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


async def poll_forever(poller: Poller, watch: Watch) -> None:
    """The background task of one watch; runs until cancelled."""
    loop = asyncio.get_running_loop()
    interval = watch.interval
    due = loop.time()
    counters = poller.counters
    while True:
        await poller.poll(watch)
        due += interval
        now = loop.time()
        if now > due:
            missed = int((now - due) // interval) + 1
            counters.polls_missed += missed
            due += missed * interval
        await asyncio.sleep(due - now)
