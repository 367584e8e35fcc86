"""Sinks: where records go. Installed and imported as ``monitor_async.backends``.

``Webhook`` posts alert events (Slack, Discord, JSON). Sinks backed by optional libraries (wandb, rich, prometheus_client, ray,
mlflow, opentelemetry) are imported on first use, so importing this package
never imports them. Network sinks build on [ResilientSink][monitor_async.backends.ResilientSink] (retries
with [Backoff][monitor_async.backends.Backoff], a disk spool, replay), which sink authors can use too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from monitor_async._core import BaseSink, Sink, ThreadedSink

from ._csv import CSVSink
from ._delivery import Backoff, Failure, ResilientSink, classify
from ._jsonl import JSONLSink
from ._logger import LoggerSink, Report
from ._memory import MemorySink
from ._tensorboard import TensorBoardSink
from ._webhook import Webhook

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these load on first use
    from ._console import ConsoleSink
    from ._mlflow import MLflowSink
    from ._otlp import OTLPSink
    from ._prometheus import PrometheusSink
    from ._ray import RaySink
    from ._wandb import WandbSink

_LAZY: dict[str, str] = {
    "ConsoleSink": "._console",
    "WandbSink": "._wandb",
    "PrometheusSink": "._prometheus",
    "RaySink": "._ray",
    "MLflowSink": "._mlflow",
    "OTLPSink": "._otlp",
}

__all__ = [
    "Backoff",
    "BaseSink",
    "CSVSink",
    "ConsoleSink",
    "Failure",
    "JSONLSink",
    "LoggerSink",
    "MLflowSink",
    "MemorySink",
    "OTLPSink",
    "PrometheusSink",
    "RaySink",
    "Report",
    "ResilientSink",
    "Sink",
    "TensorBoardSink",
    "ThreadedSink",
    "WandbSink",
    "Webhook",
    "classify",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'monitor_async.backends' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
