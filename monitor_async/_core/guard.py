"""Running user code without trusting it: whose exception is whose, and deadlines that hold.

What user code (``stats()``, a sink's calls) raises is a failure of that
code, ``KeyboardInterrupt``, ``SystemExit`` and a stray ``CancelledError``
included, since asyncio would let them end the loop. Only what
``must_propagate`` says goes through: a real cancel, a Ctrl-C in the
caller's own thread (``CALLER_THREAD``), and a ``BaseException`` of the
user's own. Waits on user code go through `within`, whose deadline holds
even when the code ignores its cancellation.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Collection
from contextvars import ContextVar
from typing import Any

from .exceptions import MonitorError
from .threads import RaisedOnThread

__all__ = ["CALLER_THREAD", "as_error", "call_guarded", "deadline", "must_propagate", "within", "within_all"]

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
    """What ``on_error="raise"`` keeps for ``exc``: an ``Exception`` as raised, else a ``kind`` error saying ``message``.

    The original is its ``__cause__``, so re-raising never reads as a Ctrl-C or an exit.
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

    The one deadline helper: it waits on a plain future that ``future``'s end
    completes, so a task swallowing its cancellation cannot hold the waiter.
    With ``cancel``, a ``future`` still pending on return is cancelled. ``None`` is done.
    """
    if future is None:
        return True
    try:
        return await within_all((future,), limit)
    finally:
        if cancel and not future.done():
            future.cancel()


async def within_all(futures: Collection[asyncio.Future[Any]], limit: float | None) -> bool:
    """`within` for several futures: waits until all are done, at most ``limit`` seconds; True when all are.

    None is cancelled here; the caller decides what to do with those still pending.
    """
    pending = [future for future in futures if not future.done()]
    if not pending:
        return True
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    left = len(pending)

    def wake(_: object) -> None:
        nonlocal left
        left -= 1
        if left == 0 and not waiter.done():
            waiter.set_result(None)

    for future in pending:
        future.add_done_callback(wake)
    try:
        async with asyncio.timeout(limit):
            await waiter
    except TimeoutError:
        return False
    finally:
        for future in pending:
            future.remove_done_callback(wake)
    return True


def deadline(limit: float | None) -> asyncio.Timeout:
    """A deadline on awaiting code in the current task, which its cancel ends (``async with deadline(5):``).

    For a wait on code that may ignore its cancellation, use `within`: this
    form holds only as long as the awaited code lets itself be cancelled.
    ``asyncio.timeout``, not ``wait_for``: on 3.11 ``wait_for`` returns the
    result and swallows a cancel that lands as the result arrives.
    """
    return asyncio.timeout(limit)


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
