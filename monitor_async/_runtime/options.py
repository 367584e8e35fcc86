"""The keyword options of ``Monitor`` and ``Monitor.watch``, for the facades that forward them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from .._core.alerts import Alert, AlertEvent
from .._core.policy import OnError
from .._core.schedule import Every
from .._core.world import World
from .callers import Offload
from .reduce import Reduce

__all__ = ["MonitorOptions", "WatchOptions"]


class MonitorOptions(TypedDict, total=False):
    """The keyword options of [Monitor][monitor_async.Monitor] (what ``SyncMonitor`` forwards to it)."""

    poll_interval: float
    on_error: OnError
    queue_size: int
    max_batch: int
    poll_timeout: float | None
    close_sinks: bool
    stop_timeout: float
    thread_limit: int
    max_values: int
    batch_wait: float
    world: World | None
    alerts: Sequence[Alert] | None
    notify: Sequence[Callable[[AlertEvent], Any]] | Callable[[AlertEvent], Any] | None
    notify_timeout: float
    handle_signals: bool


class WatchOptions(TypedDict, total=False):
    """The keyword options of [Monitor.watch][monitor_async.Monitor.watch] (what ``SyncMonitor.watch`` forwards)."""

    name: str | None
    schedule: Every | None
    step: str | None
    stats_fn: Callable[..., Any] | None
    stats_kwargs: Mapping[str, Any] | None
    rate_keys: Sequence[str] | None
    log_on_start: bool
    log_on_close: bool
    poll_interval: float | None
    timeout: float | None
    offload: Offload
    reduce: Reduce | Mapping[str, str | Sequence[str]] | None
