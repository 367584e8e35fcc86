"""The loop-lag probe: a timer that notices a blocked event loop and tells the rules engine."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..._core.policy import log
from .engine import Engine

__all__ = ["LoopLag"]


class LoopLag:
    """Notices a blocked event loop: a timer, at most 0.1 s apart, measures how late it runs.

    ``beside(lo, hi)`` gives a time in ``[lo, hi]`` when another timer of the
    loop is due, or ``None``: the probe's timer is set for that time when there
    is one, so that it runs in the same pass of the loop as the polls due then
    instead of waking the loop (and taking the GIL) on its own.

    ``lag_max`` is the longest it was late since the monitor was built; a
    lateness of at least ``THRESHOLD`` is an episode, warned once (or
    reported by an ``Alert.blocked`` rule), over once the loop has run on time
    for ``CALM`` seconds.
    """

    PERIOD = 0.1
    THRESHOLD = 0.5
    CALM = 5.0

    def __init__(self, engine: Engine, beside: Callable[[float, float], float | None] | None = None) -> None:
        self.engine = engine
        self.beside = beside
        self.own_loop = False  # the monitor's own thread (SyncMonitor): another warning
        self.lag_max = 0.0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.handle: asyncio.TimerHandle | None = None
        self.expected = 0.0
        self.last_run = 0.0
        self.late_at: float | None = None  # the last late tick of the episode under way

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.late_at = None
        self.last_run = loop.time()
        self._arm(self.last_run)

    def _arm(self, now: float) -> None:
        assert self.loop is not None
        due = None if self.beside is None else self.beside(now + self.PERIOD / 4, now + self.PERIOD)
        self.expected = now + self.PERIOD if due is None else due
        self.handle = self.loop.call_at(self.expected, self._tick)

    def _tick(self) -> None:
        assert self.loop is not None
        now = self.loop.time()
        self.look(now)
        self.last_run = now
        self._arm(now)

    def look(self, now: float) -> None:
        lag = now - self.expected
        if lag <= 0:
            return
        if lag > self.lag_max:
            self.lag_max = lag
        if lag >= self.THRESHOLD:
            if self.late_at is None:
                self._warn(now - self.last_run)
            self.late_at = now
        elif self.late_at is not None and now - self.late_at >= self.CALM:
            self.late_at = None
            self.engine.loop_calm()

    def _warn(self, blocked: float) -> None:
        if self.own_loop:
            message = (f"the monitor's event loop (its own thread) was blocked for {blocked:.1f} s: polls could "
                       "not run; a stats() or sink blocks it: give that watch offload='thread'")
        else:
            message = (f"the event loop was blocked for {blocked:.1f} s: polls could not run; offload CPU work "
                       "with asyncio.to_thread")
        if not self.engine.loop_blocked(blocked, message):
            log.warning("%s", message)

    def stop(self) -> None:
        """Looks once more (a block that ends in ``stop()`` is still seen), then stops the timer."""
        if self.loop is not None and self.handle is not None:
            self.handle.cancel()
            self.look(self.loop.time())
        self.handle = None
        self.loop = None
