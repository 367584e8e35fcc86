"""The contracts and plain utilities every other layer builds on; imports nothing above it.

Records and their provenance, the ``Sink`` protocol and its bases, ``Every``,
the exception tree, the ``on_error`` policy, value reading, worker threads,
running user code under a deadline, this process's place in its job, which
ranks a sink serves, and the file formats. The
sinks in ``monitor_async.backends`` import from here only.
"""

from .alerts import AlertEvent
from .exceptions import (
    ConfigError,
    DeliveryError,
    MonitorClosedError,
    MonitorError,
    PartialWriteError,
    PollError,
    PollTimeoutError,
    RunNotFoundError,
    SinkClosedError,
    SinkError,
    SinkTypeError,
    StatsCycleError,
    StatsTypeError,
    WatchTypeError,
)
from .formats import source_text
from .ranks import RANKS, Ranks, check_ranks, for_rank, keep_apart, many_sources, rank_path, serves
from .record import EMPTY_SOURCE, Record, Source
from .schedule import Every
from .sink import BaseSink, Sink, ThreadedAlertSink, ThreadedSink, WorkerSink
from .world import World, source_of, world

__all__ = [
    "EMPTY_SOURCE",
    "RANKS",
    "AlertEvent",
    "BaseSink",
    "ConfigError",
    "DeliveryError",
    "Every",
    "MonitorClosedError",
    "MonitorError",
    "PartialWriteError",
    "PollError",
    "PollTimeoutError",
    "Ranks",
    "Record",
    "RunNotFoundError",
    "Sink",
    "SinkClosedError",
    "SinkError",
    "SinkTypeError",
    "Source",
    "StatsCycleError",
    "StatsTypeError",
    "ThreadedAlertSink",
    "ThreadedSink",
    "WatchTypeError",
    "WorkerSink",
    "World",
    "check_ranks",
    "for_rank",
    "keep_apart",
    "many_sources",
    "rank_path",
    "serves",
    "source_of",
    "source_text",
    "world",
]
