"""The event loops the sync facade runs the monitor on, and how they end: bounded, and joined.

``LoopThread`` (``background=True``) is a daemon thread running an anyio
``BlockingPortal``; ``PrivateLoop`` (``background=False``) is run by the
calling thread, so ``step()`` costs no thread hop. Both come from
``new_loop``, with a default executor of daemon threads (file sinks write
through it), and ``close_loop`` ends a loop within a deadline rather than
waiting forever for a task that ignores its cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from anyio.from_thread import BlockingPortal

from .._core.guard import CALLER_THREAD, within, within_all
from .._core.policy import log
from .._core.threads import PoolExecutor

__all__ = ["LoopBusy", "LoopThread", "PrivateLoop", "close_loop", "loop_running_here", "new_loop"]

T = TypeVar("T")


class LoopBusy(TimeoutError):
    """The monitor's loop did not answer a call in time (something blocks it); the call was given up."""


def _result(future: Future[T], limit: float | None) -> T:
    """``future.result(limit)``, raising ``LoopBusy`` (not the call's own ``TimeoutError``) when it is late."""
    try:
        return future.result(timeout=limit)
    except TimeoutError:
        if future.done():
            raise  # the call's own
        future.cancel()
        raise LoopBusy(f"the monitor's loop did not answer within {limit:g}s") from None


