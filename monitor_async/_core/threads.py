"""Daemon worker threads for blocking calls: thread-offloaded ``stats()`` and blocking sinks.

Not ``anyio.to_thread`` or ``ThreadPoolExecutor``: their workers are joined
at interpreter exit, so one hung call would keep the program from exiting.
Here workers are daemon threads and a timed-out call can be abandoned.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

__all__ = ["PoolExecutor", "RaisedOnThread", "WorkerPool", "join_all", "on_thread", "wait_future"]

T = TypeVar("T")
P = ParamSpec("P")

_Job = tuple["Future[Any]", Callable[[], Any]]
_IDLE_SECONDS = 10.0
_FOREIGN = (KeyboardInterrupt, SystemExit, asyncio.CancelledError)


class RaisedOnThread(Exception):
    """A ``KeyboardInterrupt``, ``SystemExit`` or ``CancelledError`` raised by a call on a worker thread.

    The future carries this (``original`` is also its ``__cause__``) so the
    awaiting loop sees an ordinary failure of that call.
    """

    def __init__(self, original: BaseException, thread: str) -> None:
        super().__init__(original)
        self.original = original
        self.thread = thread
        self.__cause__ = original

    def __repr__(self) -> str:
        return f"{self.original!r} on worker thread {self.thread!r}"

    __str__ = __repr__


class WorkerPool:
    """Runs callables on at most ``limit`` daemon threads, first in, first out.

    Threads start on demand and leave after 10 s idle, or at ``retire``. With
    ``limit=1`` calls run one at a time in order (blocking sinks rely on it).
    ``abandon`` cancels a queued call, or stops counting a running one's
    thread against ``limit``. A base exception of a call completes its future
    with `RaisedOnThread`.

    Examples:
        >>> pool = WorkerPool(2, "example")
        >>> pool.submit(lambda: 6 * 7).result(timeout=5)
        42
    """

    def __init__(self, limit: int, name: str) -> None:
        if limit < 1:
            raise ValueError(f"WorkerPool {name!r}: thread limit must be at least 1, got {limit}")
        self._limit = limit
        self._name = name
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._live = 0  # threads counted against the limit: idle or running a live call
        self._idle = 0  # threads waiting for a job
        self._abandoned: set[Future[Any]] = set()
        self._count = 0
        self._retiring = False  # idle threads end instead of waiting, until the next submit()
        self._threads: set[threading.Thread] = set()
        self._inside: dict[Future[Any], threading.Thread] = {}  # the calls under way, and the thread of each

    @property
    def limit(self) -> int:
        """The most threads that run non-abandoned calls at once."""
        return self._limit

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queues ``fn()``; the returned future holds its result or exception."""
        fut: Future[T] = Future()
        with self._cond:
            self._retiring = False
            self._jobs.append((fut, fn))
            self._dispatch()
        return fut

    def retire(self) -> list[threading.Thread]:
        """Lets the idle threads end now, busy ones when their call returns; returns those not inside a call.

        A later ``submit`` starts threads again.
        """
        with self._cond:
            self._retiring = True
            busy = set(self._inside.values())
            idle = [thread for thread in self._threads if thread not in busy]
            self._cond.notify_all()
        return idle

    def abandon(self, fut: Future[Any]) -> None:
        """Gives up on a call: cancelled if still queued, else its thread stops counting."""
        if fut.cancel():
            return
        with self._cond:
            if fut in self._inside and fut not in self._abandoned:  # its call still runs
                self._abandoned.add(fut)
                self._live -= 1
                self._dispatch()

    def _dispatch(self) -> None:
        """Under the lock: make sure the queued jobs have threads to run them."""
        if len(self._jobs) <= self._idle:
            self._cond.notify()
        elif self._live < self._limit:
            self._live += 1
            self._count += 1
            thread = threading.Thread(target=self._work, name=f"{self._name}-{self._count}", daemon=True)
            self._threads.add(thread)
            thread.start()

    def _next(self, me: threading.Thread) -> _Job | None:
        """The next job, or ``None`` when this thread should end (idle too long, or retired)."""
        with self._cond:
            while not self._jobs:
                if self._retiring:
                    self._live -= 1
                    return None
                self._idle += 1
                try:
                    woken = self._cond.wait(_IDLE_SECONDS)
                finally:
                    self._idle -= 1
                if not woken and not self._jobs:
                    self._live -= 1
                    return None
            job = self._jobs.popleft()
            self._inside[job[0]] = me
            return job

    def _work(self) -> None:
        me = threading.current_thread()
        try:
            while (job := self._next(me)) is not None:
                fut, fn = job
                del job
                outcome = _outcome(fn, me.name) if fut.set_running_or_notify_cancel() else None
                with self._cond:  # out of the call before its result is out: a retire() that follows joins this thread
                    del self._inside[fut]
                    ends = False
                    if fut in self._abandoned:
                        self._abandoned.discard(fut)
                        ends = self._live >= self._limit
                        if not ends:
                            self._live += 1
                if outcome is not None:
                    _deliver(fut, outcome)
                if ends:
                    return
                del fut, fn, outcome
        finally:
            with self._cond:
                self._threads.discard(me)
                for call in [call for call, thread in self._inside.items() if thread is me]:
                    del self._inside[call]


