"""Turning a ``stats()`` result into flat ``{key: float}`` values.

This is the per-value hot path: one pass that flattens nested mappings with
``/``, coerces scalars to ``float`` and leaves out what is not a finite
number. Plain ``float``/``int``/``bool`` values never leave the loop body.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

__all__ = ["KeyCache", "as_mapping", "flatten"]


class KeyCache(dict[str, str]):
    """``cache[key]`` is ``prefix + key``, computed once per key."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def __missing__(self, key: str) -> str:
        value = self[key] = self.prefix + key
        return value


def as_mapping(raw: object, watch: str) -> dict[Any, Any]:
    """A private copy of ``raw`` (so a target mutating it cannot break the read).

    Raises ``TypeError`` naming the watch when ``raw`` is not a mapping.
    """
    if type(raw) is dict:
        return raw.copy()
    if isinstance(raw, Mapping):
        return dict(raw)
    raise TypeError(
        f"stats() of watch {watch!r} returned {type(raw).__name__}, "
        "expected a mapping of scalars"
    )


def _scalar(value: object) -> float | None:
    """The float behind a non-builtin scalar (numpy, torch, Decimal...), or None."""
    if isinstance(value, (str, bytes, bytearray)):
        return None
    item = getattr(value, "item", None)
    try:
        if callable(item):
            value = item()
            if isinstance(value, (str, bytes, bytearray)):
                return None
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return None
    return out if out - out == 0.0 else None


def flatten(raw: Mapping[Any, Any], out: dict[str, float], limit: int, prefix: str = "") -> int:
    """Adds the finite numeric values of ``raw`` to ``out``; returns how many were left out.

    Nested mappings are copied, then flattened as ``outer/inner``. ``out``
    holds at most ``limit`` values in all (the first ones in snapshot order);
    every value past the cap, nested ones included, counts as left out.
    """
    dropped = 0
    room = limit - len(out)
    items: Iterable[tuple[Any, Any]] = raw.items()
    if len(raw) > room:
        room = max(room, 0)
        items = islice(items, room)
        dropped += _count(islice(raw.values(), room, None))
    for key, value in items:
        if type(key) is not str:
            key = str(key)
        if prefix:
            key = prefix + key
        kind = type(value)
        if kind is float:
            if value - value == 0.0:
                out[key] = value
            else:
                dropped += 1
        elif kind is int or kind is bool:
            try:
                out[key] = float(value)
            except OverflowError:
                dropped += 1
        elif isinstance(value, Mapping):
            # a private copy: the target may be writing to its nested dicts too
            nested = value.copy() if type(value) is dict else dict(value)
            dropped += flatten(nested, out, limit, key + "/")
        else:
            number = _scalar(value)
            if number is None:
                dropped += 1
            else:
                out[key] = number
    if len(out) > limit:
        # plain values after a nested mapping went past the cap: the newest ones go
        excess = len(out) - limit
        for key in list(islice(reversed(out), excess)):
            del out[key]
        dropped += excess
    return dropped


def _count(values: Iterable[Any]) -> int:
    """How many values ``values`` holds, counting the leaves of nested mappings."""
    n = 0
    for value in values:
        n += _count(value.values()) if isinstance(value, Mapping) else 1
    return n
