"""LoggerSink: a legacy, blocking logger (TorchRL or AgileRL style) used as a sink."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._exceptions import SinkTypeError
from ._record import Record
from ._sink import ThreadedSink
from .distributed import Ranks, check_ranks

__all__ = ["LoggerSink", "Report"]


class Report:
    """What an AgileRL-style ``logger.write(report)`` receives for one record.

    ``to_dict()`` is the record's namespaced metrics plus ``"<name>/step"``
    when the step is known; ``to_nonscalar_dict()`` is empty; ``str(report)``
    is a small readable table.
    """

    __slots__ = ("record",)

    def __init__(self, record: Record) -> None:
        self.record = record

    def to_dict(self) -> dict[str, float]:
        out = dict(self.record.metrics)
        if self.record.step is not None:
            out[f"{self.record.name}/step"] = float(self.record.step)
        return out

    def to_nonscalar_dict(self) -> dict[str, Any]:
        return {}

    def __str__(self) -> str:
        rows = self.to_dict()
        width = max((len(k) for k in rows), default=0)
        title = f"{self.record.name} (step {self.record.step})" if self.record.step is not None else self.record.name
        return "\n".join([title, *(f"  {k:<{width}}  {v:.6g}" for k, v in rows.items())])

    __repr__ = __str__


class LoggerSink(ThreadedSink):
    """Adapts a blocking logger; its calls run on the sink's worker thread, in order.

    - TorchRL style: ``log_metrics(metrics, step=step)`` when the logger has
      it, else one ``log_scalar(name, value, step=step)`` per value.
    - AgileRL style: ``write(report)`` with a :class:`Report`.

    ``flush()`` calls the logger's ``flush()`` when it has one; ``close()``
    never closes the user's logger (it is not ours).

    Example:
        >>> class PrintLogger:
        ...     def log_metrics(self, metrics, step=None):
        ...         print(step, metrics)
        >>> sink = LoggerSink(PrintLogger())
    """

    def __init__(self, logger: Any, *, name: str | None = None, ranks: Ranks = "all") -> None:
        self.ranks = check_ranks(ranks, "LoggerSink")
        if callable(getattr(logger, "log_metrics", None)):
            self._style = "log_metrics"
        elif callable(getattr(logger, "log_scalar", None)):
            self._style = "log_scalar"
        elif callable(getattr(logger, "write", None)):
            self._style = "write"
        else:
            raise SinkTypeError(
                f"{type(logger).__name__} is neither a sink nor a logger: expected async write(records), "
                "log_metrics(dict, step=), log_scalar(name, value, step=) or write(report)"
            )
        self.logger = logger
        self.name = name or type(logger).__name__.lower()

    def write_blocking(self, records: Sequence[Record]) -> None:
        logger = self.logger
        if self._style == "log_metrics":
            for r in records:
                logger.log_metrics(r.metrics, step=r.step)
        elif self._style == "log_scalar":
            for r in records:
                for key, value in r.metrics.items():
                    logger.log_scalar(key, value, step=r.step)
        else:
            for r in records:
                logger.write(Report(r))

    def flush_blocking(self) -> None:
        flush = getattr(self.logger, "flush", None)
        if callable(flush):
            flush()

    def close_blocking(self) -> None:
        self.flush_blocking()
