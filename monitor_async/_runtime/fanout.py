"""Where every record goes: counted once, then put in each sink's channel. Never waits.

The alert rules see every record through an `AlertFeed`, given to the parts
that feed them (the fan-out, the poller, the pushes) when they are built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._core.alerts import Alert, AlertEvent
from .._core.record import Record
from .channel import Channel
from .counters import Counters

if TYPE_CHECKING:
    from .alerts import Engine

__all__ = ["AlertFeed", "Fanout", "to_channels"]


class AlertFeed:
    """The alert engine as the parts feeding it hold it; ``on`` says whether it has a rule.

    ``on`` is read for every record, so a monitor without rules pays one
    attribute read; a rule added later (`add`) turns it on for every part at once.

    Args:
        engine: the monitor's alert engine.
    """

    __slots__ = ("engine", "on")

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.on = engine.active

    def add(self, rule: Alert) -> None:
        """Adds ``rule`` to the engine (see `Engine.add`); the parts feed it from now on."""
        self.engine.add(rule)
        self.on = self.engine.active


def to_channels(channels: Sequence[Channel]) -> Callable[[AlertEvent], None]:
    """What delivers an alert event: put in each sink's channel (sinks with an ``alert()`` method take it)."""

    def deliver(event: AlertEvent) -> None:
        for channel in channels:
            channel.put_event(event)

    return deliver


class Fanout:
    """The one fan-out: polls, pushes and reductions hand their records to it.

    Args:
        channels: one per sink.
        counters: the monitor's counters (``records``).
        alerts: the alert rules, told of every record of a name they want.
    """

    __slots__ = ("alerts", "channels", "counters", "puts")

    def __init__(self, channels: Sequence[Channel], counters: Counters, alerts: AlertFeed) -> None:
        self.channels = channels
        self.counters = counters
        self.alerts = alerts
        self.puts = tuple(channel.put for channel in channels)

    def emit(self, record: Record) -> None:
        """Counts ``record``, puts it in each sink's channel, then shows it to the alert rules (if any)."""
        self.counters.records += 1
        for put in self.puts:
            put(record)
        alerts = self.alerts
        if alerts.on:
            engine = alerts.engine
            # a name no rule wants a record of is passed over while its snapshot keeps its size (see
            # `Engine.idle`): with its rules reading the watch, a watched target's records are such
            if engine.idle.get(record.name) != len(record.metrics) or record.distributions:
                engine.observe(record)
