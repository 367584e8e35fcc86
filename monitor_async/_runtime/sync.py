"""The sync facade: the async Monitor on an event loop in a background thread.

``LoopThread`` runs the loop in a daemon thread behind an anyio blocking
portal; each sync call is one round trip into it. With ``background=False``,
``step()`` drives a ``PrivateLoop`` in the caller's thread instead, which is
cheaper than a cross-thread round trip.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401 - registers its exit hook before ours (see the end)
import contextlib
import functools
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar, Unpack

from .._core.alerts import Alert, AlertEvent
from .._core.checks import choice
from .._core.exceptions import MonitorClosedError
from .._core.policy import OnError, log
from .._core.threads import join_all
from .loops import LoopBusy, LoopThread, PrivateLoop, loop_running_here
from .monitor import Monitor
from .options import MonitorOptions, WatchOptions
from .signals import settle as settle_signals

__all__ = ["LoggerMonitor", "SyncMonitor"]

T = TypeVar("T")


_PUSHERS = 4096
"""Push names whose checked ``log()`` a SyncMonitor keeps; past that, further names take the checked path each call."""


class SyncMonitor:
    """A [Monitor][monitor_async.Monitor] for code that is not async. Safe to call from any thread.

    With ``background=True`` a daemon loop thread polls once started; with
    ``background=False`` nothing runs until ``step()``, in the calling thread.
    What holds across threads, stops, restarts and ``close()`` is in
    [the guarantees](guarantees.md#thread-safety-of-syncmonitor-test_sync_threadspy).

    Args:
        sinks: the sinks, as for [Monitor][monitor_async.Monitor].
        background: ``True`` (default): ``start()`` or ``with`` polls in a
            daemon loop thread. ``False``: only ``step()`` polls.
        **options: every keyword option of [Monitor][monitor_async.Monitor], such as
            ``handle_signals=False`` ([ending by signal](guarantees.md#ending-by-signal-is-a-stop-test_signalspy)).

    Examples:
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
        choice("SyncMonitor", "background", background, (True, False))
        self.monitor = Monitor(sinks, **options)
        self._pushers: dict[str, Callable[[str, Any, Any, Any], None]] = {}  # log() by name, checked once
        self.monitor.own_loop = background  # a blocked loop is then the monitor's thread, not the caller's
        self.background = background
        grace = min(1.0, self.monitor.stop_timeout)  # for what is left when a loop ends
        self._lock = threading.Lock()
        self._thread: LoopThread | None = None
        self._private = PrivateLoop(grace)
        self._grace = grace
        self._closed = False
        self._used = False  # started or stepped at least once: polling was asked for
        self._warned = False
        self._forked = False  # inherited by a forked child: inert there
        _live.add(self)

    def __reduce__(self) -> Any:
        raise TypeError(
            f"cannot pickle a {type(self).__name__}: it owns an event loop thread, tasks and its sinks; "
            f"create one in the child process (build a {type(self).__name__} there, with sinks of its own)"
        )

    def _inherit_in_fork(self) -> None:
        """In a forked child: the loop thread did not come along, so the monitor is inert (closed) here."""
        self._forked = True
        self._closed = True
        self._thread = None

    # ------------------------------------------------------------------ plumbing
    def _guard(self) -> None:
        thread = self._thread
        if thread is not None and thread.ident == threading.get_ident():
            raise RuntimeError(
                "SyncMonitor was called from its own event loop thread (e.g. inside an async "
                "stats()); use the async API there: `await sync_monitor.monitor.step()`"
            )

    def _refuse_if_closed(self, call: str) -> None:
        if self._forked:
            raise MonitorClosedError(
                f"SyncMonitor.{call}(): this monitor was inherited through fork() and is inert in the child; "
                "create one in the child process"
            )
        if self._closed:
            raise MonitorClosedError(
                f"SyncMonitor.{call}(): this monitor is closed; build a new SyncMonitor (stop() keeps it "
                "restartable, close() does not)"
            )

    def _loop_thread(self, open_one: bool) -> LoopThread | None:
        """The loop thread (started when ``open_one``), with a call announced on it; under the lock."""
        with self._lock:
            thread = self._thread
            if thread is None and open_one:
                thread = self._thread = LoopThread(self._grace)
            if thread is not None:
                thread.enter()
            return thread

    def _run(self, fn: Callable[[], Awaitable[T]], limit: float | None = None) -> T:
        """Runs ``await fn()`` on the monitor's loop (the loop thread's or the private one); ``LoopBusy`` after ``limit`` s."""
        self._guard()
        thread = self._loop_thread(self.background or loop_running_here())
        if thread is not None:
            result: T = thread.call(fn, limit)
            return result
        return self._private.run(fn, limit)

    def _call(self, fn: Callable[[], T]) -> T:
        """Runs a sync monitor method in the loop thread when one runs, else here."""
        self._guard()
        thread = self._loop_thread(False)
        if thread is None:
            return fn()
        result: T = thread.call(fn)
        return result

    def _end_loop_thread(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.close()

    # ----------------------------------------------------------------- public API
    def watch(self, target: Any = None, **options: Unpack[WatchOptions]) -> str:
        """Registers a target and returns its watch name.

        Args:
            target: the object to poll, or ``None`` with ``stats_fn=``.
            **options: the options of [Monitor.watch][monitor_async.Monitor.watch].

        Raises:
            MonitorClosedError: the monitor was closed.
        """
        self._refuse_if_closed("watch")
        return self._call(functools.partial(self.monitor.watch, target, **options))

    def log(
        self, name: str, metrics: Mapping[str, Any], *, step: int | None = None, time: float | None = None
    ) -> None:
        """Pushes values from any thread without waiting for the loop; see [Monitor.log][monitor_async.Monitor.log].

        Args:
            name: the record's name and key prefix (not a watch's name).
            metrics: a mapping of numbers (nested mappings flattened with ``/``).
            step: the record's step, or ``None`` for the sinks to number them.
            time: the record's unix time, or ``None`` for the time of the call.

        Raises:
            ConfigError: ``name`` is the name of a watch.
            MonitorClosedError: the monitor was closed.

        Examples:
            >>> from monitor_async import SyncMonitor
            >>> from monitor_async.backends import MemorySink
            >>> sink = MemorySink()
            >>> with SyncMonitor(sink) as monitor:
            ...     monitor.log("learner", {"loss": 0.5}, step=1)
            >>> sink.records[0].metrics
            {'learner/loss': 0.5}
        """
        if self._closed:
            if self._forked:  # inert in a forked child: nothing there would ever write it
                return
            self._refuse_if_closed("log")
        try:
            push = self._pushers.get(name)  # a name already checked: Monitor.log without its check
        except TypeError:  # unhashable: Monitor.log reports it
            push = None
        if push is not None:
            push(name, metrics, step, time)
            return
        self.monitor.log(name, metrics, step=step, time=time)
        if type(name) is str and len(self._pushers) < _PUSHERS:
            self._pushers[name] = self.monitor.pusher(name)

    def unwatch(self, name: str) -> None:
        """Stops polling the named target."""
        self._refuse_if_closed("unwatch")
        self._call(functools.partial(self.monitor.unwatch, name))

    def step(self) -> dict[str, dict[str, float]]:
        """Polls every target once, writes what is due, returns ``{watch: metrics}``."""
        self._refuse_if_closed("step")
        self._used = True
        return self._run(self.monitor.step)

    def flush(self) -> None:
        """Waits until every queued record is written and flushes the sinks; returns within about ``stop_timeout``."""
        self._refuse_if_closed("flush")
        limit = self.monitor.stop_timeout + 2 * self._grace + 1.0
        try:
            self._run(self.monitor.flush, limit)
        except LoopBusy:
            log.warning("SyncMonitor.flush(): the monitor's loop did not answer within %gs (a call blocks it)", limit)

    def stats(self) -> dict[str, float]:
        """The monitor's own counters (see [Monitor.stats][monitor_async.Monitor.stats]); readable after ``close()`` too."""
        return self._call(self.monitor.stats)

    def alert(self, rule: Alert) -> None:
        """Adds an alert rule, before or while running (see `Monitor.alert`)."""
        self._call(functools.partial(self.monitor.alert, rule))

    def firing(self) -> list[AlertEvent]:
        """The events of the alerts firing now (see `Monitor.firing`)."""
        return self._call(self.monitor.firing)

    def state_dict(self) -> dict[str, Any]:
        """What a restarted process needs to continue this run (see `Monitor.state_dict`); for a checkpoint."""
        self._refuse_if_closed("state_dict")
        return self._call(self.monitor.state_dict)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues the run ``state`` was taken in; before ``start()`` or the first ``step()`` (see `Monitor.load_state_dict`)."""
        self._refuse_if_closed("load_state_dict")
        self._call(functools.partial(self.monitor.load_state_dict, state))

    def start(self) -> SyncMonitor:
        """Starts background polling (``background=True``); otherwise only re-arms ``stop()``."""
        self._guard()
        self._refuse_if_closed("start")
        self._used = True
        if not self.background:
            self.monitor.rearm()
            return self
        thread = self._loop_thread(True)
        assert thread is not None
        thread.call(self.monitor.start)
        settle_signals()  # the loop thread cannot install signal handlers: this thread may
        return self

    def stop(self, *, log_final: bool | None = None) -> None:
        """Stops polling, logs final snapshots once, drains and flushes; ends the loop thread.

        Bounded from any thread ([bounded stop](guarantees.md#bounded-stop-test_bounded_stoppy));
        a no-op after ``close()``. If the loop itself is blocked, it gives up with a
        warning; a later ``stop()`` or ``close()`` finishes once the loop is free.
        """
        self._guard()
        if self._closed:
            return
        self._used = True
        busy = False
        try:
            self._run(functools.partial(self.monitor.stop, log_final=log_final), self.monitor.stop_bound())
        except LoopBusy:
            busy = True
            log.warning(
                "SyncMonitor.stop(): the monitor's loop did not answer within %gs (a call blocks it); gave up",
                self.monitor.stop_bound(),
            )
        finally:
            if not busy:
                self._end_loop_thread()
            settle_signals()

    def close(self) -> None:
        """``stop()``, then release the loop and join the monitor's threads. Idempotent."""
        if self._closed:
            return
        try:
            self.stop()
        finally:
            self._closed = True
            _live.discard(self)
            self._private.close()
            join_all(self.monitor.retired_threads, self._grace)

    def __enter__(self) -> SyncMonitor:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _warn_if_never_started(self) -> None:
        """A background monitor given watches that never polled: say so once (it is a silent no-op otherwise)."""
        if self._warned or self._used or self._closed or not self.background:
            return
        names = list(self.monitor.watches())
        if not names:
            return
        self._warned = True
        shown = ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        log.warning(
            "a SyncMonitor watching %s never polled: it was never started. Call monitor.start() "
            "(and monitor.close() at the end), or use `with SyncMonitor(...) as monitor:`",
            shown,
        )

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # a finaliser never raises
            self._warn_if_never_started()

    def _stop_at_exit(self) -> None:
        self._warn_if_never_started()
        thread = self._thread
        if thread is None:
            return
        future = thread.submit(self.monitor.stop)
        try:
            future.result(timeout=self.monitor.stop_bound() + 5.0)
        except Exception as exc:  # noqa: BLE001 - best effort at interpreter exit
            log.warning("monitor-async: stopping a running SyncMonitor at exit failed: %r", exc)


class LoggerMonitor(SyncMonitor):
    """[SyncMonitor][monitor_async.SyncMonitor] under TorchRL's name and signature: a drop-in replacement.

    A script using ``torchrl.record.loggers.monitoring.LoggerMonitor`` switches
    by changing its import ([coming from TorchRL](torchrl.md)).

    Args:
        logger: a TorchRL or AgileRL logger, a sink, or a list of them (``logger=`` works too).
        poll_interval: seconds between two polls of a watch (default 1.0).
        background: poll in a daemon loop thread once started (default ``True``),
            or only at ``step()``.
        on_error: ``"warn"`` (default), ``"ignore"`` or ``"raise"``.
        distributions: summarise values that are many numbers as
            [distributions](distributions.md) (default ``False``: left out and
            counted, as TorchRL's ``LoggerMonitor`` does).
        **options: any other keyword option of [Monitor][monitor_async.Monitor].

    Examples:
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
        distributions: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(
            logger, poll_interval=poll_interval, background=background, on_error=on_error,
            distributions=distributions, **options,
        )


_live: weakref.WeakSet[SyncMonitor] = weakref.WeakSet()


def _inert_in_child() -> None:
    """After ``os.fork()`` in the child: every monitor inherited is inert (its loop thread stayed in the parent)."""
    for monitor in list(_live):
        monitor._inherit_in_fork()
    _live.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_inert_in_child)


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
