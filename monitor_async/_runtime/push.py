"""Values pushed from the user's own loop: ``monitor.log(name, metrics, step=...)``.

On the caller's thread a push is only a ``snapshot``, a time stamp and a
``deque.append`` (atomic under the GIL), so a bad value can neither raise
in the training loop nor slow it. Pushes are counted with
``itertools.count`` (``next()`` is atomic, ``+= 1`` is not), so the dropped
ones are exactly ``pushed - taken - waiting``. The first push after a drain
schedules one drain ``DRAIN_DELAY`` s later, bounding the loop's wake-ups.
The drain makes each push a [Record][monitor_async.Record] with the same
rules as a polled snapshot ([pushing](pushing.md#what-it-guarantees)).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import operator
from collections import deque
from collections.abc import Mapping
from time import time as _time
from typing import Any

from .._core.policy import ErrorPolicy, describe
from .._core.record import EMPTY_SOURCE, Record, Source, new_record
from .._core.values import MAX_DEPTH, KeyCache, read
from .fanout import AlertFeed, Fanout

__all__ = ["DRAIN_DELAY", "Pushes"]

DRAIN_DELAY = 0.02
"""Seconds between the first push after a drain and the drain (at most 50 wake-ups a second)."""

_NAMES = 4096
"""Push names whose key caches are kept; more distinct names start the caches afresh."""

_Push = tuple[Any, Any, Any, float]

_PLAIN = frozenset({float, int, bool, str, type(None)})
"""Value types a snapshot keeps as they are (immutable, and not mappings)."""


def snapshot(metrics: Any, depth: int = 0) -> Any:
    """A private copy of a pushed ``metrics``, nested mappings included, taken on the caller's thread.

    Never raises: what cannot be read here is kept as it is, and the drain
    reports it as an error of that push.

    Examples:
        >>> inner = {"lr": 0.1}
        >>> copy = snapshot({"opt": inner})
        >>> inner["lr"] = 9.0
        >>> copy
        {'opt': {'lr': 0.1}}
    """
    plain = _PLAIN
    try:
        if type(metrics) is dict:
            copy = metrics.copy()
            for value in copy.values():  # the common case: plain values only, one look at each type
                if type(value) not in plain:
                    break
            else:
                return copy
        elif isinstance(metrics, Mapping) and depth < MAX_DEPTH:
            copy = {key: metrics[key] for key in metrics}
        else:
            return metrics
        for key, value in copy.items():
            if type(value) not in plain and isinstance(value, Mapping) and depth < MAX_DEPTH:
                copy[key] = snapshot(value, depth + 1)
        return copy
    except Exception:  # noqa: BLE001 - read again on the loop, where its error is reported
        return metrics


class Pushes:
    """The pushed values waiting for the monitor's loop, and how they become records.

    Args:
        limit: pushes kept waiting at most; past it the oldest is dropped and counted.
        max_values: values kept per pushed mapping, as for a polled snapshot.
        errors: the monitor's ``on_error`` policy, for invalid pushes (also counted).
        fanout: the fan-out the records go to.
        source: the ``Record.source`` of every pushed record.
        alerts: the alert rules, told of a push that left values out (the ``nonfinite`` rules).
    """

    __slots__ = (
        "_armed", "_caches", "_count", "_failed", "_failing", "_items", "_loop", "_reads", "_taken", "alerts",
        "errors", "fanout", "limit", "max_values", "source",
    )

    def __init__(
        self, limit: int, max_values: int, errors: ErrorPolicy, fanout: Fanout, source: Source = EMPTY_SOURCE,
        *, alerts: AlertFeed,
    ) -> None:
        self.fanout = fanout
        self.source = source
        self.limit = limit
        self.max_values = max_values
        self.errors = errors
        self._count = itertools.count()  # next() is atomic: one per push, one per read of pushed
        self._reads = 0
        self._taken = 0  # pushes the drain took, made into records or failed
        self._failed = 0  # pushes the drain took that could not be made into records
        self._items: deque[_Push] = deque(maxlen=limit)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._armed = False
        self._caches: dict[str, KeyCache] = {}
        self._failing: set[str] = set()
        self.alerts = alerts

    # ------------------------------------------------------------ caller's side
    def push(self, name: Any, metrics: Any, step: Any) -> None:
        """Queues one push; never blocks, never raises on what it is given (any thread)."""
        next(self._count)
        self._items.append((name, snapshot(metrics), step, _time()))
        if not self._armed and self._loop is not None:
            self._arm()

    def _arm(self) -> None:
        loop = self._loop
        if loop is None:
            return
        self._armed = True
        # the loop closed between the check and the call: the pushes wait for stop()/step()
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.call_later, DRAIN_DELAY, self._drain_soon)

    # ------------------------------------------------------------- loop's side
    def attach(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Binds the pushes to a running loop (``start()``), which drains them, or unbinds them."""
        self._loop = loop
        self._armed = False
        if loop is not None and self._items:
            self._arm()

    def _drain_soon(self) -> None:
        self._armed = False
        self.drain()

    def drain(self) -> None:
        """Turns every waiting push into a record and hands it to the fan-out; values left out are counted."""
        emit = self.fanout.emit
        items = self._items
        left_out = 0
        while items:
            try:
                name, metrics, step, when = items.popleft()
            except IndexError:  # another drain took it
                break
            self._taken += 1
            try:
                record, dropped = self._record(name, metrics, step, when)
            except Exception as exc:  # noqa: BLE001 - reported through on_error, never raised at the caller
                self._failed += 1
                label = name if isinstance(name, str) else _shown(name)
                self.errors.report(
                    f"log({label!r}, ...): {describe(exc)}; this push is dropped (counted in log_dropped)",
                    exc, first=label not in self._failing,
                )
                if len(self._failing) < _NAMES:
                    self._failing.add(label)
                continue
            self._failing.discard(name)
            if dropped:
                left_out += dropped
                if self.alerts.on:
                    self.alerts.engine.rescan(name, metrics, self.source)
            emit(record)
        if left_out:
            self.fanout.counters.values_dropped += left_out

    def _record(self, name: Any, metrics: Any, step: Any, when: float) -> tuple[Record, int]:
        if not isinstance(name, str) or not name:
            raise TypeError(f"the name must be a non-empty string, got {name!r}")
        if step is not None:
            if isinstance(step, bool) or not hasattr(step, "__index__"):
                raise TypeError(f"step must be an int or None, got {type(step).__name__}")
            step = operator.index(step)  # numpy and torch integers too
        keys = self._caches.get(name)
        if keys is None:
            if len(self._caches) >= _NAMES:
                self._caches.clear()
            keys = self._caches[name] = KeyCache(name + "/", 2 * self.max_values + 64)
        if not isinstance(metrics, Mapping):
            raise TypeError(f"metrics must be a mapping of numbers, got {type(metrics).__name__}")
        values, dropped = read(metrics, self.max_values, keys)
        return new_record(name, step, when, values, self.source), dropped

    @property
    def waiting(self) -> int:
        """Pushes not yet made into records."""
        return len(self._items)

    @property
    def pushed(self) -> int:
        """Pushes so far (every call of ``push``)."""
        pushed = next(self._count) - self._reads  # next() returns how many next() calls came before
        self._reads += 1
        return pushed

    @property
    def dropped(self) -> int:
        """Pushes that never became a record (pushed out, or invalid); once pushes stop, ``records + dropped == pushed``."""
        waiting = len(self._items)  # before pushed: a push under way is then at worst counted early
        return max(0, self.pushed - self._taken - waiting) + self._failed


def _shown(name: Any) -> str:
    """A name that is not a string, for a warning (whatever its ``repr`` does)."""
    try:
        return repr(name)[:200]
    except Exception:  # noqa: BLE001 - a repr that raises is still a name we must show
        return f"<{type(name).__name__}>"
