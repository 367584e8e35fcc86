"""The wait between two tries of something that failed: exponential, capped, optionally jittered.

One definition for every retry loop: a network sink's deliveries, a dead
target's polls, a reduction's publishing to its store.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .checks import number, refuse

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """How long a network sink waits before trying again: exponential, with full jitter.

    Retry ``n`` waits a random time between 0 and ``min(cap, first * 2**n)``
    seconds, or the server's ``Retry-After``. See
    [Remote trackers: the spool](remote-trackers.md#the-spool-and-what-at-least-once-means).

    Args:
        first: the longest wait before the first retry, in seconds (default 0.5; > 0).
        cap: the longest wait between two tries, in seconds (default 30.0; >= ``first``).
        max_retry_after: the longest ``Retry-After`` obeyed, in seconds (default 300.0; > 0).

    Raises:
        ConfigError: a value out of range.

    Examples:
        >>> import random
        >>> backoff = Backoff(first=0.5, cap=4.0)
        >>> print(*(backoff.ceiling(n) for n in range(5)))
        0.5 1.0 2.0 4.0 4.0
        >>> 0.0 <= backoff.delay(3, rng=random.Random(0)) <= 4.0
        True
        >>> backoff.delay(0, retry_after=2.5)
        2.5
    """

    first: float = 0.5
    cap: float = 30.0
    max_retry_after: float = 300.0

    def __post_init__(self) -> None:
        for name in ("first", "cap", "max_retry_after"):
            number("Backoff", name, getattr(self, name), unit="seconds")
        if self.cap < self.first:
            raise refuse("Backoff", "cap", f"at least first ({self.first!r})", self.cap)

    def ceiling(self, attempt: int) -> float:
        """The longest wait before retry number ``attempt`` (0 for the first); the wait itself without jitter."""
        return float(min(self.cap, self.first * 2.0 ** min(attempt, 64)))

    def delay(self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """The wait before retry number ``attempt``: ``retry_after`` when the server gave one, else jittered."""
        if retry_after is not None and math.isfinite(retry_after):
            return float(min(max(retry_after, 0.0), self.max_retry_after))
        return (rng or random).uniform(0.0, self.ceiling(attempt))
