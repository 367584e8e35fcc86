"""How alert rules are evaluated: one tracker per rule, watch (or key) and source, on the monitor's loop.

``Engine`` sees every record the fan-out hands on (``Engine.observe``),
the polls that logged nothing and the snapshots that left values out (the
poller calls it then, never on the fast path), each rank's values on a
reduction's board (``Engine.board``), and runs a timer of its own
(at least every ``min(after / 4, 1 s, poll interval)``), so a rule fires
even when its target never answers. Time is the monitor's running time: it
stands still while the monitor is stopped. ``LoopLag`` notices a blocked
loop. What the rules are is ``monitor_async._core.alerts``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from fnmatch import translate
from functools import partial
from typing import Any

from .._core.alerts import Alert, AlertEvent
from .._core.alerts import is_pattern as _is_pattern
from .._core.exceptions import ConfigError
from .._core.policy import describe, log
from .._core.record import EMPTY_SOURCE, Record, Source
from .._core.values import nonfinite_values
from .notify import Notifier, log_event

__all__ = ["Engine", "LoopLag"]

_MATCHERS: dict[str, Callable[[str], Any]] = {}


def fnmatchcase(name: str, pattern: str) -> bool:
    """`fnmatch.fnmatchcase`, with each pattern compiled once (a crowd of watches is matched against few rules)."""
    match = _MATCHERS.get(pattern)
    if match is None:
        rest = pattern[1:]
        if pattern == "*":
            match = _MATCHERS[pattern] = _anything
        elif pattern.startswith("*") and not _is_pattern(rest):  # "*/frames": a suffix, the common rule
            match = _MATCHERS[pattern] = rest.__eq__ if not rest else functools.partial(_ends, rest)
        else:
            match = _MATCHERS[pattern] = re.compile(translate(pattern)).match
    return bool(match(name))


def _anything(name: str) -> bool:
    return True


def _ends(suffix: str, name: str) -> bool:
    return name.endswith(suffix)


is_pattern = functools.cache(_is_pattern)

_FLOOR = 0.02
"""The shortest period of the rules' timer (seconds)."""


def _clock_text(unix: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(unix))


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def _value_text(value: float | None) -> str:
    if value is None:
        return "none"
    return f"{value:g}"


class Track:
    """One rule for one watch (or key) and source: whether it fires, since when, the last value."""

    __slots__ = ("engine", "event", "firing", "metric", "rule", "since", "source", "value", "watch")

    def __init__(self, engine: Engine, rule: Alert, watch: str, metric: str | None, source: Mapping[str, Any]) -> None:
        self.engine = engine
        self.rule = rule
        self.watch = watch
        self.metric = metric
        self.source = source
        self.firing = False
        self.since = engine.clock()
        self.value: float | None = None
        self.event: AlertEvent | None = None

    def update(self, metrics: Mapping[str, float], now: float) -> None:
        """A snapshot of the watch (its full keys)."""

    def check(self, now: float) -> None:
        """The timer's look: fire when the condition has held long enough."""

    def fire(self, since: float, message: str) -> None:
        if not self.firing:
            self.firing = True
            self.engine.emit(self, "firing", since, message)

    def resolve(self, message: str) -> None:
        if self.firing:
            self.firing = False
            self.engine.emit(self, "resolved", self.since, message)

    @property
    def where(self) -> str:
        rank = self.source.get("rank") if self.source else None
        return "" if rank is None else f" on rank {rank}"


class Stalled(Track):
    """``Alert.stalled``: the key has not increased for ``after`` seconds."""

    __slots__ = ("after", "held", "last_increase", "unless")

    def __init__(self, engine: Engine, rule: Alert, watch: str, metric: str, source: Mapping[str, Any], after: float) -> None:
        super().__init__(engine, rule, watch, metric, source)
        self.after = after
        self.last_increase = self.since
        self.held = False
        unless = rule.unless
        self.unless = None if unless is None else unless if unless.startswith(watch + "/") else f"{watch}/{unless}"

    def update(self, metrics: Mapping[str, float], now: float) -> None:
        value = metrics.get(self.metric)  # type: ignore[arg-type]
        if self.unless is not None:
            self.held = bool(metrics.get(self.unless))
            if self.held and self.firing:
                self.resolve(f"{self.metric}{self.where}: {self.unless} is set, the stall is expected")
        if value is None:
            return
        last = self.value
        if last is None or value != last:  # an increase, or a decrease (a reset): movement either way
            self.value = value
            self.last_increase = now
            if self.firing:
                self.resolve(f"{self.metric}{self.where} moves again (now {_value_text(value)})")
        elif not self.firing:
            self.check(now)

    def check(self, now: float) -> None:
        if not self.firing and not self.held and self.value is not None and now - self.last_increase >= self.after:
            self.since = self.last_increase
            at = self.engine.unix(self.last_increase)
            self.fire(self.last_increase, (
                f"{self.metric}{self.where} has not increased for {_seconds(now - self.last_increase)} "
                f"(last value {_value_text(self.value)} at {_clock_text(at)})"
            ))


