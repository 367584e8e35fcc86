"""Where alert events go besides the sinks: the ``monitor_async`` logger and ``notify=`` callables.

A notifier runs off the poll path (a sync one on a daemon thread, an ``async
def`` one in a task of its own) under a deadline; whatever it raises, or a
call past the deadline, is counted in ``notify_errors`` and warned. A
notifier still busy (hung) gets no new call until it returns: the events
meanwhile are counted in ``notify_skipped``, and the other notifiers get them.
A notifier that is merely busy (within its deadline) gets the events of the
meantime one after another, at most ``Notifier.BACKLOG`` of them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from .._core.alerts import AlertEvent
from .._core.policy import describe, log

__all__ = ["Notifier", "log_event"]


def log_event(event: AlertEvent) -> None:
    """The event on the ``monitor_async`` logger: WARNING firing, ERROR critical firing, INFO resolved."""
    if event.state == "resolved":
        level = logging.INFO
    else:
        level = logging.ERROR if event.severity == "critical" else logging.WARNING
    log.log(level, "alert %s %s: %s", event.rule, event.state, event.message)


def _label(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


class Notifier:
    """One ``notify=`` callable, at most one call in flight."""

    __slots__ = ("backlog", "busy", "counts", "fn", "hung", "is_async", "label", "loop", "timeout")

    BACKLOG = 256

    def __init__(self, fn: Callable[[AlertEvent], Any], timeout: float, counts: dict[str, int]) -> None:
        self.fn = fn
        self.timeout = timeout
        self.counts = counts  # shared with the engine: "notify_errors", "notify_skipped"
        self.busy = False
        self.hung = False  # the call in flight passed its deadline
        self.backlog: deque[AlertEvent] = deque()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.label = _label(fn)
        call = getattr(fn, "__call__", None)  # noqa: B004 - an object whose __call__ is async counts as async
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)

    def send(self, event: AlertEvent, loop: asyncio.AbstractEventLoop) -> None:
        """Calls the notifier with ``event`` off the poll path (never waits, never raises)."""
        if self.busy:
            if self.hung or len(self.backlog) >= self.BACKLOG:
                self.counts["notify_skipped"] += 1
            else:
                self.backlog.append(event)
            return
        self.loop = loop
        self.busy = True
        self.hung = False
        if self.is_async:
            loop.create_task(self._run_async(event), name=f"monitor-async notify {self.label}")
        else:
            self._run_thread(event, loop)

    def _idle(self) -> None:
        """The call in flight returned: the next event waiting, if any."""
        self.busy = False
        self.hung = False
        if self.backlog and self.loop is not None and not self.loop.is_closed():
            self.send(self.backlog.popleft(), self.loop)

    def _failed(self, what: str) -> None:
        self.counts["notify_errors"] += 1
        log.warning("alert notifier %s %s", self.label, what)

    async def _run_async(self, event: AlertEvent) -> None:
        task = asyncio.ensure_future(self.fn(event))
        try:
            done, _ = await asyncio.wait([task], timeout=self.timeout)
            if not done:
                self.hung = True
                self.counts["notify_skipped"] += len(self.backlog)
                self.backlog.clear()
                task.cancel()
                self._failed(f"did not return within notify_timeout={self.timeout:g}s; it gets no new event "
                             "until it returns")
                await asyncio.wait([task])  # a task that ignores its cancel keeps the notifier busy
            elif not task.cancelled() and task.exception() is not None:
                self._failed(f"raised {describe(task.exception())}")
        finally:
            self._idle()

    def _run_thread(self, event: AlertEvent, loop: asyncio.AbstractEventLoop) -> None:
        state = {"done": False, "late": False}

        def done(error: BaseException | None) -> None:
            state["done"] = True
            self._idle()
            if error is not None:
                self._failed(f"raised {describe(error)}")

        def late() -> None:
            if not state["done"]:
                state["late"] = True
                self.hung = True
                self.counts["notify_skipped"] += len(self.backlog)
                self.backlog.clear()
                self._failed(f"did not return within notify_timeout={self.timeout:g}s; it gets no new event "
                             "until it returns")

        def work() -> None:
            error: BaseException | None = None
            try:
                self.fn(event)
            except BaseException as exc:  # noqa: BLE001 - counted and warned on the loop
                error = exc
            try:
                loop.call_soon_threadsafe(done, error)
            except RuntimeError:  # the loop is closed: nobody is left to tell
                self.busy = False

        loop.call_later(self.timeout, late)
        threading.Thread(target=work, name=f"monitor-async notify {self.label}", daemon=True).start()
