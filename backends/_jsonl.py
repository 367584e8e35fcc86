"""JSONLSink: one JSON object per record, one record per line, appended with aiofiles."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from monitor_async._core import AlertEvent, Ranks, Record

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
        - Keys and names are escaped by JSON (``ensure_ascii``): NUL, line
          breaks and lone surrogates (``"\\udcff"``, which UTF-8 cannot
          encode) included, so no key ever fails a batch, and ``json.loads``
          reads every key back exactly.
        - A file deleted or moved away while written (log rotation) is
          noticed at the next write and created again at ``path``, with one
          warning, counted in ``recreated``. The watch names it caches hold
          about ``cache_bytes`` at most.
        - Appending to an existing file keeps what it holds, and marks the new
          launch with a line ``{"launch": {"time", "pid", "host", "version"}}``
          before the first record. Alert events given to `alert()` are lines
          ``{"time", "alert": {...}}``. Parent folders are
          created on first write; constructing does no I/O. One sink is used
          from one event loop (aiofiles binds the file to the loop that opened
          it).

    Args:
        path: the JSON Lines file (``str`` or ``os.PathLike``; anything else
            raises ``TypeError``). Every ``{rank}`` in it is replaced by this
            process's rank (0 outside a distributed job), so
            ``"runs/metrics_{rank}.jsonl"`` gives each rank a file of its
            own. Missing parent folders are created at the first write. An
            existing file is appended to (it has no header to check); a last
            line left incomplete by a killed process is cut away when the
            sink opens. A pipe or a terminal (``"/dev/stdout"``) works too.
        fsync: ``False`` (default): each batch is in the OS when ``write``
            returns, so it survives a crash of this process but not a power
            cut. ``True``: each batch is also forced to disk (``os.fsync``)
            before ``write`` returns, at the cost of one disk sync per batch.
        name: the sink's label in ``Monitor.stats()``
            (``sink/<label>/written``, ``sink/<label>/recreated``...) and in
            messages. ``None`` (default) or ``""``: the class name lowercased without ``Sink``,
            ``"jsonl"``; a monitor makes a repeated label unique with
            ``_1``, ``_2``...
        ranks: ``"all"`` (default): every rank of a distributed job writes
            its own records; a local file is cheap and each batch is one
            locked append, so ranks can share one file (each line's
            ``source`` tells them apart) or use ``{rank}`` in ``path`` for
            one file each. ``"main"``: only the main rank (rank 0) writes; on
            other ranks the monitor leaves the sink out and the file is never
            opened. Anything else raises ``ConfigError``.

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
        return self._encode({"launch": info}) + "\n"

    async def alert(self, event: AlertEvent) -> None:
        """Appends ``{"time": event.time, "alert": event.to_dict()}`` to the file (strict JSON: a
        non-finite value is written as text); the run readers skip it as a record and list it.

        Args:
            event: the [AlertEvent][monitor_async.AlertEvent].
        """
        await self._file.write((self._encode({"time": event.time, "alert": event.to_dict()}) + "\n").encode())

    def format(self, records: Sequence[Record]) -> str:
        """The lines of ``records`` as one block of text (what ``write`` appends)."""
        encode = self._encode
        names = self._names
        lines: list[str] = []
        for r in records:
            name = names.get(r.name)
            if name is None:
                name = self._name(r.name)
            step = "null" if r.step is None else str(r.step)
            source = f',"source":{encode(dict(r.source))}' if r.source else ""  # where it came from
            lines.append(
                f'{{"time":{encode(r.time)},"name":{name},"step":{step},"metrics":{encode(r.metrics)}{source}}}\n'
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
