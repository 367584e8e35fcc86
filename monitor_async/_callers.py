"""How a watch calls its target's ``stats()``: one small strategy per way.

- :class:`InlineCaller` calls ``stats()`` on the event loop. Cheapest; the
  result may be a mapping or an awaitable (``async def stats``). In ``auto``
  mode it times each call and asks to be moved to a thread when the calls
  turn out slow.
- :class:`ThreadCaller` runs a blocking ``stats()`` on the monitor's daemon
  worker pool (IPC proxies, locks, remote calls).
- :class:`RemoteCaller` calls ``handle.stats.remote(**kwargs)`` on a Ray
  actor handle and awaits the ``ObjectRef``; Ray is never imported here.

A thread or remote call that times out is abandoned, not cancelled (neither
can be); until it returns the watch reports itself *busy* and gets no new
call, so a hung target never piles up threads or queued actor calls.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from multiprocessing.managers import BaseProxy
from time import perf_counter
from typing import Any, Literal

from ._threads import WorkerPool

__all__ = [
    "Busy",
    "Caller",
    "InlineCaller",
    "Offload",
    "RemoteCaller",
    "ThreadCaller",
    "make_caller",
]

Offload = Literal["auto", "inline", "thread"]
OFFLOADS: tuple[str, ...] = ("auto", "inline", "thread")

SLOW_CALL_SECONDS = 0.005
"""An inline ``stats()`` slower than this counts as slow in ``auto`` mode."""
SLOW_CALLS_TO_PROMOTE = 3
"""This many slow inline calls move an ``auto`` target to a thread."""


class Busy(Exception):
    """The previous call of this watch has not returned yet; this poll is skipped."""


class Caller:
    """Calls ``stats()`` once per poll. ``mode`` names the strategy."""

    mode: str = ""
    wants_thread = False

    def call(self) -> Any:
        """The mapping, or an awaitable of it."""
        raise NotImplementedError

    def timed_out(self) -> None:
        """The awaitable returned by :meth:`call` was not done in time."""


class InlineCaller(Caller):
    """Calls ``stats()`` directly on the event loop."""

    mode = "inline"

    def __init__(self, fn: Callable[[], Any], *, auto: bool) -> None:
        self.fn = fn
        self._auto = auto
        self._slow = 0

    def call(self) -> Any:
        if not self._auto:
            return self.fn()
        start = perf_counter()
        result = self.fn()
        if perf_counter() - start > SLOW_CALL_SECONDS:
            self._slow += 1
            if self._slow >= SLOW_CALLS_TO_PROMOTE:
                self.wants_thread = True
        return result


class _FutureCaller(Caller):
    """Shared busy/abandon logic for calls that complete on another thread or process."""

    def __init__(self) -> None:
        self._pending: Future[Any] | None = None

    def _begin(self) -> Future[Any]:
        raise NotImplementedError

    def call(self) -> Awaitable[Any]:
        if self._pending is not None and not self._pending.done():
            raise Busy
        fut = self._pending = self._begin()
        # shield: a timeout must not cancel the call's own future, whose
        # completion is what ends the busy state.
        return asyncio.shield(asyncio.wrap_future(fut))


class ThreadCaller(_FutureCaller):
    """Runs ``stats()`` on a daemon worker thread of the monitor's pool."""

    mode = "thread"

    def __init__(self, fn: Callable[[], Any], pool: WorkerPool) -> None:
        super().__init__()
        self._fn = fn
        self._pool = pool

    def _begin(self) -> Future[Any]:
        return self._pool.submit(self._fn)

    def timed_out(self) -> None:
        if self._pending is not None:
            self._pool.abandon(self._pending)


class RemoteCaller(_FutureCaller):
    """Calls ``stats.remote(**kwargs)`` on a Ray actor handle."""

    mode = "remote"

    def __init__(self, remote: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        super().__init__()
        self._remote = remote
        self._kwargs = kwargs

    def _begin(self) -> Future[Any]:
        ref = self._remote(**self._kwargs)
        fut: Future[Any] = ref.future()
        return fut


def _is_blocking_proxy(target: object, fn: object) -> bool:
    return isinstance(target, BaseProxy) or isinstance(getattr(fn, "__self__", None), BaseProxy)


def make_caller(
    target: object,
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    offload: str,
    pool: Callable[[], WorkerPool],
) -> Caller:
    """Picks the strategy for ``fn`` (``target.stats`` or the user's ``stats_fn``)."""
    remote = getattr(fn, "remote", None)
    if callable(remote) and not inspect.isroutine(fn):
        return RemoteCaller(remote, kwargs)
    bound: Callable[[], Any] = functools.partial(fn, **kwargs) if kwargs else fn
    if inspect.iscoroutinefunction(fn) or offload == "inline":
        return InlineCaller(bound, auto=False)
    if offload == "thread" or _is_blocking_proxy(target, fn):
        return ThreadCaller(bound, pool())
    return InlineCaller(bound, auto=True)
