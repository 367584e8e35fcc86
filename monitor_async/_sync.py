"""The sync facade: the async Monitor on an event loop in a background thread.

The loop runs in a daemon thread started by anyio's blocking portal
(``anyio.from_thread.start_blocking_portal``); every sync call makes one
round trip into that loop. With ``background=False`` nothing polls until
``step()``, which then drives a private loop in the caller's thread (cheaper
than a cross-thread round trip) when no loop runs there.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures.thread  # noqa: F401 - registers its exit hook before ours (see the end)
import contextlib
import contextvars
import functools
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar, Unpack

from anyio.from_thread import BlockingPortal

from ._bounded import CALLER_THREAD
from ._errors import OnError, log
from ._exceptions import MonitorClosedError
from ._monitor import Monitor
from ._options import MonitorOptions, WatchOptions
from ._threads import PoolExecutor, join_all

__all__ = ["LoggerMonitor", "SyncMonitor"]

T = TypeVar("T")


class SyncMonitor:
    """A :class:`Monitor` for code that is not async. Safe to call from any thread.

    Guarantees:
        - ``background=True``: ``start()`` (or ``with``) polls every target on
          its own task in a daemon loop thread; ``stop()``/``close()`` stop it,
          log final snapshots, drain and flush the sinks, and end the thread,
          all within a bounded time, from any thread, even while another
          thread's ``step()`` is stuck on a hung sink. A monitor left running
          does not keep the interpreter alive; when the main thread ends it is
          stopped (bounded), its final snapshots written and the files flushed.
        - ``background=False``: nothing runs until ``step()``, which drives the
          loop in the calling thread; a ``KeyboardInterrupt`` raised there
          (Ctrl-C) propagates from ``step()`` as Python would deliver it, and
          the monitor stays usable and stoppable.
        - ``step()`` returns ``{watch: {"<watch>/<metric>": value}}`` for the
          targets that logged, after the sinks have written them.
        - ``start()`` after ``stop()`` starts again, any number of times.
          ``stop()`` is idempotent: a ``with`` block after an explicit
          ``stop()`` logs nothing more.
        - ``close()`` stops, then joins the monitor's threads (its loop thread,
          the worker threads of thread-offloaded targets and wrapped loggers,
          the executor threads behind file sinks); a thread stuck in a call
          that never returns is left behind, as threads cannot be killed. A
          closed monitor refuses ``start()``, ``step()``, ``watch()``,
          ``unwatch()`` and ``flush()`` with :class:`MonitorClosedError`.
        - Calling it from its own loop thread (e.g. from an ``async def
          stats()``) raises ``RuntimeError`` instead of deadlocking.

    Example:
        >>> from monitor_async import SyncMonitor
        >>> from monitor_async.backends import MemorySink
        >>> class Buffer:
        ...     def stats(self):
        ...         return {"size": 10}
        >>> monitor = SyncMonitor(MemorySink(), background=False)
        >>> monitor.watch(Buffer(), name="rb")
        'rb'
        >>> monitor.step()
        {'rb': {'rb/size': 10.0}}
        >>> monitor.close()
    """

    def __init__(
        self, sinks: Any = None, *, background: bool = True, **options: Unpack[MonitorOptions]
    ) -> None:
        self.monitor = Monitor(sinks, **options)
        self.background = background
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._portal: BlockingPortal | None = None
        self._thread: threading.Thread | None = None
        self._loop_thread: int | None = None
        self._calls = 0  # portal calls under way
        self._private: asyncio.AbstractEventLoop | None = None
        self._driver: int | None = None  # the thread running the private loop now
        self._guests: list[Future[Any]] = []  # calls other threads handed to that loop meanwhile
        self._closed = False
        _live.add(self)

    # ------------------------------------------------------------------ plumbing
    def _guard(self) -> None:
        if self._loop_thread == threading.get_ident():
            raise RuntimeError(
                "SyncMonitor was called from its own event loop thread (e.g. inside an async "
                "stats()); use the async API there: `await sync_monitor.monitor.step()`"
            )

    def _refuse_if_closed(self, call: str) -> None:
        if self._closed:
            raise MonitorClosedError(
                f"SyncMonitor.{call}(): this monitor is closed; build a new SyncMonitor (stop() keeps it "
                "restartable, close() does not)"
            )

    @property
    def _grace(self) -> float:
        """Seconds granted to what is left on a loop that ends (a task, a portal call) before leaving it."""
        return min(1.0, self.monitor.stop_timeout)

    def _open_portal(self) -> BlockingPortal:
        """Starts the loop thread: a daemon running an anyio BlockingPortal on a loop of ours.

        (Not ``start_blocking_portal()`` nor ``anyio.run()``: the first's
        generator, if left open, is finalised at interpreter exit and waits
        forever for the already frozen daemon thread; the second waits, when
        the loop ends, for every task and every executor thread, even one that
        ignores its cancellation or hangs.)
        """
        if self._portal is None:
            ready: Future[BlockingPortal] = Future()
            grace = self._grace

            def main() -> None:
                loop = _new_loop()
                try:
                    loop.run_until_complete(_serve(ready, grace))
                except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                    if not ready.done():
                        ready.set_exception(exc)
                finally:
                    _close_loop(loop, grace)

            self._thread = threading.Thread(target=main, name="monitor-async-loop", daemon=True)
            self._thread.start()
            self._portal = ready.result()
            self._loop_thread = self._thread.ident
        return self._portal

    def _close_portal(self) -> None:
        """Ends the loop thread, bounded: calls still under way get a moment, then are cancelled."""
        grace = self._grace
        with self._lock:
            portal, thread = self._portal, self._thread
            if portal is None:
                return
            # another thread's call (a step() that stop() just released) may return first
            self._idle.wait_for(lambda: self._calls == 0, timeout=grace)
            self._portal = self._thread = self._loop_thread = None
        with contextlib.suppress(Exception):  # RuntimeError: its loop has ended already
            portal.start_task_soon(portal.stop, True).result(timeout=grace)
        if thread is not None:
            thread.join(timeout=3 * grace + 1.0)

    def _run(self, fn: Callable[[], Awaitable[T]], limit: float | None = None) -> T:
        """Runs ``await fn()`` on the monitor's loop: the portal's, or the private one.

        The private loop (``background=False``, no loop running here) runs in
        the calling thread; while another thread runs it, the call is handed
        to that loop instead (so that ``stop()`` from a watchdog thread works
        while a ``step()`` is stuck). ``limit``: seconds to wait for the
        result (``TimeoutError`` after).
        """
        self._guard()
        guest: Future[T] | None = None
        with self._lock:
            portal = self._portal
            if portal is None and (self.background or _loop_running_here()):
                portal = self._open_portal()
            if portal is not None:
                self._calls += 1
            elif self._driver is None:
                self._driver = threading.get_ident()
                if self._private is None:
                    self._private = _new_loop()
                loop = self._private
            else:
                assert self._private is not None
                guest = asyncio.run_coroutine_threadsafe(_as_coroutine(fn), self._private)
                self._guests.append(guest)
        if portal is not None:
            try:
                if limit is None:
                    return portal.call(fn)
                return portal.start_task_soon(fn).result(timeout=limit)
            finally:
                with self._lock:
                    self._calls -= 1
                    self._idle.notify_all()
        if guest is not None:
            return guest.result(timeout=limit)
        return self._drive(loop, fn)

    def _drive(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], Awaitable[T]]) -> T:
        """Runs ``await fn()`` on the private loop in this thread (``background=False``)."""
        try:
            context = contextvars.copy_context()
            context.run(CALLER_THREAD.set, True)  # a KeyboardInterrupt here is the caller's
            task = loop.create_task(_as_coroutine(fn), context=context)
            try:
                return loop.run_until_complete(task)
            except BaseException:
                if not task.done():  # Ctrl-C while it waited: end it, so the monitor stays usable
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        loop.run_until_complete(asyncio.wait({task}, timeout=self._grace))
                elif not task.cancelled():
                    task.exception()  # retrieved: re-raised here
                raise
        finally:
            self._end_drive(loop)

    def _end_drive(self, loop: asyncio.AbstractEventLoop) -> None:
        """Runs the calls other threads handed over meanwhile to their end; releases the private loop."""
        with self._lock:
            try:
                for guest in self._guests:
                    if not guest.done():
                        with contextlib.suppress(BaseException):
                            loop.run_until_complete(asyncio.wrap_future(guest, loop=loop))
            finally:
                self._guests.clear()
                self._driver = None
                if self._closed and self._private is loop:
                    self._private = None
                    _close_loop(loop, self._grace)

    def _call(self, fn: Callable[[], T]) -> T:
        """Runs a sync monitor method in the loop thread when one runs, else here."""
        self._guard()
        with self._lock:
            portal = self._portal
            if portal is None:
                return fn()
            self._calls += 1
        try:
            return portal.call(fn)
        finally:
            with self._lock:
                self._calls -= 1
                self._idle.notify_all()

    # ----------------------------------------------------------------- public API
    def watch(self, target: Any, **options: Unpack[WatchOptions]) -> str:
        """Registers a target (same options as :meth:`Monitor.watch`) and returns its name."""
        self._refuse_if_closed("watch")
        return self._call(functools.partial(self.monitor.watch, target, **options))

    def unwatch(self, name: str) -> None:
        """Stops polling the named target."""
        self._refuse_if_closed("unwatch")
        self._call(functools.partial(self.monitor.unwatch, name))

    def step(self) -> dict[str, dict[str, float]]:
        """Polls every target once, writes what is due, returns ``{watch: metrics}``."""
        self._refuse_if_closed("step")
        return self._run(self.monitor.step)

    def flush(self) -> None:
        """Waits until every queued record is written and flushes the sinks (bounded by ``stop_timeout``)."""
        self._refuse_if_closed("flush")
        self._run(self.monitor.flush)

    def stats(self) -> dict[str, float]:
        """The monitor's own counters (see :meth:`Monitor.stats`); readable after ``close()`` too."""
        return self._call(self.monitor.stats)

    def start(self) -> SyncMonitor:
        """Starts background polling (``background=True``); otherwise only re-arms ``stop()``."""
        self._guard()
        self._refuse_if_closed("start")
        if not self.background:
            self.monitor._stopped = False
            return self
        with self._lock:
            portal = self._open_portal()
            self._calls += 1
        try:
            portal.call(self.monitor.start)
        finally:
            with self._lock:
                self._calls -= 1
                self._idle.notify_all()
        return self

    def stop(self, *, log_final: bool | None = None) -> None:
        """Stops polling, logs final snapshots once, drains and flushes; ends the loop thread.

        Returns within about ``stop_timeout`` plus twice the longest watch
        timeout, from any thread; a no-op after ``close()``.
        """
        self._guard()
        if self._closed:
            return
        try:
            self._run(functools.partial(self.monitor.stop, log_final=log_final), self.monitor._stop_bound())
        except TimeoutError:
            log.warning(
                "SyncMonitor.stop(): the monitor's loop did not answer within %gs (a call blocks it); gave up",
                self.monitor._stop_bound(),
            )
        finally:
            self._close_portal()

    def close(self) -> None:
        """``stop()``, then release the loop and join the monitor's threads. Idempotent."""
        if self._closed:
            return
        try:
            self.stop()
        finally:
            with self._lock:
                self._closed = True
                _live.discard(self)
                loop = self._private if self._driver is None else None  # else its driver closes it
                if loop is not None:
                    self._private = None
            if loop is not None:
                _close_loop(loop, self._grace)
            join_all(self.monitor.retired, self._grace)

    def __enter__(self) -> SyncMonitor:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _stop_at_exit(self) -> None:
        portal = self._portal
        if portal is None:
            return
        future = portal.start_task_soon(self.monitor.stop)
        try:
            future.result(timeout=self.monitor._stop_bound() + 5.0)
        except Exception as exc:  # noqa: BLE001 - best effort at interpreter exit
            log.warning("monitor-async: stopping a running SyncMonitor at exit failed: %r", exc)


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _as_coroutine(fn: Callable[[], Awaitable[T]]) -> T:
    return await fn()


