"""An append-only line file written through aiofiles: the I/O under CSVSink and JSONLSink.

Each batch arrives as one block of whole lines and goes to the OS in one
``write`` on an ``O_APPEND`` file, on aiofiles' worker thread, so when
``write`` returns the lines are visible to readers and survive a crash of
this process. The file only ever holds whole lines:

- A write that fails part way (a full disk) is taken back: the file is cut
  to where the block began, so a failed batch leaves nothing behind.
- A process killed during a large write can leave part of a block (Linux
  may stop a write that spans memory pages at a page boundary when SIGKILL
  arrives). The next open finds a file that does not end in a line break and
  cuts that partial line away.
- Each append, and that check at open, holds an exclusive ``flock`` on the
  file, so processes appending to one file never cut each other's lines.
"""

from __future__ import annotations

import abc
import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import aiofiles
import aiofiles.os

from monitor_async import BaseSink, Record
from monitor_async.distributed import Ranks, check_ranks, rank_path

try:
    import fcntl
except ImportError:  # Windows has no fcntl: appends are still whole, just not locked
    fcntl = None  # type: ignore[assignment]

__all__ = ["LineFile", "LineSink"]

_CHUNK = 1 << 16


@contextlib.contextmanager
def _locked(fd: int) -> Iterator[None]:
    """An exclusive ``flock`` on ``fd`` (none where the OS or the file system has none)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except (AttributeError, OSError):
        yield
        return
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _append_all(fd: int, data: bytes) -> None:
    """Appends all of ``data``; on failure, cuts the file back to where ``data`` began."""
    try:
        start: int | None = os.lseek(fd, 0, os.SEEK_END)  # where an O_APPEND write lands, under the lock
    except OSError:  # a pipe or a terminal (CSVSink("/dev/stdout")): nothing to take back
        start = None
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        if start is not None and len(view) < len(data):  # part of the block reached the file: take it back
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
        raise


def _append(fd: int, data: bytes, fsync: bool) -> None:
    """One batch, on aiofiles' worker thread: locked, whole or not at all, then forced to disk if asked."""
    with _locked(fd):
        _append_all(fd, data)
        if fsync:
            os.fsync(fd)


def _line_end(fd: int, size: int) -> int:
    """The offset just past the last line break before ``size`` (0 when there is none)."""
    end = size
    while end > 0:
        begin = max(0, end - _CHUNK)
        at = os.pread(fd, end - begin, begin).rfind(b"\n")
        if at >= 0:
            return begin + at + 1
        end = begin
    return 0


def _prepare(fd: int, header: bytes) -> bytes | None:
    """At open, locked: the header goes into an empty file, and a torn last line is cut away.

    Returns the first line of a file that does not start with ``header``
    (the file is then left as it is), else ``None``.
    """
    with _locked(fd):
        size = os.fstat(fd).st_size
        if size == 0:
            _append_all(fd, header)
            return None
        if header:
            head = os.pread(fd, max(len(header), 256), 0)
            if not head.startswith(header):
                return head.split(b"\n", 1)[0]
        if os.pread(fd, 1, size - 1) != b"\n":
            os.ftruncate(fd, _line_end(fd, size))
    return None


_append_async = aiofiles.os.wrap(_append)
_prepare_async = aiofiles.os.wrap(_prepare)


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

    def _error(self, exc: OSError) -> OSError:
        return OSError(exc.errno, f"{self.owner} cannot append to {str(self.path)!r}: {exc.strerror}")

    async def open(self) -> None:
        path = self.path
        try:
            await aiofiles.os.makedirs(path.parent, exist_ok=True)
            file = await aiofiles.open(path, "a+b", buffering=0)  # read too: the checks at open
        except OSError as exc:
            raise self._error(exc) from exc
        try:
            first = await _prepare_async(file.fileno(), self.header)
        except OSError as exc:
            await file.close()
            raise self._error(exc) from exc
        except BaseException:
            await file.close()
            raise
        if first is not None:
            await file.close()
            raise ValueError(
                f"{self.owner}: {str(path)!r} starts with {first[:200]!r}, not the header "
                f"{self.header!r}; append to a file this sink wrote, or pick a new path"
            )
        self._file = file

    async def write(self, data: bytes) -> None:
        """Appends ``data`` (whole lines) in one locked write; with ``fsync``, also forces it to disk."""
        try:
            await _append_async(self._file.fileno(), data, self.fsync)
        except OSError as exc:
            raise self._error(exc) from exc

    async def close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            await file.close()


class LineSink(BaseSink, abc.ABC):
    """A sink that appends each batch to a :class:`LineFile` as one block of whole lines.

    Subclasses say how a batch reads (:meth:`format`) and, optionally, the
    ``header`` line a new file starts with.
    """

    header = b""

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = False, name: str | None = None, ranks: Ranks = "all"
    ) -> None:
        owner = type(self).__name__
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"{owner}: path must be a str or os.PathLike, got {type(path).__name__}")
        self.ranks = check_ranks(ranks, owner)
        self.path = Path(rank_path(path))  # "{rank}" in the path: this process's rank
        self.fsync = bool(fsync)
        self.name = name
        self._file = LineFile(self.path, owner, header=self.header, fsync=self.fsync)

    @abc.abstractmethod
    def format(self, records: Sequence[Record]) -> str:
        """The lines of ``records`` as one block of text (what ``write`` appends)."""

    async def _open(self) -> None:
        await self._file.open()

    async def _write(self, records: Sequence[Record]) -> None:
        await self._write_batches((records,))

    async def _write_batches(self, batches: Sequence[Sequence[Record]]) -> None:
        """All the batches' lines in one append: whole, in order, one trip to the worker thread."""
        block = "".join([self.format(records) for records in batches])
        if block:
            await self._file.write(block.encode())

    async def _close(self) -> None:
        await self._file.close()
