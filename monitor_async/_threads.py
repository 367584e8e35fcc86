"""Daemon worker threads for blocking calls: thread-offloaded ``stats()`` and blocking sinks.

Why not ``anyio.to_thread`` or ``concurrent.futures``: their workers are not
daemon threads, so one hung ``stats()`` call would keep the interpreter from
exiting. Here every worker is a daemon, a call that times out can be
*abandoned* (its worker no longer counts against the limit, so a hung target
never starves the others), and the futures are plain
``concurrent.futures.Future`` objects that any event loop can await with
``asyncio.wrap_future``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["WorkerPool"]

T = TypeVar("T")

_Job = tuple["Future[Any]", Callable[[], Any]]
_IDLE_SECONDS = 10.0


class WorkerPool:
    """Runs callables on at most ``limit`` daemon threads, first in, first out.

    With ``limit=1`` calls run one at a time, in submission order, on one
    thread: the guarantee the blocking sinks rely on.
    """

    def __init__(self, limit: int, name: str) -> None:
        if limit < 1:
            raise ValueError(f"thread limit must be at least 1, got {limit}")
        self._limit = limit
        self._name = name
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._live = 0
        self._abandoned: set[Future[Any]] = set()
        self._count = 0

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queues ``fn()``; the returned future holds its result or exception."""
        fut: Future[T] = Future()
        self._jobs.put((fut, fn))
        if not self._idle.acquire(blocking=False):
            with self._lock:
                if self._live < self._limit:
                    self._live += 1
                    self._count += 1
                    threading.Thread(
                        target=self._work, name=f"{self._name}-{self._count}", daemon=True
                    ).start()
        return fut

    def abandon(self, fut: Future[Any]) -> None:
        """Gives up on a running call: its thread stops counting against the limit."""
        with self._lock:
            if not fut.done() and fut not in self._abandoned:
                self._abandoned.add(fut)
                self._live -= 1

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=_IDLE_SECONDS)
            except queue.Empty:
                # Leave only if no submit() counted on this idle worker meanwhile.
                if self._idle.acquire(blocking=False):
                    with self._lock:
                        self._live -= 1
                    return
                continue
            fut, fn = job
            if fut.set_running_or_notify_cancel():
                try:
                    result = fn()
                except BaseException as exc:  # noqa: BLE001 - carried to the awaiting task
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)
            with self._lock:
                if fut in self._abandoned:
                    self._abandoned.discard(fut)
                    if self._live >= self._limit:
                        return
                    self._live += 1
            del job, fut, fn
            self._idle.release()
