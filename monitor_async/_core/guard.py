"""Running user code without trusting it: whose exception is whose, and deadlines that hold.

The monitor runs user code (a target's ``stats()``, a sink's ``write``,
``flush`` and ``close``) on its loop, on its worker threads, and inside the
caller's ``step()``. Two rules keep that code from ending the monitor:

- What user code raises is a failure *of that code* (counted and reported
  through ``on_error``): every ``Exception``, and ``KeyboardInterrupt``,
  ``SystemExit`` and a stray ``CancelledError`` too (asyncio re-raises the
  first two out of the event loop, which would end every poll and every
  writer). What propagates instead (``must_propagate``): a
  ``CancelledError`` while the task running the code is really being
  cancelled (``stop()``, the caller's own cancel); a ``KeyboardInterrupt``
  raised in the caller's own thread (``SyncMonitor(background=False)`` drives
  its loop there, see ``CALLER_THREAD``), which reaches the caller as
  Python would deliver it; and a ``BaseException`` subclass of the user's own
  (a test framework's outcome, a library's bypass), which ends the one poll
  task or writer it was raised in, as it was meant to bypass handlers.
- A wait on user code has a deadline that holds even when the code ignores
  its cancellation: the code runs in a task of its own, the waiter waits on a
  plain future completed by that task's end (`within`), and a task
  that does not end in time is left behind, never awaited.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from .exceptions import MonitorError
from .threads import RaisedOnThread

__all__ = ["CALLER_THREAD", "as_error", "call_guarded", "must_propagate", "within"]

CALLER_THREAD: ContextVar[bool] = ContextVar("monitor_async_caller_thread", default=False)
"""True in the tasks that ``SyncMonitor(background=False)`` runs on its private loop in the caller's thread."""


def must_propagate(exc: BaseException) -> bool:
    """Whether ``exc``, raised by user code, must propagate rather than count as that code's failure.

    ``Exception``, ``SystemExit``: never. ``CancelledError``: when the current
    task is being cancelled (a real cancel). ``KeyboardInterrupt``: in the
    caller's own thread only. Any other ``BaseException``: always.
    """
    if isinstance(exc, (Exception, SystemExit)):
        return False
    if isinstance(exc, asyncio.CancelledError):
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop: not a cancel of ours
            return False
        return task is not None and task.cancelling() > 0
    if isinstance(exc, KeyboardInterrupt):
        return CALLER_THREAD.get()
    return True


def as_error(exc: BaseException, kind: type[MonitorError], message: str) -> BaseException:
    """What ``on_error="raise"`` keeps for ``exc``: an ``Exception`` as it was raised; otherwise
    (a ``KeyboardInterrupt``, ``SystemExit``... here or on a worker thread) a ``kind`` error saying
    ``message``, with the original as ``__cause__``, so that re-raising it never reads as Ctrl-C or
    an exit to the caller.
    """
    if isinstance(exc, RaisedOnThread):
        original: BaseException = exc.original
    elif isinstance(exc, Exception):
        return exc
    else:
        original = exc
    error = kind(message)
    error.__cause__ = original
    return error


async def within(future: asyncio.Future[Any] | None, limit: float | None, *, cancel: bool = False) -> bool:
    """Waits until ``future`` is done, at most ``limit`` seconds (``None``: no limit); True when done.

    The one deadline helper. It never awaits ``future`` itself: it waits on a
    plain future that ``future``'s end completes, so a task that swallows its
    cancellation cannot hold the waiter past the deadline. With ``cancel``,
    a ``future`` still pending on return (time ran out, or the waiter was
    cancelled) is cancelled; otherwise it is left alone. ``None`` is done.
    """
    if future is None or future.done():
        return True
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake(_: object) -> None:
        if not waiter.done():
            waiter.set_result(None)

    future.add_done_callback(wake)
    try:
        async with asyncio.timeout(limit):
            await waiter
    except TimeoutError:
        return False
    finally:
        future.remove_done_callback(wake)
        if cancel and not future.done():
            future.cancel()
    return True


async def call_guarded(fn: Callable[[], Awaitable[Any] | Any]) -> BaseException | None:
    """Calls ``fn()``, awaits what it returns when that is awaitable; returns what it raised, or ``None``.

    Meant to run as a task of its own (see `within`); what must
    propagate (``must_propagate``) is raised.
    """
    try:
        result = fn()
        if inspect.isawaitable(result):
            await result
    except Exception as exc:  # noqa: BLE001 - the caller reports it
        return exc
    except BaseException as exc:
        if must_propagate(exc):
            raise
        return exc
    return None
