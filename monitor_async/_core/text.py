"""Numbers, counts and times written for people: engineering notation, ages, plurals, the clock."""

from __future__ import annotations

import math
import time

__all__ = ["age", "clock", "count", "eng"]

_SUFFIXES = ("", "k", "M", "G", "T", "P", "E")


def eng(value: float) -> str:
    """``value`` with three significant digits and an SI suffix, at most 8 characters below 1e21.

    Whole numbers below 1000 print exactly; magnitudes under 0.001 use an exponent.

    Examples:
        >>> [eng(v) for v in (300, 7.25, 88612.0, 1234567, 0.01234, -2500, 0.0, 999.99, 2e-5)]
        ['300', '7.25', '88.6k', '1.23M', '0.0123', '-2.5k', '0', '1k', '2.00e-05']
    """
    if not math.isfinite(value):
        return str(value)
    mag = abs(value)
    if mag < 1000:
        if value == int(value):
            return str(int(value))
        if mag < 0.001:
            return f"{value:.2e}"
        text = f"{value:.3g}"
        if "e" not in text:
            return text
    power = max(1, int(math.log10(mag) // 3))
    for p in (power, power + 1):
        if p >= len(_SUFFIXES):
            break
        text = f"{value / 1000.0**p:.3g}"
        if "e" not in text:
            return text + _SUFFIXES[p]
    return f"{value:.3g}"


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``1 watch``, ``5 watches``, ``0 records``.

    Examples:
        >>> count(1, "watch"), count(5, "watch"), count(0, "record")
        ('1 watch', '5 watches', '0 records')
    """
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun}{'es' if noun.endswith(('s', 'sh', 'ch', 'x')) else 's'}"


def age(seconds: float) -> str:
    """How long ago, in one unit of at most 4 characters: ``4s``, ``12m``, ``3h``, ``2d``, ``99d+``; negative is ``0s``.

    Examples:
        >>> [age(s) for s in (-1, 4.7, 750, 3 * 3600, 2 * 86400, 1e9)]
        ['0s', '4s', '12m', '3h', '2d', '99d+']
    """
    s = max(0.0, seconds)
    for unit, size, limit in (("s", 1, 60), ("m", 60, 3600), ("h", 3600, 86400), ("d", 86400, 100 * 86400)):
        if s < limit:
            return f"{int(s // size)}{unit}"
    return "99d+"


def clock(unix: float, *, date: bool = False) -> str:
    """``unix`` (seconds since the epoch) as local time: ``HH:MM:SS``, with ``date`` ``YYYY-MM-DD HH:MM:SS``.

    Examples:
        >>> len(clock(0.0)), len(clock(0.0, date=True))
        (8, 19)
    """
    return time.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S", time.localtime(unix))
