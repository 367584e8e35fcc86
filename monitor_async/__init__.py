"""monitor-async: watch ``stats()`` snapshots and stream them to logging backends.

Public API::

    from monitor_async import Monitor, SyncMonitor, LoggerMonitor, Every, Record
"""

from ._monitor import Monitor
from ._record import Record
from ._schedule import Every
from ._sync import LoggerMonitor, SyncMonitor

__all__ = ["Every", "LoggerMonitor", "Monitor", "Record", "SyncMonitor", "__version__"]

__version__ = "0.1.0"
