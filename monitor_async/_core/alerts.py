"""What alert rules are (`Alert`) and what an alert tells a person (`AlertEvent`, the contract with the sinks)."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import translate
from typing import Any, Literal

from .checks import choice, number
from .exceptions import ConfigError
from .record import EMPTY_SOURCE, Source

__all__ = [
    "KINDS", "KNOWN_COUNTERS", "SEVERITIES", "STATES", "Alert", "AlertEvent", "Severity", "State", "concerns",
    "is_pattern", "matches",
]

Severity = Literal["warning", "critical"]
State = Literal["firing", "resolved"]
SEVERITIES: tuple[str, ...] = ("warning", "critical")
STATES: tuple[str, ...] = ("firing", "resolved")


@dataclass(frozen=True)
class AlertEvent:
    """One alert rule starting or ending to fire for one watch (and source).

    Attributes:
        rule: the rule's name, e.g. ``"stalled collector/frames"``.
        state: ``"firing"`` or ``"resolved"``.
        severity: ``"warning"`` or ``"critical"``.
        watch: the watch (or pushed name) the event is about.
        metric: the full key (``"collector/frames"``), or ``None``.
        value: the key's latest value, or ``None``.
        since: unix time the condition began.
        time: unix time of the event.
        source: the record source (``{"rank": 1}``...), empty in one process.
        message: one sentence for a person.

    Examples:
        >>> e = AlertEvent("stalled collector/frames", "firing", "warning", "collector",
        ...                "collector/frames", float("nan"), 0.0, 62.0, {}, "collector/frames has not increased")
        >>> e.to_dict()["value"], e.to_dict()["state"]
        ('nan', 'firing')
    """

    rule: str
    state: State
    severity: Severity
    watch: str
    metric: str | None
    value: float | None
    since: float
    time: float
    source: Mapping[str, Any] = field(default=EMPTY_SOURCE)
    message: str = ""

    def __post_init__(self) -> None:
        if type(self.source) is not Source:
            object.__setattr__(self, "source", Source(self.source) if self.source else EMPTY_SOURCE)

    def to_dict(self) -> dict[str, Any]:
        """The event's fields as strict-JSON-safe values (a non-finite ``value`` as a string)."""
        value: Any = self.value
        if isinstance(value, float) and not math.isfinite(value):
            value = str(value)
        return {
            "rule": self.rule, "state": self.state, "severity": self.severity, "watch": self.watch,
            "metric": self.metric, "value": value, "since": self.since, "time": self.time,
            "source": dict(self.source), "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AlertEvent:
        """The event ``to_dict`` gave (a value written as text is read back as a float)."""
        value = data.get("value")
        if isinstance(value, str):
            value = float(value)
        return cls(
            str(data["rule"]), data["state"], data["severity"], str(data["watch"]), data.get("metric"),
            None if value is None else float(value), float(data["since"]), float(data["time"]),
            data.get("source") or {}, str(data.get("message", "")),
        )


KINDS: tuple[str, ...] = ("stalled", "quiet", "nonfinite", "above", "below", "unhealthy", "blocked")
KNOWN_COUNTERS: tuple[str, ...] = ("frames", "write_count", "batches", "sample_calls")
"""The counters ``Alert.defaults()`` watches for stalls."""


def _owner(kind: str, rule: str) -> str:
    """Who a factory's option errors name: the rule and the factory (``alert rule 'quiet c' (Alert.quiet)``)."""
    return f"alert rule {rule!r} (Alert.{kind})"


def _check_after(owner: str, after: Any) -> float:
    return float(number(owner, "after", after, low=0, above=False, unit="seconds"))


@functools.cache
def is_pattern(text: str) -> bool:
    """Whether ``text`` is an ``fnmatch`` pattern (``*``, ``?`` or ``[``) rather than one name."""
    return any(c in text for c in "*?[")


_MATCHERS: dict[str, Callable[[str], Any]] = {}


def matches(name: str, pattern: str) -> bool:
    """`fnmatch.fnmatchcase`, each pattern compiled once (a crowd of watches is matched against few rules).

    Examples:
        >>> matches("collector/frames", "*/frames"), matches("fleet_2", "fleet_[0-9]"), matches("a/b", "a")
        (True, True, False)
    """
    match = _MATCHERS.get(pattern)
    if match is None:
        rest = pattern[1:]
        if pattern == "*":
            match = _anything
        elif pattern.startswith("*") and rest and not is_pattern(rest):  # "*/frames": a suffix, the common rule
            match = functools.partial(_ends, rest)
        else:
            match = re.compile(translate(pattern)).match
        _MATCHERS[pattern] = match
    return bool(match(name))


def _anything(name: str) -> bool:
    return True


def _ends(suffix: str, name: str) -> bool:
    return name.endswith(suffix)


def concerns(rule: Alert, watch: str) -> bool:
    """Whether ``rule`` is about watch ``watch``: its name, or the watch part of its metric (patterns match).

    Examples:
        >>> concerns(Alert.stalled("*/frames", after=60), "collector"), concerns(Alert.quiet("learner", after=30), "rb")
        (True, False)
    """
    target = rule.target
    if rule.kind in ("quiet", "unhealthy"):
        return matches(watch, target)
    if rule.kind == "blocked":
        return False
    if is_pattern(target):
        return matches(watch + "/x", target) or matches(watch, target.rpartition("/")[0])
    return target.startswith(watch + "/")


@dataclass(frozen=True)
class Alert:
    """One alert rule: what to notice, for how long, how bad it is and who else to tell.

    Build rules with the factories (`Alert.stalled`, `Alert.quiet`,
    `Alert.nonfinite`, `Alert.above`, `Alert.below`, `Alert.unhealthy`,
    `Alert.blocked`, `Alert.defaults`) and pass them to
    `Monitor(alerts=[...])` or `monitor.alert(rule)`. Every factory takes:

    Args:
        name: the rule's name, shared by all its events (default derived,
            e.g. ``"stalled collector/frames"``).
        severity: ``"warning"`` (default) or ``"critical"``.
        notify: callables ``fn(event)`` (sync or ``async def``) called for
            this rule's events, besides the monitor's own ``notify=``.

    ``metric`` and ``watch`` may be ``fnmatch`` patterns (``"*/frames"``,
    ``"fleet_*"``): such a rule tracks each matching watch (and source) on
    its own. How rules are evaluated: docs/alerts.md.

    Raises:
        ConfigError: a negative ``after``, an unknown severity, a bad name or
            notifier (the message names the rule and the parameter).

    Examples:
        >>> Alert.stalled("collector/frames", after=60).name
        'stalled collector/frames'
        >>> [rule.kind for rule in Alert.defaults()]
        ['quiet', 'nonfinite', 'stalled', 'stalled', 'stalled', 'stalled', 'blocked']
    """

    kind: str
    name: str
    target: str
    """The metric (``"<watch>/<key>"``) or watch pattern the rule concerns (``""`` for ``blocked``)."""
    after: float | None = 0.0
    """Seconds the condition must hold; ``None``: derived per watch (``quiet`` in `defaults`)."""
    threshold: float | None = None
    unless: str | None = None
    severity: str = "warning"
    notify: tuple[Callable[[AlertEvent], Any], ...] = ()
    timeout: float = 5.0
    """``unhealthy``: seconds a ``health()`` call may take."""
    auto: bool = False
    """A rule of `defaults`: it adapts to each watch instead of rejecting a slow one."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"alert rule {self.name!r}: unknown kind {self.kind!r}")
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"alert rule: name must be a non-empty string, got {self.name!r}")
        choice(f"alert rule {self.name!r}", "severity", self.severity, SEVERITIES)
        for fn in self.notify:
            if not callable(fn):
                raise ConfigError(f"alert rule {self.name!r}: notify must hold callables, got {fn!r}")

    # ------------------------------------------------------------ factories
    @staticmethod
    def _common(rule: str, name: str | None, severity: str, notify: Any) -> dict[str, Any]:
        if notify is None:
            fns: tuple[Any, ...] = ()
        elif callable(notify):
            fns = (notify,)
        else:
            fns = tuple(notify)
        return {"name": rule if name is None else name, "severity": severity, "notify": fns}

    @staticmethod
    def _metric(kind: str, metric: Any) -> str:
        if not isinstance(metric, str) or not metric or (not is_pattern(metric) and "/" not in metric):
            raise ConfigError(
                f"Alert.{kind}: metric must be a full key '<watch>/<key>' (or a pattern), got {metric!r}"
            )
        return metric

    @classmethod
    def stalled(
        cls, metric: str, *, after: float, unless: str | None = None, name: str | None = None,
        severity: Severity = "warning", notify: Any = None,
    ) -> Alert:
        """Fires when ``metric`` (``"<watch>/<key>"``) has not increased for ``after`` seconds.

        A decrease (a reset) counts as movement. ``unless`` names a key of the
        same watch (``"completed"`` or ``"collector/completed"``): while its
        latest value is non-zero the rule does not fire, and resolves.

        Examples:
            >>> Alert.stalled("collector/frames", after=120, unless="completed").unless
            'completed'
        """
        metric = cls._metric("stalled", metric)
        common = cls._common(f"stalled {metric}", name, severity, notify)
        if unless is not None and (not isinstance(unless, str) or not unless):
            raise ConfigError(f"alert rule {common['name']!r}: unless must be a key name, got {unless!r}")
        after = _check_after(_owner("stalled", common["name"]), after)
        return cls("stalled", target=metric, after=after, unless=unless, **common)

    @classmethod
    def quiet(
        cls, watch: str, *, after: float, name: str | None = None, severity: Severity = "warning",
        notify: Any = None,
    ) -> Alert:
        """Fires when ``watch`` had no successful poll (a pushed name: no ``log()``) for ``after`` seconds.

        Examples:
            >>> Alert.quiet("collector", after=30).name
            'quiet collector'
        """
        if not isinstance(watch, str) or not watch:
            raise ConfigError(f"Alert.quiet: watch must be a watch name or pattern, got {watch!r}")
        common = cls._common(f"quiet {watch}", name, severity, notify)
        return cls("quiet", target=watch, after=_check_after(_owner("quiet", common["name"]), after), **common)

    @classmethod
    def nonfinite(
        cls, pattern: str = "*", *, name: str | None = None, severity: Severity = "warning", notify: Any = None
    ) -> Alert:
        """Fires when a polled or pushed value whose full key matches ``pattern`` is NaN or infinite.

        Resolves at the next finite value of that key. The value is still left
        out of the records (counted in ``values_dropped``).

        Examples:
            >>> Alert.nonfinite("learner/*").name
            'nonfinite learner/*'
        """
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError(f"Alert.nonfinite: pattern must be a key or pattern, got {pattern!r}")
        common = cls._common(f"nonfinite {pattern}", name, severity, notify)
        return cls("nonfinite", target=pattern, **common)

    @classmethod
    def above(
        cls, metric: str, threshold: float, *, after: float = 0.0, name: str | None = None,
        severity: Severity = "warning", notify: Any = None,
    ) -> Alert:
        """Fires when the latest value of ``metric`` stays above ``threshold`` for ``after`` seconds.

        Examples:
            >>> Alert.above("learner/loss", 10.0).name
            'learner/loss above 10'
        """
        return cls._threshold("above", metric, threshold, after, name, severity, notify)

    @classmethod
    def below(
        cls, metric: str, threshold: float, *, after: float = 0.0, name: str | None = None,
        severity: Severity = "warning", notify: Any = None,
    ) -> Alert:
        """Fires when the latest value of ``metric`` stays below ``threshold`` for ``after`` seconds.

        Examples:
            >>> Alert.below("collector/frames_per_second", 100.0, after=30).after
            30.0
        """
        return cls._threshold("below", metric, threshold, after, name, severity, notify)

    @classmethod
    def _threshold(
        cls, kind: str, metric: str, threshold: Any, after: Any, name: str | None, severity: str, notify: Any
    ) -> Alert:
        metric = cls._metric(kind, metric)
        owner = _owner(kind, f"{metric} {kind}" if name is None else name)
        number(owner, "threshold", threshold, low=None)
        common = cls._common(f"{metric} {kind} {threshold:g}", name, severity, notify)
        return cls(kind, target=metric, after=_check_after(owner, after), threshold=float(threshold), **common)

    @classmethod
    def unhealthy(
        cls, watch: str, *, timeout: float = 5.0, name: str | None = None, severity: Severity = "warning",
        notify: Any = None,
    ) -> Alert:
        """Fires when the watch's target ``health()`` reports trouble, raises or does not answer.

        ``health()`` (TorchRL's inference servers have it) is called beside
        ``stats()`` at each poll interval on a worker thread; trouble is
        ``process_alive=False``, a non-zero ``exitcode`` or a ``control_error``.

        Args:
            watch: the watch name (or a pattern).
            timeout: seconds a ``health()`` call may take (default 5.0).

        Examples:
            >>> Alert.unhealthy("server").timeout
            5.0
        """
        if not isinstance(watch, str) or not watch:
            raise ConfigError(f"Alert.unhealthy: watch must be a watch name or pattern, got {watch!r}")
        common = cls._common(f"unhealthy {watch}", name, severity, notify)
        number(_owner("unhealthy", common["name"]), "timeout", timeout, unit="seconds")
        return cls("unhealthy", target=watch, after=0.0, timeout=float(timeout), **common)

    @classmethod
    def blocked(
        cls, *, after: float = 0.5, name: str | None = None, severity: Severity = "warning", notify: Any = None
    ) -> Alert:
        """Fires when the monitor's event loop was blocked (late) for at least ``after`` seconds.

        Resolves once the loop has run on time for 5 s.

        Examples:
            >>> Alert.blocked().name
            'blocked loop'
        """
        common = cls._common("blocked loop", name, severity, notify)
        return cls("blocked", target="", after=_check_after(_owner("blocked", common["name"]), after), **common)

    @classmethod
    def defaults(cls) -> list[Alert]:
        """Rules a newcomer can pass as is.

        ``quiet`` for every polled watch after ``max(10 * poll_interval, 30)``
        seconds, ``nonfinite("*")``, ``stalled`` on each known counter
        (``frames``, ``write_count``, ``batches``, ``sample_calls``) after
        120 s unless the watch's ``completed`` is non-zero, and ``blocked``.
        """
        rules = [
            cls("quiet", name="quiet", target="*", after=None, auto=True),
            cls.nonfinite("*", name="nonfinite"),
        ]
        rules.extend(
            cls("stalled", name=f"stalled {key}", target=f"*/{key}", after=120.0, unless="completed", auto=True)
            for key in KNOWN_COUNTERS
        )
        rules.append(cls.blocked())
        return rules

    def check_watch(self, watch: str, interval: float) -> None:
        """Raises ``ConfigError`` when this rule cannot hold for a watch polled every ``interval`` s."""
        if self.kind in ("stalled", "quiet") and not self.auto and self.after is not None and self.after < interval:
            raise ConfigError(
                f"alert rule {self.name!r}: after={self.after:g}s is shorter than the poll interval "
                f"({interval:g}s) of watch {watch!r}; the rule would fire between two polls"
            )
