"""The rules engine: every rule of one monitor, its trackers, the events firing now and where events go.

``Engine`` sees every record the fan-out hands on (``Engine.observe``),
the polls that logged nothing and the snapshots that left values out (the
poller calls it then, never on the fast path), each rank's values on a
reduction's board (``Engine.board``), and runs a timer of its own
(at least every ``min(after / 4, 1 s, poll interval)``), so a rule fires
even when its target never answers. Time is the monitor's running time: it
stands still while the monitor is stopped. What the rules are is
``monitor_async._core.alerts``'s; the trackers are in ``trackers``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from ..._core.alerts import Alert, AlertEvent, concerns, is_pattern, matches
from ..._core.exceptions import ConfigError
from ..._core.policy import describe, log
from ..._core.record import EMPTY_SOURCE, Record, Source
from ..._core.values import nonfinite_values
from ..notify import Notifier, log_event
from .trackers import (
    Nonfinite,
    NonfiniteMany,
    Quiet,
    QuietWatches,
    Stalled,
    Threshold,
    Track,
    Unhealthy,
    WatchStalled,
)

__all__ = ["Engine"]

_FLOOR = 0.02
"""The shortest period of the rules' timer (seconds)."""
_monotonic = time.monotonic

_Bound = tuple[int, tuple[Track, ...]]
"""A record name's trackers, with the size of the snapshot they were found for."""


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
        self._period: float | None = None  # the timer's period, found again when a rule or watch comes or goes
        self.watch_objects: dict[str, Any] = {}  # name: its Watch (target, last logged snapshot)
        self.quiet_groups: dict[str, QuietWatches] = {}  # a quiet rule's name: its watches
        self.idle: dict[str, int] = {}
        """Record names no tracker wants, with their snapshot size then: the fan-out skips those records."""
        self.ignored: set[str] = set()  # reduced watches another rank (the main one) evaluates
        self.bound: dict[str, _Bound] = {}  # record name: (its size then, its trackers)
        self.tracks: dict[tuple[str, str, str | None, tuple[Any, ...]], Track] = {}
        self.timed: dict[Track | QuietWatches, None] = {}  # looked at by every look of the timer
        self.waiting: dict[Track, None] = {}  # trackers that fire after a time: looked at from `wake_at` on
        self.wake_at = math.inf  # no tracker of `waiting` can fire before, as of the last pass
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
        self.carried: dict[tuple[str, str, str | None], dict[str, Any]] = {}
        """Episodes firing when the state a resumed launch loaded was taken, by (rule, watch, metric): see `carry`."""
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
            for track in self.tracks.values():  # the counters' last moves, read before time stops
                if type(track) is WatchStalled:
                    track.look()
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
        self._period = None
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
        return concerns(rule, watch)

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
        self._period = None
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
        self._period = None
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
            self.waiting.pop(track, None)
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
                self.waiting.pop(pushed, None)
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
        """The timer looks at ``track`` from its ``due`` time on.

        A tracker that is ``watchful`` (an ``Unhealthy``, a `WatchStalled` that fires or is held) at every look.
        """
        if track.watchful:
            self.timed.setdefault(track)
        elif track not in self.waiting and track not in self.timed:
            self.waiting[track] = None
            self.soon(track.due())

    def soon(self, at: float) -> None:
        """A tracker could fire from ``at`` on: the timer looks at the waiting ones then."""
        if at < self.wake_at:
            self.wake_at = at

    def period(self) -> float:
        """How often the timer looks: ``min(after / 4, 1 s, the shortest poll interval)``, at least 20 ms."""
        if self._period is not None:
            return self._period
        period = 1.0
        for rule in self.rules:
            if rule.after and rule.kind != "blocked":  # a blocked loop is LoopLag's to notice
                period = min(period, rule.after / 4)
        for interval in self.watches.values():
            period = min(period, interval)
        self._period = max(period, _FLOOR)
        return self._period

    # ------------------------------------------------------------- observing
    def observe(self, record: Record) -> None:
        """A record reached the fan-out: the trackers of its name update (and may fire or resolve).

        A distribution's NaN and inf go to `many`; the records of a name no rule
        wants are passed over while its snapshot keeps its size (see `idle`).
        """
        if self.paused_at is not None:
            return
        if record.distributions:
            self.many(record)
        metrics = record.metrics
        name = record.name
        entry = self.bound.get(name)
        if entry is None or entry[0] != len(metrics):
            if self.idle.get(name) == len(metrics):
                return
            entry = self._bind(name, metrics, record.source)
        tracks = entry[1]
        if tracks:
            now = _monotonic() - self.offset  # `clock()` while running, without the call
            for track in tracks:
                stalled = track.plain
                if stalled is not None:  # a counter that moves, as at most records: `Stalled.update`'s common case
                    value = metrics.get(stalled.metric)  # type: ignore[arg-type]
                    if value is not None and value != stalled.value:
                        unless = stalled.unless
                        if unless is None or not metrics.get(unless):
                            stalled.value = value
                            stalled.last_increase = now
                            continue
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

    def _bind(self, name: str, metrics: Mapping[str, float], source: Mapping[str, Any], bound_as: str | None = None) -> _Bound:
        """The trackers of record name ``name``, found again when its snapshot gained or lost keys."""
        tracks: list[Track] = []
        if name not in self.ignored:
            for rule in self.rules:
                self._bind_rule(rule, name, metrics, source, tracks)
        entry = (len(metrics), tuple(tracks))
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
            if matches(name, rule.target) and (not rule.auto or name in self.watches):
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
            keys = [key for key in metrics if matches(key, target)]
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
                of = self.watch_objects.get(name)
                if of is not None and (source is self.source or source == self.source) and of.note_moves(key):
                    # a counter of a watch of this process: read from the watch, not from each record
                    track = self._get(rule, name, key, source, partial(WatchStalled, self, rule, name, key, source, after, of))
                    if type(track) is WatchStalled:
                        if track.value is None:
                            track.update(metrics, self.clock())  # its first value, from the record that bound it
                        self._timed(track)
                        continue
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
                if not matches(key, rule.target):
                    continue
                track = self._get(rule, name, key, source, partial(Nonfinite, self, rule, name, key, source))
                known = self.nonfinite_of.setdefault(name, [])
                if track not in known:
                    known.append(track)
                track.value = value
                self.bound.pop(name, None)  # the key's next finite value resolves it
                track.since = self.clock()
                track.fire(track.since, f"{key}{track.where} is {value} (left out of the records)")

    def many(self, record: Record) -> None:
        """A record with distributions: fire ``nonfinite`` rules for those that held NaN or inf values, saying how many."""
        if self.paused_at is not None or not self.scan_nonfinite or record.name in self.ignored:
            return
        name, source = record.name, record.source
        for key, summary in record.distributions.items():
            nans, infs = summary.nan_count, summary.inf_count
            if not (nans or infs):
                continue
            for rule in self.rules:
                if rule.kind != "nonfinite" or not matches(key, rule.target):
                    continue
                track = self._get(rule, name, key, source, partial(NonfiniteMany, self, rule, name, key, source))
                known = self.nonfinite_of.setdefault(name, [])
                if track not in known:
                    known.append(track)
                track.value = float(nans + infs)
                self.bound.pop(name, None)  # its next summary without them resolves it
                track.since = self.clock()
                track.fire(
                    track.since,
                    f"{key}{track.where} holds {nans} NaN and {infs} infinite values of "
                    f"{nans + infs + summary.count} (left out of its summary)",
                )

    def board(self, base: str, own: int, latest: Mapping[int, tuple[int, Mapping[str, Any]]]) -> None:
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
            metrics = {prefix + key: value for key, value in values.items() if type(value) is not dict}  # not a summary
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
            if not track.watchful and isinstance(track, Track):  # resolved or released: from its due time on
                del self.timed[track]
                self.waiting[track] = None
                self.soon(track.due())
        if now >= self.wake_at:
            self._wake(now)

    def _wake(self, now: float) -> None:
        """Looks at every waiting tracker and notes when the next could fire: one pass per ``after``, not per look."""
        self.wake_at = math.inf
        wake_at = math.inf
        for track in list(self.waiting):
            track.check(now)
            if track.watchful:  # fired or held: at every look until it ends
                del self.waiting[track]
                self.timed[track] = None
                continue
            due = track.due()
            if due < wake_at:
                wake_at = due
        self.soon(wake_at)

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
        """Looks every `period`; after a wake-up more than a period late, the next look instead.

        A loop that got no CPU for a while (a preempted or stopped process) wakes with every
        watch's poll overdue and this timer first among them: looking then would find every
        watch still for as long as the process slept. Deferring that one look lets the overdue
        polls run first; never two looks in a row, so a loop that is always late still evaluates.
        """
        loop = asyncio.get_running_loop()
        deferred = False
        while True:
            period = self.period()
            due = loop.time() + period
            await asyncio.sleep(period)
            if not deferred and loop.time() - due > period:
                deferred = True
                continue
            deferred = False
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
        began = self.unix(since)
        if self.carried and state == "firing":
            carried = self.carried.pop((rule.name, track.watch, track.metric), None)
            if carried is not None and isinstance(carried.get("since"), (int, float)):
                began = min(began, float(carried["since"]))
        event = AlertEvent(
            rule.name, state, rule.severity, track.watch, track.metric, track.value,  # type: ignore[arg-type]
            began, time.time(), track.source, message,
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

    # ------------------------------------------------------------- resuming
    def episodes(self) -> list[dict[str, Any]]:
        """The episodes firing now, as plain values (``Monitor.state_dict()``), those carried over included."""
        out = [
            {"rule": e.rule, "watch": e.watch, "metric": e.metric, "since": e.since, "value": e.value}
            for e in self.firing_now.values()
        ]
        seen = {(e["rule"], e["watch"], e["metric"]) for e in out}
        out += [dict(e) for key, e in self.carried.items() if key not in seen]
        return out

    def carry(self, episodes: Iterable[Mapping[str, Any]]) -> None:
        """A resumed launch: ``episodes`` were firing at the checkpoint.

        The trackers start afresh (the time the job was down counts toward no
        rule, and a restart alone fires nothing); an episode that fires again
        keeps its first ``since``, so it reads as the one episode it is.
        """
        self.carried = {
            (str(e["rule"]), str(e.get("watch")), None if e.get("metric") is None else str(e["metric"])): dict(e)
            for e in episodes
        }

    def report(self, out: dict[str, float]) -> None:
        out["alerts_firing"] = float(len(self.firing_now))
        out["alerts_fired"] = float(self.counts["alerts_fired"])
        out["notify_errors"] = float(self.counts["notify_errors"])
        out["notify_skipped"] = float(self.counts["notify_skipped"])


