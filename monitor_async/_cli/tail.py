"""``monitor-async tail``: the console sink's table for a run another process is writing."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sys
from pathlib import Path
from typing import TextIO

from .._core.checks import number
from .runs import Run, load_run

__all__ = ["tail"]


def _open(path: str | Path) -> tuple[Run, str]:
    """The run, and the table's title (``tail <folder name>``)."""
    return load_run(path), f"tail {Path(path).resolve().name}"


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
    run, title = await asyncio.to_thread(_open, path)
    if live is None:
        live = importlib.util.find_spec("rich") is not None and bool(getattr(out, "isatty", lambda: False)())
    following = run.follow()
    stopped = stop or asyncio.Event()
    try:
        async with ConsoleSink(out, min_interval=0, live=live, title=title, name="tail") as sink:
            history = await asyncio.to_thread(following.read, True)
            if history:
                await sink.write(history)
            while not stopped.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopped.wait(), interval)
                records = await asyncio.to_thread(following.read)
                if records:
                    await sink.write(records)
    finally:
        following.close()