class Quiet(Track):
    """``Alert.quiet`` for a pushed name or a rank: no push (or no new snapshot on the board) for ``after`` seconds.

    The watches of this process are :class:`QuietWatches`'s.
    """

    __slots__ = ("after", "last")

    def __init__(self, engine: Engine, rule: Alert, watch: str, source: Mapping[str, Any], after: float) -> None:
        super().__init__(engine, rule, watch, None, source)
        self.after = after
        self.last = self.since

    def update(self, metrics: Mapping[str, float], now: float) -> None:
        self.last = now
        if self.firing:
            self.resolve(f"{self.watch}{self.where} answers again")

    def check(self, now: float) -> None:
        if not self.firing and now - self.last >= self.after:
            self.since = self.last
            self.fire(self.last, f"{self.watch}{self.where} has not answered for {_seconds(now - self.last)} "
                                 f"(no successful poll or push since {_clock_text(self.engine.unix(self.last))})")


class QuietWatches:
    """``Alert.quiet`` for the watches of this process: one object per rule, whatever the number of watches.

    The time of each watch's last logged snapshot is read from the watch at
    each look of the timer (nothing is done per poll); a poll that logged
    nothing is told through :meth:`saw`. Per watch it keeps only floats in a
    few dicts (no object per watch for the garbage collector to walk); a
    :class:`Quiet` is made for a watch while it fires.
    """

    def __init__(self, engine: Engine, rule: Alert) -> None:
        self.engine = engine
        self.rule = rule
        self.members: dict[str, Any] = {}  # name: its Watch (last_log_time: monotonic, or None)
        self.after: dict[str, float] = {}
        self.last: dict[str, float] = {}  # running time of the last success seen
        self.firing: dict[str, Quiet] = {}
        self.due = math.inf  # the earliest time a watch could be quiet, as of the last full pass

    def join(self, name: str, watch: Any, after: float) -> None:
        self.members[name] = watch
        self.after[name] = after
        self.last[name] = now = self.engine.clock()
        self.due = min(self.due, now + after)

    def leave(self, name: str) -> None:
        for table in (self.members, self.after, self.last):
            table.pop(name, None)
        track = self.firing.pop(name, None)
        if track is not None:
            track.resolve(f"watch {name!r} was removed")

    def saw(self, name: str, now: float) -> None:
        if name in self.last:
            self.last[name] = now
            track = self.firing.pop(name, None)
            if track is not None:
                track.update({}, now)
                self.due = min(self.due, now + self.after[name])

    def sync(self) -> None:
        """Reads each watch's last logged snapshot (monotonic) into running time (before the clock stops)."""
        self.check(None)

    def check(self, now: float | None) -> None:
        """The timer's look: a full pass only once the earliest watch could be quiet, else the firing ones.

        A full pass reads each watch's last logged snapshot, fires those quiet
        too long, and notes the earliest time another could be (``due``):
        healthy watches cost one pass per ``after`` seconds, not one per look.
        """
        if now is not None and now < self.due:
            if self.firing:
                self._firing_pass()
            return
        offset = self.engine.offset
        last, after, firing = self.last, self.after, self.firing
        due = math.inf
        for name, watch in self.members.items():
            since = last[name]
            at = watch.last_log_time
            if at is not None and at - offset > since:  # a snapshot before the last stop() maps earlier: ignored
                since = last[name] = at - offset
                if firing and name in firing:
                    firing.pop(name).update({}, since)
            if name in firing:
                continue
            deadline = since + after[name]
            if now is not None and now >= deadline:
                track = firing[name] = Quiet(self.engine, self.rule, name, self.engine.source, after[name])
                track.last = since
                track.check(now)
            elif deadline < due:
                due = deadline
        self.due = due

    def _firing_pass(self) -> None:
        offset = self.engine.offset
        for name in list(self.firing):
            at = self.members[name].last_log_time
            if at is not None and at - offset > self.last[name]:
                self.last[name] = at - offset
                self.firing.pop(name).update({}, at - offset)
                self.due = min(self.due, at - offset + self.after[name])


