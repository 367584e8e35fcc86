"""The trackers: one rule for one watch (or key) and source, with whether it fires, since when and its last value.

A tracker is told each snapshot of its watch (``update``) and looked at by
the engine's timer (``check``). Those whose firing only waits on time
(``Stalled``, ``Threshold``, ``Quiet``) say from when it could (``due``), so
that the timer passes over them once per ``after`` rather than at each look.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..._core.alerts import Alert, AlertEvent
from ..._core.policy import describe
from ..._core.text import clock
from ..._core.threads import RaisedOnThread, on_thread, wait_future

__all__ = [
    "Host", "Nonfinite", "NonfiniteMany", "Quiet", "QuietWatches", "Stalled", "Threshold", "Track", "Unhealthy",
    "WatchStalled",
]


class Host(Protocol):
    """What a tracker needs of the engine that holds it."""

    source: Mapping[str, Any]
    offset: float
    loop: asyncio.AbstractEventLoop | None

    @property
    def paused(self) -> bool: ...

    def clock(self) -> float: ...

    def unix(self, at: float) -> float: ...

    def soon(self, at: float) -> None: ...

    def emit(self, track: Track, state: str, since: float, message: str) -> None: ...


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def _value_text(value: float | None) -> str:
    if value is None:
        return "none"
    return f"{value:g}"


class Track:
    """One rule for one watch (or key) and source: whether it fires, since when, the last value."""

    __slots__ = ("engine", "event", "firing", "metric", "plain", "rule", "since", "source", "value", "watch")

    def __init__(self, engine: Host, rule: Alert, watch: str, metric: str | None, source: Mapping[str, Any]) -> None:
        self.engine = engine
        self.rule = rule
        self.watch = watch
        self.metric = metric
        self.source = source
        self.firing = False
        self.since = engine.clock()
        self.value: float | None = None
        self.event: AlertEvent | None = None
        self.plain: Stalled | None = None
        """Itself, when a `Stalled` not firing nor held has a value: the engine then takes a move inline."""

    watchful = False
    """Whether the timer looks at it at every look, not only from its `due` time on."""

    def update(self, metrics: Mapping[str, float], now: float) -> None:
        """A snapshot of the watch (its full keys)."""

    def check(self, now: float) -> None:
        """The timer's look: fire when the condition has held long enough."""

    def due(self) -> float:
        """The earliest running time ``check`` could fire, as things stand (``inf``: only an update can)."""
        return math.inf

    def fire(self, since: float, message: str) -> None:
        if not self.firing:
            self.firing = True
            self.plain = None
            self.engine.emit(self, "firing", since, message)

    def resolve(self, message: str) -> None:
        if self.firing:
            self.firing = False
            self.engine.emit(self, "resolved", self.since, message)
            self.engine.soon(self.due())

    @property
    def where(self) -> str:
        rank = self.source.get("rank") if self.source else None
        return "" if rank is None else f" on rank {rank}"


class Stalled(Track):
    """``Alert.stalled``: the key has not increased for ``after`` seconds."""

    __slots__ = ("after", "held", "last_increase", "unless")

    def __init__(self, engine: Host, rule: Alert, watch: str, metric: str, source: Mapping[str, Any], after: float) -> None:
        super().__init__(engine, rule, watch, metric, source)
        self.after = after
        self.last_increase = self.since
        self.held = False
        unless = rule.unless
        self.unless = None if unless is None else unless if unless.startswith(watch + "/") else f"{watch}/{unless}"

    def update(self, metrics: Mapping[str, float], now: float) -> None:
        unless = self.unless
        if unless is not None and (self.held or unless in metrics):  # most snapshots have no such key
            self._hold(bool(metrics.get(unless)))
        value = metrics.get(self.metric)  # type: ignore[arg-type]
        if value is None:
            return
        if value != self.value:  # an increase, or a decrease (a reset): movement either way
            if self.value is None:
                self.engine.soon(now + self.after)
            self.value = value
            self.last_increase = now
            if self.firing:
                self.resolve(f"{self.metric}{self.where} moves again (now {_value_text(value)})")
        elif not self.firing and now - self.last_increase >= self.after:
            self.check(now)
        self.plain = None if self.firing or self.held else self

    def _hold(self, held: bool) -> None:
        """``unless`` is set (``held``) or not in the latest snapshot."""
        if held != self.held:
            self.held = held
            if held and self.firing:
                self.resolve(f"{self.metric}{self.where}: {self.unless} is set, the stall is expected")
            elif not held:
                self.engine.soon(self.last_increase + self.after)

    def due(self) -> float:
        return math.inf if self.firing or self.held or self.value is None else self.last_increase + self.after

    def check(self, now: float) -> None:
        if not self.firing and not self.held and self.value is not None and now - self.last_increase >= self.after:
            self.since = self.last_increase
            at = self.engine.unix(self.last_increase)
            self.fire(self.last_increase, (
                f"{self.metric}{self.where} has not increased for {_seconds(now - self.last_increase)} "
                f"(last value {_value_text(self.value)} at {clock(at)})"
            ))


