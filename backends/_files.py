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

Files that move: before each append the path is checked to still name the
open file (one ``stat``, on the worker thread). A file deleted or renamed
while written (log rotation) is noticed at the next write: the batch goes to
a new file created at the path, with the header, and one warning says so.
A file cut to nothing in place (``copytruncate``) gets its header again.

Launches: a sink that opens a file already holding lines appends a marker
line first (``LineSink.launch_line``), so readers keep the launches apart.
A sink that resumes a launch (``resume``) always appends its mark, which then
says which launch it resumes and where ([Resuming a run](resuming.md)).
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiofiles
import aiofiles.os

from monitor_async._core import BaseSink, Ranks, Record, check_ranks, rank_path
from monitor_async._core.formats import launch_info
from monitor_async._core.resume import ResumePoint

try:
    import fcntl
except ImportError:  # Windows has no fcntl: appends are still whole, just not locked
    fcntl = None  # type: ignore[assignment]

__all__ = ["LineFile", "LineSink"]

log = logging.getLogger("monitor_async")

_CHUNK = 1 << 16


_Identity = tuple[int, int]
_WRITTEN, _MOVED, _TRUNCATED = 0, 1, 2


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


def _end(fd: int) -> int | None:
    """Where an O_APPEND write lands (under the lock); ``None`` for a pipe or a terminal."""
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    except OSError:  # CSVSink("/dev/stdout"): nothing to take back
        return None


