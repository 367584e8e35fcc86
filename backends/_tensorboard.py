"""TensorBoardSink: scalars in TensorBoard event files, written with tensorboardX on the sink's thread."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from typing import Any

from monitor_async import Record, ThreadedSink
from monitor_async.distributed import Ranks, check_ranks, keep_apart

__all__ = ["TensorBoardSink"]

_files = itertools.count()


class TensorBoardSink(ThreadedSink):
    """Writes every value as a TensorBoard scalar, in an event file of its own under ``log_dir``.

    Guarantees:
        - Tag = the metric key (``"<name>/<metric>"``, kept exactly, so
          TensorBoard groups each watch's charts under its name);
          ``global_step`` = the record's step, or when it has none the
          record's index within its watch (0, 1, 2, ... per watch name);
          ``walltime`` = the poll's unix time.
        - One event per record (all its values in one summary), in record
          order, written with tensorboardX's event-file writer on this sink's
          own worker thread, one call at a time, never on the event loop.
          Constructing the sink does no I/O.
        - ``flush()`` returns once every event written so far is in the file
          and synced to disk: TensorBoard shows it on its next reload. While
          records keep coming, the file is also flushed every ``flush_secs``.
          ``close()`` flushes and closes the file.
        - Each sink writes its own file (``events.out.tfevents.<time>.<host>
          .<pid>.<n><filename_suffix>``), so sinks sharing a folder, or a
          sink reopened on it, never overwrite each other.
        - Ranks: by default (``ranks="main"``) only the main rank of a
          distributed job opens and writes the sink; other ranks never
          touch ``log_dir``. With ``ranks="all"`` each rank writes under
          ``log_dir/rank<r>`` (a run of its own in TensorBoard), unless
          ``log_dir`` holds ``{rank}``, which is then replaced.

    Example:
        >>> import asyncio, tempfile
        >>> from monitor_async import Monitor
        >>> log_dir = tempfile.mkdtemp()
        >>> class Buffer:
        ...     def stats(self):
        ...         return {"size": 3}
        >>> async def main():
        ...     async with TensorBoardSink(log_dir) as sink:
        ...         monitor = Monitor(sink)
        ...         monitor.watch(Buffer(), name="rb")
        ...         await monitor.step()
        >>> asyncio.run(main())  # then: tensorboard --logdir <log_dir>
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        flush_secs: float = 10.0,
        filename_suffix: str = "",
        name: str | None = None,
        ranks: Ranks = "main",
    ) -> None:
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"TensorBoardSink: log_dir must be a str or os.PathLike, got {type(log_dir).__name__}")
        if not (isinstance(flush_secs, (int, float)) and flush_secs > 0):
            raise ValueError(f"TensorBoardSink: flush_secs must be a strictly positive number, got {flush_secs!r}")
        self.ranks = check_ranks(ranks, "TensorBoardSink")
        self.log_dir = keep_apart(log_dir, self.ranks)  # ranks="all": log_dir/rank<r>, a run per rank
        self.flush_secs = float(flush_secs)
        self.filename_suffix = filename_suffix
        self.name = name
        self._events: Any = None
        self._index: dict[str, int] = {}
        self._dirty = False
        self._flushed = 0.0

    def open_blocking(self) -> None:
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary
        from tensorboardX.record_writer import directory_check

        suffix = f".{os.getpid()}.{next(_files)}{self.filename_suffix}"
        try:
            directory_check(self.log_dir)
            self._events = EventsWriter(os.path.join(self.log_dir, "events"), suffix)
        except OSError as exc:
            raise OSError(
                exc.errno, f"TensorBoardSink cannot write event files under {self.log_dir!r}: {exc.strerror}"
            ) from exc
        self._event, self._summary, self._value = Event, Summary, Summary.Value
        self._flushed = time.monotonic()

    def write_blocking(self, records: Sequence[Record]) -> None:
        write = self._events.write_event
        event, summary, value = self._event, self._summary, self._value
        index = self._index
        for r in records:
            n = index.get(r.name, 0)
            index[r.name] = n + 1
            values = [value(tag=k, simple_value=v) for k, v in r.metrics.items()]
            write(event(wall_time=r.time, step=n if r.step is None else r.step, summary=summary(value=values)))
        self._dirty = True
        if time.monotonic() - self._flushed >= self.flush_secs:
            self.flush_blocking()

    def flush_blocking(self) -> None:
        if self._dirty:
            self._events.flush()
            self._dirty = False
        self._flushed = time.monotonic()

    def close_blocking(self) -> None:
        self._events.close()
