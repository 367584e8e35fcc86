"""Records holding distributions, as the monitor makes them: the summary, and its scalars in ``metrics``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from monitor_async import Record
from monitor_async._core.distribution import Summary, summarize
from monitor_async._core.record import new_record

RETURNS = [-12.5, -3.0, 0.0, 0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 40.0]
"""Ten episode returns: both signs, zeros and a long tail."""


def dist_record(
    name: str, values: Mapping[str, Any], *, step: int | None = None, time: float = 1_700_000_000.0,
    metrics: Mapping[str, float] | None = None, bounds: Sequence[float] | None = None,
) -> Record:
    """A record of watch ``name`` whose keys ``values`` are distributions (their scalars in ``metrics`` too)."""
    out = dict(metrics or {})
    summaries: dict[str, Summary] = {}
    for key, numbers in values.items():
        summary = summaries[f"{name}/{key}"] = summarize(numbers, bounds=bounds)
        out.update({f"{name}/{key}/{field}": v for field, v in summary.scalars().items()})
    return new_record(name, step, time, out, distributions=summaries)