class Threshold(Track):
    """``Alert.above`` / ``Alert.below``: the latest value beyond the threshold for ``after`` seconds."""

    __slots__ = ("after", "beyond", "threshold")

    def __init__(self, engine: Engine, rule: Alert, watch: str, metric: str, source: Mapping[str, Any]) -> None:
        super().__init__(engine, rule, watch, metric, source)
        self.after = float(rule.after or 0.0)
        assert rule.threshold is not None
        self.threshold = rule.threshold
        self.beyond: float | None = None  # since when the value is beyond the threshold

    def update(self, metrics: Mapping[str, float], now: float) -> None:
        value = metrics.get(self.metric)  # type: ignore[arg-type]
        if value is None:
            return
        self.value = value
        out = value > self.threshold if self.rule.kind == "above" else value < self.threshold
        if not out:
            self.beyond = None
            if self.firing:
                self.resolve(f"{self.metric}{self.where} is back at {_value_text(value)}")
            return
        if self.beyond is None:
            self.beyond = now
        self.check(now)

    def check(self, now: float) -> None:
        if not self.firing and self.beyond is not None and now - self.beyond >= self.after:
            self.since = self.beyond
            self.fire(self.beyond, f"{self.metric}{self.where} is {_value_text(self.value)}, {self.rule.kind} "
                                   f"{self.threshold:g}" + (f" for {_seconds(now - self.beyond)}" if self.after else ""))


class Nonfinite(Track):
    """``Alert.nonfinite`` for one key: fired by a re-scan, resolved by the key's next finite value."""

    __slots__ = ()

    def update(self, metrics: Mapping[str, float], now: float) -> None:
        if self.firing and self.metric in metrics:
            self.value = metrics[self.metric]  # type: ignore[index]
            self.resolve(f"{self.metric}{self.where} is finite again ({_value_text(self.value)})")


class Unhealthy(Track):
    """``Alert.unhealthy``: ``target.health()`` on a thread of its own, every poll interval, under a timeout."""

    __slots__ = ("asked", "health", "interval", "next_at")

    def __init__(self, engine: Engine, rule: Alert, watch: str, health: Callable[[], Any], interval: float) -> None:
        super().__init__(engine, rule, watch, None, engine.source)
        self.health = health
        self.interval = interval
        self.next_at = self.since
        self.asked: float | None = None  # when the call in flight started

    def check(self, now: float) -> None:
        asked = self.asked
        if asked is not None:
            if now - asked >= self.rule.timeout:
                self.fire(asked, f"health() of watch {self.watch!r} did not answer within {self.rule.timeout:g} s")
            return
        if now < self.next_at:
            return
        loop = self.engine.loop
        if loop is None:
            return
        self.asked = now
        health = self.health

        def work() -> None:
            try:
                result: Any = health()
                error: BaseException | None = None
            except BaseException as exc:  # noqa: BLE001 - a failing health() is what the rule reports
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is left to tell
                loop.call_soon_threadsafe(self.answer, result, error)

        threading.Thread(target=work, name=f"monitor-async health {self.watch}", daemon=True).start()

    def answer(self, report: Any, error: BaseException | None) -> None:
        if self.engine.paused:
            self.asked = None
            return
        now = self.engine.clock()
        since = self.asked if self.asked is not None else now
        self.asked = None
        self.next_at = now + self.interval
        trouble = f"health() raised {describe(error)}" if error is not None else _trouble(report)
        if trouble is None:
            self.resolve(f"health() of watch {self.watch!r} reports healthy again")
        else:
            self.fire(since, f"watch {self.watch!r} is unhealthy: {trouble}")


def _trouble(report: Any) -> str | None:
    """What is wrong in a ``health()`` report (a mapping or an object), or ``None``."""

    def field(name: str) -> Any:
        if isinstance(report, Mapping):
            return report.get(name)
        return getattr(report, name, None)

    if field("process_alive") is False:
        return f"process_alive=False (pid {field('pid')}, exitcode {field('exitcode')})"
    exitcode = field("exitcode")
    if exitcode not in (None, 0):
        return f"exitcode={exitcode}"
    error = field("control_error")
    if error:
        return f"control_error={error!r}"
    return None


