"""What an alert tells a person: :class:`AlertEvent`, the contract between the rules and the sinks."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .record import EMPTY_SOURCE, Source

__all__ = ["SEVERITIES", "STATES", "AlertEvent", "Severity", "State"]

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
        """The event :meth:`to_dict` gave (a value written as text is read back as a float)."""
        value = data.get("value")
        if isinstance(value, str):
            value = float(value)
        return cls(
            str(data["rule"]), data["state"], data["severity"], str(data["watch"]), data.get("metric"),
            None if value is None else float(value), float(data["since"]), float(data["time"]),
            data.get("source") or {}, str(data.get("message", "")),
        )