def _append_all(fd: int, data: bytes, start: int | None) -> None:
    """Appends all of ``data`` at ``start``; on failure, cuts the file back to where ``data`` began."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        if start is not None and len(view) < len(data):  # part of the block reached the file: take it back
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
        raise


def _append(fd: int, data: bytes, fsync: bool, path: str, identity: _Identity | None, header: bytes) -> int:
    """One batch, on aiofiles' worker thread: locked, whole or not at all, then forced to disk if asked.

    With ``identity`` (the open file's device and inode), first checks that
    ``path`` still names that file: if not (deleted, renamed), writes nothing
    and returns ``_MOVED``. A file found empty gets ``header`` first
    (``_TRUNCATED``). Else returns ``_WRITTEN``.
    """
    if identity is not None:
        try:
            found = os.stat(path)
        except OSError:  # gone (or its folder is): created again by the caller
            return _MOVED
        if (found.st_dev, found.st_ino) != identity:
            return _MOVED
    done = _WRITTEN
    with _locked(fd):
        start = _end(fd)
        if start == 0 and header and identity is not None:
            data = header + data
            done = _TRUNCATED
        _append_all(fd, data, start)
        if fsync:
            os.fsync(fd)
    return done


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


def _prepare(fd: int, header: bytes, marker: bytes = b"", always: bool = False) -> tuple[bytes | None, _Identity | None]:
    """At open, locked: the header goes into an empty file, a torn last line is cut away, and a
    file that already holds lines gets ``marker`` (a new launch appends to it); with ``always``, any file does.

    Returns the first line of a file that does not start with ``header``
    (the file is then left as it is), else ``None``; and the file's device
    and inode when it is a regular file (``None`` for a pipe or a terminal).
    """
    with _locked(fd):
        info = os.fstat(fd)
        identity = (info.st_dev, info.st_ino) if stat.S_ISREG(info.st_mode) else None
        size = info.st_size
        if size == 0:
            _append_all(fd, header + (marker if always else b""), _end(fd))
            return None, identity
        if header:
            head = os.pread(fd, max(len(header), 256), 0)
            if not head.startswith(header):
                return head.split(b"\n", 1)[0], identity
        if os.pread(fd, 1, size - 1) != b"\n":
            size = _line_end(fd, size)
            os.ftruncate(fd, size)
        if marker and identity is not None and (size > len(header) or always):
            _append_all(fd, marker, _end(fd))
    return None, identity


_append_async = aiofiles.os.wrap(_append)
_prepare_async = aiofiles.os.wrap(_prepare)


class LineFile:
    """One append-only file of whole lines, opened on first use.

    ``header`` (one line, ending in a newline) is written when the file is
    new or empty; an existing file must already start with it.
    """

    def __init__(
        self, path: Path, owner: str, *, header: bytes = b"", fsync: bool = False,
        marker: Callable[[], bytes] | None = None,
    ) -> None:
        self.path = path
        self.marker = marker
        """Makes the line that marks a new launch in a file that already holds lines (see ``LineSink.launch_line``)."""
        self.mark_always = False
        """Whether the mark goes into a new or empty file too (a resumed launch's mark)."""
        self.owner = owner
        self.header = header
        self.fsync = fsync
        self.recreated = 0
        """How many times the file was found deleted or moved away, and created again."""
        self._file: Any = None
        self._name = os.fspath(path)
        self._identity: _Identity | None = None

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
            always = self.mark_always  # read first: making the marker says the resume once
            marker = b"" if self.marker is None else self.marker()
            first, identity = await _prepare_async(file.fileno(), self.header, marker, always)
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
        self._file, self._identity = file, identity

    async def write(self, data: bytes) -> None:
        """Appends ``data`` (whole lines) in one locked write; with ``fsync``, also forces it to disk.

        A file deleted or moved away since the last write is created again at
        ``path`` (with the header) and ``data`` goes there, with a warning.
        """
        if self._file is None:  # created again after a move, and that failed: try once more
            await self.open()
        try:
            done = await _append_async(self._file.fileno(), data, self.fsync, self._name, self._identity, self.header)
            if done == _MOVED:
                await self._recreate()
                done = await _append_async(self._file.fileno(), data, self.fsync, self._name, None, b"")
        except OSError as exc:
            raise self._error(exc) from exc
        if done == _TRUNCATED:
            log.warning(
                "%s: %r was emptied while written (log rotation with copytruncate?); wrote the header again",
                self.owner, self._name,
            )

    async def _recreate(self) -> None:
        await self.close()
        await self.open()
        self.recreated += 1
        log.warning(
            "%s: %r was deleted or moved away while written (log rotation?); created it again at that "
            "path, with the header (counted in monitor.stats()['sink/<label>/recreated'])",
            self.owner, self._name,
        )

    async def close(self) -> None:
        file, self._file, self._identity = self._file, None, None
        if file is not None:
            await file.close()


class LineSink(BaseSink, abc.ABC):
    """A sink that appends each batch to a ``LineFile`` as one block of whole lines.

    Subclasses say how a batch reads (``format``) and, optionally, the
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
        self._file = LineFile(self.path, owner, header=self.header, fsync=self.fsync, marker=self._launch)

    def _launch(self) -> bytes:
        info: dict[str, object] = launch_info()
        if self.resuming is not None and self._file.mark_always:  # said once, in the first mark after resume()
            info["resumes"] = self.resuming.mark()
            self._file.mark_always = False
        return self.launch_line(info).encode()

    async def resume(self, point: ResumePoint, state: Mapping[str, Any] | None) -> None:
        """Continues the launch ``point`` names: the file's launch mark says so (see [resuming](resuming.md))."""
        self._file.mark_always = True
        await super().resume(point, state)

    async def _resume_open(self) -> None:
        """Open already (its mark written): the resumed launch's mark is appended now."""
        line = self._launch()
        if line:
            await self._file.write(line)

    def launch_line(self, info: dict[str, object]) -> str:
        """The line that marks a new launch appending to a file that already holds lines ("" for none).

        Args:
            info: ``time``, ``pid``, ``host``, ``sink`` and ``version`` of this launch.
        """
        return ""

    @abc.abstractmethod
    def format(self, records: Sequence[Record]) -> str:
        """The lines of ``records`` as one block of text (what ``write`` appends)."""

    async def _open(self) -> None:
        await self._file.open()

    async def _write(self, records: Sequence[Record]) -> None:
        await self._write_batches((records,))

    def counters(self) -> dict[str, float]:
        """``recreated``: how many times the file was deleted or moved away and created again."""
        return {"recreated": float(self._file.recreated)}

    async def _write_batches(self, batches: Sequence[Sequence[Record]]) -> None:
        """All the batches' lines in one append: whole, in order, one trip to the worker thread."""
        block = "".join([self.format(records) for records in batches])
        if block:
            try:
                data = block.encode()
            except UnicodeEncodeError:  # a format() that let a lone surrogate through: escaped, not lost
                data = block.encode("utf-8", "backslashreplace")
            await self._file.write(data)

    async def _close(self) -> None:
        await self._file.close()