def _new_loop() -> asyncio.AbstractEventLoop:
    """A loop of ours, whose default executor (aiofiles' file calls) is made of daemon threads we can join."""
    loop = asyncio.new_event_loop()
    loop.set_default_executor(PoolExecutor(min(32, (os.cpu_count() or 1) + 4), "monitor-async-files"))
    return loop


async def _serve(ready: Future[BlockingPortal], grace: float) -> None:
    """Serves a BlockingPortal until it is stopped; calls still under way then get ``grace`` seconds to end."""
    stopped = asyncio.Event()

    async def portal() -> None:
        async with BlockingPortal() as portal:
            ready.set_result(portal)
            await portal.sleep_until_stopped()
            stopped.set()

    main = asyncio.create_task(portal())
    stop = asyncio.create_task(stopped.wait())
    await asyncio.wait({main, stop}, return_when=asyncio.FIRST_COMPLETED)
    # the portal's exit cancels its remaining calls and waits for them: a call whose user code
    # ignores the cancel is left behind after grace
    await asyncio.wait({main}, timeout=grace)
    stop.cancel()
    if main.done() and not main.cancelled():
        main.result()


def _close_loop(loop: asyncio.AbstractEventLoop, grace: float) -> None:
    """Ends a loop of ours, bounded: cancels what is left (leaving after ``grace`` a task that ignores it),
    lets its executor's idle threads end and joins them, closes it."""
    try:
        tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=grace))
        shutdown = loop.create_task(loop.shutdown_asyncgens())
        loop.run_until_complete(asyncio.wait({shutdown}, timeout=grace))
        executor = getattr(loop, "_default_executor", None)
        if isinstance(executor, PoolExecutor):
            executor.shutdown(wait=True)
    except BaseException as exc:  # noqa: BLE001 - best effort: the loop closes anyway
        log.debug("monitor-async: closing a loop: %r", exc)
    finally:
        loop.close()


