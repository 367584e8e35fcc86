"""Values pushed from the user's own loop: ``monitor.log(name, metrics, step=...)``.

On the caller's thread a push is only a ``snapshot``, a time stamp and a
``deque.append`` (atomic under the GIL), so a bad value can neither raise
in the training loop nor slow it. Pushes are counted with
``itertools.count`` (``next()`` is atomic, ``+= 1`` is not), so the dropped
ones are exactly ``pushed - taken - waiting``. Up to ``WAIT_FACTOR *
queue_size`` pushes wait for the loop, enough for the loop's thread to go
without CPU for a while at a high rate. The first push after a drain
schedules one drain ``DRAIN_DELAY`` s later, bounding the loop's wake-ups at
low rates; a push that fills the buffer past half wakes the loop at once
(one wake-up per crossing), and a drain that took many pushes schedules the
next one ``FAST_DELAY`` s later itself, so a steady high rate is drained
before it overflows. A drain takes no more than every sink's queue takes
without dropping one (any burst between two writes, the free room while a
write is in flight) and drains again at the loop's next turn, after the
writers; all go when the buffer overflowed meanwhile, or a queue has had
no room for ``HOLD`` s (its sink is behind and drops its own oldest, as
for polls). The first push a full
buffer drops starts a streak: one warning then, one when no push was
dropped for ``QUIET`` s (or at the next drain without a loop).
The drain makes each push a [Record][monitor_async.Record] with the same
rules as a polled snapshot ([pushing](pushing.md#what-it-guarantees)).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import operator
import threading
from collections import deque
from collections.abc import Callable, Mapping
from time import monotonic
from time import time as _time
from typing import Any

from .._core.distribution import DEFAULT_QUANTILES, Summary
from .._core.policy import ErrorPolicy, describe, log
from .._core.record import EMPTY_SOURCE, NO_DISTRIBUTIONS, Record, Source, new_record
from .._core.threads import WorkerPool, wait_future
from .._core.values import KeyCache, OnDevice, read
from .copies import give_back, snapshot
from .fanout import AlertFeed, Fanout

__all__ = ["DRAIN_DELAY", "FAST_DELAY", "HOLD", "QUIET", "WAIT_FACTOR", "Pushes"]

WAIT_FACTOR = 16
"""Pushes that may wait for the loop per ``queue_size``: 16,384 by default, 160 ms at 100,000 a second."""

DRAIN_DELAY = 0.02
"""Seconds between the first push after a drain and the drain, while the buffer stays under half full."""

FAST_DELAY = 0.001
"""Seconds between a drain that took many pushes and the next (the caller's thread has the GIL meanwhile)."""

HOLD = 0.5
"""Seconds the fullest sink queue may stay without room before pushes go all the same (its sink is behind)."""

FAST_TURNS = 3
"""Fast drains in a row finding few pushes that end them."""

QUIET = 1.0
"""Seconds without a dropped push that end a streak of drops (and its warnings)."""

_NAMES = 4096
"""Push names whose key caches are kept; more distinct names start the caches afresh."""

_Push = tuple[Any, Any, Any, float]

class Pushes:
    """The pushed values waiting for the monitor's loop, and how they become records.

    Args:
        queue_size: the monitor's ``queue_size``; ``WAIT_FACTOR`` times it wait at most,
            past that the oldest is dropped and counted.
        max_values: values kept per pushed mapping, as for a polled snapshot.
        errors: the monitor's ``on_error`` policy, for invalid pushes (also counted).
        fanout: the fan-out the records go to.
        source: the ``Record.source`` of every pushed record.
        alerts: the alert rules, told of a push that left values out (the ``nonfinite`` rules).
        quantiles: the quantiles of a pushed distribution's summary (``None``: such values are left out).
        pool: the monitor's worker threads, where a push holding a tensor on a device is read.
    """

    __slots__ = (
        "_bar", "_busy_drain", "_caches", "_count", "_dropping", "_failed", "_failing", "_fast", "_half", "_items",
        "_lock", "_loop", "_lost_before", "_lost_drained", "_moved", "_reads", "_seen", "_stalled", "_taken", "_timer",
        "alerts", "errors", "fanout", "limit", "max_values", "points", "pool", "quantiles", "queue_size",
        "source",
    )

    def __init__(
        self, queue_size: int, max_values: int, errors: ErrorPolicy, fanout: Fanout, source: Source = EMPTY_SOURCE,
        *, alerts: AlertFeed, quantiles: tuple[float, ...] | None = DEFAULT_QUANTILES,
        pool: Callable[[], WorkerPool] | None = None,
    ) -> None:
        self.pool = pool
        self._moved: set[asyncio.Future[Any]] = set()  # pushes read on a worker thread (a tensor on a device)
        self.fanout = fanout
        self.quantiles = quantiles  # of the distributions pushed; None: values of many numbers are left out
        self.source = source
        self.queue_size = queue_size
        self.limit = limit = WAIT_FACTOR * queue_size
        self.max_values = max_values
        self.errors = errors
        self._count = itertools.count()  # next() is atomic: one per push, one per read of pushed
        self._reads = 0
        self._taken = 0  # pushes the drain took, made into records or failed
        self.points: dict[str, tuple[int | None, float]] = {}
        """Each pushed name's last step and time, for ``Monitor.state_dict()`` (bounded as the key caches are)."""
        self._failed = 0  # pushes the drain took that could not be made into records
        self._items: deque[_Push] = deque(maxlen=limit)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._half = (limit + 1) // 2
        self._busy_drain = max(1, queue_size // 4)  # a drain taking this many starts the fast drains (a quarter, to go on)
        self._bar = limit  # a push leaving this many waiting has something to do: see _busy()
        self._timer: asyncio.TimerHandle | None = None  # the next drain, on the loop
        self._fast = 0  # drains at FAST_DELAY left while they find few pushes
        self._stalled: float | None = None  # since when drains found no room in the fullest sink queue
        self._lost_drained = 0  # pushes pushed out of the buffer, at the last drain
        self._lock = threading.Lock()  # for the reads of the counts, and a streak's start and end
        self._dropping = False  # in a streak of drops: said at its start and at its end
        self._lost_before = 0  # pushes pushed out of the buffer before the streak
        self._seen = 0  # ... when the streak was last looked at
        self._caches: dict[str, KeyCache] = {}
        self._failing: set[str] = set()
        self.alerts = alerts

    # ------------------------------------------------------------ caller's side
    def push(self, name: Any, metrics: Any, step: Any, when: Any = None) -> None:
        """Queues one push stamped ``when`` (now by default); never blocks, never raises on what it is given (any thread)."""
        next(self._count)
        items = self._items
        items.append((name, snapshot(metrics), step, _time() if when is None else when))
        if len(items) >= self._bar:
            self._busy()

    def push_owned(self, name: Any, metrics: dict[str, Any], step: Any, when: Any = None) -> None:
        """`push` of a dict made for this push alone, of plain values (a writer's ``{tag: value}``): queued as it is."""
        # push's queueing written out again, not push calling this: a frame less on the caller's thread
        next(self._count)
        items = self._items
        items.append((name, metrics, step, _time() if when is None else when))
        if len(items) >= self._bar:
            self._busy()

    def _busy(self) -> None:
        """What a push does beyond queueing, as ``_bar`` says: schedules a drain, or says a first drop.

        ``_bar`` is 0 while no drain is scheduled (the push schedules one
        ``DRAIN_DELAY`` s later), half the buffer while that one is (a push
        filling past it wakes the loop at once), the buffer's size while a drain
        is on its way or no loop runs (a full buffer drops), and above it in a
        streak of drops. A drain that finds few pushes sets it to 0 and looks
        again, and a push checks it after queueing, so no push is left without a drain.
        """
        waiting = len(self._items)
        if waiting >= self.limit and not self._dropping:
            self._start_streak()
        full = self.limit + 1 if self._dropping else self.limit
        loop = self._loop
        if loop is None:
            self._bar = full
            return
        crowded = waiting >= self._half
        self._bar = full if crowded else self._half
        with contextlib.suppress(RuntimeError):  # a closed loop: the pushes wait for stop() or step()
            loop.call_soon_threadsafe(self._drain_in, 0.0 if crowded else DRAIN_DELAY)

    # ------------------------------------------------------------- loop's side
    def attach(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Binds the pushes to a running loop (``start()``), which drains them, or unbinds them."""
        self._loop = loop
        self._timer = None
        self._bar = 0 if loop is not None else self.limit + 1 if self._dropping else self.limit
        if loop is not None and self._items:
            self._busy()

    def _drain_in(self, delay: float) -> None:
        """Schedules the drain ``delay`` s from now, unless one is due sooner (one timer at a time)."""
        loop = self._loop
        if loop is None:
            return
        due = loop.time() + delay
        timer = self._timer
        if timer is not None:
            if timer.when() <= due:
                return
            timer.cancel()
        self._timer = loop.call_at(due, self._scheduled)

    def _scheduled(self) -> None:
        self._timer = None
        waiting = len(self._items)
        taken = self.drain(self._room())
        held = taken < waiting  # the sinks' queues had no room for the rest
        fast = self._fast
        if taken >= self._busy_drain or (fast > 0 and taken >= self._busy_drain // 4):
            self._fast = fast = FAST_TURNS
        elif taken or not held:  # a drain the sinks' queues held back is no turn with few pushes
            self._fast = fast = max(0, fast - 1)
        if self._loop is None:
            self._bar = self.limit + 1 if self._dropping else self.limit
        elif held or fast > 0:
            # pushes come fast, or wait for room: drain again on the loop's own clock (at its next turn,
            # after the writers, when some room was found), also after a turn or two with few (the
            # caller's thread was descheduled); a wake-up from the caller's thread costs the loop's
            # thread up to three GIL hand-overs (5 ms each behind a caller that never releases the
            # GIL) and would come later
            self._drain_in(0.0 if held and taken else FAST_DELAY if fast > 0 else DRAIN_DELAY)
            full = self.limit + 1 if self._dropping else self.limit
            self._bar = full if fast > 0 or taken else min(full, self._half)
        else:
            self._bar = 0
            if self._items:  # queued while the bar was up: scheduled now
                self._busy()

    def _room(self) -> int:
        """Records every sink's queue takes now without dropping one (see `Channel.room`)."""
        return max(0, min((channel.room() for channel in self.fanout.channels), default=self.limit))

    def drain(self, room: int | None = None) -> int:
        """Turns the pushes waiting now into records for the fan-out, and returns how many it took.

        With ``room``, takes at most that many, or all when the buffer overflowed
        since the last drain or drains have found no room for ``HOLD`` s: a sink
        that is behind then drops its own oldest, as for polls, and the others
        lose nothing. Pushes made meanwhile (other threads) wait for the next
        drain, so that one drain never keeps the loop from its other work.
        """
        waiting = len(self._items)
        with self._lock:
            lost = self._lost()
        overflowed, self._lost_drained = lost != self._lost_drained, lost
        if room is None or room >= waiting or overflowed:
            self._stalled = None
            return self._take(waiting)
        if room > 0:
            self._stalled = None
        elif self._stalled is None:
            self._stalled = monotonic()
        elif monotonic() - self._stalled >= HOLD:
            room = waiting
        return self._take(room)

    async def settle(self) -> None:
        """Drains the pushes waiting now into the sinks' queues as their writers make room (``flush()``, ``stop()``).

        Waits for room at most ``HOLD`` s at a time, as the drains on the loop do.
        """
        left = len(self._items)
        while left > 0 and self._items:
            taken = self.drain(min(left, self._room()))
            left -= taken
            if left > 0 and self._items:
                await asyncio.sleep(0.0 if taken else FAST_DELAY)  # the writers' turn

    def _take(self, count: int) -> int:
        """Makes records of the oldest ``count`` pushes; returns how many it took."""
        emit = self.fanout.emit
        popleft = self._items.popleft
        make = self._record
        failing = self._failing
        left_out = 0
        taken = 0
        for _ in range(count):
            try:
                name, metrics, step, when = popleft()
            except IndexError:  # another drain took it
                break
            self._taken += 1
            taken += 1
            try:
                record, dropped = make(name, metrics, step, when)
            except OnDevice:  # a tensor on a device: its copy to the host waits on a worker thread
                self._move(name, metrics, step, when)
                continue
            except Exception as exc:  # noqa: BLE001 - reported through on_error, never raised at the caller
                self._fail(name, exc)
                continue
            if failing:
                failing.discard(name)
            if dropped:
                left_out += dropped
                if self.alerts.on:
                    self.alerts.engine.rescan(name, metrics, self.source)
            emit(record)
            if record.distributions is not NO_DISTRIBUTIONS:  # summarised: its arrays' copies are spares now
                give_back(metrics)
        if left_out:
            self.fanout.counters.values_dropped += left_out
        if self._dropping and self._loop is None:  # no loop to see the streak end: it ends here
            self._end_streak()
        return taken

    def _fail(self, name: Any, exc: BaseException) -> None:
        """A push that could not be made into a record: reported (once per streak of its name), counted."""
        self._failed += 1
        label = name if isinstance(name, str) else _shown(name)
        self.errors.report(
            f"log({label!r}, ...): {describe(exc)}; this push is dropped (counted in log_dropped)",
            exc, first=label not in self._failing,
        )
        if len(self._failing) < _NAMES:
            self._failing.add(label)

    def _move(self, name: Any, metrics: Any, step: Any, when: float) -> None:
        """Makes a push holding a tensor on a device into a record on a worker thread, then fans it out on the loop."""
        if self.pool is None:  # no worker threads: read here, off any loop
            raise RuntimeError("log(): a tensor on a device needs the monitor's worker threads")
        moved = wait_future(self.pool().submit(lambda: self._record(name, metrics, step, when)))
        self._moved.add(moved)

        def done(future: asyncio.Future[tuple[Record, int]]) -> None:
            self._moved.discard(future)
            if future.cancelled():
                return
            exc = future.exception()
            if exc is not None:
                self._fail(name, exc)
                return
            record, dropped = future.result()
            if dropped:
                self.fanout.counters.values_dropped += dropped
                if self.alerts.on:
                    self.alerts.engine.rescan(name, metrics, self.source)
            self.fanout.emit(record)

        moved.add_done_callback(done)

    # ---------------------------------------------------------- streaks of drops
    def _start_streak(self) -> None:
        """Says the first dropped push of a streak: the count so far, the bound and the fix (any thread)."""
        with self._lock:
            lost = self._lost()
            if self._dropping or lost <= self._lost_before:  # the buffer just filled: nothing dropped yet
                return
            self._dropping = True
            self._seen = lost
            so_far = lost + self._failed
        log.warning(
            "log(): more than %s pushes (%d x queue_size=%d) are waiting for the monitor's loop: dropping the "
            "oldest (%s so far, counted in monitor.stats()['log_dropped']); pass a larger queue_size= to the "
            "monitor, or push less often",
            f"{self.limit:,}", WAIT_FACTOR, self.queue_size, _pushes(so_far),
        )
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop: the streak ends at the next drain
                loop.call_soon_threadsafe(loop.call_later, QUIET, self._check_streak)

    def _check_streak(self) -> None:
        """On the loop, every ``QUIET`` s of a streak: ends it if no push was dropped meanwhile."""
        if not self._dropping:
            return
        with self._lock:
            lost = self._lost()
            if lost != self._seen:
                self._seen = lost
                lost = -1
        loop = self._loop
        if lost < 0 and loop is not None:
            loop.call_later(QUIET, self._check_streak)
        else:
            self._end_streak()

    def _end_streak(self) -> None:
        """Says how many pushes the streak dropped in all."""
        with self._lock:
            if not self._dropping:
                return
            self._dropping = False
            self._bar = min(self._bar, self.limit)  # a full buffer drops again: said again
            lost = self._lost()
            total = lost - self._lost_before
            self._lost_before = lost
            so_far = lost + self._failed
        log.warning(
            "log(): %s in all in this streak (queue_size=%d); log_dropped is now %d",
            _pushes(total), self.queue_size, so_far,
        )

    def _lost(self) -> int:
        """Pushes pushed out of the full buffer so far (the lock held)."""
        waiting = len(self._items)  # before pushed: a push under way is then at worst counted early
        pushed = next(self._count) - self._reads  # next() returns how many next() calls came before
        self._reads += 1
        return max(0, pushed - self._taken - waiting)

    def _record(self, name: Any, metrics: Any, step: Any, when: float) -> tuple[Record, int]:
        if (type(name) is not str and not isinstance(name, str)) or not name:
            raise TypeError(f"the name must be a non-empty string, got {name!r}")
        if step is not None and type(step) is not int:
            if isinstance(step, bool) or not hasattr(step, "__index__"):
                raise TypeError(f"step must be an int or None, got {type(step).__name__}")
            step = operator.index(step)  # numpy and torch integers too
        if type(when) is not float:
            if isinstance(when, bool) or not isinstance(when, (int, float)):
                raise TypeError(f"time must be a number (unix seconds) or None, got {type(when).__name__}")
            when = float(when)
        keys = self._caches.get(name)
        if keys is None:
            if len(self._caches) >= _NAMES:
                self._caches.clear()
            keys = self._caches[name] = KeyCache(name + "/", 2 * self.max_values + 64, self.quantiles, bare=True)
        if type(metrics) is not dict and not isinstance(metrics, Mapping):
            raise TypeError(f"metrics must be a mapping of numbers, got {type(metrics).__name__}")
        found: dict[str, Summary] = {}
        values, dropped = read(metrics, self.max_values, keys, found)
        points = self.points
        if len(points) >= _NAMES and name not in points:
            points.clear()
        points[name] = (step, when)
        return new_record(name, step, when, values, self.source, found or NO_DISTRIBUTIONS), dropped

    @property
    def waiting(self) -> int:
        """Pushes not yet made into records."""
        return len(self._items)

    @property
    def pushed(self) -> int:
        """Pushes so far (every call of ``push``)."""
        with self._lock:
            pushed = next(self._count) - self._reads  # next() returns how many next() calls came before
            self._reads += 1
        return pushed

    @property
    def dropped(self) -> int:
        """Pushes that never became a record (pushed out, or invalid); once pushes stop, ``records + dropped == pushed``."""
        with self._lock:
            return self._lost() + self._failed


def _pushes(count: int) -> str:
    """``"1 push dropped"``, ``"18,976 pushes dropped"``."""
    return f"{count:,} push dropped" if count == 1 else f"{count:,} pushes dropped"


def _shown(name: Any) -> str:
    """A name that is not a string, for a warning (whatever its ``repr`` does)."""
    try:
        return repr(name)[:200]
    except Exception:  # noqa: BLE001 - a repr that raises is still a name we must show
        return f"<{type(name).__name__}>"
