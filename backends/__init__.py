"""Sinks: where records go. Installed and imported as ``monitor_async.backends``.

Sinks backed by optional libraries (wandb, rich, prometheus_client, ray) are
imported on first use, so importing this package never imports them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from monitor_async import BaseSink, LoggerSink, Report, Sink, ThreadedSink

from ._csv import CSVSink
from ._jsonl import JSONLSink
from ._memory import MemorySink
from ._tensorboard import TensorBoardSink

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from ._console import ConsoleSink
    from ._prometheus import PrometheusSink
    from ._ray import RaySink
    from ._wandb import WandbSink

_LAZY: dict[str, str] = {
    "ConsoleSink": "._console",
    "WandbSink": "._wandb",
    "PrometheusSink": "._prometheus",
    "RaySink": "._ray",
}

__all__ = [
    "BaseSink",
    "CSVSink",
    "ConsoleSink",
    "JSONLSink",
    "LoggerSink",
    "MemorySink",
    "PrometheusSink",
    "RaySink",
    "Report",
    "Sink",
    "TensorBoardSink",
    "ThreadedSink",
    "WandbSink",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'monitor_async.backends' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
