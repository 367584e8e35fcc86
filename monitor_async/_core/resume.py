"""A monitor's state as it rides in a checkpoint, and the point a resumed launch continues from.

``Monitor.state_dict()`` builds the dict ``build_state`` lays out; a restarted
process hands it to ``load_state_dict``, which reads it back with
``read_state`` into a `ResumePoint` its sinks are given (their ``resume``
hook). The state holds plain values only (str keys, numbers, strings, lists,
dicts), so ``json`` and ``pickle`` both take it. What resuming does is in
[Resuming a run](resuming.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .exceptions import ConfigError

__all__ = [
    "STATE_FORMAT", "STATE_VERSION", "ResumePoint", "WatchPoint", "build_state", "number_on", "read_state",
]

STATE_FORMAT = "monitor-async/state"
"""The ``format`` entry of every state: what tells a monitor's state from another dict."""
STATE_VERSION = 1
"""The layout's version; a state of another version is refused with a ``ConfigError``."""


@dataclass(frozen=True)
class WatchPoint:
    """Where one watch (or pushed name) stood when the state was taken: its last step and unix time (None: none yet)."""

    step: int | None
    time: float | None


@dataclass(frozen=True)
class ResumePoint:
    """The launch a resumed one continues, and where: what a sink's ``resume`` hook is given.

    Attributes:
        launch: the launch the state was taken in: ``id``, ``time`` (unix, when it began), ``pid``, ``host``.
        time: unix time at the ``state_dict()`` call; records of that launch after it are superseded.
        watches: per watch, its last step and time at the call; a record of the watch with a
            greater step (or, without a step, a later time) is superseded.
        sinks: what each sink saved (its ``resume_state()``), by label.
        alerts: the alert episodes firing at the call (``rule``, ``watch``, ``metric``, ``since``, ``value``).
        by: the launch that resumes it (``id``, ``time``), set by the monitor that loaded the state.
        pushed: per name given to ``log()``, its last step and time at the call.
    """

    launch: dict[str, Any]
    time: float
    watches: dict[str, WatchPoint] = field(default_factory=dict)
    sinks: dict[str, dict[str, Any]] = field(default_factory=dict)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    by: dict[str, Any] = field(default_factory=dict)
    pushed: dict[str, WatchPoint] = field(default_factory=dict)

    def point(self, name: str) -> WatchPoint | None:
        """Where the watch or pushed name ``name`` stood at the call (None: the state does not name it)."""
        return self.watches.get(name) or self.pushed.get(name)

    def mark(self) -> dict[str, Any]:
        """What a file's launch mark says of the launch it resumes (``resumes`` in JSONL, rows in CSV)."""
        return {
            "id": self.launch.get("id"), "time": self.launch.get("time"), "pid": self.launch.get("pid"),
            "at": self.time, "by": self.by.get("time"),
            "watches": {name: [p.step, p.time] for name, p in (*self.pushed.items(), *self.watches.items())},
        }


def build_state(
    launch: Mapping[str, Any], now: float, watches: Mapping[str, tuple[int | None, float | None]],
    sinks: Mapping[str, dict[str, Any]], alerts: list[dict[str, Any]],
    pushed: Mapping[str, tuple[int | None, float | None]] | None = None,
) -> dict[str, Any]:
    """The plain dict ``Monitor.state_dict()`` returns (see [Resuming a run](resuming.md#the-state))."""
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "launch": dict(launch),
        "time": now,
        "watches": {name: [step, when] for name, (step, when) in watches.items()},
        "pushed": {name: [step, when] for name, (step, when) in (pushed or {}).items()},
        "sinks": dict(sinks),
        "alerts": alerts,
    }


def _fail(what: str) -> ConfigError:
    return ConfigError(f"load_state_dict: {what}; pass the dict Monitor.state_dict() returned, as it was saved")


def _number(value: Any, where: str, *, none: bool = False) -> float | None:
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(f"{where} must be a finite number{' or None' if none else ''}, got {value!r}")
    return float(value)


