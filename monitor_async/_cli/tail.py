"""``monitor-async tail``: the console sink's table for a run another process is writing."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sys
from pathlib import Path
from typing import TextIO

from .._core.checks import number
from .._core.record import Record
from .runs import Follower, find_run_files

__all__ = ["tail"]


def _latest(records: list[Record]) -> list[Record]:
    """Each watch's last record, in the order the watches first appear."""
    latest: dict[str, Record] = {}
    for r in records:
        latest[r.name] = r
    return list(latest.values())


def _open(path: str | Path) -> tuple[str, list[Path], str]:
    """The run's format, its files, and the table's title (``tail <folder name>``)."""
    kind, files = find_run_files(path)
    return kind, files, f"tail {Path(path).resolve().name}"


async def tail(
    path: str | Path,
    *,
    interval: float = 0.5,
    live: bool | None = None,
    stream: TextIO | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Shows the run at ``path`` as ``ConsoleSink`` does, following its files as they grow.

    A live table on a terminal with rich, else one line per record; runs until
    ``stop`` is set or the task is cancelled. What it follows is in [tail](cli.md#tail).

    Args:
        path: a run's folder, or one of its files (any format ``show`` reads).
        interval: seconds between two reads (> 0).
        live: ``True`` for the table, ``False`` for lines, ``None`` to pick
            the table on a terminal with rich installed.
        stream: where to write (default: ``sys.stdout``).
        stop: when set, ``tail`` returns (for programs and tests).

    Raises:
        RunNotFoundError: no run at ``path``.
        ConfigError: ``interval`` is not a positive number.
    """
    from ..backends import ConsoleSink

    number("tail", "interval", interval, unit="seconds")
    out = sys.stdout if stream is None else stream
    kind, files, title = await asyncio.to_thread(_open, path)
    if live is None:
        live = importlib.util.find_spec("rich") is not None and bool(getattr(out, "isatty", lambda: False)())
    followers = {f: Follower(f, kind) for f in files}

    def read(latest: bool = False) -> list[Record]:
        """The new records of every file; with ``latest``, only each watch's last (memory per watch)."""
        if Path(path).is_dir():
            try:
                again, found = find_run_files(path)
            except (FileNotFoundError, OSError):
                found = []
            for f in found:
                if again == kind and f not in followers:
                    followers[f] = Follower(f, kind)
        out: list[Record] = []
        for follower in list(followers.values()):
            while True:  # a chunk at a time, so a large file's history is never all in memory
                before = follower.offset
                got = [item for _, item in follower.read_entries() if isinstance(item, Record)]
                out = _latest(out + got) if latest else out + got
                if follower.offset == before:
                    break
        return out

    stopped = stop or asyncio.Event()
    async with ConsoleSink(out, min_interval=0, live=live, title=title, name="tail") as sink:
        history = await asyncio.to_thread(read, True)
        if history:
            await sink.write(history)
        while not stopped.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopped.wait(), interval)
            records = await asyncio.to_thread(read)
            if records:
                await sink.write(records)
