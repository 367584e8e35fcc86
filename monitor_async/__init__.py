"""monitor-async: watch ``stats()`` snapshots and stream them to logging backends.

Public API::

    from monitor_async import Monitor, SyncMonitor, LoggerMonitor, Every, Record
    from monitor_async import Distribution, Summary                     # values that are many numbers
    from monitor_async import Alert, AlertEvent                         # alert rules and their events
    from monitor_async import Sink, BaseSink, ThreadedSink, LoggerSink   # for sink authors
    from monitor_async import MonitorError                              # and its subclasses
    from monitor_async.distributed import world, World, Reduce          # distributed runs

The sinks themselves live in ``monitor_async.backends``. This module only
re-exports; each concept lives in a private module of its own.
"""

from ._core.alerts import Alert, AlertEvent
from ._core.distribution import Distribution, Summary
from ._core.exceptions import (
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
from ._core.record import Record
from ._core.schedule import Every
from ._core.sink import BaseSink, Sink, ThreadedSink
from ._runtime.monitor import Monitor
from ._runtime.sync import LoggerMonitor, SyncMonitor
from ._version import __version__
from .backends._logger import LoggerSink, Report

__all__ = [
    "Alert",
    "AlertEvent",
    "BaseSink",
    "ConfigError",
    "DeliveryError",
    "Distribution",
    "Every",
    "LoggerMonitor",
    "LoggerSink",
    "Monitor",
    "MonitorClosedError",
    "MonitorError",
    "PartialWriteError",
    "PollError",
    "PollTimeoutError",
    "Record",
    "Report",
    "RunNotFoundError",
    "Sink",
    "SinkClosedError",
    "SinkError",
    "SinkTypeError",
    "StatsCycleError",
    "StatsTypeError",
    "Summary",
    "SyncMonitor",
    "ThreadedSink",
    "WatchTypeError",
    "__version__",
]
