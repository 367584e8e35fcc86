"""What the sinks that keep firing alerts (the console table, Prometheus' ``ALERTS``) key them by."""

from __future__ import annotations

from typing import Any

from monitor_async._core import AlertEvent

__all__ = ["episode"]


def episode(event: AlertEvent) -> tuple[Any, ...]:
    """The alert episode ``event`` belongs to: its rule, watch, metric and source.

    A firing event and the resolved event that ends it share it; a pattern
    rule's events for two watches (or two ranks) do not.

    Examples:
        >>> firing = AlertEvent("stalled */frames", "firing", "warning", "a", "a/frames", 1.0, 0.0, 1.0, {"rank": 1})
        >>> resolved = AlertEvent("stalled */frames", "resolved", "warning", "a", "a/frames", 2.0, 0.0, 5.0, {"rank": 1})
        >>> episode(firing) == episode(resolved)
        True
    """
    return (event.rule, event.watch, event.metric, tuple(sorted((str(k), str(v)) for k, v in event.source.items())))
