"""The keyword options of ``Monitor`` and ``Monitor.watch``: their types, for the facades that forward them, and their checks.

The defaults are those of ``Monitor``'s and ``Monitor.watch``'s signatures, and only there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from .._core.alerts import Alert, AlertEvent
from .._core.checks import choice, fractions, number, refuse
from .._core.policy import ON_ERROR, OnError
from .._core.schedule import Every
from .._core.world import World
from .callers import OFFLOADS, Offload
from .reduce import Reduce

__all__ = ["MonitorOptions", "WatchOptions", "WatchSpec", "check_monitor"]


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
    quantiles: Sequence[float]
    distributions: bool


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
    quantiles: Sequence[float] | None


@dataclass(frozen=True)
class WatchSpec:
    """The options of one ``Monitor.watch`` call, as given (see its docstring); checked when made."""

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
    quantiles: Sequence[float] | None = None

    def __post_init__(self) -> None:
        choice("watch", "offload", self.offload, OFFLOADS)
        object.__setattr__(self, "quantiles", fractions("watch", "quantiles", self.quantiles, none=True))
        number("watch", "poll_interval", self.poll_interval, unit="seconds", none=True)
        number("watch", "timeout", self.timeout, unit="seconds", none=True)


_SECONDS = ("poll_interval", "stop_timeout", "notify_timeout")
_COUNTS = ("queue_size", "max_batch", "thread_limit", "max_values")


def check_monitor(options: Mapping[str, Any]) -> None:
    """Raises [ConfigError][monitor_async.ConfigError] naming the first of ``Monitor``'s ``options`` out of range."""
    choice("Monitor", "on_error", options["on_error"], ON_ERROR)
    choice("Monitor", "handle_signals", options["handle_signals"], (True, False))
    choice("Monitor", "distributions", options["distributions"], (True, False))
    fractions("Monitor", "quantiles", options["quantiles"])
    for option in _SECONDS:
        number("Monitor", option, options[option], unit="seconds")
    number("Monitor", "poll_timeout", options["poll_timeout"], unit="seconds", none=True)
    number("Monitor", "batch_wait", options["batch_wait"], unit="seconds", low=0.0, above=False)
    for option in _COUNTS:
        number("Monitor", option, options[option], integer=True)
    world, alerts = options["world"], options["alerts"]
    if world is not None and not isinstance(world, World):
        raise refuse("Monitor", "world", "a monitor_async.distributed.World", world)
    if alerts is not None and (isinstance(alerts, Alert) or not isinstance(alerts, (list, tuple))):
        raise refuse("Monitor", "alerts", "a list of monitor_async.Alert rules", alerts)
