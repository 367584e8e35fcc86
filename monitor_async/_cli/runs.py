"""Reading a run back, streamed: the files of this project's sinks, TorchRL's ``CSVLogger`` and TensorBoard.

The formats, the order they are looked for in and how a growing file is
read are in [the CLI guide](cli.md#what-a-run-is). Files are parsed in
chunks, so memory is bounded by a chunk and what a reader keeps per
metric; a ``Follower`` holds text after the last line break (a torn line)
and a CSV record's rows until the record is whole.
"""

from __future__ import annotations

import csv
import heapq
import json
import math
import os
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.alerts import AlertEvent
from .._core.exceptions import RunNotFoundError
from .._core.record import Record

__all__ = [
    "CSV_HEADER", "LAUNCH", "Follower", "Launch", "Run", "RunUnreadableError", "find_run_files", "load_run",
]

CSV_HEADER = ["time", "name", "step", "metric", "value"]
CSV_HEADER_SOURCE = [*CSV_HEADER, "source"]
LAUNCH = "__launch__"
"""The name of the CSV row that marks a new launch appended to a file."""
LOOKED_FOR = (
    "no .jsonl file of JSONLSink, no .csv file of CSVSink, no TorchRL CSVLogger folder (scalars/*.csv) "
    "and no TensorBoard event file (events.out.tfevents.*)"
)
CHUNK = 1 << 18
"""Bytes read at a time (256 KiB): what a read holds (its records) besides what the reader keeps."""
TIMED = ("jsonl", "csv", "tensorboard")


class RunUnreadableError(OSError):
    """A run's folder or file exists but cannot be read (permissions, a folder where a file was expected)."""


@dataclass(frozen=True)
class Launch:
    """A launch that appended to a file: its time and what the sink wrote (``pid``, ``host``...)."""

    time: float
    file: Path
    info: dict[str, Any] = field(default_factory=dict)


Item = Record | Launch | AlertEvent
Entry = tuple[int, Item]
"""``(launch, item)``: the item and the launch (1, 2...) of its file it belongs to."""


def _unreadable(path: Path, exc: OSError) -> RunUnreadableError:
    return RunUnreadableError(exc.errno, f"cannot read {path}: {exc.strerror or exc}")


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(4096)
    except OSError as exc:
        raise _unreadable(path, exc) from exc


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


def _is_events(path: Path) -> bool:
    return path.name.startswith("events.out.tfevents.")


def _kind(path: Path) -> tuple[str, bool] | None:
    """``(format, holds_records)`` when ``path`` is a file one of the formats wrote, else None."""
    if _is_events(path):
        return ("tensorboard", True) if path.is_file() else None
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv") or not path.is_file():
        return None
    head = _head(path)
    first = head.split(b"\n", 1)[0]
    if suffix == ".jsonl":
        if not head.strip():
            return "jsonl", False
        return ("jsonl", True) if head.lstrip().startswith(b"{") else None
    if not head:
        return "csv", False
    fields = first.rstrip(b"\r").decode("utf-8", "replace").split(",")
    if fields in (CSV_HEADER, CSV_HEADER_SOURCE):
        return "csv", len(head) > len(first) + 1
    if _torchrl_line(first.decode("utf-8", "replace")) is not None:
        return "torchrl", True
    return None


def _listdir(root: Path) -> list[Path]:
    try:
        return sorted(root.iterdir())
    except OSError as exc:
        raise _unreadable(root, exc) from exc


def _walk(root: Path, keep: Callable[[Path], bool]) -> list[Path]:
    out: list[Path] = []
    for child in _listdir(root):
        if child.is_dir():
            out += _walk(child, keep)
        elif keep(child):
            out.append(child)
    return out


def _holds_run(folder: Path) -> bool:
    """Whether ``folder`` itself holds a run (its own files, not its subfolders')."""
    try:
        children = list(folder.iterdir())
    except OSError:
        return False
    if (folder / "scalars").is_dir():
        return True
    for child in children:
        try:
            if _is_events(child) or _kind(child) is not None:
                return True
        except OSError:
            continue
    return False


