"""TensorBoardSink: scalars in TensorBoard event files, written by tensorboardX on the sink's thread."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .._record import Record
from ._base import ThreadedSink

__all__ = ["TensorBoardSink"]


class TensorBoardSink(ThreadedSink):
    """Writes every value as a TensorBoard scalar through a tensorboardX ``SummaryWriter``.

    Guarantees:
        - Tag = the metric key (``"<name>/<metric>"``, kept exactly, so
          TensorBoard groups each watch's charts under its name);
          ``global_step`` = the record's step, or when it has none the
          record's index within its watch (0, 1, 2, ... per watch name);
          ``walltime`` = the poll's unix time.
        - One event per record (all its values in one summary), in record
          order. The writer is created, written, flushed and closed on this
          sink's own worker thread, one call at a time, never on the event
          loop; constructing the sink does no I/O.
        - ``flush()`` pushes tensorboardX's queue to the event file (as
          ``SummaryWriter.flush``); between flushes tensorboardX writes on its
          own every ``flush_secs`` (120 s unless given). ``close()`` closes the
          writer.
        - ``writer_kwargs`` go to ``SummaryWriter`` (``flush_secs``,
          ``max_queue``, ``filename_suffix``...).

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

    def __init__(self, log_dir: str | os.PathLike[str], *, name: str | None = None, **writer_kwargs: Any) -> None:
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"TensorBoardSink: log_dir must be a str or os.PathLike, got {type(log_dir).__name__}")
        for key in ("logdir", "log_dir"):
            if key in writer_kwargs:
                raise TypeError(f"TensorBoardSink: pass the folder once, as log_dir (got {key}= as well)")
        self.log_dir = os.fspath(log_dir)
        self.name = name
        self.writer_kwargs = writer_kwargs
        self.writer: Any = None
        self._index: dict[str, int] = {}

    def open_blocking(self) -> None:
        from tensorboardX import SummaryWriter
        from tensorboardX.proto.summary_pb2 import Summary

        try:
            self.writer = SummaryWriter(logdir=self.log_dir, **self.writer_kwargs)
        except OSError as exc:
            raise OSError(
                exc.errno, f"TensorBoardSink cannot write event files under {self.log_dir!r}: {exc.strerror}"
            ) from exc
        self._summary = Summary
        self._value = Summary.Value

    def write_blocking(self, records: Sequence[Record]) -> None:
        add = self.writer.file_writer.add_summary
        summary, value = self._summary, self._value
        index = self._index
        for r in records:
            n = index.get(r.name, 0)
            index[r.name] = n + 1
            step = n if r.step is None else r.step
            add(summary(value=[value(tag=k, simple_value=v) for k, v in r.metrics.items()]), step, r.time)

    def flush_blocking(self) -> None:
        self.writer.flush()

    def close_blocking(self) -> None:
        self.writer.close()
