"""Reading a run back: the records that ``JSONLSink`` and ``CSVSink`` wrote, even while they write.

A *run* is a folder (or one file) holding ``*.jsonl`` files written by
``JSONLSink`` or ``*.csv`` files written by ``CSVSink`` (long format:
``time,name,step,metric,value``). When a folder holds both, as the demo's
does, the JSONL files are read (one record per line, so record boundaries
are exact) and the CSV files, which hold the same records, are not.

The files may be growing while they are read. A :class:`Follower` reads a
file from where it stopped and keeps any text after the last line break for
the next read, so a torn last line (a write in progress) is never parsed
half. A CSV record's rows are held back until a row of another record
follows, or a read finds nothing new and no torn line that may continue the
record (the sink writes each batch in one call, so a quiet file holds whole
records). A line that is whole but not
readable (a file edited by hand) is skipped and counted.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.exceptions import RunNotFoundError
from .._core.record import Record

__all__ = ["CSV_HEADER", "Follower", "Run", "find_run_files", "load_run"]

CSV_HEADER = ["time", "name", "step", "metric", "value"]


def _kind(path: Path) -> str | None:
    """``"jsonl"`` or ``"csv"`` when ``path`` looks like a file a sink wrote (or an empty one), else None."""
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv") or not path.is_file():
        return None
    try:
        with path.open("rb") as f:
            head = f.readline(4096)
    except OSError:
        return None
    if suffix == ".jsonl":
        return "jsonl" if not head.strip() or head.lstrip().startswith(b"{") else None
    return "csv" if not head or head.rstrip(b"\r\n").decode("utf-8", "replace").split(",") == CSV_HEADER else None


def find_run_files(path: str | os.PathLike[str]) -> tuple[str, list[Path]]:
    """The format and the files of the run at ``path`` (a run's folder, or one of its files).

    Args:
        path: a folder holding ``*.jsonl`` or ``*.csv`` files of the sinks, or one such file.

    Returns:
        ``("jsonl", files)`` or ``("csv", files)``, files sorted by name.

    Raises:
        RunNotFoundError: ``path`` does not exist or holds no such file; the
            message names the path, what was looked for, and the folders
            below it that hold runs, if any.

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
    if root.is_file():
        kind = _kind(root)
        if kind is None:
            raise RunNotFoundError(
                f"{root} is not a file a sink wrote: expected a .jsonl file of JSONLSink "
                f"or a .csv file of CSVSink starting with {','.join(CSV_HEADER)}"
            )
        return kind, [root]
    found: dict[str, list[Path]] = {"jsonl": [], "csv": []}
    for child in sorted(root.iterdir()):
        kind = _kind(child)
        if kind is not None:
            found[kind].append(child)
    for kind in ("jsonl", "csv"):
        if found[kind]:
            return kind, found[kind]
    below = sorted(
        (d for d in root.iterdir() if d.is_dir() and any(_kind(f) for f in d.iterdir())),
        key=lambda d: d.stat().st_mtime,
    )
    hint = ""
    if below:
        names = ", ".join(str(d) for d in below[-3:])
        hint = f"; the folders below it that hold runs include {names} (the newest last): pass one of them"
    raise RunNotFoundError(
        f"no run in {root}: it holds no .jsonl file of JSONLSink and no .csv file of CSVSink{hint}"
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    out = float(value)
    return out if math.isfinite(out) else None


def _jsonl_record(line: str) -> Record | None:
    """The record on one JSONL line, or None when the line is not one."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    name, step, when, metrics = obj.get("name"), obj.get("step"), _number(obj.get("time")), obj.get("metrics")
    if not isinstance(name, str) or when is None or not isinstance(metrics, dict):
        return None
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        return None
    values = {k: v for k, v in ((k, _number(v)) for k, v in metrics.items()) if v is not None}
    return Record(name=name, step=step, time=when, metrics=values)


@dataclass
class Follower:
    """Reads one growing JSONL or CSV file of a sink, a whole record at a time.

    Guarantees:
        - :meth:`read` returns the records added since the last call, each
          once, in file order; text after the last line break waits for the
          next call (a torn last line is never parsed), and a CSV record is
          returned only once it is whole (see the module docstring).
        - A file that became shorter (truncated, replaced) is read again from
          its start.
        - Whole lines that are not records are skipped and counted in
          ``skipped``; a missing file reads as no records.

    Args:
        path: the file.
        kind: ``"jsonl"`` or ``"csv"``.

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
    _tail: bytes = b""
    _row: str = ""
    _held: list[list[str]] = field(default_factory=list)
    _header_seen: bool = False

    def read(self) -> list[Record]:
        """The records written since the last call (see the class docstring)."""
        try:
            with self.path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:  # truncated or replaced: start over
                    self.offset, self._tail, self._row, self._held, self._header_seen = 0, b"", "", [], False
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        if not data:
            return self._release() if self.kind == "csv" and not self._may_continue() else []
        self.offset += len(data)
        data = self._tail + data
        cut = data.rfind(b"\n") + 1
        self._tail = data[cut:]
        text = data[:cut].decode("utf-8", "replace")
        if self.kind == "jsonl":
            return self._jsonl(text)
        return self._csv(text)

    def read_all(self) -> list[Record]:
        """Every whole record up to now: :meth:`read` until the file is quiet (three reads at most).

        A CSV record whose rows may go on in a torn last line is left for a later read.
        """
        out: list[Record] = []
        for _ in range(3):
            before = self.offset
            out += self.read()
            if self.offset == before:
                break
        if self.kind == "csv" and not self._may_continue():
            out += self._release()
        return out

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

    def _jsonl(self, text: str) -> list[Record]:
        out = []
        for line in text.splitlines():
            if not line.strip():
                continue
            record = _jsonl_record(line)
            if record is None:
                self.skipped += 1
            else:
                out.append(record)
        return out

    def _csv(self, text: str) -> list[Record]:
        out: list[Record] = []
        for line in text.splitlines(keepends=True):
            self._row += line
            if self._row.count('"') % 2:  # inside a quoted field that holds a line break
                continue
            row_text, self._row = self._row, ""
            fields = next(csv.reader([row_text]), [])
            if not fields:
                continue
            if fields == CSV_HEADER and not self._header_seen:
                self._header_seen = True
                continue
            if self._held and fields[:3] != self._held[0][:3]:
                out += self._release()
            self._held.append(fields)
        return out

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
            if len(row) == 5:
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
        return [Record(name=rows[0][1], step=step, time=when, metrics=metrics)]


@dataclass
class Run:
    """A run read back: its records in time order, and where they came from.

    Attributes:
        path: the folder or file given.
        kind: ``"jsonl"`` or ``"csv"``.
        files: the files read.
        records: every whole record, sorted by time (file order among equal times).
        skipped: whole lines that were not records.
    """

    path: Path
    kind: str
    files: list[Path]
    records: list[Record]
    skipped: int = 0

    def watches(self) -> dict[str, list[Record]]:
        """The records of each watch, watches in the order they first appear."""
        out: dict[str, list[Record]] = {}
        for r in self.records:
            out.setdefault(r.name, []).append(r)
        return out

    def select(self, keep: Callable[[str, str], bool]) -> Run:
        """A run whose records keep only the metrics ``keep(watch, key)`` accepts (empty records go).

        Args:
            keep: called with the watch name and the full metric key (``"<watch>/<metric>"``).

        Returns:
            A new :class:`Run`.
        """
        records = []
        for r in self.records:
            metrics = {k: v for k, v in r.metrics.items() if keep(r.name, k)}
            if metrics:
                records.append(Record(name=r.name, step=r.step, time=r.time, metrics=metrics))
        return Run(self.path, self.kind, self.files, records, self.skipped)


def load_run(path: str | os.PathLike[str]) -> Run:
    """Reads the run at ``path`` as it is now (files still being written included).

    Args:
        path: a run's folder, or one of its ``.jsonl`` / ``.csv`` files.

    Returns:
        The :class:`Run`.

    Raises:
        RunNotFoundError: no run at ``path`` (see :func:`find_run_files`).

    Examples:
        >>> import tempfile, pathlib
        >>> run = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (run / "metrics.csv").write_text(
        ...     "time,name,step,metric,value\\n1.0,rb,3,rb/size,3.0\\n1.0,rb,3,rb/free,7.0\\n")
        >>> [(r.name, r.step, r.metrics) for r in load_run(run).records]
        [('rb', 3, {'rb/size': 3.0, 'rb/free': 7.0})]
    """
    kind, files = find_run_files(path)
    followers = [Follower(f, kind) for f in files]
    records: Iterable[Record] = [r for f in followers for r in f.read_all()]
    ordered = sorted(records, key=lambda r: r.time)
    return Run(Path(path), kind, files, ordered, sum(f.skipped for f in followers))
