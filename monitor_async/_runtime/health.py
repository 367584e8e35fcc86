"""Dead targets: a watched process that is gone is reported once, then polled with backoff.

A poll error that says the process is gone (``is_dead``) marks the watch
dead: one report through ``on_error``, then its caller is swapped for a
``Resting`` one (`Watch.swap_caller`), which skips slots (``polls_missed``)
and calls through after ``FIRST_RETRY``, then at doubling waits up to
``LONGEST_WAIT`` (a `Backoff`); the first answer brings the watch back.
See [dead targets](distributed.md#dead-targets).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from time import monotonic
from typing import TYPE_CHECKING, Any

from .._core.backoff import Backoff
from .._core.policy import describe, log
from .callers import Busy, Caller

if TYPE_CHECKING:
    from .._core.policy import ErrorPolicy
    from .counters import Counters
    from .watch import Watch

__all__ = ["FIRST_RETRY", "LONGEST_WAIT", "Resting", "is_dead", "on_failure"]

FIRST_RETRY = 1.0
"""Seconds from a target's death to its first retry; also the shortest wait between retries."""
LONGEST_WAIT = 30.0
"""The longest wait between two retries of a dead target."""
_BACKOFF = Backoff(first=FIRST_RETRY, cap=LONGEST_WAIT)

_DEAD = (EOFError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError, FileNotFoundError)
_RAY_DEAD = frozenset({"RayActorError", "ActorDiedError"})


def is_dead(exc: BaseException) -> bool:
    """Whether ``exc``, a poll's error, says the target's process is gone (Ray's errors matched by name, never imported).

    Examples:
        >>> is_dead(ConnectionRefusedError()), is_dead(ValueError())
        (True, False)
    """
    if isinstance(exc, _DEAD):
        return True
    return any(cls.__name__ in _RAY_DEAD and cls.__module__.startswith("ray") for cls in type(exc).__mro__)


class Resting(Caller):
    """Stands in for a dead target's caller: skips polls until the next retry, then calls through."""

    def __init__(self, watch: Watch, inner: Caller, counters: Counters) -> None:
        self.watch = watch
        self.inner = inner
        self.counters = counters
        self.retries = 0
        self.retry_at = monotonic() + _BACKOFF.ceiling(0)

    @property
    def mode(self) -> str:  # type: ignore[override]
        return self.inner.mode

    @property
    def busy(self) -> bool:
        return self.inner.busy

    def call(self) -> Any:
        now = monotonic()
        if now < self.retry_at:
            raise Busy
        self.retries += 1
        self.retry_at = now + _BACKOFF.ceiling(self.retries)
        result = self.inner.call()  # a failure goes to the poller's fail(), which keeps us resting
        if type(result) is not dict and inspect.isawaitable(result):
            return self._probe(result)
        self.revive()
        return result

    async def _probe(self, pending: Awaitable[Any]) -> Any:
        result = await pending
        self.revive()
        return result

    def timed_out(self) -> None:
        self.inner.timed_out()

    def revive(self) -> None:
        """The target answered: its own caller takes over again."""
        watch = self.watch
        if watch.swap_caller(self, self.inner):
            self.counters.targets_dead -= 1
            log.info("watch %r: its target answers again; polling it as before", watch.name)


def on_failure(counters: Counters, errors: ErrorPolicy, watch: Watch, exc: BaseException) -> bool:
    """Called for every failed poll; ``True`` when it is a dead target's (reported once, then backoff; retries are silent)."""
    if isinstance(watch.caller, Resting):
        return True
    if not is_dead(exc):
        return False
    watch.swap_caller(watch.caller, Resting(watch, watch.caller, counters))
    counters.targets_dead += 1
    counters.targets_died += 1
    errors.report(
        f"watch {watch.name!r}: its target's process is gone ({describe(exc)}); polling it again "
        f"after {FIRST_RETRY:g} s, then up to {LONGEST_WAIT:g} s apart, until it answers "
        "(monitor.stats()['targets_dead'])",
        exc,
        first=True,
    )
    watch.failing = True
    return True
