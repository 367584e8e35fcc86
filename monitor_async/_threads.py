"""Daemon worker threads for blocking calls: thread-offloaded ``stats()`` and blocking sinks.

Why not ``anyio.to_thread`` (with a ``CapacityLimiter``) or
``concurrent.futures.ThreadPoolExecutor``: their workers are not daemon
threads, and the executor joins them at interpreter exit, so one ``stats()``
call hung on a dead manager, a stuck lock or a lost socket would keep the
whole program from exiting. Here every worker is a daemon thread, a call
that times out can be *abandoned* (its worker stops counting against the
limit, so a hung target never starves the others), and the futures are plain
``concurrent.futures.Future`` objects that any event loop can await.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["WorkerPool", "wait_future"]

T = TypeVar("T")

_Job = tuple["Future[Any]", Callable[[], Any]]
_IDLE_SECONDS = 10.0


class WorkerPool:
    """Runs callables on at most ``limit`` daemon threads, first in, first out.

    Guarantees:
        - At most ``limit`` threads run calls that have not been abandoned;
          threads are started on demand and leave after 10 s idle.
        - Calls start in submission order. With ``limit=1`` they run one at a
          time, in order, on one thread: the guarantee blocking sinks rely on
          (they never abandon a call).
        - :meth:`abandon` gives up on a call: a call still queued is cancelled
          and never runs; a running one keeps its thread (threads cannot be
          cancelled) but that thread no longer counts, so queued calls get a
          fresh thread. When the abandoned call returns, its thread rejoins
          the pool if there is room, else it ends.
        - Every worker is a daemon thread: a call that never returns does not
          block interpreter exit.

    Example:
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

    @property
    def limit(self) -> int:
        """The most threads that run non-abandoned calls at once."""
        return self._limit

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queues ``fn()``; the returned future holds its result or exception."""
        fut: Future[T] = Future()
        with self._cond:
            self._jobs.append((fut, fn))
            self._dispatch()
        return fut

    def abandon(self, fut: Future[Any]) -> None:
        """Gives up on a call: cancelled if still queued, else its thread stops counting."""
        if fut.cancel():
            return
        with self._cond:
            if not fut.done() and fut not in self._abandoned:
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
            threading.Thread(target=self._work, name=f"{self._name}-{self._count}", daemon=True).start()

    def _next(self) -> _Job | None:
        """The next job, or ``None`` when this thread should end (idle too long)."""
        with self._cond:
            while not self._jobs:
                self._idle += 1
                try:
                    woken = self._cond.wait(_IDLE_SECONDS)
                finally:
                    self._idle -= 1
                if not woken and not self._jobs:
                    self._live -= 1
                    return None
            return self._jobs.popleft()

    def _work(self) -> None:
        while (job := self._next()) is not None:
            fut, fn = job
            del job
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # noqa: BLE001 - carried to the awaiting task
                    fut.set_exception(exc)
            with self._cond:
                if fut in self._abandoned:
                    self._abandoned.discard(fut)
                    if self._live >= self._limit:
                        return
                    self._live += 1
            del fut, fn


def wait_future(fut: Future[T]) -> asyncio.Future[T]:
    """An asyncio future on the running loop that completes when ``fut`` does.

    Cancelling the returned future (a poll timing out) leaves ``fut`` alone:
    unlike ``asyncio.wrap_future`` there is no cancellation to shield against,
    so a queued call is only ever cancelled on purpose by
    :meth:`WorkerPool.abandon`. A ``fut`` that completes after the loop closed
    (a hung call returning at interpreter exit) is dropped quietly.
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
