"""CSVSink: every value as one row of a long-format CSV file, appended with aiofiles."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path

from monitor_async._record import Record

from ._base import BaseSink
from ._files import LineFile

__all__ = ["CSVSink"]

HEADER = "time,name,step,metric,value\n"


def _quote(field: str) -> str:
    """``field`` as the csv module writes it: quoted when it holds a comma, a quote or a line break."""
    buf = io.StringIO()
    # "\r\n" as terminator makes the writer quote fields holding either character.
    csv.writer(buf, lineterminator="\r\n").writerow([field])
    return buf.getvalue()[:-2]


class CSVSink(BaseSink):
    """Appends one CSV row per value: ``time,name,step,metric,value``.

    Guarantees:
        - Long format: ``time`` is the poll's unix time, ``name`` the watch
          name, ``step`` the record's step (empty when it has none),
          ``metric`` the full key (``"<name>/<metric>"``), ``value`` the float
          written with ``repr`` (reads back exactly).
        - The header is written once: a new or empty file gets it, appending
          to a file that starts with it adds none, and a file that starts with
          anything else is refused with an error naming the path.
        - Every batch is formatted as one block of whole rows and appended in
          one unbuffered write through aiofiles (never on the event loop's
          thread), so when ``write`` returns the rows are in the OS and a crash
          never leaves half a row. ``fsync=True`` also forces each batch to
          disk before ``write`` returns.
        - Names holding commas, quotes or line breaks are quoted the way
          ``csv.reader`` reads them back.
        - Nothing is dropped here: the monitor's per-sink queue decides that.
          Parent folders are created on first write; constructing does no I/O.
          One sink is used from one event loop (aiofiles binds the file to the
          loop that opened it).

    Example:
        >>> import asyncio, csv, tempfile
        >>> from monitor_async import Monitor
        >>> path = tempfile.mkdtemp() + "/runs/metrics.csv"
        >>> class Buffer:
        ...     def stats(self):
        ...         return {"size": 3}
        >>> async def main():
        ...     async with CSVSink(path) as sink:
        ...         monitor = Monitor(sink)
        ...         monitor.watch(Buffer(), name="rb")
        ...         await monitor.step()
        >>> asyncio.run(main())
        >>> [row[1:] for row in csv.reader(open(path))]
        [['name', 'step', 'metric', 'value'], ['rb', '', 'rb/size', '3.0']]
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False, name: str | None = None) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"CSVSink: path must be a str or os.PathLike, got {type(path).__name__}")
        self.path = Path(path)
        self.fsync = bool(fsync)
        self.name = name
        self._file = LineFile(self.path, "CSVSink", header=HEADER.encode(), fsync=self.fsync)
        self._quoted: dict[str, str] = {}

    def format(self, records: Sequence[Record]) -> str:
        """The rows of ``records`` as one block of CSV text (what ``write`` appends)."""
        quoted = self._quoted
        lines: list[str] = []
        add = lines.extend
        for r in records:
            name = quoted.get(r.name)
            if name is None:
                name = quoted[r.name] = _quote(r.name)
            step = r.step
            prefix = f"{r.time!r},{name},{'' if step is None else step},"
            metrics = r.metrics
            try:
                add([f"{prefix}{quoted[k]},{v!r}\n" for k, v in metrics.items()])
            except KeyError:
                for k in metrics:
                    if k not in quoted:
                        quoted[k] = _quote(k)
                add([f"{prefix}{quoted[k]},{v!r}\n" for k, v in metrics.items()])
        return "".join(lines)

    async def _open(self) -> None:
        await self._file.open()

    async def _write(self, records: Sequence[Record]) -> None:
        block = self.format(records)
        if block:
            await self._file.write(block.encode())

    async def _close(self) -> None:
        await self._file.close()
