"""The keyword options of ``Monitor`` and ``Monitor.watch``: their types (for the facades that forward
them) and their checks."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from ._callers import Offload
from ._errors import OnError
from ._exceptions import ConfigError
from ._schedule import Every

__all__ = ["MonitorOptions", "WatchOptions", "default_name", "positive"]


class MonitorOptions(TypedDict, total=False):
    """The keyword options of :class:`Monitor` (what ``SyncMonitor`` forwards to it)."""

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


class WatchOptions(TypedDict, total=False):
    """The keyword options of :meth:`Monitor.watch` (what ``SyncMonitor.watch`` forwards)."""

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


def positive(name: str, value: float | None, *, integer: bool = False, zero: bool = False) -> None:
    """Raises ``ValueError`` naming the option unless ``value`` is a finite number > 0 (>= 0 with ``zero``).

    ``None`` passes (an option left to its default), except for an option that may be ``0``.
    """
    if value is None:
        ok = not zero
    elif isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        ok = False
    else:
        ok = (value >= 0 if zero else value > 0) and (integer or not math.isinf(value))
    if not ok:
        kind = "a positive integer" if integer else "a finite number of seconds >= 0" if zero else (
            "a strictly positive number of seconds"
        )
        raise ConfigError(f"Monitor: {name} must be {kind}, got {value!r}")


def default_name(target: Any) -> str:
    """The lowercase class name; for a manager proxy or a Ray actor handle, the class behind it."""
    name = type(target).__name__
    if name.startswith("AutoProxy[") and name.endswith("]"):
        name = name[len("AutoProxy[") : -1]
    elif name == "ActorHandle":
        descriptor = getattr(target, "_ray_actor_creation_function_descriptor", None)
        name = (getattr(descriptor, "class_name", None) or name).rpartition(".")[2]
    return name.lower()
