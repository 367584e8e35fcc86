"""One watched target: its schedule, baselines and rates, how a snapshot becomes a Record, and its `Slots`.

The rules follow TorchRL's ``LoggerMonitor`` so that switching is invisible:
the first poll logs (or only records baselines with ``log_on_start=False``);
rates are deltas over the time since the last *logged* snapshot; a counter
decrease re-baselines without logging and never yields a negative rate.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from time import monotonic as _monotonic
from time import time as _time
from typing import TYPE_CHECKING, Any

from .._core.distribution import DEFAULT_QUANTILES, Summary
from .._core.names import rate_names
from .._core.policy import log
from .._core.record import EMPTY_SOURCE, NO_DISTRIBUTIONS, Record, Source, new_record
from .._core.schedule import Every
from .._core.values import Flattened, KeyCache, read, read_plain
from .callers import Caller

if TYPE_CHECKING:
    from .counters import Counters

__all__ = ["Slots", "Watch"]

_NO_COUNTERS: dict[str, float] = {}
"""The baseline of a watch with no counters to derive rates from (shared: a baseline is never changed)."""


class Slots:
    """Where one watch stands in background polling: its k-th slot is ``origin + k * interval``.

    Args:
        interval: seconds between two slots (the watch's poll interval).
    """

    __slots__ = ("due", "interval", "origin", "running", "slot", "waiter")

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.origin = 0.0
        self.slot = 0
        self.due = 0.0  # the slot it waits for now
        self.running = False  # polled by a background task
        self.waiter: asyncio.Future[Any] | None = None  # what its task awaits while the timers poll it

    def start(self, origin: float) -> None:
        """Background polling starts at ``origin``: slots a blocked loop misses from then on count (see `first`)."""
        self.origin = self.due = origin
        self.slot = 0
        self.running = True

    def first(self, origin: float, counters: Counters) -> float:
        """Its task's first slot, at ``origin`` (its group's, see `Ticks.origin`); returns it.

        The slots between `start` and ``origin`` that a blocked loop let go by are missed (``polls_missed``).
        """
        late = origin - self.origin
        if late >= self.interval:
            counters.polls_missed += int(late // self.interval)
        self.origin = self.due = origin
        self.slot = 0
        return origin

    def stop(self) -> None:
        """Background polling ended (``stop()``, or the loop went away)."""
        self.running = False

    def book(self, when: float) -> None:
        """The slot it waits for now is at ``when``."""
        self.due = when

    def wait(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Any]:
        """The future its task awaits while the timers poll it (a new one once the last is done)."""
        waiter = self.waiter
        if waiter is None or waiter.done():
            waiter = self.waiter = loop.create_future()
        return waiter

    def advance(self, now: float, counters: Counters) -> float:
        """The next slot after a poll that ended at ``now``; slots already past are missed (``polls_missed``).

        Slots are ``origin + k * interval``, computed not summed, so watches of one origin share due times exactly.
        """
        interval = self.interval
        slot = self.slot + 1
        due = self.origin + slot * interval
        if now > due:
            missed = int((now - due) // interval) + 1
            counters.polls_missed += missed
            slot += missed
            due = self.origin + slot * interval
        self.slot = slot
        return due

    def missed(self, now: float) -> int:
        """The slots past at ``now`` that no poll took (a loop blocked until ``stop()``)."""
        late = now - self.due
        return int(late // self.interval) if late > self.interval else 0


class Watch(Slots):
    """Bookkeeping for one target; ``snapshot`` is the per-poll hot path.

    Values are namespaced as they are read (``"<name>/<key>"``, through the
    watch's ``KeyCache`` ``keys``), so the dict built by one poll is the
    record's ``metrics`` as is. Where the watch stands in background polling
    is its `Slots`' (``slots``); its caller changes only through `swap_caller`. The rate and
    schedule keys are namespaced once here; the baseline keeps only the
    counters rates are derived from, in a small dict of its own, so a sink or
    a caller of ``step()`` changing a record's metrics cannot change a rate.
    """

    # the fields every background poll reads come first, so that they share a few cache lines
    # (with 10,000 watches, each poll finds its watch's memory cold)
    __slots__ = (  # noqa: RUF023 - ordered by use, not by name
        "caller",
        "plain",
        "baseline_time",
        "keys",
        "max_values",
        "slots",
        "step_key",
        "rates_seen",
        "rates_live",
        "baseline",
        "last_log_time",
        "has_logged",
        "last_step",
        "name",
        "source",
        "failing",
        "capped",
        "counter_key",
        "last_counter",
        "log_on_close",
        "log_on_start",
        "next_log",
        "next_threshold",
        "rate_pairs",
        "rates_overlap",
        "schedule",
        "target",
        "timeout",
        "warned_key",
        "unlogged",
        "on_record",
        "resumed_step",
        "moved",
        "latest",
    )

    def __init__(
        self,
        *,
        target: object,
        name: str,
        caller: Caller,
        schedule: Every | None,
        step_key: str | None,
        rate_keys: tuple[str, ...] | None,
        log_on_start: bool,
        log_on_close: bool,
        interval: float,
        timeout: float,
        max_values: int,
        source: Source = EMPTY_SOURCE,
        on_record: Callable[[Record], None] | None = None,
        quantiles: tuple[float, ...] | None = DEFAULT_QUANTILES,
    ) -> None:
        self.target = target
        self.source = source  # Record.source of every record (the rank, in a job of several)
        self.name = name
        self.caller = caller
        self.schedule = schedule
        self.log_on_start = log_on_start
        self.log_on_close = log_on_close
        self.interval = interval
        self.timeout = timeout
        self.max_values = max_values
        # the snapshot keys seen so far (room for them all: a snapshot of known keys never clears it)
        prefix = name + "/"
        self.keys = KeyCache(prefix, 2 * max_values + 64, quantiles)  # quantiles None: no distributions
        names = rate_names(rate_keys)
        self.rate_pairs: tuple[tuple[str, str], ...] = tuple(
            (prefix + key, prefix + rate) for key, rate in names.items()
        )
        # a rate named like another rate's counter (rate_keys=["x", "x_per_second"]) must not be
        # read back as that counter: such watches read every counter before adding any rate
        self.rates_overlap = bool({rate for _, rate in self.rate_pairs} & {key for key, _ in self.rate_pairs})
        # the pairs whose counter this target has reported so far, and ``added`` (key cache) when they
        # were found: a snapshot of known keys checks only those, not every default counter name
        self.rates_live: tuple[tuple[str, str], ...] = ()
        self.rates_seen = -1
        self.step_key = None if step_key is None else prefix + step_key
        self.counter_key = (
            prefix + schedule.key if schedule is not None and schedule.kind == "counter" and schedule.key else None
        )
        self.baseline: dict[str, float] = {}
        self.baseline_time: float | None = None
        self.next_threshold: float | None = None
        self.next_log: float | None = None  # Every.seconds: the next time on its grid
        self.warned_key = False
        # where the watch stands in background polling (its `Slots` part, no object of its own for the
        # garbage collector to walk); while it runs, rates over less than half the interval are left out
        Slots.__init__(self, interval)
        self.slots: Slots = self
        self.on_record = on_record  # called with each record logged (a reduction member publishes it)
        self.last_counter: float | None = None
        self.last_log_time: float | None = None
        self.has_logged = False
        self.last_step: int | None = None  # the step of the last record logged
        self.failing = False
        self.capped = False
        self.unlogged: dict[str, float] | None = None  # the values of the last poll the schedule did not log
        self.resumed_step: int | None = None  # a resumed launch: the step this watch had at the checkpoint
        self.moved: dict[str, float] | None = None
        """When each counter last changed (``monotonic()`` of the record), once a stalled rule reads it (`note_moves`)."""
        self.latest: Mapping[str, float] = _NO_COUNTERS  # the metrics of the last record logged, while ``moved`` is kept
        # no schedule, no rate named like a counter, no record hook: the fast read may take the poll
        self.plain = schedule is None and not self.rates_overlap and on_record is None
        # a thread-offloaded stats() is flattened on its worker thread (see prepare)
        caller.owner = self

    def snapshot(self, raw: object, *, force: bool = False) -> tuple[Record | None, int]:
        """Turns one ``stats()`` result into a Record when it is due.

        Returns the record (``None`` when not due) and how many values were
        left out (non-numeric, non-finite, or over ``max_values``).
        """
        since = self.baseline_time
        if self.plain and not force and type(raw) is dict:
            record = self.fast(raw)
            if record is not None:
                return record, 0
        # a thread-offloaded target's result comes flattened already (see prepare)
        found: dict[str, Summary] = {}
        metrics, dropped = read(raw, self.max_values, self.keys, found)
        dists = found or NO_DISTRIBUTIONS
        if dropped and not self.capped and len(metrics) >= self.max_values:
            self._warn_capped()
        now = _monotonic()
        # no schedule and not the first poll: always due (the common case, without a call)
        if not (force or (since is not None and self.schedule is None) or self._due(metrics, now, since is None)):
            if since is None:
                self._rebase(self._counters(metrics), metrics, now)
                self.baseline_time = now
            self.unlogged = metrics
            return None, dropped
        step = None if self.step_key is None else self._step(metrics)
        if step is not None and step == self.resumed_step and not self.has_logged:
            # a resumed watch back at its checkpoint's step: the launch it resumes logged that step
            # (one value per step); the baseline starts here, so the first rate is within this launch
            self.resumed_step = None
            self._rebase(self._counters(metrics), metrics, now)
            self.baseline_time = now
            self.unlogged = metrics
            return None, dropped
        if force and step is not None and step == self.last_step and self.has_logged:
            # the final snapshot of a step already logged: a second row of one step (TensorBoard and
            # wandb keep one value per step) would only repeat it
            return None, dropped
        self.last_step = step
        if since is not None and now - since < 0.5 * self.interval and (force or self.running):
            # a rate over a sliver of time (the final snapshot right after the last poll) is noise:
            # left out, and the baseline kept, so the next rate spans the whole time since it
            self.last_log_time = now
            self.has_logged = True
            return self._out(new_record(self.name, step, _time(), metrics, self.source, dists)), dropped
        if since is not None and now > since and not self.rates_overlap:
            return self._out(self._logged(metrics, now, since, step, dists)), dropped
        counters = self._counters(metrics)
        if since is not None and now > since:
            self._add_rates(counters, metrics, now - since)
        self._rebase(counters, metrics, now)
        self.baseline_time = self.last_log_time = now
        self.has_logged = True
        self.last_step = step
        return self._out(new_record(self.name, step, _time(), metrics, self.source, dists)), dropped

    def _out(self, record: Record) -> Record:
        """A record this watch logs, shown to its record hook first (if any)."""
        if self.on_record is not None:
            self.on_record(record)
        return record

    def fast(self, raw: dict[Any, Any]) -> Record | None:
        """The record of the common background poll in one piece, or ``None``: `snapshot` reads it in full.

        The common poll: a plain watch past its first poll whose ``stats()``
        gave a dict that `read_plain` reads (known keys, finite numbers).
        """
        since = self.baseline_time
        if since is None:
            return None
        metrics = read_plain(raw, self.keys, self.max_values)
        if metrics is None:
            return None
        now = _monotonic()
        if now <= since or (self.running and now - since < 0.5 * self.interval):
            return None
        return self._logged(metrics, now, since, None if self.step_key is None else self._step(metrics))

    def swap_caller(self, old: Caller, new: Caller) -> bool:
        """Puts ``new`` in the place of ``old`` (a dead target resting or revived, a move to a thread).

        ``False``, changing nothing, when ``old`` is not the caller any more.
        """
        if self.caller is not old:
            return False
        self.caller = new
        return True

    def take_unlogged(self) -> dict[str, float] | None:
        """The values of the last poll its schedule did not log (once; ``None`` after)."""
        unlogged, self.unlogged = self.unlogged, None
        return unlogged

    def _step(self, metrics: Mapping[str, float]) -> int | None:
        """The step a snapshot gives (``watch(step=...)``): its ``step_key`` value as an int, if it has one."""
        key = self.step_key
        counter = None if key is None else metrics.get(key)
        return None if counter is None else int(counter)

    def _logged(
        self, metrics: dict[str, float], now: float, since: float, step: int | None,
        dists: Mapping[str, Summary] = NO_DISTRIBUTIONS,
    ) -> Record:
        """The record of a snapshot past the first poll, ``now - since`` after the last one logged.

        One pass over the counters this target reports: each is kept as the
        next baseline and, when it did not go down, its rate is added to
        ``metrics``.
        """
        if self.keys.added != self.rates_seen:
            self._find_rates()
        counters = _NO_COUNTERS
        moved = self.moved
        if self.rates_live:
            counters = {}
            elapsed = now - since
            baseline = self.baseline
            for key, rate in self.rates_live:
                current = metrics.get(key)
                if current is not None:
                    counters[key] = current
                    previous = baseline.get(key)
                    if previous is not None and current >= previous:
                        metrics[rate] = (current - previous) / elapsed
                    if moved is not None and current != previous:
                        moved[key] = now
        if moved is not None:
            self.latest = metrics
        self.baseline = counters
        self.baseline_time = self.last_log_time = now
        self.has_logged = True
        self.last_step = step
        return new_record(self.name, step, _time(), metrics, self.source, dists)

    def prepare(self, raw: Any) -> Any:
        """On a worker thread: a mapping ``stats()`` returned, flattened there (``snapshot`` takes it as is).

        Copying and flattening a lazy mapping (one slow read per key) then
        costs that thread, never the event loop. Anything else (an awaitable,
        a result that is not a mapping) is returned as it is, for the loop.
        At most one call of a watch is in flight, so the key cache is never
        used by two threads at once.
        """
        if type(raw) is dict or isinstance(raw, Mapping):
            found: dict[str, Summary] = {}
            metrics, dropped = read(raw, self.max_values, self.keys, found)
            return Flattened(metrics, dropped, raw if dropped else None, found or None)
        return raw

    def _find_rates(self) -> None:
        added = self.keys.added  # read first: a key added meanwhile makes the next snapshot look again
        seen = set(self.keys.names.values())
        self.rates_live = tuple(pair for pair in self.rate_pairs if pair[0] in seen)
        self.rates_seen = added

    def note_moves(self, key: str) -> bool:
        """Keeps, from now on, when each counter last changed (``moved``) and the last record's metrics (``latest``).

        What a stalled rule on counter ``key`` (namespaced) of this watch
        reads at the timer's looks instead of each record. ``False`` (nothing
        kept) when ``key`` is not one of its rates' counters, or the watch has
        a schedule or rates that overlap its counters: its records then do
        not all pass through the counters' one pass.
        """
        if self.schedule is not None or self.rates_overlap or all(key != counter for counter, _ in self.rate_pairs):
            return False
        if self.moved is None:
            self.moved = {}
        return True

    def _rebase(self, counters: dict[str, float], metrics: Mapping[str, float], now: float) -> None:
        """Keeps ``counters`` as the next rates' baseline (and, when `note_moves` asked, when each changed)."""
        moved = self.moved
        if moved is not None:
            old = self.baseline
            for key, value in counters.items():
                if old.get(key) != value:
                    moved[key] = now
            self.latest = metrics
        self.baseline = counters

    def _counters(self, metrics: Mapping[str, float]) -> dict[str, float]:
        """The values rates are derived from (read before any rate is added)."""
        return {key: value for key, _ in self.rate_pairs if (value := metrics.get(key)) is not None}

    def _warn_capped(self) -> None:
        self.capped = True
        log.warning(
            "stats() of watch %r gave more than max_values=%d values in one snapshot; only the first "
            "%d are kept, the rest are left out and counted in monitor.stats()['values_dropped'] "
            "(reported once per watch)",
            self.name, self.max_values, self.max_values,
        )

    def _add_rates(self, counters: Mapping[str, float], metrics: dict[str, float], elapsed: float) -> None:
        baseline = self.baseline
        for key, rate in self.rate_pairs:
            current = counters.get(key)
            if current is not None:
                previous = baseline.get(key)
                if previous is not None and current >= previous:
                    metrics[rate] = (current - previous) / elapsed

    def _due(self, values: Mapping[str, float], now: float, first: bool) -> bool:
        schedule = self.schedule
        if first and not self.has_logged:
            if self.log_on_start:
                self._prime(values, now)
                return True
            if schedule is None:
                return False
        if schedule is None:
            return True
        if schedule.kind == "seconds":
            # on a grid: the k-th log is due at t0 + k * interval; due times missed are skipped
            due = self.next_log
            if due is None:  # the first poll of a watch that does not log at start: t0
                self.next_log = now + schedule.interval
                return False
            if now < due:
                return False
            self.next_log = due + ((now - due) // schedule.interval + 1) * schedule.interval
            return True
        counter = values.get(self.counter_key)  # type: ignore[arg-type]
        if counter is None:
            if not self.warned_key:
                self._warn_key(values)
            return False
        if self.next_threshold is None:
            self._prime(values, now)
            return False
        if self.last_counter is not None and counter < self.last_counter:
            # reset or restored state: re-baseline counters and clock, no log
            self.baseline = self._counters(values)
            self.baseline_time = now
            self.next_threshold = (counter // schedule.interval + 1) * schedule.interval
            self.last_counter = counter
            return False
        self.last_counter = counter
        if counter >= self.next_threshold:
            self.next_threshold = (counter // schedule.interval + 1) * schedule.interval
            return True
        return False

    def _prime(self, values: Mapping[str, float], now: float) -> None:
        schedule = self.schedule
        if schedule is None:
            return
        if schedule.kind == "seconds":
            self.next_log = now + schedule.interval
            return
        counter = values.get(self.counter_key)  # type: ignore[arg-type]
        if counter is not None:
            self.next_threshold = (counter // schedule.interval + 1) * schedule.interval
            self.last_counter = counter
        elif not self.warned_key:
            self._warn_key(values)

    def _warn_key(self, values: Mapping[str, float]) -> None:
        """Once per watch: the counter schedule's key is not in the snapshot (a typo, most likely)."""
        self.warned_key = True
        prefix = len(self.keys.prefix)
        keys = sorted(key[prefix:] for key in values)
        shown = ", ".join(repr(k) for k in keys[:20]) + (f" and {len(keys) - 20} more" if len(keys) > 20 else "")
        assert self.schedule is not None
        log.warning(
            "watch %r: the counter key %r of its schedule Every.counter(%r, %g) is not in its snapshot, "
            "so it logs only at start and stop; the snapshot's keys are %s (reported once per watch)",
            self.name, self.schedule.key, self.schedule.key, self.schedule.interval, shown or "none",
        )


