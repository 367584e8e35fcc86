"""When polls happened: a target that notes the time of each call, and the share of poll slots that got one.

Shared with the benchmarks, whose cadence goals read `slot_share`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable


class Clocked:
    """A target that notes the ``time.monotonic()`` of every ``stats()`` call, then answers a few scalars."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def stats(self) -> dict[str, float]:
        self.times.append(time.monotonic())
        return {"calls": float(len(self.times)), "value": 1.0}


def slot_share(times: Iterable[float], start: float, end: float, interval: float) -> tuple[int, int]:
    """``(slots with a poll, slots)`` for one target polled every ``interval`` from ``start``.

    The window ``[start, end)`` is cut into whole slots ``[start + k*interval,
    start + (k+1)*interval)``. A slot counts when at least one ``stats()``
    call began inside it, so a poll that comes more than one interval late
    lands in a later slot and leaves its own slot empty, and a burst of
    catch-up polls cannot fill more than one slot each.

    >>> slot_share([0.01, 0.11, 0.12, 0.35], 0.0, 0.4, 0.1)
    (3, 4)
    """
    slots = int((end - start) / interval + 1e-9)
    limit = start + slots * interval
    hit = {int((t - start) // interval) for t in times if start <= t < limit}
    return len(hit), slots
