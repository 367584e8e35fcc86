"""The exceptions monitor-async raises, in one tree under [MonitorError][monitor_async.MonitorError].

Each also inherits the builtin it stands for (``ConfigError`` is a
``ValueError``...); the tree is in [errors](errors.md#exceptions-monitor-async-raises).

Examples:
    >>> from monitor_async import Monitor, MonitorError
    >>> try:
    ...     Monitor(poll_interval=0)
    ... except MonitorError as exc:
    ...     print(type(exc).__name__, isinstance(exc, ValueError))
    ConfigError True
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DeliveryError",
    "MonitorClosedError",
    "MonitorError",
    "PartialWriteError",
    "PollError",
    "PollTimeoutError",
    "RunNotFoundError",
    "SinkClosedError",
    "SinkError",
    "SinkTypeError",
    "StatsCycleError",
    "StatsTypeError",
    "WatchTypeError",
]


class MonitorError(Exception):
    """The root of every exception monitor-async raises itself."""


class ConfigError(MonitorError, ValueError):
    """An option of ``Monitor``, ``Monitor.watch`` or ``Every`` is out of range; the message names it."""


class SinkTypeError(MonitorError, TypeError):
    """Something passed as a sink is neither a sink nor a recognised logger; the message names it."""


class WatchTypeError(MonitorError, TypeError):
    """A watched target has no callable ``stats()`` and no ``stats_fn`` was given."""


class MonitorClosedError(MonitorError, RuntimeError):
    """A ``SyncMonitor`` was used after ``close()``; build a new one."""


class RunNotFoundError(MonitorError, FileNotFoundError):
    """A path given to read a run holds no file of ``JSONLSink`` or ``CSVSink``; the message names it."""


class PollError(MonitorError):
    """One poll of one watch failed (the message names the watch)."""


class StatsTypeError(PollError, TypeError):
    """``stats()`` returned something that is not a mapping."""


class StatsCycleError(PollError, ValueError):
    """``stats()`` returned a mapping that contains itself (a cycle)."""


class PollTimeoutError(PollError, TimeoutError):
    """``stats()`` did not answer within the watch's ``timeout``."""


class SinkError(MonitorError):
    """A sink failed (the message names the sink)."""


class SinkClosedError(SinkError, RuntimeError):
    """A closed sink was written to or opened again."""


class PartialWriteError(SinkError):
    """A sink stored a batch except ``failed`` of its records: only those count as dropped.

    Args:
        message: what failed, naming the sink and the first record's error.
        failed: how many records of the batch were not stored.

    Examples:
        >>> from monitor_async import PartialWriteError
        >>> PartialWriteError("TensorBoardSink: 1 record not stored", failed=1).failed
        1
    """

    def __init__(self, message: str, *, failed: int) -> None:
        super().__init__(message)
        self.failed = failed


def _retryable(status: int | None) -> bool:
    """No reply (``None``), a timeout (408), too many requests (429) or a server error (5xx)."""
    return status is None or status in (408, 429) or 500 <= status <= 599


class DeliveryError(SinkError):
    """A network sink could not deliver a batch; says whether trying again may help.

    Retried: no reply (``status=None``), 408, 429 and 5xx; any other status is a refusal.

    Args:
        message: what failed, naming the sink, the status and the server's message.
        status: the HTTP status of the reply, or ``None`` without a reply.
        retry_after: seconds the server asked to wait (``Retry-After``), or ``None``.
        retryable: whether to try again (default: from ``status``).
        sent: whether the request may have reached the server without a reply
            coming back (resending may duplicate it).

    Examples:
        >>> from monitor_async import DeliveryError
        >>> DeliveryError("busy", status=503, retry_after=2.0).retryable
        True
        >>> DeliveryError("bad key", status=400).retryable
        False
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
        sent: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.retryable = _retryable(status) if retryable is None else retryable
        self.sent = sent

    def __reduce__(self) -> tuple[object, ...]:
        # keyword-only arguments: rebuilt through a helper so the error pickles (Ray, multiprocessing)
        return _rebuild_delivery_error, (str(self), self.status, self.retry_after, self.retryable, self.sent)


def _rebuild_delivery_error(
    message: str, status: int | None, retry_after: float | None, retryable: bool, sent: bool
) -> DeliveryError:
    return DeliveryError(message, status=status, retry_after=retry_after, retryable=retryable, sent=sent)


# shown as ``monitor_async.ConfigError`` in tracebacks: the name users import it by
for _cls in (
    MonitorError, ConfigError, SinkTypeError, WatchTypeError, MonitorClosedError, RunNotFoundError, PollError,
    StatsTypeError, StatsCycleError, PollTimeoutError, SinkError, SinkClosedError, DeliveryError,
):
    _cls.__module__ = "monitor_async"
del _cls