def _outcome(fn: Callable[[], T], thread: str) -> tuple[bool, Any]:
    """Runs ``fn()``: ``(True, result)``, or ``(False, exception)`` with a base exception as `RaisedOnThread`."""
    try:
        return True, fn()
    except _FOREIGN as exc:  # the call's failure, not a signal to the awaiting loop
        return False, RaisedOnThread(exc, thread)
    except BaseException as exc:  # noqa: BLE001 - carried to the awaiting task
        return False, exc


def _deliver(fut: Future[Any], outcome: tuple[bool, Any]) -> None:
    """Puts an `_outcome` into ``fut``."""
    ok, value = outcome
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


def _settle(fut: Future[T], fn: Callable[[], T], thread: str) -> None:
    """Runs ``fn()`` into ``fut``: its result, its exception, or a base exception as `RaisedOnThread`."""
    _deliver(fut, _outcome(fn, thread))


def on_thread(fn: Callable[[], T], name: str) -> Future[T]:
    """Runs ``fn()`` on a daemon thread of its own; the future holds its result or exception.

    For a call that may hang and must not hold a pool's thread (a ``health()``,
    a ``notify=`` callable): nothing joins the thread. Wait for it on the loop
    with `wait_future`, under a deadline with ``guard.within``.

    Examples:
        >>> on_thread(lambda: 6 * 7, "example").result(timeout=5)
        42
    """
    fut: Future[T] = Future()
    fut.set_running_or_notify_cancel()
    threading.Thread(target=_settle, args=(fut, fn, name), name=name, daemon=True).start()
    return fut


class PoolExecutor(ThreadPoolExecutor):
    """An executor on a ``WorkerPool``: the default executor of a loop of ours (aiofiles' file sinks).

    Its threads are daemons and ``shutdown`` joins the idle ones within
    ``join_timeout``, leaving a hung one behind. A subclass only because
    ``loop.set_default_executor`` accepts nothing else.
    """

    def __init__(self, limit: int, name: str, join_timeout: float = 1.0) -> None:
        super().__init__(max_workers=1, thread_name_prefix=name)
        self._pool = WorkerPool(limit, name)
        self._join_timeout = join_timeout
        self._closed = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        return self._pool.submit(functools.partial(fn, *args, **kwargs))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True
        idle = self._pool.retire()
        if wait:
            join_all(idle, self._join_timeout)


def join_all(threads: Iterable[threading.Thread], timeout: float) -> None:
    """Joins ``threads`` within ``timeout`` seconds in all (the current thread is skipped)."""
    deadline = time.monotonic() + timeout
    me = threading.current_thread()
    for thread in threads:
        if thread is not me:
            thread.join(max(0.0, deadline - time.monotonic()))


def wait_future(fut: Future[T]) -> asyncio.Future[T]:
    """An asyncio future on the running loop that completes when ``fut`` does.

    Cancelling it leaves ``fut`` alone (only ``WorkerPool.abandon`` cancels a
    queued call); a result after the loop closed is dropped quietly.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[T] = loop.create_future()

    def copy(done: Future[T]) -> None:
        if waiter.done():
            return
        if done.cancelled():
            waiter.cancel()
            return
        exc = done.exception()
        if exc is not None:
            waiter.set_exception(exc)
        else:
            waiter.set_result(done.result())

    def wake(done: Future[T]) -> None:
        # RuntimeError: the loop closed while the call ran, nobody waits any more
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(copy, done)

    fut.add_done_callback(wake)
    return waiter
