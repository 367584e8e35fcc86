"""JSONLSink: one JSON object per record, one record per line, appended with aiofiles."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from monitor_async import Record
from monitor_async.distributed import Ranks

from ._files import LineSink

__all__ = ["JSONLSink"]


class JSONLSink(LineSink):
    """Appends one line per record: ``{"time", "name", "step", "metrics"}`` (and ``"source"``).

    Guarantees:
        - Each line is one JSON object: ``time`` (unix seconds of the poll),
          ``name`` (watch name), ``step`` (int or ``null``) and ``metrics``
          (``{"<name>/<metric>": float}``), plus ``source`` (the record's
          provenance: ``{"rank": 1}``, a sender's host/pid/node) when it is
          not empty. ``{rank}`` in ``path`` is replaced by the process's rank;
          ``ranks="main"`` keeps the sink off other ranks. Line breaks inside names are
          escaped by JSON, so every record is exactly one line.
        - Every batch is formatted as one block of whole lines and appended in
          one locked, unbuffered write through aiofiles (never on the event
          loop's thread): when ``write`` returns the lines are in the OS. The
          file holds only whole lines: a write that fails part way (a full
          disk) is taken back, and part of a block left by a process killed
          mid-write is cut away when the file is next opened. ``fsync=True``
          also forces each batch to disk before ``write`` returns.
        - Appending to an existing file keeps what it holds. Parent folders are
          created on first write; constructing does no I/O. One sink is used
          from one event loop (aiofiles binds the file to the loop that opened
          it).

    Example:
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

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = False, name: str | None = None, ranks: Ranks = "all"
    ) -> None:
        super().__init__(path, fsync=fsync, name=name, ranks=ranks)
        self._encode = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
        self._names: dict[str, str] = {}

    def format(self, records: Sequence[Record]) -> str:
        """The lines of ``records`` as one block of text (what ``write`` appends)."""
        encode = self._encode
        names = self._names
        lines: list[str] = []
        for r in records:
            name = names.get(r.name)
            if name is None:
                name = names[r.name] = encode(r.name)
            step = "null" if r.step is None else str(r.step)
            source = f',"source":{encode(dict(r.source))}' if r.source else ""  # where it came from
            lines.append(
                f'{{"time":{encode(r.time)},"name":{name},"step":{step},"metrics":{encode(r.metrics)}{source}}}\n'
            )
        return "".join(lines)

