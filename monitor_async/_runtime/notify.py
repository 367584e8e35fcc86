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
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

from .._core.alerts import AlertEvent
from .._core.guard import within
from .._core.policy import describe, log
from .._core.threads import RaisedOnThread, on_thread, wait_future

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
        thread: Future[Any] | None = None
        if not self.is_async:
            thread = on_thread(partial(self.fn, event), f"monitor-async notify {self.label}")
            thread.add_done_callback(partial(self._returned, loop))
        loop.create_task(self._run(event, thread), name=f"monitor-async notify {self.label}")

    def _returned(self, loop: asyncio.AbstractEventLoop, _: Future[Any]) -> None:
        """A sync call returned (on its thread): with the loop closed, nobody else is left to say so."""
        if loop.is_closed():
            self.busy = False

    def _idle(self) -> None:
        """The call in flight returned: the next event waiting, if any."""
        self.busy = False
        self.hung = False
        if self.backlog and self.loop is not None and not self.loop.is_closed():
            self.send(self.backlog.popleft(), self.loop)

    def _failed(self, what: str) -> None:
        self.counts["notify_errors"] += 1
        log.warning("alert notifier %s %s", self.label, what)

    async def _run(self, event: AlertEvent, thread: Future[Any] | None) -> None:
        """One call, ``thread`` (a sync one, started) or in a task (``async def``), under ``notify_timeout``."""
        try:
            call: asyncio.Future[Any] = asyncio.ensure_future(self.fn(event)) if thread is None else wait_future(thread)
            if not await within(call, self.timeout, cancel=thread is None):  # a thread cannot be cancelled
                self.hung = True
                self.counts["notify_skipped"] += len(self.backlog)
                self.backlog.clear()
                self._failed(f"did not return within notify_timeout={self.timeout:g}s; it gets no new event "
                             "until it returns")
                await asyncio.wait([call])  # a call that ignores its cancel (or a thread) keeps the notifier busy
            elif not call.cancelled() and (error := call.exception()) is not None:
                self._failed(f"raised {describe(error.original if isinstance(error, RaisedOnThread) else error)}")
        finally:
            self._idle()
