"""Following a run's files as they grow: one file by name (``Follower``), and a whole run (``RunFollower``).

A file is read a chunk at a time and handed to its format's parser
(``parsers.py``); a file truncated in place is read again from its start, a
replaced one to its end and then the new one ([tail](cli.md#tail)).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._core.record import Record
from .discover import RunUnreadableError, find_run_files, unreadable
from .parsers import PARSERS, Entry

__all__ = ["CHUNK", "Follower", "RunFollower"]

CHUNK = 1 << 18
"""Bytes read at a time (256 KiB): what a read holds (its records) besides what the reader keeps."""


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

    def __init__(self, path: Path, kind: str) -> None:
        self._file: Any = None
        self._identity: tuple[int, int] | None = None
        self.path = path
        self.kind = kind
        self.parser = PARSERS[kind](path)
        self.offset = 0
        """Bytes of the file read so far."""

    @property
    def skipped(self) -> int:
        """Whole lines (or records) that were not records, so far."""
        return self.parser.skipped

    @property
    def launch(self) -> int:
        """The launch of the file the next items belong to (1 until a launch mark is read)."""
        return self.parser.launch

    def close(self) -> None:
        """Closes the open file (the next read opens it again)."""
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def __del__(self) -> None:
        self.close()

    def _reset(self) -> None:
        self.offset = 0
        self.parser.reset()

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
                raise unreadable(self.path, exc) from exc
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
        data = self._chunk(limit)
        if not data:
            return self.parser.end()
        self.offset += len(data)
        return self.parser.feed(data)

    def entries(self) -> Iterator[Entry]:
        """Every item up to now, a chunk at a time, until the file is quiet."""
        while True:
            before = self.offset
            got = self.read_entries()
            yield from got
            if self.offset == before and not got:
                break
        yield from self.parser.end()

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


def _latest(records: list[Record]) -> list[Record]:
    """Each watch's last record, in the order the watches first appear."""
    latest: dict[str, Record] = {}
    for r in records:
        latest[r.name] = r
    return list(latest.values())


class RunFollower:
    """Follows every file of a run: the files it has, and those of its format that appear in its folder.

    Args:
        path: the run's folder, or one of its files.
        kind: the run's format.
        files: its files when following starts.
    """

    def __init__(self, path: Path, kind: str, files: list[Path]) -> None:
        self.path, self.kind = path, kind
        self.followers = {f: Follower(f, kind) for f in files}

    def _discover(self) -> None:
        if not self.path.is_dir():
            return
        try:
            kind, found = find_run_files(self.path)
        except (FileNotFoundError, RunUnreadableError, OSError):
            return
        for f in found:
            if kind == self.kind and f not in self.followers:
                self.followers[f] = Follower(f, kind)

    def read(self, latest: bool = False) -> list[Record]:
        """The records added to every file since the last call; with ``latest``, only each watch's last.

        ``latest`` bounds memory by watches, not records: a large history is
        read a chunk at a time and only each watch's last record is kept.
        """
        self._discover()
        out: list[Record] = []
        for follower in list(self.followers.values()):
            while True:
                before = follower.offset
                got = [item for _, item in follower.read_entries() if isinstance(item, Record)]
                out = _latest(out + got) if latest else out + got
                if follower.offset == before:
                    break
        return out

    def close(self) -> None:
        """Closes every open file."""
        for follower in self.followers.values():
            follower.close()
