"""Logging schedules: when a polled snapshot is worth logging."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .checks import choice, number
from .exceptions import ConfigError


@dataclass(frozen=True, slots=True)
class Every:
    """When to log a watched target (TorchRL's ``Every``, same arguments).

    ``Every.seconds(s)`` logs on a grid ``t0 + k * s``; ``Every.counter(key, n)``
    logs when the counter ``key`` crosses a multiple of ``n``. The rules are in
    [schedules](watching.md#schedules).

    Args:
        kind: ``"seconds"`` (wall clock) or ``"counter"`` (a cumulative counter
            of the snapshot).
        interval: seconds, or counter units, between logs; > 0.
        key: the counter's key (required for ``"counter"``; also the record's
            default step).

    Examples:
        >>> Every.counter("frames", 1000)
        Every(kind='counter', interval=1000, key='frames')
        >>> Every(kind="weekly", interval=1)
        Traceback (most recent call last):
        ...
        monitor_async.ConfigError: Every: kind must be 'seconds' or 'counter', got 'weekly'
    """

    kind: Literal["seconds", "counter"]
    interval: float
    key: str | None = None

    def __post_init__(self) -> None:
        choice("Every", "kind", self.kind, ("seconds", "counter"))
        number("Every", "interval", self.interval)
        if self.kind == "counter":
            if not self.key:
                raise ConfigError("Every: a counter schedule needs a counter key, e.g. Every.counter('frames', 1000)")
            if not isinstance(self.key, str):
                raise ConfigError(f"Every: the counter key must be a string, got {type(self.key).__name__}")

    @classmethod
    def seconds(cls, interval: float) -> Every:
        """A wall-clock schedule: log at most every ``interval`` seconds."""
        return cls(kind="seconds", interval=interval)

    @classmethod
    def counter(cls, key: str, interval: float) -> Every:
        """Log when snapshot entry ``key`` crosses a multiple of ``interval``."""
        return cls(kind="counter", interval=interval, key=key)
