"""The disk spool of a network sink: its batches wait here, in order, until the server acknowledged them.

One file per batch, ``<sequence>-<records>.batch``, holding
``{"destination": ..., "records": [...]}``, written to a temporary name and
renamed (whole after a kill; no ``fsync``). A lock file (``flock``) keeps two
sinks off one folder. The file ``sending`` names the batch whose request is
(or last was) out, ``unsure`` the batches whose reply was lost: a later sink
knows those may have reached the server already and counts them as duplicates.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from monitor_async._core import ConfigError, Record
from monitor_async._core.formats import distribution_json, parse_distribution

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory lock, one sink per folder is up to the user
    fcntl = None  # type: ignore[assignment]

__all__ = ["Batch", "Spool"]

log = logging.getLogger("monitor_async")

_FILE = re.compile(r"^(\d{12})-(\d+)\.batch$")
_FIELDS = tuple(f.name for f in fields(Record))
_DISTRIBUTIONS = "distributions"
_CACHE_BYTES = 4 << 20
"""Batches whose records stay in memory as well (the newest first fill it); the others are read back."""


@dataclass(slots=True, eq=False)
class Batch:
    """One batch in the spool: a file, and its records while they fit in the cache."""

    seq: int
    count: int
    size: int
    records: list[Record] | None = None
    destination: str | None = None
    waited: bool = False
    """It did not go out at its first try (an outage, a backlog, a previous process): counted as replayed."""
    unsure: bool = False
    """An earlier try may have reached the server: delivering it may make duplicates."""
    ack: Any = None
    """What the writer that handed it over waits on, if anyone does (see ResilientSink)."""
    stored: bool = True
    """Its file exists; ``False``: the spool could not be written, the batch is held in memory only."""


def _encode(destination: str | None, records: Sequence[Record]) -> bytes:
    body = {
        "destination": destination,
        "records": [_fields(r) for r in records],
    }
    # Record.source is a read-only mapping: spooled as a plain object, made a Source again on replay
    return json.dumps(body, separators=(",", ":"), default=dict).encode()


def _fields(record: Record) -> dict[str, Any]:
    """``record`` as JSON can hold it; its distributions in the JSONL line's format (``distribution_json``)."""
    out = {name: getattr(record, name) for name in _FIELDS}
    if record.distributions:
        out[_DISTRIBUTIONS] = {key: distribution_json(s) for key, s in record.distributions.items()}
    else:
        del out[_DISTRIBUTIONS]
    return out


def _record(item: dict[str, Any]) -> Record:
    """The record `_fields` wrote; a distribution that does not read back is left out."""
    given = {k: v for k, v in item.items() if k in _FIELDS}
    shapes = given.pop(_DISTRIBUTIONS, None)
    if isinstance(shapes, dict):
        parsed = {key: parse_distribution(shape) for key, shape in shapes.items()}
        given[_DISTRIBUTIONS] = {key: s for key, s in parsed.items() if s is not None}
    return Record(**given)


