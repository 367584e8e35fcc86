"""The ``on_error`` policy: one warning per failure streak, or stop and re-raise."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

__all__ = ["ON_ERROR", "ErrorPolicy", "OnError", "describe", "log"]

log = logging.getLogger("monitor_async")

OnError = Literal["warn", "raise", "ignore"]
ON_ERROR: tuple[str, ...] = ("warn", "raise", "ignore")


def describe(exc: BaseException) -> str:
    """``repr(exc)`` on one line: remote errors (Ray) carry whole tracebacks in their repr.

    Never raises (but for ``BaseException`` that is not an ``Exception``): an
    error whose ``__repr__`` raises is described by its class name and
    ``str``, or by its class name alone, so reporting a failure never fails.

    Examples:
        >>> class Odd(Exception):
        ...     def __repr__(self):
        ...         raise RuntimeError
        ...     def __str__(self):
        ...         raise RuntimeError
        >>> describe(Odd())
        'Odd(<repr() and str() of the error raised>)'
    """
    try:
        text = repr(exc)
        if not isinstance(text, str):
            raise TypeError("__repr__ returned a non-string")
    except Exception:  # noqa: BLE001 - the error's own repr failed: fall back on what cannot
        text = _fallback(exc)
    line, _, rest = text.partition("\n")
    if len(line) > 300:
        line = line[:297] + "..."
    return f"{line} [...]" if rest else line


def _fallback(exc: BaseException) -> str:
    """``Name(str)`` of an error whose repr raised; ``Name(<...>)`` when its str raises too."""
    try:
        name = type(exc).__qualname__
    except Exception:  # noqa: BLE001 - a metaclass with a raising __qualname__
        name = "Exception"
    try:
        text = str(exc)
        if not isinstance(text, str):
            raise TypeError("__str__ returned a non-string")
    except Exception:  # noqa: BLE001
        return f"{name}(<repr() and str() of the error raised>)"
    return f"{name}({text!r})"


class ErrorPolicy:
    """Reports failures of watches and sinks as ``on_error`` says.

    ``"warn"`` logs the first failure of a streak (the caller tracks streaks
    and passes ``first``); ``"ignore"`` stays silent; ``"raise"`` keeps the
    first error for ``take`` and calls ``on_fatal`` so that background
    polling stops instead of going on in a broken state.
    """

    def __init__(self, mode: OnError) -> None:
        self.mode = mode
        self.error: BaseException | None = None
        self.raised = False
        self.on_fatal: Callable[[], None] | None = None

    def report(self, message: str, exc: BaseException | None, *, first: bool) -> None:
        if self.mode == "raise" and exc is not None:
            if self.error is None:
                self.error = exc
                if self.on_fatal is not None:
                    self.on_fatal()
            elif exc is not self.error:
                log.warning("%s (after an earlier error that stopped the monitor)", message)
            return
        if self.mode == "warn" and first:
            log.warning("%s; further failures are counted in monitor.stats() until it recovers", message)

    def take(self) -> BaseException | None:
        """The first error of ``"raise"`` mode, once."""
        if self.error is None or self.raised:
            return None
        self.raised = True
        return self.error
