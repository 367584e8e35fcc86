"""An append-only line file written through aiofiles: the I/O under CSVSink and JSONLSink.

Each batch arrives as one block of whole lines and goes to the OS in one
unbuffered ``write`` on an ``O_APPEND`` file, so when ``write`` returns the
lines are visible to readers and survive a crash of this process, and
concurrent appenders never interleave inside a block. A write that the OS
cuts short (a full disk) is finished by the next one after a line break, so
every later line still starts on a line of its own.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiofiles
import aiofiles.os

from monitor_async._record import Record

from ._base import BaseSink

__all__ = ["LineFile", "LineSink"]

_fsync = aiofiles.os.wrap(os.fsync)
_fstat = aiofiles.os.wrap(os.fstat)


class LineFile:
    """One append-only file of whole lines, opened on first use.

    ``header`` (one line, ending in a newline) is written when the file is
    new or empty; an existing file must already start with it.
    """

    def __init__(self, path: Path, owner: str, *, header: bytes = b"", fsync: bool = False) -> None:
        self.path = path
        self.owner = owner
        self.header = header
        self.fsync = fsync
        self._file: Any = None
        self._torn = False

    async def open(self) -> None:
        path = self.path
        try:
            await aiofiles.os.makedirs(path.parent, exist_ok=True)
            file = await aiofiles.open(path, "ab", buffering=0)
        except OSError as exc:
            raise OSError(exc.errno, f"{self.owner} cannot append to {str(path)!r}: {exc.strerror}") from exc
        try:
            lead = await self._lead(file)
            self._file = file
            if lead:
                await self.write(lead)
        except BaseException:
            self._file = None
            await file.close()
            raise

    async def _lead(self, file: Any) -> bytes:
        """What goes before the first block: the header of a new file, a line break after a torn line."""
        size = (await _fstat(file.fileno())).st_size
        if size == 0:
            return self.header
        lead = b""
        async with aiofiles.open(self.path, "rb") as reader:
            if self.header:
                first = await reader.readline()
                if first != self.header:
                    raise ValueError(
                        f"{self.owner}: {str(self.path)!r} starts with {first[:200]!r}, not the header "
                        f"{self.header!r}; append to a file this sink wrote, or pick a new path"
                    )
            await reader.seek(size - 1)
            if await reader.read(1) != b"\n":
                lead = b"\n"
        return lead

    async def write(self, data: bytes) -> None:
        """Appends ``data`` (whole lines) in one write; with ``fsync``, also forces it to disk."""
        file = self._file
        if self._torn:
            data = b"\n" + data
        view = memoryview(data)
        while view:
            try:
                n = await file.write(view)
            except BaseException as exc:
                if len(view) < len(data):
                    self._torn = True
                if isinstance(exc, OSError):
                    raise OSError(
                        exc.errno, f"{self.owner} cannot append to {str(self.path)!r}: {exc.strerror}"
                    ) from exc
                raise
            view = view[n:]
            self._torn = bool(view)
        if self.fsync:
            await _fsync(file.fileno())

    async def close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            await file.close()


class LineSink(BaseSink):
    """A sink that appends each batch to a :class:`LineFile` as one block of whole lines.

    Subclasses say how a batch reads (:meth:`format`) and, optionally, the
    ``header`` line a new file starts with.
    """

    header = b""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False, name: str | None = None) -> None:
        owner = type(self).__name__
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"{owner}: path must be a str or os.PathLike, got {type(path).__name__}")
        self.path = Path(path)
        self.fsync = bool(fsync)
        self.name = name
        self._file = LineFile(self.path, owner, header=self.header, fsync=self.fsync)

    def format(self, records: Sequence[Record]) -> str:
        """The lines of ``records`` as one block of text (what ``write`` appends)."""
        raise NotImplementedError

    async def _open(self) -> None:
        await self._file.open()

    async def _write(self, records: Sequence[Record]) -> None:
        block = self.format(records)
        if block:
            await self._file.write(block.encode())

    async def _close(self) -> None:
        await self._file.close()
