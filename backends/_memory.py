"""MemorySink: records kept in a list, for tests and notebooks."""

from __future__ import annotations

from collections.abc import Sequence

from monitor_async._core import BaseSink, Ranks, Record, check_ranks

__all__ = ["MemorySink"]


class MemorySink(BaseSink):
    """Keeps every record it is given, in arrival order, in ``.records``.

    For tests, notebooks and short runs: memory grows with every record. See
    [Sinks: MemorySink](sinks.md#in-memory-memorysink).

    Args:
        name: the sink's label in ``Monitor.stats()`` and in messages;
            ``None`` (default) or ``""``: ``"memory"``.
        ranks: ``"all"`` (default): every rank keeps its own records;
            ``"main"``: only rank 0.

    Raises:
        ConfigError: ``ranks`` is neither ``"main"`` nor ``"all"``.

    Examples:
        >>> import asyncio
        >>> from monitor_async import Monitor
        >>> sink = MemorySink()
        >>> class T:
        ...     def stats(self):
        ...         return {"x": 1}
        >>> async def main():
        ...     m = Monitor(sink)
        ...     m.watch(T(), name="t")
        ...     await m.step()
        >>> asyncio.run(main())
        >>> sink.records[0].metrics
        {'t/x': 1.0}
    """

    def __init__(self, name: str | None = None, *, ranks: Ranks = "all") -> None:
        self.name = name
        self.ranks = check_ranks(ranks, "MemorySink")
        self.records: list[Record] = []
        self.flushes = 0

    async def _write(self, records: Sequence[Record]) -> None:
        self.records.extend(records)

    async def _flush(self) -> None:
        self.flushes += 1

    def series(self, key: str) -> list[float]:
        """The values of one metric key (``"<name>/<metric>"``) over time."""
        return [r.metrics[key] for r in self.records if key in r.metrics]
