"""How a watch calls its target's ``stats()``: one small strategy per way.

``InlineCaller`` calls on the event loop (timing calls in ``auto`` mode);
``ThreadCaller`` runs a blocking ``stats()`` on the worker pool and copies
and flattens the result there; ``RemoteCaller`` awaits a Ray actor's
``stats.remote()`` ``ObjectRef`` (Ray is never imported here).

A watch has at most one thread or remote call in flight: a call that timed
out is abandoned (neither can be cancelled) and polls raise ``Busy`` until
it returns, as does a poll that finds another waiting; a call whose poll was
cancelled without timing out is joined by the next poll, so a slow target's
final snapshot is still taken.
"""

from __future__ import annotations

import functools
import inspect
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.managers import BaseProxy
from time import perf_counter
from types import MethodType
from typing import Any, Literal

from .._core.threads import WorkerPool, wait_future
from .._core.values import Flattened

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
"""This many slow inline calls ..."""
SLOW_CALLS_WINDOW = 10
"""... among this many consecutive calls move an ``auto`` target to a thread.

A window rather than a lifetime count: a cheap ``stats()`` that hits a GC
pause or a busy machine now and then stays inline.
"""


class Busy(Exception):
    """The previous call of this watch is still running and nobody needs a second one; this poll is skipped."""


class Caller:
    """Calls ``stats()`` once per poll; ``mode`` names the strategy, ``owner`` is the watch it serves.

    A worker-thread call hands its result to ``owner.prepare(result)`` there.
    """

    __slots__ = ()

    mode: str = ""
    inline = False
    """Whether ``call()`` runs ``stats()`` right here, on the event loop (the timers may then poll it in their callback)."""
    wants_thread = False
    owner: Any = None

    @property
    def busy(self) -> bool:
        """Whether a timed-out call is still running (new polls are skipped)."""
        return False

    def call(self) -> Any:
        """The mapping, or an awaitable of it."""
        raise NotImplementedError

    def timed_out(self) -> None:
        """The awaitable returned by ``call`` was not done in time."""

    def abandon(self) -> bool:
        """Gives up on a call still running (its watch was removed); whether there was one."""
        return False


_UNBOUND: Any = object()


class InlineCaller(Caller):
    """Calls ``stats()`` directly on the event loop.

    With ``auto=True``, ``SLOW_CALLS_TO_PROMOTE`` slow calls of the last
    ``SLOW_CALLS_WINDOW`` set ``wants_thread``. A call returning an awaitable is
    not timed: the awaitable may belong to this loop.
    """

    # what every call reads first, so that they share a cache line (see Watch.__slots__)
    __slots__ = ("_func", "_self", "_auto", "_calls", "wants_thread", "_slow", "owner")  # noqa: RUF023

    mode = "inline"
    inline = True

    def __init__(self, fn: Callable[[], Any], *, auto: bool) -> None:
        self.owner = None
        self.wants_thread = False
        # a bound method (``target.stats``) is kept as its function and its object: the method
        # object would be one more per watch for a full garbage collection to walk
        if type(fn) is MethodType:
            self._func, self._self = fn.__func__, fn.__self__
        else:
            self._func, self._self = fn, _UNBOUND
        self._auto = auto
        self._calls = 0
        self._slow: deque[int] | None = None  # made at the first slow call: most targets never need it

    @property
    def may_move(self) -> bool:
        """Whether the calls may move to a worker thread (``offload="auto"``, a plain ``stats()``)."""
        return self._auto

    @property
    def fn(self) -> Callable[[], Any]:
        """What a ``ThreadCaller`` takes over on promotion: the call, and the owner's flattening after it."""
        func, obj = self._func, self._self
        fn = func if obj is _UNBOUND else MethodType(func, obj)
        return fn if self.owner is None else functools.partial(_prepared, fn, self.owner)

    def call(self) -> Any:
        func, obj = self._func, self._self
        if not self._auto:
            return func() if obj is _UNBOUND else func(obj)
        start = perf_counter()
        result = func() if obj is _UNBOUND else func(obj)
        self._calls += 1
        if perf_counter() - start > SLOW_CALL_SECONDS and not inspect.isawaitable(result):
            slow = self._slow
            if slow is None:
                slow = self._slow = deque(maxlen=SLOW_CALLS_TO_PROMOTE)
            slow.append(self._calls)
            if len(slow) == SLOW_CALLS_TO_PROMOTE and self._calls - slow[0] < SLOW_CALLS_WINDOW:
                self.wants_thread = True
        return result


