"""Turning a ``stats()`` result into flat ``{key: float}`` values.

This is the per-value hot path: one pass that flattens nested mappings with
``/``, coerces scalars to ``float``, leaves out what is not a finite number
and puts each value under its namespaced key (``"<watch>/<key>"``, cached).
Plain ``float``/``int``/``bool`` values never leave the loop body.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

from ._exceptions import StatsTypeError

__all__ = ["KeyCache", "as_mapping", "flatten"]


class KeyCache:
    """``names[key]`` is ``prefix + key``; :meth:`of` computes it once per key.

    ``names`` is a plain dict so that the hot path reads it with the
    interpreter's fast dict subscript. Bounded: it starts afresh once it holds
    more than ``bound`` keys (a target whose key names keep changing, with an
    id or a time in them), so its memory never grows without bound.
    ``added`` counts the keys ever added, so a reader can tell the set changed.
    """

    __slots__ = ("added", "bound", "names", "prefix")

    def __init__(self, prefix: str, bound: int) -> None:
        self.prefix = prefix
        self.bound = bound
        self.names: dict[Any, str] = {}
        self.added = 0

    def of(self, key: Any) -> str:
        """The namespaced name of ``key`` (a non-str key is first made a str)."""
        names = self.names
        name = names.get(key)
        if name is None:
            if len(names) >= self.bound:
                names.clear()
            name = names[key] = self.prefix + (key if type(key) is str else str(key))
            self.added += 1
        return name


def as_mapping(raw: object, watch: str) -> dict[Any, Any]:
    """A private copy of ``raw`` (so a target mutating it cannot break the read).

    Raises ``TypeError`` naming the watch when ``raw`` is not a mapping.
    """
    if type(raw) is dict:
        return raw.copy()
    if isinstance(raw, Mapping):
        return dict(raw)
    raise StatsTypeError(
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


def flatten(raw: Mapping[Any, Any], out: dict[str, float], limit: int, keys: KeyCache) -> int:
    """Adds the finite numeric values of ``raw`` to ``out`` under namespaced keys; returns how many were left out.

    One pass does all of it: each key becomes ``keys.of(key)`` (the watch's
    ``"<name>/"`` prefix, cached per key, so a snapshot of known keys builds
    no new key string), nested mappings are copied, then flattened as
    ``outer/inner``, and each value is coerced to ``float`` or left out.
    ``out`` holds at most ``limit`` values in all (the first ones in snapshot
    order); every value past the cap, nested ones included, counts as left out.
    """
    if len(raw) > limit - len(out):
        return _flatten(raw, out, limit, keys, "")
    # the common case, kept lean: a flat mapping of str -> float/int/bool under the cap
    dropped = 0
    names = keys.names
    for key, value in raw.items():
        kind = type(value)
        if kind is float:
            if value - value != 0.0:  # inf or nan
                dropped += 1
                continue
        elif kind is int or kind is bool:
            try:
                value = value + 0.0
            except OverflowError:
                dropped += 1
                continue
        elif isinstance(value, Mapping):
            dropped += _nested(value, out, limit, keys, (key if type(key) is str else str(key)) + "/")
            continue
        else:
            value = _scalar(value)
            if value is None:
                dropped += 1
                continue
        try:
            out[names[key]] = value
        except KeyError:
            out[keys.of(key)] = value
    return dropped + _cut(out, limit)


def _flatten(raw: Mapping[Any, Any], out: dict[str, float], limit: int, keys: KeyCache, prefix: str) -> int:
    """:func:`flatten` for nested mappings (keys under ``prefix``) and mappings past the cap."""
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
        kind = type(value)
        if kind is float:
            if value - value != 0.0:  # inf or nan
                dropped += 1
                continue
        elif kind is int or kind is bool:
            try:
                value = value + 0.0
            except OverflowError:
                dropped += 1
                continue
        elif isinstance(value, Mapping):
            dropped += _nested(value, out, limit, keys, prefix + key + "/")
            continue
        else:
            value = _scalar(value)
            if value is None:
                dropped += 1
                continue
        out[keys.of(prefix + key)] = value
    return dropped + _cut(out, limit)


def _nested(value: Mapping[Any, Any], out: dict[str, float], limit: int, keys: KeyCache, prefix: str) -> int:
    # a private copy: the target may be writing to its nested dicts too
    nested = value.copy() if type(value) is dict else dict(value)
    return _flatten(nested, out, limit, keys, prefix)


def _cut(out: dict[str, float], limit: int) -> int:
    """Plain values after a nested mapping went past the cap: the newest ones go; returns how many."""
    excess = len(out) - limit
    if excess <= 0:
        return 0
    for key in list(islice(reversed(out), excess)):
        del out[key]
    return excess


def _count(values: Iterable[Any]) -> int:
    """How many values ``values`` holds, counting the leaves of nested mappings."""
    n = 0
    for value in values:
        n += _count(value.values()) if isinstance(value, Mapping) else 1
    return n