def read_state(state: Any) -> ResumePoint:
    """The `ResumePoint` of a state ``build_state`` made; ``ConfigError`` naming the first thing that is wrong.

    Examples:
        >>> point = read_state(build_state({"id": "a1", "time": 1.0, "pid": 7, "host": "n1"}, 2.0,
        ...                                {"rb": (300, 1.5)}, {}, []))
        >>> point.watches["rb"], point.time
        (WatchPoint(step=300, time=1.5), 2.0)
        >>> read_state({"format": "monitor-async/state", "version": 9})
        Traceback (most recent call last):
        ...
        monitor_async.ConfigError: load_state_dict: the state is of version 9, this monitor-async reads version 1; pass the dict Monitor.state_dict() returned, as it was saved
    """
    if not isinstance(state, Mapping):
        raise _fail(f"expected a dict, got {type(state).__name__}")
    if state.get("format") != STATE_FORMAT:
        raise _fail(f"the state's 'format' is {state.get('format')!r}, not {STATE_FORMAT!r} (not a monitor's state)")
    version = state.get("version")
    if version != STATE_VERSION:
        raise _fail(f"the state is of version {version!r}, this monitor-async reads version {STATE_VERSION}")
    launch = state.get("launch")
    if not isinstance(launch, Mapping) or not isinstance(launch.get("id"), str):
        raise _fail(f"'launch' must be a dict with an 'id', got {launch!r}")
    _number(launch.get("time"), "launch['time']")
    now = _number(state.get("time"), "'time'")
    assert now is not None
    watches, pushed = _points(state, "watches"), _points(state, "pushed")
    sinks = state.get("sinks")
    if not isinstance(sinks, Mapping) or not all(isinstance(v, Mapping) for v in sinks.values()):
        raise _fail(f"'sinks' must be a dict of dicts, got {sinks!r}")
    alerts = state.get("alerts")
    if not isinstance(alerts, list) or not all(isinstance(a, Mapping) and isinstance(a.get("rule"), str) for a in alerts):
        raise _fail(f"'alerts' must be a list of episodes (dicts with a 'rule'), got {alerts!r}")
    return ResumePoint(
        dict(launch), now, watches, {str(k): dict(v) for k, v in sinks.items()}, [dict(a) for a in alerts],
        pushed=pushed,
    )


def _points(state: Mapping[str, Any], key: str) -> dict[str, WatchPoint]:
    """The ``{name: [step, time]}`` entry ``key`` of a state (``pushed`` may be absent)."""
    raw = state.get(key, {} if key == "pushed" else None)
    if not isinstance(raw, Mapping):
        raise _fail(f"'{key}' must be a dict, got {type(raw).__name__}")
    points: dict[str, WatchPoint] = {}
    for name, entry in raw.items():
        if not isinstance(name, str) or not isinstance(entry, (list, tuple)) or len(entry) != 2:
            raise _fail(f"{key}[{name!r}] must be [step, time], got {entry!r}")
        step, when = entry
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise _fail(f"{key}[{name!r}]: the step must be an int or None, got {step!r}")
        points[name] = WatchPoint(step, _number(when, f"{key}[{name!r}]: the time", none=True))
    return points


def number_on(numbering: dict[str, int], saved: Mapping[str, Any] | None) -> None:
    """Continues a sink's numbering of step-less records (``{name: next number}``) from what it saved (``index``).

    Examples:
        >>> numbering = {"rb": 2}
        >>> number_on(numbering, {"index": {"rb": 7, "env": 3, "bad": "x"}})
        >>> numbering
        {'rb': 7, 'env': 3}
    """
    index = (saved or {}).get("index")
    if isinstance(index, Mapping):
        for name, n in index.items():
            if isinstance(n, int) and not isinstance(n, bool):
                numbering[str(name)] = max(n, numbering.get(str(name), 0))
