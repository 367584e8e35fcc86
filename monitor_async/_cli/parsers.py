"""One parser per format a run reader reads: JSONL and CSV (this project's sinks), TorchRL's CSV, TensorBoard.

A parser is fed a file's bytes in order, a chunk at a time, and returns the
items that are whole: it keeps text after the last line break (a torn line),
a CSV record's rows until the record is whole, and a TensorBoard record still
being written. The JSONL and CSV layouts come from
``monitor_async._core.formats``, the definitions the sinks write with.
"""

from __future__ import annotations

import csv
import json
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.alerts import AlertEvent
from .._core.formats import (
    CSV_COLUMNS,
    CSV_SOURCE_COLUMNS,
    JSONL_ALERT,
    JSONL_METRICS,
    JSONL_NAME,
    JSONL_SOURCE,
    JSONL_STEP,
    JSONL_TIME,
    LAUNCH,
    LAUNCH_PID,
    csv_launch,
    csv_launch_more,
    finite,
    jsonl_launch,
    parse_source,
)
from .._core.record import Record

__all__ = [
    "CSV_HEADERS", "PARSERS", "CsvParser", "Entry", "Item", "JsonlParser", "Launch", "Parser", "TensorBoardParser",
    "TorchRLParser", "torchrl_line",
]

CSV_HEADERS = (list(CSV_COLUMNS), list(CSV_SOURCE_COLUMNS))
"""The header rows a CSVSink file starts with (without and with the ``source`` column)."""


@dataclass(frozen=True)
class Launch:
    """A launch that appended to a file: its time and what the sink wrote (``pid``, ``host``...)."""

    time: float
    file: Path
    info: dict[str, Any] = field(default_factory=dict)


Item = Record | Launch | AlertEvent
Entry = tuple[int, Item]
"""``(launch, item)``: the item and the launch (1, 2...) of its file it belongs to."""


def torchrl_line(line: str) -> tuple[int, float] | None:
    """``(step, value)`` of a line of TorchRL's ``CSVLogger`` (``step,value``), or None."""
    parts = line.strip().split(",")
    if len(parts) != 2:
        return None
    try:
        return int(parts[0]), float(parts[1])
    except ValueError:
        return None


class Parser:
    """The parser of one file: ``feed`` the bytes read, in order; ``end`` when the file is quiet for now.

    Attributes:
        skipped: whole lines (or records) that were not items.
        launch: the launch of the file the next items belong to (1 until a launch mark is read).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.skipped = 0
        self.launch = 1
        self._tail = b""

    def reset(self) -> None:
        """Forgets what was read: the file is read again from its start (truncated or replaced)."""
        self.launch, self._tail = 1, b""

    def feed(self, data: bytes) -> list[Entry]:
        """The whole items in ``data`` and what was kept from the last feed."""
        data = self._tail + data
        cut = data.rfind(b"\n") + 1
        self._tail = data[cut:]
        return self.lines(data[:cut].decode("utf-8", "replace"))

    def lines(self, text: str) -> list[Entry]:
        """The items of ``text``: whole lines."""
        raise NotImplementedError

    def end(self) -> list[Entry]:
        """What is whole once the file is quiet (a CSV record whose rows cannot go on)."""
        return []


class JsonlParser(Parser):
    """JSONLSink's lines: records, launch lines and alert lines (the keys of ``formats``)."""

    def item(self, line: str) -> Item | None:
        """The record, launch or alert event on one line, or None when the line is none of them."""
        try:
            obj = json.loads(line)
        except ValueError:
            return None
        if not isinstance(obj, dict):
            return None
        if JSONL_METRICS not in obj:
            launch = jsonl_launch(obj)
            if launch is not None:
                return Launch(float(launch["time"]), self.path, launch)
            alert = obj.get(JSONL_ALERT)
            if isinstance(alert, dict):
                try:
                    return AlertEvent.from_dict(alert)
                except (KeyError, TypeError, ValueError):
                    return None
            return None
        name, step, metrics = obj.get(JSONL_NAME), obj.get(JSONL_STEP), obj.get(JSONL_METRICS)
        when = finite(obj.get(JSONL_TIME))
        if not isinstance(name, str) or when is None or not isinstance(metrics, dict):
            return None
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            return None
        values = {k: v for k, v in ((k, finite(v)) for k, v in metrics.items()) if v is not None}
        source = obj.get(JSONL_SOURCE)
        return Record(name=name, step=step, time=when, metrics=values, source=source if isinstance(source, dict) else {})

    def lines(self, text: str) -> list[Entry]:
        out: list[Entry] = []
        for line in text.splitlines():
            if not line.strip():
                continue
            item = self.item(line)
            if item is None:
                self.skipped += 1
                continue
            if isinstance(item, Launch):
                self.launch += 1
            out.append((self.launch, item))
        return out


