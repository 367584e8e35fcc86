"""Checking the options users give: one checker, one message shape.

Every message reads ``"<owner>: <option> must be <what is allowed>, got <value>"`` and is raised
as [ConfigError][monitor_async.ConfigError] (a ``ValueError``).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any, TypeVar, overload

from .exceptions import ConfigError

__all__ = ["choice", "fractions", "number", "refuse"]

T = TypeVar("T")


def refuse(owner: str, option: str, allowed: str, value: Any) -> ConfigError:
    """The error for ``option`` of ``owner``: ``"<owner>: <option> must be <allowed>, got <value!r>"``."""
    return ConfigError(f"{owner}: {option} must be {allowed}, got {value!r}")


def _allowed(integer: bool, low: float | None, above: bool, high: float | None, unit: str, none: bool) -> str:
    kind = "an integer" if integer else "a finite number"
    if unit:
        kind += f" of {unit}"
    if low is not None:
        kind += f" {'>' if above else '>='} {low:g}"
    if high is not None:
        kind += f"{' and' if low is not None else ''} <= {high:g}"
    return kind + (" or None" if none else "")


@overload
def number(
    owner: str, option: str, value: int, *, integer: bool = ..., low: float | None = ..., above: bool = ...,
    high: float | None = ..., unit: str = ..., none: bool = ...,
) -> int: ...
@overload
def number(
    owner: str, option: str, value: float, *, integer: bool = ..., low: float | None = ..., above: bool = ...,
    high: float | None = ..., unit: str = ..., none: bool = ...,
) -> float: ...
@overload
def number(
    owner: str, option: str, value: float | None, *, integer: bool = ..., low: float | None = ...,
    above: bool = ..., high: float | None = ..., unit: str = ..., none: bool = ...,
) -> float | None: ...
def number(
    owner: str,
    option: str,
    value: Any,
    *,
    integer: bool = False,
    low: float | None = 0.0,
    above: bool = True,
    high: float | None = None,
    unit: str = "",
    none: bool = False,
) -> Any:
    """``value`` if it is a number in range, else a [ConfigError][monitor_async.ConfigError] naming it.

    ``bool``, NaN and infinities are never numbers here; a string is not either.

    Args:
        owner: who takes the option, as the user wrote it (``"Monitor"``, ``"CSVSink"``...).
        option: the option's name.
        value: what the user gave.
        integer: only an ``int`` will do.
        low: the lower bound (``None``: none); ``above`` makes it strict (the default: ``> 0``).
        high: an inclusive upper bound, if any.
        unit: what the number counts, for the message (``"seconds"``).
        none: ``None`` is allowed (and returned).

    Examples:
        >>> number("Monitor", "poll_interval", 0.5, unit="seconds")
        0.5
        >>> number("Monitor", "queue_size", True, integer=True)
        Traceback (most recent call last):
        ...
        monitor_async.ConfigError: Monitor: queue_size must be an integer > 0, got True
    """
    if value is None and none:
        return None
    ok = not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
    if ok and not integer:
        ok = math.isfinite(value)
    if ok and low is not None:
        ok = value > low if above else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        raise refuse(owner, option, _allowed(integer, low, above, high, unit, none), value)
    return value


def choice(owner: str, option: str, value: T, allowed: Collection[Any]) -> T:
    """``value`` if it is one of ``allowed``, else a [ConfigError][monitor_async.ConfigError] listing them.

    Examples:
        >>> choice("Monitor", "on_error", "warn", ("warn", "raise", "ignore"))
        'warn'
    """
    if not any(type(value) is type(a) and value == a for a in allowed):  # True is not 1 here
        names = [repr(a) for a in allowed]
        text = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        raise refuse(owner, option, text, value)
    return value


def fractions(owner: str, option: str, value: Any, *, none: bool = False) -> tuple[float, ...] | None:
    """``value`` as a sorted tuple of distinct numbers in ``[0, 1]`` (quantiles), else a [ConfigError][monitor_async.ConfigError].

    Examples:
        >>> fractions("Monitor", "quantiles", [0.9, 0.5])
        (0.5, 0.9)
        >>> fractions("watch 'server'", "quantiles", [50, 90])
        Traceback (most recent call last):
        ...
        monitor_async.ConfigError: watch 'server': quantiles must be a non-empty list of numbers >= 0 and <= 1, got [50, 90]
    """
    if value is None and none:
        return None
    allowed = "a non-empty list of numbers >= 0 and <= 1" + (" or None" if none else "")
    if not isinstance(value, (list, tuple)) or not value:
        raise refuse(owner, option, allowed, value)
    for q in value:
        ok = not isinstance(q, bool) and isinstance(q, (int, float)) and math.isfinite(q) and 0.0 <= q <= 1.0
        if not ok:
            raise refuse(owner, option, allowed, value)
    return tuple(sorted({float(q) for q in value}))