class Spool:
    """The batches of one sink, oldest first, each in its own file under ``path``.

    Args:
        path: the folder; ``None`` makes a private temporary one on `open`.
        limit: the most bytes the files may take; the oldest batches go first.
        label: the sink's label, for messages and the temporary folder's name.
    """

    def __init__(self, path: Path | None, limit: int, label: str) -> None:
        self.requested = path
        self.path = path if path is not None else Path(tempfile.gettempdir())
        self.limit = limit
        self.label = label
        self.batches: deque[Batch] = deque()
        self.bytes = 0
        self.records = 0
        """How many records the spool holds."""
        self.busy: Batch | None = None
        """The batch being sent: never dropped to make room."""
        self._next = 0
        self._cached = 0
        self._lock: int | None = None
        self._unsure: set[int] = set()
        self.write_error: OSError | None = None
        """Why the last batch could not be written to the folder (``None`` once one could)."""
        self._undeletable = False

    @property
    def temporary(self) -> bool:
        """Whether the folder is a private temporary one (no later process will look there)."""
        return self.requested is None

    # ----------------------------------------------------------------- lifecycle
    def open(self) -> list[Batch]:
        """Creates and locks the folder; returns the batches a previous process left, oldest first.

        Raises:
            ConfigError: the folder cannot be made, or another sink holds it.
        """
        if self.requested is None:
            self.path = Path(tempfile.mkdtemp(prefix=f"monitor-async-{self.label}-"))
        else:
            self.path = self.path.absolute()  # the log names it: say where it is from anywhere
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"sink {self.label!r}: cannot create spool_dir {str(self.path)!r}: {exc}") from exc
        self._take_lock()
        found: list[tuple[int, int, Path]] = []
        try:
            items = list(self.path.iterdir())
        except OSError as exc:
            self.close()
            raise ConfigError(f"sink {self.label!r}: cannot read spool_dir {str(self.path)!r}: {exc}") from exc
        for item in items:
            match = _FILE.match(item.name)
            if match:
                found.append((int(match[1]), int(match[2]), item))
            elif item.name.endswith(".tmp"):  # a write cut short by a crash: never renamed, never counted
                with contextlib.suppress(OSError):  # a read-only folder: it stays, still never counted
                    item.unlink(missing_ok=True)
        stored = self._read_unsure()
        unsure = stored | self._read_sending()
        left: list[Batch] = []
        for seq, count, item in sorted(found):
            try:
                size = item.stat().st_size
            except OSError:
                continue
            left.append(Batch(seq, count, size, waited=True, unsure=seq in unsure))
        # the marks are kept in one place from now on: "unsure", for the batches still here
        self._unsure = stored
        with contextlib.suppress(OSError):  # a read-only folder: the marks cannot move, the batches still go
            self.mark_unsure(b.seq for b in left if b.unsure)
            (self.path / "sending").unlink(missing_ok=True)
        self.batches.extend(left)
        self.bytes = sum(b.size for b in left)
        self.records = sum(b.count for b in left)
        self._next = (left[-1].seq + 1) if left else 0
        return left

    def _take_lock(self) -> None:
        if fcntl is None:
            return
        # read-only: the lock needs no write access, and an open writer would keep the folder's file system
        # from being remounted read-only
        try:
            fd = os.open(self.path / ".lock", os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"sink {self.label!r}: cannot use spool_dir {str(self.path)!r}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise ConfigError(
                f"sink {self.label!r}: spool_dir {str(self.path)!r} is in use by another sink "
                "(in this process or another one); give each sink its own spool_dir"
            ) from exc
        self._lock = fd

    def close(self) -> None:
        """Releases the lock; a temporary folder left empty is removed."""
        if not self.batches:
            with contextlib.suppress(OSError):  # a folder turned read-only: the mark stays, harmless
                (self.path / "sending").unlink(missing_ok=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        if self.temporary and not self.batches:
            shutil.rmtree(self.path, ignore_errors=True)

    # ------------------------------------------------------------------- batches
    def append(self, destination: str | None, records: Sequence[Record]) -> tuple[Batch | None, list[Batch]]:
        """Writes a batch after the others; returns it and the batches dropped to make room.

        The oldest batches go first (never the one being sent). A batch
        larger than the whole spool is not written: it comes back as ``None``
        and is dropped itself.
        """
        data = _encode(destination, records)
        size = len(data)
        if size > self.limit:
            return None, []
        dropped: list[Batch] = []
        while self.bytes + size > self.limit:
            oldest = next((b for b in self.batches if b is not self.busy), None)
            if oldest is None:
                break
            self.remove(oldest)
            dropped.append(oldest)
        seq = self._next
        self._next += 1
        final = self.path / f"{seq:012d}-{len(records)}.batch"
        temp = final.with_suffix(".tmp")
        batch = Batch(seq, len(records), size, destination=destination)
        try:
            temp.write_bytes(data)
            os.replace(temp, final)
        except OSError as exc:  # a full or read-only file system: the batch is held in memory instead
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            self.write_error = exc
            batch.stored = False
            batch.records = list(records)
        else:
            self.write_error = None
            if self._cached + size <= _CACHE_BYTES:
                batch.records = list(records)
                self._cached += size
        self.batches.append(batch)
        self.bytes += size
        self.records += batch.count
        return batch, dropped

    def load(self, batch: Batch) -> tuple[str | None, list[Record]]:
        """The destination and records of ``batch`` (from memory, or read back from its file).

        Raises:
            OSError, ValueError: the file is gone or unreadable (the caller drops the batch).
        """
        if batch.records is not None:
            return batch.destination, batch.records
        body = json.loads(self._file(batch).read_bytes())
        records = [_record(item) for item in body["records"]]
        return body.get("destination"), records

    def remove(self, batch: Batch) -> None:
        """Deletes ``batch`` (delivered, refused or dropped)."""
        try:
            self.batches.remove(batch)
        except ValueError:
            return
        self.bytes -= batch.size
        self.records -= batch.count
        if batch.records is not None:
            batch.records = None
            if batch.stored:
                self._cached -= batch.size
        if not batch.stored:
            return
        try:
            self._file(batch).unlink(missing_ok=True)
            if batch.seq in self._unsure:
                self.mark_unsure(self._unsure - {batch.seq})
        except OSError as exc:
            if not self._undeletable:
                self._undeletable = True
                log.warning(
                    "sink %r: cannot delete %s from the spool (%s); a later sink on this spool_dir "
                    "sends it again, a duplicate", self.label, self._file(batch), exc,
                )

    @property
    def in_memory(self) -> tuple[int, int]:
        """``(batches, records)`` held in memory only, because the folder could not be written."""
        held = [b for b in self.batches if not b.stored]
        return len(held), sum(b.count for b in held)

    def mark_unsure(self, seqs: Iterable[int]) -> None:
        """Records which batches may already have reached the server (kept across a crash)."""
        wanted = set(seqs)
        if wanted == self._unsure:
            return
        self._unsure = wanted
        target = self.path / "unsure"
        if not wanted:
            target.unlink(missing_ok=True)
            return
        temp = target.with_suffix(".tmp")
        temp.write_text("".join(f"{seq}\n" for seq in sorted(wanted)), encoding="ascii")
        os.replace(temp, target)

    @property
    def unsure(self) -> set[int]:
        return set(self._unsure)

    def sending(self, batch: Batch) -> None:
        """Notes that ``batch``'s request goes out now: if the process dies before the reply, it is unsure."""
        target = self.path / "sending"
        temp = target.with_suffix(".tmp")
        temp.write_text(f"{batch.seq}\n", encoding="ascii")
        os.replace(temp, target)

    def not_sending(self) -> None:
        """The request came back without reaching the server (or its batch is marked unsure instead)."""
        (self.path / "sending").unlink(missing_ok=True)

    def _read_sending(self) -> set[int]:
        try:
            text = (self.path / "sending").read_text(encoding="ascii").strip()
        except OSError:
            return set()
        return {int(text)} if text.isdigit() else set()

    def _read_unsure(self) -> set[int]:
        try:
            text = (self.path / "unsure").read_text(encoding="ascii")
        except OSError:
            return set()
        return {int(line) for line in text.split() if line.isdigit()}

    def file(self, batch: Batch) -> Path:
        """The path of ``batch``'s file."""
        return self._file(batch)

    def _file(self, batch: Batch) -> Path:
        return self.path / f"{batch.seq:012d}-{batch.count}.batch"
