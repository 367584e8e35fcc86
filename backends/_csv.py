"""CSVSink: every value as one row of a long-format CSV file, appended with aiofiles."""

from __future__ import annotations

import csv
import io
import os
import sys
from collections.abc import Sequence

from monitor_async._core import Ranks, Record, many_sources
from monitor_async._core.formats import CSV_HEADER, CSV_HEADER_SOURCE, csv_launch_row, source_text

from ._files import LineSink
from ._text import escape

__all__ = ["CSVSink"]

_ENTRY = 64
"""Bytes a cache entry costs besides its strings (its slot in the dict's table), for the budget."""


def _quote(field: str) -> str:
    """``field`` as the csv module writes it (quoted when it holds a comma, a quote or a line break), escaped first.

    What UTF-8 cannot encode (a lone surrogate) is escaped (see ``escape``).
    A field that needs neither is returned as it is (no copy to keep).
    """
    field = escape(field) or field
    buf = io.StringIO()
    # "\r\n" as terminator makes the writer quote fields holding either character.
    csv.writer(buf, lineterminator="\r\n").writerow([field])
    quoted = buf.getvalue()[:-2]
    return field if quoted == field else quoted


class CSVSink(LineSink):
    """Appends one CSV row per value: ``time,name,step,metric,value`` (and ``source``).

    What it promises: [Sinks: Files](sinks.md#files-csvsink-and-jsonlsink).

    Args:
        path: the CSV file (``str`` or ``os.PathLike``); every ``{rank}`` in it
            becomes this process's rank. An existing file is appended to.
        fsync: ``False`` (default): each batch is in the OS when ``write``
            returns; ``True``: also forced to disk.
        name: the sink's label in ``Monitor.stats()`` and in messages;
            ``None`` (default) or ``""``: ``"csv"``.
        ranks: ``"all"`` (default): every rank writes; ``"main"``: only rank 0.
        source: whether rows get a sixth column, ``source``: ``None``
            (default) where records come from several processes, ``True``
            always, ``False`` never.

    Raises:
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``.
        ConfigError: ``ranks`` is neither ``"main"`` nor ``"all"``.
        ValueError: when the sink opens, the file starts with another header.

    Examples:
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

    header = CSV_HEADER.encode()
    cache_bytes = 4 << 20
    """About how many bytes the row templates and quoted names may hold (more starts them afresh)."""

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = False, name: str | None = None, ranks: Ranks = "all",
        source: bool | None = None,
    ) -> None:
        # a sixth column for Record.source: asked for, or where records come from several processes
        self._source = many_sources() if source is None else bool(source)
        if self._source:
            self.header = CSV_HEADER_SOURCE.encode()
        self._ends: dict[object, str] = {}
        super().__init__(path, fsync=fsync, name=name, ranks=ranks)
        self.keys_escaped = 0
        self._quoted: dict[str, str] = {}
        self._templates: dict[tuple[str, ...], str] = {}
        self._escaping: dict[tuple[str, ...], tuple[str, int]] = {}  # key orders holding escaped keys
        self._cached = 0  # bytes the three caches hold, about

    def launch_line(self, info: dict[str, object]) -> str:
        """A row named ``__launch__`` (metric ``__launch__/pid``, the process id as value): a new launch
        appending to this file, in the long format that ``csv.reader`` and pandas read."""
        return csv_launch_row(info, source=self._source)

    def counters(self) -> dict[str, float]:
        """``recreated`` (see ``LineSink``) and ``keys_escaped``: values written under an escaped key."""
        out = super().counters()
        out["keys_escaped"] = float(self.keys_escaped)
        return out

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
                name = self._quote(r.name)
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
                fields = self._fields(keys)
                add("".join([f"{prefix}{field},{v!r}{end}\n" for field, v in zip(fields, metrics.values(), strict=True)]))
        return "".join(blocks)

    def _quote(self, text: str) -> str:
        """``_quote(text)``, cached; the caches start afresh past ``cache_bytes``."""
        if self._cached > self.cache_bytes:
            self._clear()
        quoted = self._quoted[text] = _quote(text)
        self._cached += sys.getsizeof(text) + (0 if quoted is text else sys.getsizeof(quoted)) + _ENTRY
        return quoted

    def _end(self, source: object) -> str:
        """``",<source>"``: the source column of a record's rows (cached per distinct source)."""
        end = self._ends.get(source)
        if end is None:
            if self._cached > self.cache_bytes:
                self._clear()
            end = self._ends[source] = "," + _quote(source_text(source))  # type: ignore[arg-type]
            self._cached += sys.getsizeof(end) + _ENTRY
        return end

    def _template(self, keys: tuple[str, ...]) -> str:
        """``"\\0<metric>,%r\\1\\n"`` per key (``\\0`` stands for the row prefix, ``\\1`` for the source column).

        ``""`` when a key holds NUL or ``\\1``. Counts the record's escaped
        keys in ``keys_escaped``: a key order that holds one is cached apart,
        so the common one costs no check at all.
        """
        escaping = self._escaping.get(keys)
        if escaping is not None:
            self.keys_escaped += escaping[1]
            return escaping[0]
        if self._cached > self.cache_bytes:
            self._clear()  # key names that keep changing: keep the caches bounded
        fields = self._fields(keys)
        mark = "\1" if self._source else ""  # where the source column goes
        template = "" if any("\0" in k or "\1" in k for k in keys) else "".join(
            ["\0" + field.replace("%", "%%") + ",%r" + mark + "\n" for field in fields]
        )
        self._cached += sys.getsizeof(template) + sys.getsizeof(keys) + _ENTRY
        escaped = sum(1 for k in keys if not k.isascii() and escape(k) is not None)
        if escaped:
            self._escaping[keys] = (template, escaped)
            self.keys_escaped += escaped
        else:
            self._templates[keys] = template
        return template

    def _fields(self, keys: tuple[str, ...]) -> list[str]:
        """The quoted (and escaped) text of each key."""
        quoted = self._quoted
        return [field if (field := quoted.get(k)) is not None else self._quote(k) for k in keys]

    def _clear(self) -> None:
        self._quoted.clear()
        self._templates.clear()
        self._escaping.clear()
        self._ends.clear()
        self._cached = 0
