"""The monitor's own cumulative poll counters, and the grace a cancelled task gets."""

from __future__ import annotations

__all__ = ["GRACE", "Counters"]

GRACE = 0.25
"""Seconds granted past a deadline for a cancelled task to end before it is left behind."""


class Counters:
    """The monitor's own cumulative poll counters (``Monitor.stats()``)."""

    __slots__ = (
        "calls_abandoned", "polls", "polls_failed", "polls_missed", "polls_timed_out", "records", "targets_dead", "targets_died",
        "values_dropped",
    )

    def __init__(self) -> None:
        self.polls = 0
        self.polls_failed = 0
        self.polls_timed_out = 0
        self.polls_missed = 0
        self.records = 0
        self.values_dropped = 0
        self.targets_dead = 0  # dead targets polled with backoff now (_health)
        self.targets_died = 0
        self.calls_abandoned = 0  # thread or Ray calls still running when their watch was removed

    def report(self, watches: int, log_dropped: int, loop_lag_max: float) -> dict[str, float]:
        """``Monitor.stats()``'s first keys, in their order: these counters, with the figures given."""
        return {
            "polls": float(self.polls),
            "polls_failed": float(self.polls_failed),
            "polls_timed_out": float(self.polls_timed_out),
            "polls_missed": float(self.polls_missed),
            "records": float(self.records),
            "values_dropped": float(self.values_dropped),
            "watches": float(watches),
            "targets_dead": float(self.targets_dead),
            "targets_died": float(self.targets_died),
            "log_dropped": float(log_dropped),
            "calls_abandoned": float(self.calls_abandoned),
            "loop_lag_max": loop_lag_max,
        }
