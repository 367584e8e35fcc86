"""The unit of data that flows from a poll task to the sinks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Record:
    """One logged snapshot of one watched target.

    A record is immutable and shared by every sink it is delivered to.

    Attributes:
        name: the watch name the snapshot belongs to.
        step: the logging step taken from the snapshot (``watch(step=...)``),
            or ``None`` when the sink should number the records itself.
        time: unix time (seconds) of the poll that produced the snapshot.
        metrics: flat ``{"<name>/<metric>": float}`` mapping, rates included.

    Example:
        >>> r = Record(name="rb", step=3, time=0.0, metrics={"rb/size": 3.0})
        >>> r.metrics["rb/size"]
        3.0
    """

    name: str
    step: int | None
    time: float
    metrics: dict[str, float]
