"""CSVSink: every value as one row of a long-format CSV file, appended with aiofiles."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence

from monitor_async import Record
from monitor_async.distributed import Ranks, many_sources, source_text

from ._files import LineSink

__all__ = ["CSVSink"]

HEADER = "time,name,step,metric,value\n"
HEADER_SOURCE = "time,name,step,metric,value,source\n"
_CACHED = 4096
"""Row templates kept (one per distinct key order) before the caches start afresh."""


def _quote(field: str) -> str:
    """``field`` as the csv module writes it: quoted when it holds a comma, a quote or a line break."""
    buf = io.StringIO()
    # "\r\n" as terminator makes the writer quote fields holding either character.
    csv.writer(buf, lineterminator="\r\n").writerow([field])
    return buf.getvalue()[:-2]


class CSVSink(LineSink):
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
          one locked, unbuffered write through aiofiles (never on the event
          loop's thread), so when ``write`` returns the rows are in the OS.
          The file holds only whole rows: a write that fails part way (a full
          disk) is taken back, and part of a block left by a process killed
          mid-write is cut away when the file is next opened. ``fsync=True``
          also forces each batch to disk before ``write`` returns.
        - Provenance: with ``source=True``, or by default where records come
          from several processes (this process is one rank of several, or
          the sink is hosted in a Ray actor by ``RaySink``), the header has a
          sixth column ``source``: the record's source as ``key=value`` pairs
          joined by ``;`` (``rank=1``, ``host=n1;pid=42;node=...``), empty
          for a record without one; ``csv.reader`` and ``pandas.read_csv``
          read it as one string. ``source=False`` keeps five columns.
          ``{rank}`` in ``path`` is replaced by the process's rank;
          ``ranks="main"`` keeps the sink off other ranks.
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

    header = HEADER.encode()

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = False, name: str | None = None, ranks: Ranks = "all",
        source: bool | None = None,
    ) -> None:
        # a sixth column for Record.source: asked for, or where records come from several processes
        self._source = many_sources() if source is None else bool(source)
        if self._source:
            self.header = HEADER_SOURCE.encode()
        self._ends: dict[object, str] = {}
        super().__init__(path, fsync=fsync, name=name, ranks=ranks)
        self._quoted: dict[str, str] = {}
        self._templates: dict[tuple[str, ...], str] = {}

    def format(self, records: Sequence[Record]) -> str:
        """The rows of ``records`` as one block of CSV text (what ``write`` appends).

        A record's rows come from a ``%`` template cached per key order, so a
        record whose keys were seen before is formatted by two C calls (``%``
        writes every value with ``repr``, ``replace`` puts in the row prefix)
        instead of one f-string per value. The text is the same either way.
        """
        quoted = self._quoted
        templates = self._templates
        blocks: list[str] = []
        add = blocks.append
        for r in records:
            name = quoted.get(r.name)
            if name is None:
                name = quoted[r.name] = _quote(r.name)
            step = r.step
            prefix = f"{r.time!r},{name},{'' if step is None else step},"
            metrics = r.metrics
            keys = tuple(metrics)
            template = templates.get(keys)
            if template is None:
                template = self._template(keys)
            end = self._end(r.source) if self._source else ""
            if template:
                text = (template % tuple(metrics.values())).replace("\0", prefix)
                add(text.replace("\1", end) if end else text)
            else:  # a key holding NUL, or no values
                add("".join([f"{prefix}{quoted[k]},{v!r}{end}\n" for k, v in metrics.items()]))
        return "".join(blocks)

    def _end(self, source: object) -> str:
        """``",<source>"``: the source column of a record's rows (cached per distinct source)."""
        end = self._ends.get(source)
        if end is None:
            if len(self._ends) >= _CACHED:
                self._ends.clear()
            end = self._ends[source] = "," + _quote(source_text(source))  # type: ignore[arg-type]
        return end

    def _template(self, keys: tuple[str, ...]) -> str:
        """``"\\0<metric>,%r\\n"`` per key (``\\0`` stands for the row prefix); ``""`` when a key holds NUL."""
        quoted, templates = self._quoted, self._templates
        if len(templates) >= _CACHED or len(quoted) >= 16 * _CACHED:
            templates.clear()  # key names that keep changing: keep the caches bounded
            quoted.clear()
        for k in keys:
            if k not in quoted:
                quoted[k] = _quote(k)
        mark = "\1" if self._source else ""  # where the source column goes
        template = "" if any("\0" in k or "\1" in k for k in keys) else "".join(
            ["\0" + quoted[k].replace("%", "%%") + ",%r" + mark + "\n" for k in keys]
        )
        templates[keys] = template
        return template

