"""The contracts and plain utilities every other layer builds on; imports nothing above it.

Records and their provenance, the ``Sink`` protocol and its bases, ``Every``,
the exception tree, the ``on_error`` policy, value reading, worker threads,
running user code under a deadline, and this process's place in its job. The
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
from .loggers import LoggerSink, Report
from .record import EMPTY_SOURCE, Record, Source
from .schedule import Every
from .sink import BaseSink, Sink, ThreadedAlertSink, ThreadedSink, WorkerSink
from .world import (
    RANKS,
    Ranks,
    World,
    check_ranks,
    for_rank,
    keep_apart,
    many_sources,
    rank_path,
    serves,
    source_of,
    source_text,
    world,
)

__all__ = [
    "EMPTY_SOURCE",
    "RANKS",
    "AlertEvent",
    "BaseSink",
    "ConfigError",
    "DeliveryError",
    "Every",
    "LoggerSink",
    "MonitorClosedError",
    "MonitorError",
    "PartialWriteError",
    "PollError",
    "PollTimeoutError",
    "Ranks",
    "Record",
    "Report",
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
