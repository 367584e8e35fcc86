"""Where polling happens: one poll of one watch.

``Poller`` runs a watch's caller, awaits an awaitable result under the
watch's timeout, turns the snapshot into a Record and hands it to every
channel. It never waits on a sink. Whatever a ``stats()`` raises is a failure
of its watch (see ``monitor_async._core.guard`` for what propagates).
``Poller.poll_each`` and ``Poller.finals`` await the answers of several
watches at once (a ``step()``, the final snapshots), each under its
timeout, even a ``stats()`` that ignores its cancellation. When polling happens is
``monitor_async._runtime.timers``'s."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from .._core.exceptions import PollError, PollTimeoutError
from .._core.guard import as_error, deadline, must_propagate, within_all
from .._core.policy import ErrorPolicy, describe, log
from .._core.record import Record
from .._core.threads import WorkerPool, wait_future
from .._core.values import OnDevice
from .callers import Busy, InlineCaller, ThreadCaller
from .counters import GRACE, Counters
from .fanout import AlertFeed, Fanout
from .health import on_failure
from .watch import Watch

__all__ = ["Poller"]

class Poller:
    """What a poll needs from the monitor: counters, the fan-out, error policy, threads, the alert rules.

    Whatever a ``stats()`` raises is a failure of its watch (see
    ``monitor_async._core.guard`` for the two exceptions that propagate).
    """

    __slots__ = ("alerts", "counters", "emit", "errors", "moved", "pool", "stuck")

    def __init__(
        self,
        counters: Counters,
        fanout: Fanout,
        errors: ErrorPolicy,
        pool: Callable[[], WorkerPool],
        alerts: AlertFeed,
    ) -> None:
        self.counters = counters
        self.emit = fanout.emit  # the one fan-out
        self.errors = errors
        self.pool = pool
        self.stuck: dict[Watch, asyncio.Task[Any]] = {}
        """Watches whose awaited ``stats()`` ignored its cancellation, with the task left behind."""
        self.alerts = alerts
        """The alert rules, told of polls that logged nothing or left values out."""
        self.moved: set[asyncio.Task[Any]] = set()
        """Snapshots holding a tensor on a device, being read on a worker thread (see `on_device`)."""

    def _still_stuck(self, watch: Watch) -> bool:
        task = self.stuck.get(watch)
        if task is None:
            return False
        if task.done() or task.get_loop().is_closed():
            del self.stuck[watch]
            return False
        return True

    def left_behind(self, watch: Watch, task: asyncio.Task[Any]) -> None:
        """An awaited poll of ``watch`` outlived its timeout, its cancel ignored: skip the watch until it ends."""
        task.cancel()
        self.stuck[watch] = task
        self.counters.polls_timed_out += 1
        self.fail(
            watch,
            f"stats() of watch {watch.name!r} did not return within {watch.timeout:g}s and ignored its "
            "cancellation; the watch is skipped until that call returns",
            PollTimeoutError(f"stats() of watch {watch.name!r} timed out after {watch.timeout:g}s"),
        )

    def poll_once(self, watch: Watch, force: bool = False) -> Any:
        """One poll of ``watch``, the one path every poll takes (``step()``, the timers, the final snapshots).

        Calls ``stats()``; a plain answer is finished here and its
        [Record][monitor_async.Record] returned (``None`` when it was not due or the poll
        failed); an awaitable answer is returned as is, for ``complete``
        to await under the watch's timeout.
        """
        # the call of stats() is made here, not in a helper: this is the path of every background poll
        counters = self.counters
        counters.polls += 1
        if self.stuck and self._still_stuck(watch):
            counters.polls_missed += 1
            return None
        try:
            raw = watch.caller.call()
        except Busy:
            counters.polls_missed += 1
            return None
        except BaseException as exc:  # noqa: BLE001 - reported through on_error, unless it must propagate
            self._raised(watch, exc)
            return None
        if type(raw) is not dict and inspect.isawaitable(raw):
            return raw
        return self.finish(watch, raw, force)

    def poll_carried(self, watch: Watch) -> Any:
        """`poll_once` of a watch the timers poll (see `Ticks`): an inline caller without its checks."""
        caller = watch.caller
        if type(caller) is not InlineCaller or self.stuck:
            return self.poll_once(watch)
        self.counters.polls += 1
        try:
            raw = caller.call()
        except BaseException as exc:  # noqa: BLE001 - reported through on_error, unless it must propagate
            self._raised(watch, exc)
            return None
        if type(raw) is not dict:
            return raw if inspect.isawaitable(raw) else self.finish(watch, raw)
        if not watch.plain:
            return self.finish(watch, raw)
        # the common poll: the one read and the one fan-out, without finish()'s checks for drops
        record = watch.fast(raw)
        if record is None:
            return self.finish(watch, raw)
        watch.failing = False
        self.emit(record)
        if caller.wants_thread:
            self.promote(watch)
        return record

    def answer(self, watch: Watch) -> Awaitable[Any] | None:
        """One background poll: ``None`` when it is done, else the awaitable answer to complete."""
        result = self.poll_once(watch)
        return None if result is None or type(result) is Record else result

    async def complete(self, watch: Watch, pending: Awaitable[Any], force: bool = False) -> Record | None:
        """Awaits an awaitable ``stats()`` result under the watch's timeout, then finishes the poll."""
        try:
            async with deadline(watch.timeout):  # stats() ignoring its cancel: see complete_all
                raw = await pending
        except TimeoutError:
            watch.caller.timed_out()
            self.counters.polls_timed_out += 1
            self.fail(
                watch,
                f"stats() of watch {watch.name!r} did not return within {watch.timeout:g}s "
                f"(timeout=, poll_timeout=)",
                PollTimeoutError(f"stats() of watch {watch.name!r} timed out after {watch.timeout:g}s"),
            )
            return None
        except BaseException as exc:  # noqa: BLE001 - reported through on_error, unless it must propagate
            self._raised(watch, exc)
            return None
        return self.finish(watch, raw, force)

    def _raised(self, watch: Watch, exc: BaseException) -> None:
        """``stats()`` of ``watch`` raised ``exc``: a failure of the watch, or re-raised (see ``must_propagate``)."""
        if must_propagate(exc):
            raise exc
        self.fail(watch, f"stats() of watch {watch.name!r} raised {describe(exc)}", exc)

    def finish(self, watch: Watch, raw: Any, force: bool = False) -> Record | None:
        """Turns a ``stats()`` result into a Record and fans it out when due."""
        try:
            record, dropped = watch.snapshot(raw, force=force)
        except OnDevice:
            self.on_device(watch, raw, force)
            return None
        except Exception as exc:  # noqa: BLE001
            self.fail(watch, str(exc) if isinstance(exc, TypeError) else f"watch {watch.name!r}: {describe(exc)}", exc)
            return None
        except BaseException as exc:  # a value's __float__ raising KeyboardInterrupt...
            if must_propagate(exc):
                raise
            self.fail(watch, f"watch {watch.name!r}: {describe(exc)}", exc)
            return None
        watch.failing = False
        counters = self.counters
        if dropped:
            counters.values_dropped += dropped
        if self.alerts.on:
            engine = self.alerts.engine
            if dropped:
                engine.rescan(watch.name, raw, watch.source)  # NaN and inf values: the slow path only
            if record is None:
                engine.polled(watch.name, watch.take_unlogged(), watch.source)
        if watch.caller.wants_thread:
            self.promote(watch)
        if record is not None:
            self.emit(record)
        return record

    def on_device(self, watch: Watch, raw: Any, force: bool) -> None:
        """A snapshot read on the loop holds a tensor on a device (a GPU): it is read on a worker thread.

        Its copy to the host waits for the device there, never on the loop; the record follows when it is
        done. A watch whose ``stats()`` may move runs on a worker thread from now on (its reads then too).
        """
        caller = watch.caller
        if isinstance(caller, InlineCaller) and caller.may_move and watch.swap_caller(
            caller, ThreadCaller(caller.fn, self.pool())
        ):
            log.info("stats() of watch %r holds a tensor on a device; it now runs on a worker thread", watch.name)
        future = self.pool().submit(lambda: watch.prepare(raw))
        task = asyncio.get_running_loop().create_task(self._read_moved(watch, future, force))
        self.moved.add(task)
        task.add_done_callback(self.moved.discard)

    async def _read_moved(self, watch: Watch, future: Any, force: bool) -> None:
        try:
            flattened = await wait_future(future)
        except Exception as exc:  # noqa: BLE001 - the read on the worker failed: a failure of the watch
            self.fail(watch, f"watch {watch.name!r}: {describe(exc)}", exc)
            return
        self.finish(watch, flattened, force)

    def fail(self, watch: Watch, message: str, exc: BaseException) -> None:
        self.counters.polls_failed += 1
        if on_failure(self.counters, self.errors, watch, exc):  # a dead target: reported once, then polled with backoff
            return
        self.errors.report(message, as_error(exc, PollError, message), first=not watch.failing)
        watch.failing = True

    def promote(self, watch: Watch) -> None:
        caller = watch.caller
        if isinstance(caller, InlineCaller) and watch.swap_caller(caller, ThreadCaller(caller.fn, self.pool())):
            log.info(
                "stats() of watch %r was slow inline several times; it now runs on a worker thread",
                watch.name,
            )

    async def complete_all(self, pending: Sequence[tuple[Watch, Any]], force: bool = False) -> list[Record | None]:
        """Awaits several awaitable ``stats()`` results at once, each under its watch's timeout.

        Each runs in a task of its own: one that ignores its cancellation is
        left behind after its timeout (``left_behind``), and counts as
        timed out. Returns one record (or ``None``) per item, in order.
        """
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(self.complete(w, raw, force)) for w, raw in pending]
        return await self._within(tasks, [w for w, _ in pending])

    async def finals(self, watches: Iterable[Watch], log_final: bool | None) -> None:
        """The final snapshots: one poll at once of each watch ``log_final`` (or, when None, its ``log_on_close``) picks.

        Each poll runs in a task of its own, so no user code runs in the
        calling task (a cancelled ``run()`` stopping, where a stray
        ``CancelledError`` would read as a real cancel).
        """
        picked = [w for w in watches if (w.log_on_close if log_final is None else log_final)]
        loop = asyncio.get_running_loop()
        records = await self._within([loop.create_task(self.poll(w, True)) for w in picked], picked)
        for watch, record in zip(picked, records, strict=True):
            if record is None and watch.failing:
                log.warning("final snapshot of watch %r skipped: its stats() failed or hung", watch.name)

    async def _within(self, tasks: list[asyncio.Task[Record | None]], watches: Sequence[Watch]) -> list[Record | None]:
        if not tasks:
            return []
        try:
            await within_all(tasks, max(w.timeout for w in watches) + GRACE)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        records: list[Record | None] = []
        for watch, task in zip(watches, tasks, strict=True):
            if task.done():
                records.append(None if task.cancelled() or task.exception() is not None else task.result())
            else:
                self.left_behind(watch, task)
                records.append(None)
        return records

    async def poll(self, watch: Watch, force: bool = False) -> Record | None:
        """One poll of ``watch``, its awaitable answer awaited: the record, or ``None``."""
        result = self.poll_once(watch, force)
        if result is None or type(result) is Record:
            return result
        return await self.complete(watch, result, force)

    async def poll_each(self, watches: Sequence[Watch]) -> dict[str, dict[str, float]]:
        """One poll of each watch (a ``step()``): inline answers first, awaitable ones all at once.

        Returns ``{watch name: metrics}`` of the watches that logged.
        """
        logged: dict[str, dict[str, float]] = {}
        pending: list[tuple[Watch, Any]] = []
        for watch in watches:
            result = self.poll_once(watch)
            if result is None:
                continue
            if type(result) is Record:
                logged[watch.name] = result.metrics
            else:  # an awaitable answer: awaited below, all at once
                pending.append((watch, result))
        if pending:
            for record in await self.complete_all(pending):
                if record is not None:
                    logged[record.name] = record.metrics
        return logged
