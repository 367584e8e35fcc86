"""Ending by SIGTERM or SIGHUP is a stop: the running monitors stop as ``stop()`` does, then the process
ends the way the signal would have ended it (or the handler that was there before ours runs).

A started monitor is enlisted here with the loop it runs on (from any thread); the handlers are
installed and restored only from the main thread, the one place Python allows it, by ``settle()``.
When a signal comes, each enlisted monitor's ``stop()`` is started on its own loop, all at once.
If none of those loops is the main thread's own, the handler waits for them there (bounded); if one
is, it must not wait (the loop cannot turn while its thread is in the handler), so the end is
scheduled on that loop and a watchdog thread re-sends the signal when the stops' bound has passed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import threading
import time
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol

from .._core.policy import log

__all__ = ["SIGNALS", "Stoppable", "discharge", "enlist", "settle"]

SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""The signals that end a process the way a scheduler or a closed terminal does (no SIGHUP on Windows)."""


class Stoppable(Protocol):
    """What a signal needs of a monitor: stopping it, and how long that may take."""

    def stop(self) -> Awaitable[None]: ...

    def stop_bound(self) -> float: ...


@dataclass
class _Ending:
    """One signal being handled: the stops under way and when they are given up."""

    signum: int
    frame: FrameType | None
    deadline: float
    stops: list[tuple[Stoppable, asyncio.AbstractEventLoop, concurrent.futures.Future[None]]]
    over: threading.Event = field(default_factory=threading.Event)


_lock = threading.RLock()  # reentrant: the handler may interrupt the main thread inside enlist() or settle()
_running: weakref.WeakKeyDictionary[Stoppable, asyncio.AbstractEventLoop] = weakref.WeakKeyDictionary()
_previous: dict[int, Any] = {}  # signal number: the handler in place before ours (chained to, then restored)
_ending: _Ending | None = None


def enlist(monitor: Stoppable, loop: asyncio.AbstractEventLoop) -> None:
    """Lets a signal stop ``monitor``, running on ``loop``; installs the handlers if called from the main thread."""
    with _lock:
        _running[monitor] = loop
    settle()


def discharge(monitor: Stoppable) -> None:
    """``monitor`` stopped: a signal leaves it alone; the handlers are restored from the main thread when none is left."""
    with _lock:
        _running.pop(monitor, None)
    settle()


def settle() -> None:
    """From the main thread: installs the handlers while a monitor is enlisted, restores the previous ones after.

    Elsewhere it does nothing (Python installs handlers only from the main thread); neither while a
    signal is being handled.
    """
    if threading.current_thread() is not threading.main_thread() or _ending is not None:
        return
    with _lock:
        if _running:
            for sig in SIGNALS:
                current = signal.getsignal(sig)
                # SIG_IGN was asked for (nohup); None is a handler set outside Python: both left as they are
                if current is not _on_signal and current is not signal.SIG_IGN and current is not None:
                    _previous[sig] = current
                    signal.signal(sig, _on_signal)
        else:
            for signum, previous in list(_previous.items()):
                if signal.getsignal(signum) is _on_signal:  # a handler installed after ours stays in place
                    signal.signal(signum, previous)
                del _previous[signum]


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Our handler: stops every enlisted monitor, then passes the signal on (see the module's docstring)."""
    global _ending
    ending = _ending
    if ending is not None:  # the same or another signal while the stops run: they go on, up to their bound
        if time.monotonic() >= ending.deadline:
            _finish(ending)
        return
    with _lock:
        entries = [(m, loop) for m, loop in _running.items() if loop.is_running() and not loop.is_closed()]
    if not entries:
        _pass_on(signum, frame)
        return
    bound = max(_bound(monitor) for monitor, _ in entries)
    stops = [(m, loop, asyncio.run_coroutine_threadsafe(_awaited(m.stop()), loop)) for m, loop in entries]
    ending = _ending = _Ending(signum, frame, time.monotonic() + bound, stops)
    here = _loop_here()
    if all(loop is not here for _, loop, _ in stops):  # every loop turns in a thread of its own: wait here
        concurrent.futures.wait([f for _, _, f in stops], timeout=bound)
        _finish(ending)
        return
    assert here is not None
    threading.Thread(target=_watch, args=(ending, here), name="monitor-async-signal", daemon=True).start()


def _watch(ending: _Ending, here: asyncio.AbstractEventLoop) -> None:
    """Ends the signal on the main thread's loop once the stops are done; re-sends it if that loop is blocked."""
    concurrent.futures.wait([f for _, _, f in ending.stops], timeout=max(0.0, ending.deadline - time.monotonic()))
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        here.call_soon_threadsafe(_finish, ending)
    if not ending.over.wait(max(0.0, ending.deadline - time.monotonic()) + 0.5):
        os.kill(os.getpid(), ending.signum)  # our handler runs at the main thread's next bytecode: past the bound


def _finish(ending: _Ending) -> None:
    """In the main thread: the stops are done or past their bound; the signal is passed on."""
    global _ending
    if ending.over.is_set():
        return
    ending.over.set()
    for monitor, _, future in ending.stops:
        if not future.done():
            log.warning("monitor-async: on signal %d, a monitor did not stop within %gs", ending.signum, _bound(monitor))
        elif not future.cancelled() and future.exception() is not None:
            log.warning("monitor-async: stopping on signal %d: %r", ending.signum, future.exception())
    try:
        if _pass_on(ending.signum, ending.frame):
            log.info(
                "monitor-async: signal %d stopped %d monitor(s), and the handler in place before them let the "
                "process go on: they stay stopped, as after stop()", ending.signum, len(ending.stops),
            )
    finally:
        _ending = None
    settle()


def _pass_on(signum: int, frame: FrameType | None) -> bool:
    """What would have happened without us: the previous handler's call (``True`` if it returned), or the
    default action: the process ends by the signal."""
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
        return True
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return False


def _loop_here() -> asyncio.AbstractEventLoop | None:
    """The loop running in this thread, if any (the main thread's own, when a signal interrupts it)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _bound(monitor: Stoppable) -> float:
    try:
        return monitor.stop_bound()
    except RuntimeError:  # its watches changed size while read from this thread
        return 60.0


async def _awaited(step: Awaitable[Any]) -> None:
    await step


def _forget_in_child() -> None:
    """After ``os.fork()`` in the child: the loops stayed in the parent, so the handlers from before ours come back.

    With none of ours left, a signal does in the child what it would have done without monitor-async, at
    once: a Python handler would run only at the child's next bytecode, after a ``time.sleep()`` it came
    just before. The lock is made anew: a thread of the parent may have held it at the fork.
    """
    global _ending, _lock
    _lock = threading.RLock()
    _running.clear()
    _ending = None
    settle()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