class _FutureCaller(Caller):
    """Shared busy/join/abandon logic for calls that complete on another thread or process."""

    def __init__(self) -> None:
        self._pending: Future[Any] | None = None
        self._abandoned = False
        self._waiting = 0

    @property
    def busy(self) -> bool:
        pending = self._pending
        return self._abandoned and pending is not None and not pending.done()

    def _begin(self) -> Future[Any]:
        raise NotImplementedError

    def call(self) -> Any:
        pending = self._pending
        if pending is None or pending.done():
            pending = self._pending = self._begin()
            self._abandoned = False
        elif self._abandoned or self._waiting:
            # timed out and still running, or another poll (a step() during
            # background polling) already waits for it: skip this poll
            raise Busy
        # else: the poll that waited for the call in flight was cancelled
        # (stop(), a cancelled step()): join that call instead of starting another
        return self._result(pending)

    def timed_out(self) -> None:
        self._abandoned = True

    def abandon(self) -> bool:
        pending = self._pending
        if pending is None or pending.done():
            return False
        self.timed_out()
        return True

    async def _result(self, pending: Future[Any]) -> Any:
        """The call's result; an awaitable result (a coroutine, an ObjectRef) is awaited too."""
        self._waiting += 1
        try:
            result = await wait_future(pending)
        finally:
            self._waiting -= 1
        if type(result) is not Flattened and type(result) is not dict and inspect.isawaitable(result):
            result = await result
        return result


def _prepared(fn: Callable[[], Any], owner: Any) -> Any:
    """On a worker thread: ``fn()``, then the owner's copying and flattening of its result."""
    return owner.prepare(fn())


class ThreadCaller(_FutureCaller):
    """Runs ``stats()`` on a daemon worker thread of the monitor's pool."""

    mode = "thread"

    def __init__(self, fn: Callable[[], Any], pool: WorkerPool) -> None:
        super().__init__()
        self.fn = fn
        self._pool = pool

    def _begin(self) -> Future[Any]:
        owner = self.owner
        return self._pool.submit(self.fn if owner is None else functools.partial(_prepared, self.fn, owner))

    def timed_out(self) -> None:
        super().timed_out()
        if self._pending is not None:
            self._pool.abandon(self._pending)


class RemoteCaller(_FutureCaller):
    """Calls ``stats.remote(**kwargs)`` on a Ray actor handle and awaits the ObjectRef."""

    mode = "remote"

    def __init__(self, remote: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        super().__init__()
        self._remote = remote
        self._kwargs = kwargs

    def _begin(self) -> Future[Any]:
        ref = self._remote(**self._kwargs)
        fut: Future[Any] = ref.future()
        return fut


def is_blocking_proxy(target: object, fn: object) -> bool:
    """A ``multiprocessing`` manager proxy, or a bound method of one: every call is a blocking IPC round trip."""
    return isinstance(target, BaseProxy) or isinstance(getattr(fn, "__self__", None), BaseProxy)


def make_caller(
    target: object,
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    offload: str,
    pool: Callable[[], WorkerPool],
) -> Caller:
    """Picks the strategy for ``fn``: a Ray handle is remote and an ``async def`` inline, whatever ``offload`` says."""
    remote = getattr(fn, "remote", None)
    if callable(remote) and not inspect.isroutine(fn):
        return RemoteCaller(remote, kwargs)
    bound: Callable[[], Any] = functools.partial(fn, **kwargs) if kwargs else fn
    if inspect.iscoroutinefunction(fn) or offload == "inline":
        return InlineCaller(bound, auto=False)
    if offload == "thread" or is_blocking_proxy(target, fn):
        return ThreadCaller(bound, pool())
    return InlineCaller(bound, auto=True)
