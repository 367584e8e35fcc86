"""TensorBoardSink: scalars and histograms in TensorBoard event files, written with tensorboardX on the sink's thread."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from monitor_async._core import PartialWriteError, Ranks, Record, ThreadedSink, check_ranks, keep_apart
from monitor_async._core.checks import number
from monitor_async._core.distribution import Summary
from monitor_async._core.resume import number_on

from ._text import escape

__all__ = ["TensorBoardSink"]

_files = itertools.count()
_BEYOND = 1 << 62
"""A step beyond any a run reaches: the event that makes the purges after it out of order."""


class TensorBoardSink(ThreadedSink):
    """Writes every value as a TensorBoard scalar, in an event file of its own under ``log_dir``.

    A record's distributions are histograms (tagged ``<watch>/<key>``) in the same event as its scalars.

    What it promises: [Sinks: TensorBoard](sinks.md#tensorboard-tensorboardsink).

    Args:
        log_dir: the folder of the event files, the one to give
            ``tensorboard --logdir`` (``str`` or ``os.PathLike``); every
            ``{rank}`` in it becomes this process's rank.
        flush_secs: seconds between two flushes while records keep coming
            (default 10.0); a number > 0.
        filename_suffix: text appended to each event file's name (default
            ``""``), e.g. ``".train"``.
        name: the sink's label in ``Monitor.stats()`` and in messages;
            ``None`` (default) or ``""``: ``"tensorboard"``.
        ranks: ``"main"`` (default): only rank 0 writes; ``"all"``: every
            rank, as a run of its own under ``log_dir/rank<r>``.

    Raises:
        TypeError: ``log_dir`` is not a ``str`` or ``os.PathLike``.
        ValueError: ``flush_secs`` is not a number > 0.
        ConfigError: ``ranks`` is neither ``"main"`` nor ``"all"``.
        OSError: when the sink opens, ``log_dir`` cannot be created.

    Examples:
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
        number("TensorBoardSink", "flush_secs", flush_secs, unit="seconds")
        self.ranks = check_ranks(ranks, "TensorBoardSink")
        self.log_dir = keep_apart(log_dir, self.ranks)  # ranks="all": log_dir/rank<r>, a run per rank
        self.flush_secs = float(flush_secs)
        self.filename_suffix = filename_suffix
        self.name = name
        self.keys_escaped = 0
        self._events: Any = None
        self._index: dict[str, int] = {}
        self._tags: dict[str, frozenset[str]] = {}  # per record name, the tags written (a resumed launch purges them)
        self._dirty = False
        self._flushed = 0.0

    def open_blocking(self) -> None:
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import HistogramProto, Summary
        from tensorboardX.record_writer import directory_check

        # zero-padded: TensorBoard reads a folder's files in name order, and sinks opened in the
        # same second must sort as they were opened (".10" would sort before ".9")
        suffix = f".{os.getpid()}.{next(_files):06d}{self.filename_suffix}"
        try:
            directory_check(self.log_dir)
            self._events = EventsWriter(os.path.join(self.log_dir, "events"), suffix)
        except OSError as exc:
            raise OSError(
                exc.errno, f"TensorBoardSink cannot write event files under {self.log_dir!r}: {exc.strerror}"
            ) from exc
        self._event, self._summary, self._value, self._histogram = Event, Summary, Summary.Value, HistogramProto
        self._flushed = time.monotonic()
        if self.resuming is not None:
            self._purge_blocking()

    def resume_state(self) -> dict[str, Any] | None:
        """The tags written per record name, and the numbering of the records without a step: what a resume purges."""
        tags = list(self._tags.items())  # one C call: the sink's thread may add a name meanwhile
        return {"tags": {name: sorted(known) for name, known in tags}, "index": dict(self._index)}

    async def _resume_open(self) -> None:
        await self.call(self._purge_blocking)

    def _purge_blocking(self) -> None:
        """Makes TensorBoard drop what the resumed launch wrote after the checkpoint, per record name.

        TensorBoard's reader (``EventAccumulator``), told by a ``brain.Event:1``
        file version to purge on an out-of-order step, drops the values of an
        event's tags at its step and above. After one event at a step beyond
        any, an event per name holding only its tags, at the step after the
        checkpoint's, purges that name's superseded part (watches have steps
        of their own); then ``brain.Event:2`` restores the usual reading.
        """
        point, saved = self.resuming, self.resumed or {}
        assert point is not None
        tags: dict[str, Any] = saved["tags"] if isinstance(saved.get("tags"), dict) else {}
        index: dict[str, Any] = saved["index"] if isinstance(saved.get("index"), dict) else {}
        number_on(self._index, saved)  # numbering goes on
        purges = []
        for name, known in tags.items():
            at = point.point(name)
            start = at.step + 1 if at is not None and at.step is not None else index.get(name)
            if isinstance(start, int) and isinstance(known, list) and known:
                purges.append((start, [self._value(tag=str(tag)) for tag in known]))
        if not purges:
            return
        now, event, write = time.time(), self._event, self._events.write_event
        write(event(wall_time=now, file_version="brain.Event:1"))
        write(event(wall_time=now, step=_BEYOND, summary=self._summary()))
        for start, values in purges:
            write(event(wall_time=now, step=start, summary=self._summary(value=values)))
        write(event(wall_time=now, file_version="brain.Event:2"))
        self._events.flush()

    def write_blocking(self, records: Sequence[Record]) -> None:
        write = self._events.write_event
        event, summary, value = self._event, self._summary, self._value
        index = self._index
        failed: list[tuple[Record, Exception]] = []
        tags = self._tags
        for r in records:
            n = index.get(r.name, 0)
            index[r.name] = n + 1
            known = tags.get(r.name)
            if known is None or not known.issuperset(r.metrics):
                known = tags[r.name] = (known or frozenset()).union(r.metrics)
            if r.distributions and not known.issuperset(r.distributions):
                tags[r.name] = known.union(r.distributions)  # histograms are purged by tag too
            try:
                try:
                    values = [value(tag=k, simple_value=v) for k, v in r.metrics.items()]
                except UnicodeEncodeError:  # a tag UTF-8 cannot encode: escaped, the record's other values as usual
                    values = self._escaped(r.metrics)
                if r.distributions:
                    values += self._histograms(r.distributions)
                write(event(wall_time=r.time, step=n if r.step is None else r.step, summary=summary(value=values)))
            except (ValueError, TypeError, OverflowError) as exc:  # this record only (a step protobuf cannot hold)
                failed.append((r, exc))
        self._dirty = True
        if time.monotonic() - self._flushed >= self.flush_secs:
            self.flush_blocking()
        if failed:
            first, cause = failed[0]
            raise PartialWriteError(
                f"TensorBoardSink could not store {len(failed)} of {len(records)} records (the others are "
                f"written), the first {first.name!r} at step {first.step!r}: {cause!r}",
                failed=len(failed),
            ) from cause

    def _escaped(self, metrics: dict[str, float]) -> list[Any]:
        """The summary values of ``metrics``, each tag UTF-8 cannot encode escaped (and counted)."""
        values = []
        for k, v in metrics.items():
            tag = escape(k)
            if tag is not None:
                self.keys_escaped += 1
            values.append(self._value(tag=k if tag is None else tag, simple_value=v))
        return values

    def _histograms(self, distributions: Mapping[str, Summary]) -> list[Any]:
        """A histogram value per distribution that holds values (TensorBoard's ``HistogramProto``)."""
        out = []
        for key, summary in distributions.items():
            if not summary.count:
                continue
            edges, counts = summary.histogram()
            histo = self._histogram(
                min=summary.min, max=summary.max, num=summary.count, sum=summary.sum,
                bucket_limit=edges[1:], bucket=counts,
            )
            tag = escape(key)
            if tag is not None:
                self.keys_escaped += 1
            out.append(self._value(tag=key if tag is None else tag, histo=histo))
        return out

    def counters(self) -> dict[str, float]:
        """``keys_escaped``: values written under an escaped tag (read on the monitor's loop)."""
        return {"keys_escaped": float(self.keys_escaped)}

    def flush_blocking(self) -> None:
        if self._dirty:
            self._events.flush()
            self._dirty = False
        self._flushed = time.monotonic()

    def close_blocking(self) -> None:
        self._events.close()
