"""JSONLSink: one JSON object per record, one record per line, appended with aiofiles."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from monitor_async._core import AlertEvent, Ranks, Record
from monitor_async._core.formats import (
    JSONL_ALERT,
    JSONL_DISTRIBUTIONS,
    JSONL_RECORD_PARTS,
    JSONL_TIME,
    distribution_json,
    jsonl_launch_line,
)

from ._files import LineSink

__all__ = ["JSONLSink"]


class JSONLSink(LineSink):
    """Appends one line per record: ``{"time", "name", "step", "metrics"}`` (and ``"source"``, ``"distributions"``).

    A record's distributions keep their histogram in the line
    (``"distributions": {"<watch>/<key>": {...}}``, see
    [Sinks: Files](sinks.md#distributions-in-a-jsonl-line)); their summary is in ``metrics``.

    What it promises: [Sinks: Files](sinks.md#files-csvsink-and-jsonlsink).

    Args:
        path: the JSON Lines file (``str`` or ``os.PathLike``); every
            ``{rank}`` in it becomes this process's rank. An existing file is
            appended to.
        fsync: ``False`` (default): each batch is in the OS when ``write``
            returns; ``True``: also forced to disk.
        name: the sink's label in ``Monitor.stats()`` and in messages;
            ``None`` (default) or ``""``: ``"jsonl"``.
        ranks: ``"all"`` (default): every rank writes; ``"main"``: only rank 0.

    Raises:
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``.
        ConfigError: ``ranks`` is neither ``"main"`` nor ``"all"``.

    Examples:
        >>> import asyncio, json, tempfile
        >>> from monitor_async import Monitor
        >>> path = tempfile.mkdtemp() + "/metrics.jsonl"
        >>> class Buffer:
        ...     def stats(self):
        ...         return {"size": 3}
        >>> async def main():
        ...     async with JSONLSink(path) as sink:
        ...         monitor = Monitor(sink)
        ...         monitor.watch(Buffer(), name="rb")
        ...         await monitor.step()
        >>> asyncio.run(main())
        >>> line = json.loads(open(path).readline())
        >>> line["name"], line["step"], line["metrics"]
        ('rb', None, {'rb/size': 3.0})
    """

    cache_bytes = 1 << 20
    """About how many bytes the cached watch names may hold (more starts the cache afresh)."""

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = False, name: str | None = None, ranks: Ranks = "all"
    ) -> None:
        super().__init__(path, fsync=fsync, name=name, ranks=ranks)
        self._encode = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
        self._names: dict[str, str] = {}  # watch name -> its JSON text
        self._cached = 0  # bytes the names hold, about

    def launch_line(self, info: dict[str, object]) -> str:
        """``{"launch": {"time", "pid", "host", "version"}}``: a new launch appending to this file."""
        return jsonl_launch_line(info, self._encode)

    async def alert(self, event: AlertEvent) -> None:
        """Appends ``{"time": event.time, "alert": event.to_dict()}`` to the file (strict JSON: a
        non-finite value is written as text); the run readers skip it as a record and list it.

        Args:
            event: the [AlertEvent][monitor_async.AlertEvent].
        """
        await self._file.write((self._encode({JSONL_TIME: event.time, JSONL_ALERT: event.to_dict()}) + "\n").encode())

    def format(self, records: Sequence[Record]) -> str:
        """The lines of ``records`` as one block of text (what ``write`` appends)."""
        encode = self._encode
        names = self._names
        at_time, at_name, at_step, at_metrics, at_source = JSONL_RECORD_PARTS
        lines: list[str] = []
        for r in records:
            name = names.get(r.name)
            if name is None:
                name = self._name(r.name)
            step = "null" if r.step is None else str(r.step)
            source = f"{at_source}{encode(dict(r.source))}" if r.source else ""  # where it came from
            if r.distributions:
                shapes = {key: distribution_json(summary) for key, summary in r.distributions.items()}
                source += f',"{JSONL_DISTRIBUTIONS}":{encode(shapes)}'
            lines.append(
                f"{at_time}{encode(r.time)}{at_name}{name}{at_step}{step}{at_metrics}{encode(r.metrics)}{source}}}\n"
            )
        return "".join(lines)

    def _name(self, name: str) -> str:
        """``name`` as JSON text, cached; the cache starts afresh past ``cache_bytes``."""
        if self._cached > self.cache_bytes:
            self._names.clear()
            self._cached = 0
        text = self._names[name] = self._encode(name)
        self._cached += sys.getsizeof(name) + sys.getsizeof(text) + 64
        return text
