"""Resumed launches in a run's files: finding their marks, and which records they supersede.

A launch that resumed from a checkpoint says so in its launch mark
(``formats.launch_resumes``). The records the launch it resumes logged after
the checkpoint are superseded: the run readers leave them out, so the run
reads as one ([Resuming a run](resuming.md#what-the-readers-show)). The marks
are found by a scan of the files' bytes before the records are read (a mark
comes after the records it supersedes), so the records still stream, and
memory is bounded by the marks, not the records.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.formats import LAUNCH, LAUNCH_PID, csv_launch, csv_launch_more, jsonl_launch, launch_resumes
from .._core.record import Record
from .discover import unreadable

__all__ = ["Resume", "find_resumes"]

_SCAN = 1 << 20
"""Bytes read at a time by the scan."""


@dataclass
class Resume:
    """One resumed launch, from its mark: the launch it resumes, where, and what it superseded.

    Attributes:
        file: the file whose mark it is.
        time: the mark's time (the resuming launch's sink opened then).
        pid: the resuming process.
        began: when the resumed launch began (its records are from then on).
        resumed_pid: the resumed launch's process.
        at: the checkpoint's time.
        by: when the resuming launch began (the superseded records are before it).
        watches: per watch, its step and time at the checkpoint.
        superseded: records left out for it so far, in the last read.
    """

    file: Path
    time: float
    pid: Any
    began: float
    resumed_pid: Any
    at: float
    by: float
    watches: dict[str, tuple[int | None, float | None]] = field(default_factory=dict)
    superseded: int = 0

    def covers(self, r: Record) -> bool:
        """Whether ``r`` is a record of the resumed launch logged after the checkpoint."""
        if not self.began <= r.time < self.by:
            return False
        point = self.watches.get(r.name)
        if point is None:
            return r.time > self.at
        step, when = point
        if r.step is not None and step is not None:
            return r.step > step
        return r.time > (when if when is not None else self.at)


def _resume(file: Path, info: dict[str, Any]) -> Resume | None:
    said = launch_resumes(info)
    if said is None:
        return None
    watches = {name: (step, when) for name, (step, when) in said["watches"].items()}
    return Resume(file, float(info["time"]), info.get("pid"), said["time"], said["pid"], said["at"], said["by"], watches)


def _lines(path: Path, needle: bytes) -> Iterable[bytes]:
    """The whole lines of ``path`` holding ``needle``, in order, read a chunk at a time."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise unreadable(path, exc) from exc
    with handle:
        tail = b""
        while True:
            chunk = handle.read(_SCAN)
            if not chunk:
                return
            data = tail + chunk
            cut = data.rfind(b"\n") + 1
            tail, data = data[cut:], data[:cut]
            at = data.find(needle)
            while at >= 0:
                begin = data.rfind(b"\n", 0, at) + 1
                end = data.find(b"\n", at) + 1
                yield data[begin:end]
                at = data.find(needle, end)


def _jsonl(path: Path) -> list[Resume]:
    out = []
    for line in _lines(path, b'{"launch":'):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        info = jsonl_launch(obj) if isinstance(obj, dict) else None
        found = None if info is None else _resume(path, info)
        if found is not None:
            out.append(found)
    return out


def _csv(path: Path) -> list[Resume]:
    marks: list[dict[str, Any]] = []
    mark: dict[str, Any] | None = None
    needle = f",{LAUNCH},".encode()
    for line in _lines(path, needle):
        fields = next(csv.reader([line.decode("utf-8", "replace")]), [])
        if len(fields) < 5 or fields[1] != LAUNCH:
            continue
        if fields[3] == LAUNCH_PID:
            mark = csv_launch(fields)
            if mark is not None:
                marks.append(mark)
        elif mark is not None:
            csv_launch_more(mark, fields)
    return [found for info in marks if (found := _resume(path, info)) is not None]


def find_resumes(kind: str, files: Iterable[Path]) -> list[Resume]:
    """The resumed launches marked in the files of a run of format ``kind`` (CSV and JSONL carry marks)."""
    scan = {"jsonl": _jsonl, "csv": _csv}.get(kind)
    if scan is None:
        return []
    return [found for path in files for found in scan(path)]