class WatchStalled(Stalled):
    """`Stalled` on a counter of a watch of this process: read from the watch at the timer's looks, not per record.

    The watch notes when each of its counters last changed (``Watch.moved``,
    in the one pass over its counters that makes their rates) and keeps its
    last record's metrics (``Watch.latest``); `look` reads them into this
    tracker. A healthy tracker is looked at from its `due` time on, so a
    fleet of moving counters costs one pass per ``after``; one that fires or
    is held by ``unless`` at every look of the timer (`watchful`), so that it
    resolves or is released within one look.
    """

    __slots__ = ("of",)

    def __init__(
        self, engine: Host, rule: Alert, watch: str, metric: str, source: Mapping[str, Any], after: float, of: Any,
    ) -> None:
        super().__init__(engine, rule, watch, metric, source, after)
        self.of = of  # the Watch

    @property
    def watchful(self) -> bool:  # type: ignore[override]
        """Firing or held: looked at at every look, until it resolves or is released."""
        return self.firing or self.held

    def look(self) -> None:
        """Reads the watch: when the counter last changed (a move before the last ``stop()`` maps earlier: ignored)."""
        of = self.of
        latest = of.latest
        at = of.moved.get(self.metric)
        if at is not None and at - self.engine.offset > self.last_increase:
            self.last_increase = at - self.engine.offset
            self.value = latest.get(self.metric, self.value)
            if self.firing:
                self.resolve(f"{self.metric}{self.where} moves again (now {_value_text(self.value)})")
        if self.unless is not None:
            self._hold(bool(latest.get(self.unless)))

    def check(self, now: float) -> None:
        self.look()
        super().check(now)


class Quiet(Track):
    """``Alert.quiet`` for a pushed name or a rank: no push (or no new snapshot on the board) for ``after`` seconds.

    The watches of this process are :class:`QuietWatches`'s.
    """

    __slots__ = ("after", "last")

    def __init__(self, engine: Host, rule: Alert, watch: str, source: Mapping[str, Any], after: float) -> None:
        super().__init__(engine, rule, watch, None, source)
        self.after = after
        self.last = self.since
        engine.soon(self.since + after)

    def update(self, metrics: Mapping[str, float], now: float) -> None:
        self.last = now
        if self.firing:
            self.resolve(f"{self.watch}{self.where} answers again")

    def due(self) -> float:
        return math.inf if self.firing else self.last + self.after

    def check(self, now: float) -> None:
        if not self.firing and now - self.last >= self.after:
            self.since = self.last
            self.fire(self.last, f"{self.watch}{self.where} has not answered for {_seconds(now - self.last)} "
                                 f"(no successful poll or push since {clock(self.engine.unix(self.last))})")


class QuietWatches:
    """``Alert.quiet`` for the watches of this process: one object per rule, whatever the number of watches.

    The time of each watch's last logged snapshot is read from the watch at
    each look of the timer (nothing is done per poll); a poll that logged
    nothing is told through :meth:`saw`. Per watch it keeps only floats in a
    few dicts (no object per watch for the garbage collector to walk); a
    :class:`Quiet` is made for a watch while it fires.
    """

    watchful = True  # its own pass decides whom it reads (see `check`)

    def __init__(self, engine: Host, rule: Alert) -> None:
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

    def __init__(self, engine: Host, rule: Alert, watch: str, metric: str, source: Mapping[str, Any]) -> None:
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
            self.engine.soon(now + self.after)
        self.check(now)

    def due(self) -> float:
        return math.inf if self.firing or self.beyond is None else self.beyond + self.after

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


class NonfiniteMany(Track):
    """``Alert.nonfinite`` for one distribution key: fired when its summary counted NaN or inf values,
    resolved by a summary of that key without them (its ``/count`` logged, no ``/nan_count`` nor ``/inf_count``)."""

    __slots__ = ()

    def update(self, metrics: Mapping[str, float], now: float) -> None:
        key = self.metric
        if self.firing and f"{key}/count" in metrics and f"{key}/nan_count" not in metrics \
                and f"{key}/inf_count" not in metrics:
            self.value = metrics[f"{key}/count"]
            self.resolve(f"{key}{self.where} holds only finite values again ({_value_text(self.value)} values)")


class Unhealthy(Track):
    """``Alert.unhealthy``: ``target.health()`` on a thread of its own, every poll interval, under a timeout.

    The timeout is the timer's to notice (as any rule's time is): a call past
    it fires, and the rule resolves when a later call reports healthy.
    """

    watchful = True  # each look may start a call of health() or notice one past its timeout

    __slots__ = ("asked", "health", "interval", "next_at")

    def __init__(self, engine: Host, rule: Alert, watch: str, health: Callable[[], Any], interval: float) -> None:
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
        if now < self.next_at or self.engine.loop is None:
            return
        self.asked = now
        wait_future(on_thread(self.health, f"monitor-async health {self.watch}")).add_done_callback(self.answer)

    def answer(self, done: asyncio.Future[Any]) -> None:
        if done.cancelled():
            return
        error = done.exception()
        if isinstance(error, RaisedOnThread):
            error = error.original
        if self.engine.paused:
            self.asked = None
            return
        now = self.engine.clock()
        since = self.asked if self.asked is not None else now
        self.asked = None
        self.next_at = now + self.interval
        trouble = f"health() raised {describe(error)}" if error is not None else _trouble(done.result())
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