class LoggerMonitor(SyncMonitor):
    """:class:`SyncMonitor` under TorchRL's name and signature: a drop-in replacement.

    ``LoggerMonitor(logger, *, poll_interval=1.0, background=True, on_error="warn")``
    (``logger=`` works too) accepts a TorchRL logger (``log_metrics``/``log_scalar``),
    an AgileRL-style logger, a monitor-async sink, or a list of them. A script
    using ``torchrl.record.loggers.monitoring.LoggerMonitor`` switches by
    changing its import.

    Example:
        >>> from monitor_async import LoggerMonitor
        >>> class PrintLogger:
        ...     def log_metrics(self, metrics, step=None):
        ...         print(step, metrics)
        >>> class Buffer:
        ...     def stats(self):
        ...         return {"write_count": 5}
        >>> monitor = LoggerMonitor(PrintLogger(), background=False)
        >>> monitor.watch(Buffer(), name="rb", step="write_count")
        'rb'
        >>> logged = monitor.step()
        5 {'rb/write_count': 5.0}
        >>> monitor.stop(log_final=False)
    """

    def __init__(
        self,
        logger: Any = None,
        *,
        poll_interval: float = 1.0,
        background: bool = True,
        on_error: OnError = "warn",
        **options: Any,
    ) -> None:
        super().__init__(
            logger, poll_interval=poll_interval, background=background, on_error=on_error, **options
        )


_live: weakref.WeakSet[SyncMonitor] = weakref.WeakSet()


def _stop_running_monitors() -> None:
    for monitor in list(_live):
        monitor._stop_at_exit()


# Stop running monitors *before* concurrent.futures refuses new work at exit:
# file sinks write through the loop's default executor (aiofiles), so from a
# plain atexit hook the final snapshots could no longer reach the files.
# threading's exit hooks run before atexit's, last registered first, and
# importing concurrent.futures.thread above registered its hook before this one.
_register_at_thread_exit = getattr(threading, "_register_atexit", None)
if callable(_register_at_thread_exit):
    _register_at_thread_exit(_stop_running_monitors)
else:  # pragma: no cover - an interpreter without threading._register_atexit
    atexit.register(_stop_running_monitors)
