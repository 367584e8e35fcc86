"""monitor-async: watch ``stats()`` snapshots and stream them to logging backends.

Public API::

    from monitor_async import Monitor, SyncMonitor, LoggerMonitor, Every, Record
"""

from ._monitor import Monitor
from ._record import Record
from ._schedule import Every

__all__ = ["Every", "Monitor", "Record", "__version__"]

__version__ = "0.1.0"
