"""When polls happened: a target that notes the time of each call, and the share of poll slots that got one.

Shared with the benchmarks, whose cadence goals read `slot_share` and `on_time`.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Sequence


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


FIRST = 5
"""How many of a target's first polls `origin` reads its slots from."""


def origin(times: Sequence[float], interval: float) -> float:
    """Slot 0 of a target polled every ``interval`` on slots ``origin + k * interval``, read from its first polls.

    A poll never comes before its slot, so the earliest of ``times[j] - j *
    interval`` over the first `FIRST` polls is the grid's start. The first
    poll alone is not: one that a start-up pause made late (a full garbage
    collection among thousands of first polls) would move every later slot,
    and each later poll, on its slot, would look late by as much.

    >>> round(origin([0.06, 1.0, 2.0, 3.0], 1.0), 3)
    0.0
    """
    return min(times[j] - j * interval for j in range(min(len(times), FIRST)))


def on_time(times: Sequence[float], start: float, end: float, interval: float, tolerance: float) -> tuple[int, int]:
    """``(slots in [start, end) polled within tolerance of the slot, slots in [start, end))`` for one target.

    The slots are ``origin(times, interval) + k * interval``; a slot whose
    nearest poll is further than ``tolerance`` off, or that no poll took,
    counts as missed. ``times`` are the target's poll times, sorted.

    >>> on_time([0.06, 1.0, 2.0, 3.07, 4.0], 0.5, 4.5, 1.0, 0.05)  # slots 1, 2 and 3: the third 70 ms late
    (2, 3)
    """
    if not times:
        return 0, 0
    first_slot = origin(times, interval)
    first = max(0, int((start - first_slot) // interval) + 1)
    last = int((end - first_slot) // interval)  # slots first..last-1 lie wholly in the window
    kept = 0
    for k in range(first, last):
        slot = first_slot + k * interval
        i = bisect.bisect_left(times, slot - tolerance)
        if i < len(times) and abs(times[i] - slot) <= tolerance:
            kept += 1
    return kept, max(0, last - first)


def share_on_time(timelines: Iterable[Sequence[float]], start: float, end: float, interval: float,
                  tolerance: float) -> float:
    """The share of the slots in ``[start, end)`` of all ``timelines`` (one per target) polled on time (`on_time`)."""
    kept = slots = 0
    for times in timelines:
        hit, n = on_time(times, start, end, interval, tolerance)
        kept += hit
        slots += n
    return kept / slots if slots else 0.0
