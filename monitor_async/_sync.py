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
import functools
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar, Unpack

import anyio
from anyio.from_thread import BlockingPortal

from ._errors import OnError, log
from ._monitor import Monitor
from ._options import MonitorOptions, WatchOptions

__all__ = ["LoggerMonitor", "SyncMonitor"]

T = TypeVar("T")


class SyncMonitor:
    """A :class:`Monitor` for code that is not async. Safe to call from any thread.

    Guarantees:
        - ``background=True``: ``start()`` (or ``with``) polls every target on
          its own task in a daemon loop thread; ``stop()``/``close()`` stop it,
          log final snapshots, drain and flush the sinks, and end the thread,
          all within a bounded time. A monitor left running does not keep the
          interpreter alive; when the main thread ends it is stopped (bounded),
          its final snapshots written and the files flushed.
        - ``background=False``: nothing runs until ``step()``.
        - ``step()`` returns ``{watch: {"<watch>/<metric>": value}}`` for the
          targets that logged, after the sinks have written them.
        - ``stop()`` is idempotent: a ``with`` block after an explicit
          ``stop()`` logs nothing more.
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
        self._portal: BlockingPortal | None = None
        self._thread: threading.Thread | None = None
        self._loop_thread: int | None = None
        self._private: asyncio.AbstractEventLoop | None = None
        _live.add(self)

    # ------------------------------------------------------------------ plumbing
    def _guard(self) -> None:
        if self._loop_thread == threading.get_ident():
            raise RuntimeError(
                "SyncMonitor was called from its own event loop thread (e.g. inside an async "
                "stats()); use the async API there: `await sync_monitor.monitor.step()`"
            )

    def _open_portal(self) -> BlockingPortal:
        """Starts the loop thread: a daemon running an anyio BlockingPortal.

        (Not ``start_blocking_portal()``: its context-manager generator, if
        left open, is finalised at interpreter exit and waits forever for the
        already frozen daemon thread.)
        """
        if self._portal is None:
            ready: Future[BlockingPortal] = Future()

            async def serve() -> None:
                async with BlockingPortal() as portal:
                    ready.set_result(portal)
                    await portal.sleep_until_stopped()

            def main() -> None:
                try:
                    anyio.run(serve)
                except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                    if not ready.done():
                        ready.set_exception(exc)

            self._thread = threading.Thread(target=main, name="monitor-async-loop", daemon=True)
            self._thread.start()
            self._portal = ready.result()
            self._loop_thread = self._thread.ident
        return self._portal

    def _close_portal(self) -> None:
        portal, self._portal = self._portal, None
        thread, self._thread = self._thread, None
        self._loop_thread = None
        if portal is not None:
            with contextlib.suppress(RuntimeError):
                portal.call(portal.stop, True)
        if thread is not None:
            thread.join(timeout=self.monitor.stop_timeout)

    def _run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Runs ``await fn()`` on the monitor's loop: the portal's, or a private one here."""
        self._guard()
        with self._lock:
            if self._portal is not None:
                return self._portal.call(fn)
            if not self.background:
                try:
                    asyncio.get_running_loop()
                except RuntimeError:
                    if self._private is None:
                        self._private = asyncio.new_event_loop()
                    coro: Coroutine[Any, Any, T] = fn()  # type: ignore[assignment]
                    return self._private.run_until_complete(coro)
            return self._open_portal().call(fn)

    def _call(self, fn: Callable[[], T]) -> T:
        """Runs a sync monitor method in the loop thread when one runs, else here."""
        self._guard()
        with self._lock:
            if self._portal is not None:
                return self._portal.call(fn)
            return fn()

    # ----------------------------------------------------------------- public API
    def watch(self, target: Any, **options: Unpack[WatchOptions]) -> str:
        """Registers a target (same options as :meth:`Monitor.watch`) and returns its name."""
        return self._call(functools.partial(self.monitor.watch, target, **options))

    def unwatch(self, name: str) -> None:
        """Stops polling the named target."""
        self._call(functools.partial(self.monitor.unwatch, name))

    def step(self) -> dict[str, dict[str, float]]:
        """Polls every target once, writes what is due, returns ``{watch: metrics}``."""
        return self._run(self.monitor.step)

    def flush(self) -> None:
        """Waits until every queued record is written and flushes the sinks."""
        self._run(self.monitor.flush)

    def stats(self) -> dict[str, float]:
        """The monitor's own counters (see :meth:`Monitor.stats`)."""
        return self._call(self.monitor.stats)

    def start(self) -> SyncMonitor:
        """Starts background polling (``background=True``); otherwise only re-arms ``stop()``."""
        self._guard()
        with self._lock:
            if self.background:
                self._open_portal().call(self.monitor.start)
            else:
                self.monitor._stopped = False
        return self

    def stop(self, *, log_final: bool | None = None) -> None:
        """Stops polling, logs final snapshots once, drains and flushes; ends the loop thread."""
        self._guard()
        with self._lock:
            try:
                self._run(functools.partial(self.monitor.stop, log_final=log_final))
            finally:
                self._close_portal()

    def close(self) -> None:
        """``stop()`` and release the loop (thread or private loop). Idempotent."""
        with self._lock:
            try:
                self.stop()
            finally:
                if self._private is not None:
                    self._private.close()
                    self._private = None
                _live.discard(self)

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
            future.result(timeout=self.monitor.stop_timeout + 5.0)
        except Exception as exc:  # noqa: BLE001 - best effort at interpreter exit
            log.warning("monitor-async: stopping a running SyncMonitor at exit failed: %r", exc)


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