def find_run_files(path: str | os.PathLike[str]) -> tuple[str, list[Path]]:
    """The format and the files of the run at ``path`` (a run's folder, or one of its files).

    Args:
        path: a folder holding files of one of the formats, or one such file.

    Returns:
        ``(kind, files)``: ``kind`` is ``"jsonl"``, ``"csv"``, ``"torchrl"`` or
        ``"tensorboard"``; files sorted by name.

    Raises:
        RunNotFoundError: ``path`` does not exist or holds no such file; the
            message names the formats looked for and the runs below it.
        RunUnreadableError: ``path`` or a file in it cannot be read.

    Examples:
        >>> import tempfile, pathlib
        >>> run = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (run / "metrics.csv").write_text("time,name,step,metric,value\\n")
        >>> kind, files = find_run_files(run)
        >>> kind, [f.name for f in files]
        ('csv', ['metrics.csv'])
    """
    root = Path(path)
    if not root.exists():
        raise RunNotFoundError(f"no run at {root}: it does not exist")
    if not root.is_dir():
        if not root.is_file():
            raise RunUnreadableError(f"cannot read {root}: not a regular file or folder")
        kind = _kind(root)
        if kind is None:
            raise RunNotFoundError(
                f"{root} is not a file a sink wrote: expected a .jsonl file of JSONLSink, a .csv file of CSVSink "
                f"starting with {','.join(CSV_HEADER)}, a TorchRL CSVLogger scalar file or a TensorBoard event file"
            )
        return kind[0], [root]
    found: dict[tuple[str, bool], list[Path]] = {}
    for child in _listdir(root):
        kind = _kind(child)
        if kind is not None and kind[0] != "tensorboard":
            found.setdefault(kind, []).append(child)
    for kind_ in (("jsonl", True), ("csv", True)):
        if kind_ in found:
            return kind_[0], found[kind_]
    scalars = root / "scalars" if (root / "scalars").is_dir() else (root if root.name == "scalars" else None)
    if scalars is not None:
        files = _walk(scalars, lambda p: p.suffix == ".csv")
        if files:
            return "torchrl", files
    events = [f for f in _listdir(root) if _is_events(f) and f.is_file()]
    if events:
        return "tensorboard", events
    below = sorted((d for d in _listdir(root) if d.is_dir() and _holds_run(d)), key=lambda d: d.stat().st_mtime)
    if all(re.fullmatch(r"rank\d+", d.name) for d in below):  # one run's ranks (TensorBoardSink's rank<r>)
        events = _walk(root, _is_events)
        if events:
            return "tensorboard", events
    for kind_ in (("jsonl", False), ("csv", False)):
        if kind_ in found:
            return kind_[0], found[kind_]
    hint = ""
    if below:
        names = ", ".join(str(d) for d in below[-3:])
        hint = f"; the folders below it that hold runs include {names} (the newest last): pass one of them"
    raise RunNotFoundError(f"no run in {root}: it holds {LOOKED_FOR}{hint}")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    out = float(value)
    return out if math.isfinite(out) else None


def _torchrl_line(line: str) -> tuple[int, float] | None:
    parts = line.strip().split(",")
    if len(parts) != 2:
        return None
    try:
        return int(parts[0]), float(parts[1])
    except ValueError:
        return None