class CsvParser(Parser):
    """CSVSink's long format: a record's rows (same time, name, step and source) become one record."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._row = ""
        self._held: list[list[str]] = []
        self._header_seen = False
        self._mark: dict[str, Any] | None = None  # the info of the launch mark just read: its rows may go on

    def reset(self) -> None:
        super().reset()
        self._row, self._held, self._header_seen, self._mark = "", [], False, None

    def end(self) -> list[Entry]:
        if self._may_continue():
            return []
        return [(self.launch, r) for r in self._release()]

    def _may_continue(self) -> bool:
        """Whether the text after the last line break may be more rows of the held record."""
        pending = self._row + self._tail.decode("utf-8", "replace")
        if not self._held or not pending:
            return False
        try:
            fields = next(csv.reader([pending]), [])
        except csv.Error:
            return True
        return len(fields) < 4 or fields[:3] == self._held[0][:3]

    def lines(self, text: str) -> list[Entry]:
        out: list[Entry] = []
        for line in text.splitlines(keepends=True):
            self._row += line
            if self._row.count('"') % 2:  # inside a quoted field that holds a line break
                continue
            row_text, self._row = self._row, ""
            fields = next(csv.reader([row_text]), [])
            if not fields:
                continue
            if fields in CSV_HEADERS and not self._header_seen:
                self._header_seen = True
                continue
            if self._held and (fields[:3] != self._held[0][:3] or fields[5:6] != self._held[0][5:6]):
                out += [(self.launch, r) for r in self._release()]
            if len(fields) >= 2 and fields[1] == LAUNCH:
                if len(fields) > 3 and fields[3] != LAUNCH_PID:  # more of the mark before it (a resumed launch's)
                    if self._mark is None or not csv_launch_more(self._mark, fields):
                        self.skipped += 1
                    continue
                info = csv_launch(fields)
                if info is None:
                    self.skipped += 1
                else:
                    self.launch += 1
                    self._mark = info
                    out.append((self.launch, Launch(info["time"], self.path, info)))
                continue
            self._mark = None
            self._held.append(fields)
        return out

    def _release(self) -> list[Record]:
        """The held rows (one record's) as a record."""
        rows, self._held = self._held, []
        if not rows:
            return []
        try:
            when = float(rows[0][0])
            step = int(rows[0][2]) if rows[0][2] else None
        except (ValueError, IndexError):
            self.skipped += len(rows)
            return []
        metrics: dict[str, float] = {}
        for row in rows:
            value = None
            if len(row) in (len(CSV_COLUMNS), len(CSV_SOURCE_COLUMNS)):
                try:
                    value = finite(float(row[4]))
                except ValueError:
                    value = None
            if value is None:
                self.skipped += 1
            else:
                metrics[row[3]] = value
        if not math.isfinite(when):
            self.skipped += len(rows)
            return []
        source = parse_source(rows[0][5]) if len(rows[0]) == len(CSV_SOURCE_COLUMNS) else {}
        return [Record(name=rows[0][1], step=step, time=when, metrics=metrics, source=source)]


class TorchRLParser(Parser):
    """One scalar file of TorchRL's ``CSVLogger`` (``scalars/<key>.csv``, lines ``step,value``)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        parts = list(path.parts)
        at = len(parts) - 1 - parts[::-1].index("scalars") if "scalars" in parts[:-1] else len(parts) - 1
        self.key = "/".join([*parts[at + 1 : -1], path.stem]) if at < len(parts) - 1 else path.stem

    def lines(self, text: str) -> list[Entry]:
        out: list[Entry] = []
        name = self.key.split("/", 1)[0]
        for line in text.splitlines():
            if not line.strip():
                continue
            parsed = torchrl_line(line)
            if parsed is None or not math.isfinite(parsed[1]):
                self.skipped += 1
                continue
            # TorchRL writes no wall time: the step stands in for it (Run.timed is False)
            out.append((self.launch, Record(name, parsed[0], float(parsed[0]), {self.key: parsed[1]})))
        return out


def _event_records(event: Any) -> list[Record]:
    """The scalars of one TensorBoard ``Event``, one record per watch (the tag's first part)."""
    by_watch: dict[str, dict[str, float]] = {}
    for value in event.summary.value:
        if value.WhichOneof("value") == "simple_value":
            number = float(value.simple_value)
        elif value.HasField("tensor") and value.tensor.float_val:
            number = float(value.tensor.float_val[0])
        else:
            continue
        if math.isfinite(number):
            by_watch.setdefault(value.tag.split("/", 1)[0], {})[value.tag] = number
    return [Record(name, int(event.step), float(event.wall_time), metrics) for name, metrics in by_watch.items()]


class TensorBoardParser(Parser):
    """TensorBoard's event files: TFRecord framing (length, its masked CRC, the Event, the Event's CRC).

    Parsed with the protobufs of tensorboardX, a core dependency: reading needs
    no tensorboard install. A damaged length ends the file's reading (the
    records after it cannot be found).
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._broken = False

    def reset(self) -> None:
        super().reset()
        self._broken = False

    def feed(self, data: bytes) -> list[Entry]:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.record_writer import masked_crc32c

        if self._broken:
            return []
        buf = self._tail + data
        out: list[Entry] = []
        at = 0
        while len(buf) - at >= 12:
            header = buf[at : at + 8]
            if struct.unpack("<I", buf[at + 8 : at + 12])[0] != masked_crc32c(header):
                self.skipped += 1
                self._broken = True
                buf, at = b"", 0
                break
            length = struct.unpack("<Q", header)[0]
            if len(buf) - at < 16 + length:
                break  # a record still being written: the next read completes it
            event = Event()
            try:
                event.ParseFromString(buf[at + 12 : at + 12 + length])
            except Exception:  # noqa: BLE001 - protobuf's DecodeError: one damaged record
                self.skipped += 1
                event = None
            at += 16 + length
            if event is not None:
                out += [(self.launch, record) for record in _event_records(event)]
        self._tail = buf[at:]
        return out


PARSERS: dict[str, Callable[[Path], Parser]] = {
    "jsonl": JsonlParser, "csv": CsvParser, "torchrl": TorchRLParser, "tensorboard": TensorBoardParser,
}
"""The parser of each format, by the name ``find_run_files`` gives it."""