class Engine:
    """Every rule of one monitor, its trackers, the events firing now, and where events go."""

    def __init__(
        self,
        rules: Iterable[Alert],
        notify: Sequence[Callable[[AlertEvent], Any]],
        notify_timeout: float,
        deliver: Callable[[AlertEvent], None],
        source: Mapping[str, Any] = EMPTY_SOURCE,
    ) -> None:
        self.rules: list[Alert] = []
        self.deliver = deliver  # to the sinks, through their bounded, counted channels
        self.source = source
        self.notify_timeout = notify_timeout
        self.counts = {"alerts_fired": 0, "notify_errors": 0, "notify_skipped": 0}
        self.notifiers: dict[int, Notifier] = {}
        self.monitor_notify = [self._notifier(fn) for fn in notify]
        self.watches: dict[str, float] = {}  # name: poll interval
        self.watch_objects: dict[str, Any] = {}  # name: its Watch (target, last logged snapshot)
        self.quiet_groups: dict[str, QuietWatches] = {}  # a quiet rule's name: its watches
        self.idle: dict[str, int] = {}
        """Record names no tracker wants, with their snapshot size then: the fan-out skips those records."""
        self.ignored: set[str] = set()  # reduced watches another rank (the main one) evaluates
        self.bound: dict[str, tuple[int, list[Track]]] = {}  # record name: (its size then, its trackers)
        self.tracks: dict[tuple[str, str, str | None, tuple[Any, ...]], Track] = {}
        self.timed: dict[Track | QuietWatches, None] = {}  # the trackers the timer looks at, in order (QuietWatches too)
        self.targets: dict[str, Any] = {}
        self.nonfinite_of: dict[str, list[Track]] = {}  # a name's nonfinite trackers, resolved by its records
        self.warned: set[str] = set()
        self.board_seq: dict[tuple[str, int], int] = {}
        self.firing_now: dict[int, AlertEvent] = {}
        self.blocked_track: Track | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[None] | None = None
        self.offset = 0.0  # running time = monotonic() - offset
        self.paused_at: float | None = time.monotonic()  # stopped (or never started) since
        self.scan_nonfinite = False
        for rule in rules:
            self.add(rule)

    # ------------------------------------------------------------------ time
    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def clock(self) -> float:
        """The monitor's running time (seconds): it stands still while the monitor is stopped."""
        paused = self.paused_at
        return (time.monotonic() if paused is None else paused) - self.offset

    def unix(self, at: float) -> float:
        """The unix time of running time ``at``."""
        return time.time() - (self.clock() - at)

    def resume(self) -> None:
        if self.paused_at is not None:
            self.offset += time.monotonic() - self.paused_at
            self.paused_at = None

    def pause(self) -> None:
        if self.paused_at is None:
            for group in self.quiet_groups.values():  # the last logged snapshots, read before time stops
                group.sync()
            self.paused_at = time.monotonic()

    # ----------------------------------------------------------------- rules
    @property
    def active(self) -> bool:
        return bool(self.rules)

    def add(self, rule: Alert) -> None:
        """Adds a rule; checks it against every watch it concerns (``ConfigError`` names both)."""
        if not isinstance(rule, Alert):
            raise ConfigError(f"alerts: expected monitor_async.Alert rules, got {rule!r}")
        for name, interval in self.watches.items():
            if self.concerns(rule, name):
                rule.check_watch(name, interval)
        if any(r.name == rule.name and r.kind == rule.kind and r.target == rule.target for r in self.rules):
            return
        self.rules.append(rule)
        if rule.kind == "nonfinite":
            self.scan_nonfinite = True
        if rule.kind == "quiet":
            group = self.quiet_groups[rule.name] = QuietWatches(self, rule)
            self.timed[group] = None
        for name, interval in self.watches.items():
            self._track_watch(rule, name, interval, self.watch_objects.get(name))
        self.idle.clear()  # every name is bound again, this rule included
        if rule.kind == "quiet" and not is_pattern(rule.target) and rule.target not in self.watches:
            assert rule.after is not None
            name = rule.target  # a pushed name (or a watch still to come): quiet from now on
            make = partial(Quiet, self, rule, name, self.source, rule.after)
            self._timed(self._get(rule, name, None, self.source, make))
        if rule.kind == "blocked":
            self.blocked_track = self.blocked_track or Track(self, rule, "loop", None, self.source)
        self.bound.clear()  # records bind their trackers again, this rule included

    @staticmethod
    def concerns(rule: Alert, watch: str) -> bool:
        """Whether ``rule`` is about watch ``watch`` (its name, or the watch part of its metric)."""
        target = rule.target
        if rule.kind in ("quiet", "unhealthy"):
            return fnmatchcase(watch, target)
        if rule.kind == "blocked":
            return False
        if is_pattern(target):
            return fnmatchcase(watch + "/x", target) or fnmatchcase(watch, target.rpartition("/")[0])
        return target.startswith(watch + "/")

    def check_watch(self, name: str, interval: float) -> None:
        """Raises ``ConfigError`` if a rule cannot hold for this new watch (before it is registered)."""
        for rule in self.rules:
            if self.concerns(rule, name):
                rule.check_watch(name, interval)

    def add_watch(self, name: str, interval: float, target: Any, watch: Any = None) -> None:
        """A watch was registered: its quiet and unhealthy trackers start now.

        ``watch`` (the `Watch`) lets ``quiet`` read the time of its last logged snapshot.
        """
        self.watches[name] = interval
        self.watch_objects[name] = watch
        self.targets[name] = target
        for rule in self.rules:
            self._track_watch(rule, name, interval, watch)

    def ignore(self, name: str) -> None:
        """Rules about ``name`` are evaluated elsewhere (a reduced watch, on the main rank)."""
        self.remove_watch(name)
        self.ignored.add(name)

    def remove_watch(self, name: str) -> None:
        self.watches.pop(name, None)
        self.watch_objects.pop(name, None)
        self.targets.pop(name, None)
        for group in self.quiet_groups.values():
            group.leave(name)
        self.bound.pop(name, None)
        self.idle.pop(name, None)
        self.nonfinite_of.pop(name, None)
        for key in [k for k, t in self.tracks.items() if t.watch == name]:
            track = self.tracks.pop(key)
            self.timed.pop(track, None)
            if track.firing:
                track.resolve(f"watch {name!r} was removed")

    def _track_watch(self, rule: Alert, name: str, interval: float, watch: Any) -> None:
        if not self.concerns(rule, name):
            return
        target = self.targets.get(name)
        if rule.kind == "quiet":
            after = rule.after if rule.after is not None else max(10 * interval, 30.0)
            pushed = self.tracks.pop((rule.name, name, None, tuple(sorted(self.source.items()))), None)
            if pushed is not None:  # the rule named it before it was a watch
                self.timed.pop(pushed, None)
            if watch is not None:
                self.quiet_groups[rule.name].join(name, watch, after)
        elif rule.kind == "unhealthy":
            health = getattr(target, "health", None)
            if not callable(health):
                if not is_pattern(rule.target):
                    raise ConfigError(
                        f"alert rule {rule.name!r}: watch {name!r} has no health() method (parameter watch)"
                    )
                return
            self._timed(self._get(rule, name, None, self.source, partial(Unhealthy, self, rule, name, health, interval)))

    def _get(self, rule: Alert, watch: str, metric: str | None, source: Mapping[str, Any], make: Callable[[], Track]) -> Track:
        key = (rule.name, watch, metric, tuple(sorted(source.items())) if source else ())
        track = self.tracks.get(key)
        if track is None:
            track = self.tracks[key] = make()
        return track

    def _timed(self, track: Track) -> None:
        if track not in self.timed:
            self.timed[track] = None

    def period(self) -> float:
        """How often the timer looks: ``min(after / 4, 1 s, the shortest poll interval)``, at least 20 ms."""
        period = 1.0
        for rule in self.rules:
            if rule.after and rule.kind != "blocked":  # a blocked loop is LoopLag's to notice
                period = min(period, rule.after / 4)
        for interval in self.watches.values():
            period = min(period, interval)
        return max(period, _FLOOR)

    # ------------------------------------------------------------- observing
    def observe(self, record: Record) -> None:
        """A record reached the fan-out: the trackers of its name update (and may fire or resolve)."""
        if self.paused_at is not None:
            return
        metrics = record.metrics
        entry = self.bound.get(record.name)
        if entry is None or entry[0] != len(metrics):
            entry = self._bind(record.name, metrics, record.source)
        if entry[1]:
            now = self.clock()
            for track in entry[1]:
                track.update(metrics, now)

    def polled(self, name: str, metrics: Mapping[str, float] | None, source: Mapping[str, Any]) -> None:
        """A poll of ``name`` succeeded but its schedule logged nothing: it is not quiet, and its values count."""
        if self.paused_at is not None:
            return
        now = self.clock()
        for group in self.quiet_groups.values():
            group.saw(name, now)
        if metrics:
            entry = self.bound.get(name)
            if entry is None and name not in self.idle:
                entry = self._bind(name, metrics, source)
            if entry is not None:  # the trackers of its logged records: a schedule's skipped poll still moves them
                for track in entry[1]:
                    track.update(metrics, now)

    def _bind(self, name: str, metrics: Mapping[str, float], source: Mapping[str, Any], bound_as: str | None = None) -> tuple[
        int, list[Track]
    ]:
        """The trackers of record name ``name``, found again when its snapshot gained or lost keys."""
        tracks: list[Track] = []
        if name not in self.ignored:
            for rule in self.rules:
                self._bind_rule(rule, name, metrics, source, tracks)
        entry = (len(metrics), tracks)
        if bound_as is not None or tracks:
            self.bound[bound_as or name] = entry
            self.idle.pop(name, None)
        else:  # nothing to update: the fan-out skips its records while the snapshot keeps its size
            self.bound.pop(name, None)
            self.idle[name] = len(metrics)
        return entry

    def _bind_rule(
        self, rule: Alert, name: str, metrics: Mapping[str, float], source: Mapping[str, Any], tracks: list[Track]
    ) -> None:
        kind = rule.kind
        if kind == "quiet":
            if name in self.watches and (source is self.source or source == self.source):
                return  # a watch of this process: its rule's QuietWatches reads it from the watch
            if fnmatchcase(name, rule.target) and (not rule.auto or name in self.watches):
                after = rule.after if rule.after is not None else max(10 * self.watches.get(name, 0.0), 30.0)
                track = self._get(rule, name, None, source, partial(Quiet, self, rule, name, source, after))
                self._timed(track)
                tracks.append(track)
            return
        if kind == "nonfinite":
            tracks.extend(t for t in self.nonfinite_of.get(name, ()) if t.source == source)
            return
        if kind not in ("stalled", "above", "below"):
            return
        target = rule.target
        if is_pattern(target):
            keys = [key for key in metrics if fnmatchcase(key, target)]
        elif target.startswith(name + "/"):
            keys = [target] if target in metrics else []
            if not keys and metrics:
                self._warn_missing(rule, name, metrics)
        else:
            return
        for key in keys:
            if kind == "stalled":
                after = float(rule.after or 0.0)
                if rule.auto and name in self.watches:
                    after = max(after, 10 * self.watches[name])
                make: Callable[[], Track] = partial(Stalled, self, rule, name, key, source, after)
            else:
                make = partial(Threshold, self, rule, name, key, source)
            track = self._get(rule, name, key, source, make)
            self._timed(track)
            tracks.append(track)

    def _warn_missing(self, rule: Alert, name: str, metrics: Mapping[str, float]) -> None:
        if rule.name in self.warned:
            return
        self.warned.add(rule.name)
        keys = sorted(metrics)
        shown = ", ".join(keys[:20]) + (f" and {len(keys) - 20} more" if len(keys) > 20 else "")
        log.warning(
            "alert rule %r: the key %r is not in the snapshot of %r, so the rule cannot fire; the keys are %s "
            "(reported once per rule)", rule.name, rule.target, name, shown,
        )

    def rescan(self, name: str, raw: Any, source: Mapping[str, Any]) -> None:
        """A snapshot or push of ``name`` left values out: fire ``nonfinite`` rules for its NaN and inf values."""
        if self.paused_at is not None or not self.scan_nonfinite or name in self.ignored:
            return
        found = nonfinite_values(raw, name + "/")
        if not found:
            return
        for rule in self.rules:
            if rule.kind != "nonfinite":
                continue
            for key, value in found.items():
                if not fnmatchcase(key, rule.target):
                    continue
                track = self._get(rule, name, key, source, partial(Nonfinite, self, rule, name, key, source))
                known = self.nonfinite_of.setdefault(name, [])
                if track not in known:
                    known.append(track)
                track.value = value
                self.bound.pop(name, None)  # the key's next finite value resolves it
                track.since = self.clock()
                track.fire(track.since, f"{key}{track.where} is {value} (left out of the records)")

    def board(self, base: str, own: int, latest: Mapping[int, tuple[int, Mapping[str, float]]]) -> None:
        """Every rank's values on a reduction's board (main rank): each rank is tracked as a source of its own."""
        if self.paused_at is not None:
            return
        prefix = base + "/"
        for member, (seq, values) in latest.items():
            if member == own:
                continue  # this rank's own records are observed as they are logged
            if self.board_seq.get((base, member)) == seq:
                continue
            self.board_seq[(base, member)] = seq
            metrics = {prefix + key: value for key, value in values.items()}
            source = Source({**self.source, "rank": member})
            bound_as = f"{base}\x00{member}"
            entry = self.bound.get(bound_as)
            if entry is None or entry[0] != len(metrics):
                entry = self._bind(base, metrics, source, bound_as)
            now = self.clock()
            for track in entry[1]:
                track.update(metrics, now)

    # ---------------------------------------------------------------- timer
    def check_all(self) -> None:
        """The timer's look at every tracker."""
        if self.paused_at is not None:
            return
        now = self.clock()
        for track in list(self.timed):
            track.check(now)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.resume()
        if self.rules and (self.task is None or self.task.done()):
            self.task = loop.create_task(self._tick(), name="monitor-async alerts")

    def stop(self) -> None:
        """Ends evaluation: no event after this, and the time stopped does not count toward ``after``."""
        self.pause()
        if self.task is not None:
            self.task.cancel()
            self.task = None

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.period())
            self.check_all()

    # ---------------------------------------------------------------- events
    def loop_blocked(self, seconds: float, message: str) -> bool:
        """The loop was late by ``seconds``: fires the ``blocked`` rule; ``False`` if there is none (or it is quiet)."""
        track = self.blocked_track
        if track is None or self.paused_at is not None or seconds < float(track.rule.after or 0.0):
            return False
        track.value = round(seconds, 3)
        track.since = self.clock() - seconds
        track.fire(track.since, message)
        return True

    def loop_calm(self) -> None:
        if self.blocked_track is not None and self.paused_at is None:
            self.blocked_track.resolve("the event loop runs on time again")

    def emit(self, track: Track, state: str, since: float, message: str) -> None:
        rule = track.rule
        event = AlertEvent(
            rule.name, state, rule.severity, track.watch, track.metric, track.value,  # type: ignore[arg-type]
            self.unix(since), time.time(), track.source, message,
        )
        if state == "firing":
            self.counts["alerts_fired"] += 1
            self.firing_now[id(track)] = event
        else:
            self.firing_now.pop(id(track), None)
        track.event = event
        log_event(event)
        try:
            self.deliver(event)
        except Exception as exc:  # noqa: BLE001 - a sink-side failure is the channel's to count
            log.warning("alert %s: could not hand the event to the sinks: %s", rule.name, describe(exc))
        loop = self.loop
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
        for notifier in [*self.monitor_notify, *(self._notifier(fn) for fn in rule.notify)]:
            notifier.send(event, loop)

    def _notifier(self, fn: Callable[[AlertEvent], Any]) -> Notifier:
        notifier = self.notifiers.get(id(fn))
        if notifier is None:
            if not callable(fn):
                raise ConfigError(f"Monitor: notify must hold callables fn(event), got {fn!r}")
            notifier = self.notifiers[id(fn)] = Notifier(fn, self.notify_timeout, self.counts)
        return notifier

    def firing(self) -> list[AlertEvent]:
        return list(self.firing_now.values())

    def report(self, out: dict[str, float]) -> None:
        out["alerts_firing"] = float(len(self.firing_now))
        out["alerts_fired"] = float(self.counts["alerts_fired"])
        out["notify_errors"] = float(self.counts["notify_errors"])
        out["notify_skipped"] = float(self.counts["notify_skipped"])


class LoopLag:
    """Notices a blocked event loop: a timer every 0.1 s measures how late it runs.

    ``lag_max`` is the longest it was late since the monitor was built; a
    lateness of at least ``THRESHOLD`` is an episode, warned once (or
    reported by an ``Alert.blocked`` rule), over once the loop has run on time
    for ``CALM`` seconds.
    """

    PERIOD = 0.1
    THRESHOLD = 0.5
    CALM = 5.0

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
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
        self.expected = now + self.PERIOD
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