def _jsonl_item(line: str, path: Path) -> Item | None:
    """The record, launch or alert event on one JSONL line, or None when the line is none of them."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if "metrics" not in obj:
        launch, alert = obj.get("launch"), obj.get("alert")
        if isinstance(launch, dict) and _number(launch.get("time")) is not None:
            return Launch(float(launch["time"]), path, launch)
        if isinstance(alert, dict):
            try:
                return AlertEvent.from_dict(alert)
            except (KeyError, TypeError, ValueError):
                return None
        return None
    name, step, when, metrics = obj.get("name"), obj.get("step"), _number(obj.get("time")), obj.get("metrics")
    if not isinstance(name, str) or when is None or not isinstance(metrics, dict):
        return None
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        return None
    values = {k: v for k, v in ((k, _number(v)) for k, v in metrics.items()) if v is not None}
    source = obj.get("source")
    return Record(name=name, step=step, time=when, metrics=values, source=source if isinstance(source, dict) else {})


def _source(text: str) -> dict[str, str]:
    """The CSV source column (``rank=1;host=n1``) as a mapping."""
    pairs = (part.partition("=") for part in text.split(";") if part)
    return {k: v for k, _, v in pairs}


@dataclass
class Follower:
    """Reads one growing file of a run, a whole record at a time, following it by name.

    ``read`` returns the records added since the last call, each once, in
    file order; a truncated file is read again from its start, a replaced one
    to its end and then the new one ([tail](cli.md#tail)). Whole lines that
    are not records are counted in ``skipped``; a missing file reads as none.

    Args:
        path: the file.
        kind: ``"jsonl"``, ``"csv"``, ``"torchrl"`` or ``"tensorboard"``.

    Examples:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "metrics.jsonl"
        >>> _ = path.write_text('{"time":1.0,"name":"rb","step":null,"metrics":{"rb/size":3.0}}\\n{"time":2.0,"na')
        >>> follower = Follower(path, "jsonl")
        >>> [r.metrics for r in follower.read()]
        [{'rb/size': 3.0}]
        >>> with path.open("a") as f:
        ...     _ = f.write('me":"rb","step":null,"metrics":{"rb/size":4.0}}\\n')
        >>> [r.metrics for r in follower.read()]
        [{'rb/size': 4.0}]
    """

    path: Path
    kind: str
    skipped: int = 0
    offset: int = 0
    launch: int = 1
    """The launch of the file the next items belong to (1 until a launch marker is read)."""
    _tail: bytes = b""
    _row: str = ""
    _held: list[list[str]] = field(default_factory=list)
    _header_seen: bool = False
    _file: Any = None
    _identity: tuple[int, int] | None = None
    _broken: bool = False
    _key: str = ""

    def __post_init__(self) -> None:
        if self.kind == "torchrl":
            parts = list(self.path.parts)
            at = len(parts) - 1 - parts[::-1].index("scalars") if "scalars" in parts[:-1] else len(parts) - 1
            self._key = "/".join([*parts[at + 1 : -1], self.path.stem]) if at < len(parts) - 1 else self.path.stem

    def close(self) -> None:
        """Closes the open file (the next read opens it again)."""
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def __del__(self) -> None:
        self.close()

    def _reset(self) -> None:
        self.offset, self._tail, self._row, self._held, self._header_seen = 0, b"", "", [], False
        self.launch, self._broken = 1, False

    def _identity_now(self) -> tuple[int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_dev, info.st_ino

    def _chunk(self, size: int) -> bytes:
        """The next bytes of the file by name: the open one's rest, then a replacing file's from its start."""
        if self._file is None:
            try:
                self._file = self.path.open("rb")
            except FileNotFoundError:
                return b""
            except OSError as exc:
                raise _unreadable(self.path, exc) from exc
            info = os.fstat(self._file.fileno())
            self._identity = (info.st_dev, info.st_ino)
        if os.fstat(self._file.fileno()).st_size < self.offset:  # truncated in place: start over
            self._reset()
        self._file.seek(self.offset)
        data: bytes = self._file.read(size)
        if data:
            return data
        now = self._identity_now()
        if now is not None and now != self._identity:  # rotated: the old file is read to its end
            self.close()
            self._reset()
            return self._chunk(size)
        return b""

    def read_entries(self, limit: int = CHUNK) -> list[Entry]:
        """The items (records, launches, alert events) of at most ``limit`` more bytes, with their launch."""
        if self.kind == "tensorboard":
            return self._tensorboard(limit)
        data = self._chunk(limit)
        if not data:
            if self.kind == "csv" and not self._may_continue():
                return [(self.launch, r) for r in self._release()]
            return []
        self.offset += len(data)
        data = self._tail + data
        cut = data.rfind(b"\n") + 1
        self._tail = data[cut:]
        text = data[:cut].decode("utf-8", "replace")
        if self.kind == "jsonl":
            return self._jsonl(text)
        if self.kind == "torchrl":
            return self._torchrl(text)
        return self._csv(text)

    def entries(self) -> Iterator[Entry]:
        """Every item up to now, a chunk at a time, until the file is quiet."""
        while True:
            before = self.offset
            got = self.read_entries()
            yield from got
            if self.offset == before and not got:
                break
        if self.kind == "csv" and not self._may_continue():
            yield from ((self.launch, r) for r in self._release())

    def read(self) -> list[Record]:
        """The records written since the last call (see the class docstring)."""
        out: list[Record] = []
        while True:
            before = self.offset
            got = self.read_entries()
            out += [item for _, item in got if isinstance(item, Record)]
            if self.offset == before:
                return out

    def read_all(self) -> list[Record]:
        """Every whole record up to now (a CSV record whose rows may go on in a torn last line waits)."""
        return [item for _, item in self.entries() if isinstance(item, Record)]

    def _may_continue(self) -> bool:
        """Whether the text after the last line break may be more rows of the held CSV record."""
        pending = self._row + self._tail.decode("utf-8", "replace")
        if not self._held or not pending:
            return False
        try:
            fields = next(csv.reader([pending]), [])
        except csv.Error:
            return True
        return len(fields) < 4 or fields[:3] == self._held[0][:3]

    def _jsonl(self, text: str) -> list[Entry]:
        out: list[Entry] = []
        for line in text.splitlines():
            if not line.strip():
                continue
            item = _jsonl_item(line, self.path)
            if item is None:
                self.skipped += 1
                continue
            if isinstance(item, Launch):
                self.launch += 1
            out.append((self.launch, item))
        return out

    def _torchrl(self, text: str) -> list[Entry]:
        out: list[Entry] = []
        name = self._key.split("/", 1)[0]
        for line in text.splitlines():
            if not line.strip():
                continue
            parsed = _torchrl_line(line)
            if parsed is None or not math.isfinite(parsed[1]):
                self.skipped += 1
                continue
            # TorchRL writes no wall time: the step stands in for it (Run.timed is False)
            out.append((self.launch, Record(name, parsed[0], float(parsed[0]), {self._key: parsed[1]})))
        return out

    def _tensorboard(self, limit: int) -> list[Entry]:
        # TensorBoard's framing (TFRecord: length, its masked CRC, the Event, the Event's CRC) parsed with
        # the protobufs of tensorboardX, a core dependency: reading needs no tensorboard install
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.record_writer import masked_crc32c

        data = self._chunk(limit)
        if not data:
            return []
        self.offset += len(data)
        if self._broken:
            return []
        buf = self._tail + data
        out: list[Entry] = []
        at = 0
        while len(buf) - at >= 12:
            header = buf[at : at + 8]
            if struct.unpack("<I", buf[at + 8 : at + 12])[0] != masked_crc32c(header):
                self.skipped += 1  # a damaged length: the records after it cannot be found
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

    def _csv(self, text: str) -> list[Entry]:
        out: list[Entry] = []
        for line in text.splitlines(keepends=True):
            self._row += line
            if self._row.count('"') % 2:  # inside a quoted field that holds a line break
                continue
            row_text, self._row = self._row, ""
            fields = next(csv.reader([row_text]), [])
            if not fields:
                continue
            if fields in (CSV_HEADER, CSV_HEADER_SOURCE) and not self._header_seen:
                self._header_seen = True
                continue
            if self._held and (fields[:3] != self._held[0][:3] or fields[5:6] != self._held[0][5:6]):
                out += [(self.launch, r) for r in self._release()]
            if len(fields) >= 2 and fields[1] == LAUNCH:
                launch = self._launch_row(fields)
                if launch is not None:
                    out.append(launch)
                continue
            self._held.append(fields)
        return out

    def _launch_row(self, fields: list[str]) -> Entry | None:
        try:
            when = float(fields[0])
            info: dict[str, Any] = {"time": when, "pid": int(float(fields[4]))}
        except (ValueError, IndexError):
            self.skipped += 1
            return None
        self.launch += 1
        return (self.launch, Launch(when, self.path, info))

    def _release(self) -> list[Record]:
        """The held CSV rows (one record's) as a record."""
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
            if len(row) in (5, 6):
                try:
                    value = _number(float(row[4]))
                except ValueError:
                    value = None
            if value is None:
                self.skipped += 1
            else:
                metrics[row[3]] = value
        if not math.isfinite(when):
            self.skipped += len(rows)
            return []
        source = _source(rows[0][5]) if len(rows[0]) == 6 else {}
        return [Record(name=rows[0][1], step=step, time=when, metrics=metrics, source=source)]


class Run:
    """A run: where it is, its format and files, and its items, streamed (or given).

    Args:
        path: the folder or file given.
        kind: ``"jsonl"``, ``"csv"``, ``"torchrl"`` or ``"tensorboard"``.
        files: the files to read.
        records: the records, when they are given rather than read (for programs and tests).
        skipped: whole lines that were not records (grows as the files are read).

    Examples:
        >>> run = Run(Path("r"), "jsonl", [], [Record("rb", 1, 0.0, {"rb/size": 3.0})])
        >>> [r.step for r in run.iter_records()]
        [1]
    """

    def __init__(
        self, path: Path, kind: str, files: list[Path], records: list[Record] | None = None, skipped: int = 0,
        keep: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.path, self.kind, self.files, self._skipped = path, kind, files, skipped
        self._records = records
        self._read = records is not None
        self._keep = keep

    @property
    def skipped(self) -> int:
        """Whole lines that were not records, in the last read (a first read is made if none was)."""
        if not self._read:
            for _ in self.entries():
                pass
        return self._skipped

    @property
    def timed(self) -> bool:
        """Whether records carry a wall time (TorchRL's CSV files have only steps)."""
        return self.kind in TIMED

    def entries(self) -> Iterator[Entry]:
        """Every ``(launch, item)`` of the run, in time order across files (file order within one).

        Reading again reads the files again from their start; ``skipped`` counts the last read.
        """
        keep = self._keep
        if self._records is not None:
            source: Iterator[Entry] = ((1, r) for r in self._records)
        else:
            followers = [Follower(f, self.kind) for f in self.files]
            self._skipped, self._read = 0, True

            def counted(follower: Follower) -> Iterator[Entry]:
                try:
                    yield from follower.entries()
                finally:
                    self._skipped += follower.skipped
                    follower.close()

            source = heapq.merge(*(counted(f) for f in followers), key=lambda entry: entry[1].time)
        for launch, item in source:
            if keep is not None and isinstance(item, Record):
                metrics = {k: v for k, v in item.metrics.items() if keep(item.name, k)}
                if not metrics:
                    continue
                if len(metrics) != len(item.metrics):
                    item = Record(item.name, item.step, item.time, metrics, item.source)
            yield launch, item

    def iter_records(self) -> Iterator[Record]:
        """The run's records, streamed (see ``entries``)."""
        return (item for _, item in self.entries() if isinstance(item, Record))

    @property
    def records(self) -> list[Record]:
        """Every record, in a list (reads the whole run into memory: prefer ``iter_records``)."""
        if self._records is None or self._keep is not None:
            return list(self.iter_records())
        return self._records

    def watches(self) -> dict[str, list[Record]]:
        """The records of each watch, watches in the order they first appear (in memory)."""
        out: dict[str, list[Record]] = {}
        for r in self.iter_records():
            out.setdefault(r.name, []).append(r)
        return out

    def select(self, keep: Callable[[str, str], bool]) -> Run:
        """A run whose records keep only the metrics ``keep(watch, key)`` accepts (empty records go).

        Args:
            keep: called with the watch name and the full metric key (``"<watch>/<metric>"``).

        Returns:
            A new ``Run``, read as lazily as this one.
        """
        before = self._keep
        both = keep if before is None else (lambda w, k: before(w, k) and keep(w, k))
        return Run(self.path, self.kind, self.files, self._records, self._skipped, both)


def load_run(path: str | os.PathLike[str]) -> Run:
    """The run at ``path``: finds its files now; its records are read when asked for (streamed).

    Args:
        path: a run's folder, or one of its files.

    Returns:
        The ``Run``.

    Raises:
        RunNotFoundError: no run at ``path`` (see ``find_run_files``).
        RunUnreadableError: ``path`` or one of its files cannot be read.

    Examples:
        >>> import tempfile, pathlib
        >>> run = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (run / "metrics.csv").write_text(
        ...     "time,name,step,metric,value\\n1.0,rb,3,rb/size,3.0\\n1.0,rb,3,rb/free,7.0\\n")
        >>> [(r.name, r.step, r.metrics) for r in load_run(run).records]
        [('rb', 3, {'rb/size': 3.0, 'rb/free': 7.0})]
    """
    kind, files = find_run_files(path)
    return Run(Path(path), kind, files)
