"""Where every record goes: counted once, then put in each sink's channel. Never waits."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .._core.alerts import AlertEvent
from .._core.record import Record
from .channel import Channel
from .counters import Counters

__all__ = ["Fanout"]


class Fanout:
    """The one fan-out: polls, pushes and reductions hand their records to it."""

    __slots__ = ("channels", "counters", "idle", "observer")

    def __init__(self, channels: Sequence[Channel], counters: Counters) -> None:
        self.channels = channels
        self.counters = counters
        self.observer: Callable[[Record], None] | None = None
        """Sees every record after the channels (the alert rules), or ``None`` when no rule is set."""
        self.idle: dict[str, int] = {}
        """Record names the observer does not want, with their snapshot size then (see `Engine.idle`)."""

    def emit(self, record: Record) -> None:
        """Counts ``record`` and puts it in each sink's channel."""
        self.counters.records += 1
        for channel in self.channels:
            channel.put(record)
        observer = self.observer
        if observer is not None and self.idle.get(record.name) != len(record.metrics):
            observer(record)

    def event(self, event: AlertEvent) -> None:
        """Puts an alert event in each sink's channel (sinks with an ``alert()`` method take it)."""
        for channel in self.channels:
            channel.put_event(event)