def loop_running_here() -> bool:
    """Whether an event loop runs in the calling thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _as_coroutine(fn: Callable[[], Awaitable[T]]) -> T:
    return await fn()


_executors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PoolExecutor] = weakref.WeakKeyDictionary()
"""The default executor of each loop of ours (asyncio has no public getter for it)."""


def new_loop() -> asyncio.AbstractEventLoop:
    """A loop of ours, whose default executor (aiofiles' file calls) is made of daemon threads we can join."""
    loop = asyncio.new_event_loop()
    executor = PoolExecutor(min(32, (os.cpu_count() or 1) + 4), "monitor-async-files")
    loop.set_default_executor(executor)
    _executors[loop] = executor
    return loop


def loop_gone(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` ended (closed, or stopped in this thread) while a monitor was started on it."""
    if loop.is_closed():
        return True
    try:
        return asyncio.get_running_loop() is not loop and not loop.is_running()
    except RuntimeError:
        return False


def close_loop(loop: asyncio.AbstractEventLoop, grace: float) -> None:
    """Ends a loop of ours within about ``2 * grace`` seconds: cancels what is left (leaving behind a
    task that ignores it), lets the executor's idle threads end and joins them, closes the loop."""
    try:
        tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(within_all(tasks, grace))
        shutdown = loop.create_task(loop.shutdown_asyncgens())
        loop.run_until_complete(within(shutdown, grace))
        executor = _executors.pop(loop, None)
        if executor is not None:
            executor.shutdown(wait=True)
    except BaseException as exc:  # noqa: BLE001 - best effort: the loop closes anyway
        log.debug("monitor-async: closing a loop: %r", exc)
    finally:
        loop.close()


async def _serve(ready: Future[BlockingPortal], grace: float) -> None:
    """Serves a BlockingPortal until it is stopped; calls still under way then get ``grace`` seconds."""
    stopped = asyncio.Event()

    async def portal() -> None:
        async with BlockingPortal() as portal:
            ready.set_result(portal)
            await portal.sleep_until_stopped()
            stopped.set()

    main = asyncio.create_task(portal())
    stop = asyncio.create_task(stopped.wait())
    await asyncio.wait({main, stop}, return_when=asyncio.FIRST_COMPLETED)
    # the portal's exit cancels its remaining calls and waits for them: one whose user code ignores
    # the cancel is left behind after grace
    await within(main, grace)
    stop.cancel()
    if main.done() and not main.cancelled():
        main.result()


class LoopThread:
    """A daemon thread running a BlockingPortal on a loop of ours.

    Not ``start_blocking_portal()``: its generator, if left open, is finalised
    at interpreter exit and waits forever for a frozen thread.

    Args:
        grace: seconds granted at the end to calls and tasks still under way.
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self._calls = 0
        self._idle = threading.Condition()
        ready: Future[BlockingPortal] = Future()
        self.loop = new_loop()
        self.thread = threading.Thread(target=self._main, args=(ready,), name="monitor-async-loop", daemon=True)
        self.thread.start()
        self.portal = ready.result()
        self.ident = self.thread.ident

    def _main(self, ready: Future[BlockingPortal]) -> None:
        loop = self.loop
        try:
            loop.run_until_complete(_serve(ready, self.grace))
        except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
            if not ready.done():
                ready.set_exception(exc)
        finally:
            close_loop(loop, self.grace)

    def enter(self) -> None:
        """Announces a call (made under the owner's lock, so that ``close`` waits for it)."""
        with self._idle:
            self._calls += 1

    def call(self, fn: Callable[[], Any], limit: float | None = None) -> Any:
        """``fn()`` on the loop (awaited if it returns an awaitable), after ``enter``; ``LoopBusy`` after ``limit`` s.

        A call with a limit bypasses the portal's hand-over, which a blocked loop never takes.
        """
        try:
            if limit is None:
                return self.portal.call(fn)
            return _result(self.submit(fn), limit)
        finally:
            with self._idle:
                self._calls -= 1
                self._idle.notify_all()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        """Starts ``fn()`` on the loop (awaited when it returns an awaitable) without waiting for the loop."""

        async def run() -> Any:
            result = fn()
            return await result if inspect.isawaitable(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self.loop)

    def close(self) -> None:
        """Ends the thread, bounded: calls still under way get ``grace`` seconds, then are cancelled."""
        with self._idle:
            self._idle.wait_for(lambda: self._calls == 0, timeout=self.grace)
        with contextlib.suppress(Exception):  # RuntimeError: its loop has ended already
            self.submit(functools.partial(self.portal.stop, True)).result(timeout=self.grace)
        self.thread.join(timeout=3 * self.grace + 1.0)


class PrivateLoop:
    """A loop of ours, run by the thread that calls; a call from another thread meanwhile is handed to it.

    A ``KeyboardInterrupt`` in the calling thread propagates to the caller and
    cancels what it interrupted, so the loop stays usable.

    Args:
        grace: seconds granted to what is left when it ends or is interrupted.
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._driver: int | None = None  # the thread running the loop now
        self._guests: list[Future[Any]] = []  # calls other threads handed to it meanwhile
        self._closed = False

    def run(self, fn: Callable[[], Awaitable[T]], limit: float | None = None) -> T:
        """``await fn()`` on the loop, here, or in the thread running it now (``LoopBusy`` after ``limit`` s)."""
        with self._lock:
            if self._loop is None:
                self._loop = new_loop()
            loop = self._loop
            if self._driver is not None:
                guest = asyncio.run_coroutine_threadsafe(_as_coroutine(fn), loop)
                self._guests.append(guest)
            else:
                self._driver = threading.get_ident()
                guest = None
        if guest is not None:
            return _result(guest, limit)
        return self._drive(loop, fn)

    def _drive(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], Awaitable[T]]) -> T:
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
                        loop.run_until_complete(within(task, self.grace))
                elif not task.cancelled():
                    task.exception()  # retrieved: re-raised here
                raise
        finally:
            self._release(loop)

    def _release(self, loop: asyncio.AbstractEventLoop) -> None:
        """Runs the calls handed over meanwhile to their end, then lets the next caller run the loop."""
        with self._lock:
            try:
                for guest in self._guests:
                    if not guest.done():
                        with contextlib.suppress(BaseException):
                            loop.run_until_complete(asyncio.wrap_future(guest, loop=loop))
            finally:
                self._guests.clear()
                self._driver = None
                if self._closed and self._loop is loop:
                    self._loop = None
                    close_loop(loop, self.grace)

    def close(self) -> None:
        """Closes the loop now, or, while a thread runs it, when that thread is done."""
        with self._lock:
            self._closed = True
            loop = self._loop if self._driver is None else None
            if loop is not None:
                self._loop = None
        if loop is not None:
            close_loop(loop, self.grace)
