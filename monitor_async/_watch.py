"""One watched target: its schedule, baselines and rates, and how a snapshot becomes a Record.

The rules follow TorchRL's ``LoggerMonitor`` so that switching is invisible:
the first poll logs (or only records baselines with ``log_on_start=False``);
rates are deltas over the time since the last *logged* snapshot; a counter
decrease re-baselines without logging and never yields a negative rate.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from ._callers import Caller
from ._errors import log
from ._record import Record
from ._schedule import Every
from ._values import KeyCache, as_mapping, flatten

__all__ = ["DEFAULT_RATE_NAMES", "Watch"]

DEFAULT_RATE_NAMES: dict[str, str] = {
    "frames": "frames_per_second",
    "batches": "batches_per_second",
    "write_count": "writes_per_second",
    "worker_frames": "worker_frames_per_second",
    "sample_calls": "samples_per_second",
    "samples_returned": "samples_returned_per_second",
}


class Watch:
    """Bookkeeping for one target; :meth:`snapshot` is the per-poll hot path."""

    __slots__ = (
        "baseline",
        "baseline_time",
        "caller",
        "capped",
        "failing",
        "has_logged",
        "interval",
        "keys",
        "last_counter",
        "last_log_time",
        "log_on_close",
        "log_on_start",
        "max_values",
        "name",
        "next_threshold",
        "rate_names",
        "schedule",
        "step_key",
        "target",
        "timeout",
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
    ) -> None:
        self.target = target
        self.name = name
        self.caller = caller
        self.schedule = schedule
        self.step_key = step_key
        self.rate_names: dict[str, str] | None = (
            None
            if rate_keys is None
            else {k: DEFAULT_RATE_NAMES.get(k, f"{k}_per_second") for k in rate_keys}
        )
        self.log_on_start = log_on_start
        self.log_on_close = log_on_close
        self.interval = interval
        self.timeout = timeout
        self.max_values = max_values
        self.keys = KeyCache(name + "/")
        self.baseline: dict[str, float] = {}
        self.baseline_time: float | None = None
        self.next_threshold: float | None = None
        self.last_counter: float | None = None
        self.last_log_time: float | None = None
        self.has_logged = False
        self.failing = False
        self.capped = False

    def snapshot(self, raw: object, *, force: bool = False) -> tuple[Record | None, int]:
        """Turns one ``stats()`` result into a Record when it is due.

        Returns the record (``None`` when not due) and how many values were
        left out (non-numeric, non-finite, or over ``max_values``).
        """
        values: dict[str, float] = {}
        dropped = flatten(as_mapping(raw, self.name), values, self.max_values)
        if dropped and not self.capped and len(values) >= self.max_values:
            self._warn_capped()
        now = time.monotonic()
        first = self.baseline_time is None
        if not (force or self._due(values, now, first)):
            if first:
                self.baseline = values
                self.baseline_time = now
            return None, dropped
        keys = self.keys
        metrics = {keys[k]: v for k, v in values.items()}
        if not first:
            self._add_rates(values, metrics, now)
        step = None
        if self.step_key is not None:
            counter = values.get(self.step_key)
            if counter is not None:
                step = int(counter)
        self.baseline = values
        self.baseline_time = self.last_log_time = now
        self.has_logged = True
        return Record(self.name, step, time.time(), metrics), dropped

    def _warn_capped(self) -> None:
        self.capped = True
        log.warning(
            "stats() of watch %r gave more than max_values=%d values in one snapshot; only the first "
            "%d are kept, the rest are left out and counted in monitor.stats()['values_dropped'] "
            "(reported once per watch)",
            self.name, self.max_values, self.max_values,
        )

    def _add_rates(self, values: Mapping[str, float], metrics: dict[str, float], now: float) -> None:
        elapsed = now - self.baseline_time  # type: ignore[operator]
        if elapsed <= 0:
            return
        names = self.rate_names
        baseline = self.baseline
        keys = self.keys
        if names is None:
            for key, rate in DEFAULT_RATE_NAMES.items():
                current = values.get(key)
                if current is not None:
                    previous = baseline.get(key)
                    if previous is not None and current >= previous:
                        metrics[keys[rate]] = (current - previous) / elapsed
            return
        for key, rate in names.items():
            current = values.get(key)
            previous = baseline.get(key)
            if current is not None and previous is not None and current >= previous:
                metrics[keys[rate]] = (current - previous) / elapsed

    def _due(self, values: Mapping[str, float], now: float, first: bool) -> bool:
        schedule = self.schedule
        if first and not self.has_logged:
            if self.log_on_start:
                self._prime(values)
                return True
            if schedule is None:
                return False
        if schedule is None:
            return True
        if schedule.kind == "seconds":
            reference = self.last_log_time if self.last_log_time is not None else self.baseline_time
            return reference is not None and now - reference >= schedule.interval
        counter = values.get(schedule.key)  # type: ignore[arg-type]
        if counter is None:
            return False
        if self.next_threshold is None:
            self._prime(values)
            return False
        if self.last_counter is not None and counter < self.last_counter:
            # reset or restored state: re-baseline counters and clock, no log
            self.baseline = dict(values)
            self.baseline_time = now
            self.next_threshold = (counter // schedule.interval + 1) * schedule.interval
            self.last_counter = counter
            return False
        self.last_counter = counter
        if counter >= self.next_threshold:
            self.next_threshold = (counter // schedule.interval + 1) * schedule.interval
            return True
        return False

    def _prime(self, values: Mapping[str, float]) -> None:
        schedule = self.schedule
        if schedule is not None and schedule.kind == "counter":
            counter = values.get(schedule.key)  # type: ignore[arg-type]
            if counter is not None:
                self.next_threshold = (counter // schedule.interval + 1) * schedule.interval
                self.last_counter = counter


