"""The private copy a push takes of its values on the caller's thread, and the spare arrays it copies into.

``log()`` copies what it is given at the call (the caller may change it
right after) and the drain summarises it on the monitor's loop. A numpy
array is copied into a spare array of its shape and dtype that an earlier
push's drain gave back, when there is one: memory fresh from the allocator
costs the caller a page fault per page on first touch (about 10 us for
8 KB on a virtual machine), a spare one a plain copy. Spares are kept per
size and dtype, at most ``SPARE_BYTES`` of each and for at most
``SPARE_KINDS`` kinds; an array over ``SPARE_BYTES`` is copied fresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core.distribution import Distribution, Summary
from .._core.values import MAX_DEPTH, is_many

__all__ = ["SPARE_BYTES", "SPARE_KINDS", "give_back", "snapshot"]

SPARE_BYTES = 1 << 20
"""Bytes of spare arrays kept for one size and dtype (128 arrays of 1,000 float64)."""

SPARE_KINDS = 8
"""Sizes and dtypes whose spares are kept; one more starts the spares afresh."""

_PLAIN = frozenset({float, int, bool, str, type(None)})
"""Value types a snapshot keeps as they are (immutable, and not mappings)."""


def snapshot(metrics: Any, depth: int = 0) -> Any:
    """A private copy of a pushed ``metrics``, nested mappings included, taken on the caller's thread.

    Never raises: what cannot be read here is kept as it is, and the drain
    reports it as an error of that push.

    Examples:
        >>> inner = {"lr": 0.1}
        >>> copy = snapshot({"opt": inner})
        >>> inner["lr"] = 9.0
        >>> copy
        {'opt': {'lr': 0.1}}
    """
    plain = _PLAIN
    try:
        if type(metrics) is dict:
            copy = metrics.copy()
            for value in copy.values():  # the common case: plain values only, one look at each class
                kind = value.__class__  # read faster than type(value); a float is settled without the set
                if kind is not float and kind not in plain:
                    break
            else:
                return copy
        elif isinstance(metrics, Mapping) and depth < MAX_DEPTH:
            copy = {key: metrics[key] for key in metrics}
        else:
            return metrics
        array = _array
        for key, value in copy.items():
            kind = type(value)
            if kind is array:  # the common array: copied whole (the caller may reuse it), summarised at the drain
                copy[key] = _copied(value)
            elif kind in plain:
                continue
            elif kind is dict or (kind is not list and isinstance(value, Mapping)):
                if depth < MAX_DEPTH:
                    copy[key] = snapshot(value, depth + 1)
            elif is_many(value):
                copy[key] = _own(value)
        return copy
    except Exception:  # noqa: BLE001 - read again on the loop, where its error is reported
        return metrics


class _NotSeen:
    """Stands for numpy's array type until a push holds one (no value has this type)."""


_array: type = _NotSeen
"""``numpy.ndarray`` once a push held one: the type `snapshot` copies first."""


class _Slab(bytearray):
    """The memory of a copy `snapshot` made: how the drain tells those copies from the caller's own arrays."""

    __slots__ = ()


_Spare = tuple[Any, memoryview]
"""A flat array over a `_Slab`, and a memoryview of it to copy into."""

_spares: dict[tuple[int, Any], list[_Spare]] = {}
"""Spare arrays by ``(size, dtype)``; a ``list``'s ``pop`` and ``append`` are atomic under the GIL."""

_frombuffer: Any = None
"""``numpy.frombuffer``, once a push held an array."""


def _copied(value: Any) -> Any:
    """A private copy of a numpy array, into a spare of its size and dtype or fresh, by a copy that holds the GIL.

    numpy's own copy of more than 500 values releases the GIL, and when a thread waits for it (the
    monitor's loop) that costs the caller a wake-up of that thread: several microseconds.
    """
    ndim = value.ndim
    if not ndim:  # a number: immutable
        return value
    spare = _spares.get((value.size, value.dtype))
    if spare:
        try:
            copy, view = spare.pop()
        except IndexError:  # another thread took the last one
            pass
        else:
            try:
                view[:] = value if ndim == 1 else value.reshape(-1)
            except (TypeError, ValueError):  # another byte order, say: numpy's copy
                return value.copy()
            return copy if ndim == 1 else copy.reshape(value.shape)
    return _fresh(value)


def _fresh(value: Any) -> Any:
    """A new copy of a numpy array, in memory a drain can give back to the spares (when it is small enough)."""
    nbytes = value.nbytes
    if nbytes > SPARE_BYTES or nbytes == 0 or value.dtype.hasobject:
        return value.copy()
    copy = _frombuffer(_Slab(value), value.dtype)  # the bytes in C order, whatever the layout
    return copy if value.ndim == 1 else copy.reshape(value.shape)


def give_back(metrics: Any, depth: int = 0) -> None:
    """Keeps the arrays `snapshot` copied into ``metrics`` as spares, once the drain has summarised them.

    Only for a push made into a record: nothing else holds its copy then.
    """
    if type(metrics) is not dict:
        return
    array = _array
    for value in metrics.values():
        kind = type(value)
        if kind is array:
            base = value.base
            if type(base) is not _Slab:
                if type(base) is not array or type(base.base) is not _Slab:
                    continue
                value = base  # the flat array under a copy of another shape
            key = (value.size, value.dtype)
            spare = _spares.get(key)
            if spare is None:
                if len(_spares) >= SPARE_KINDS:
                    _spares.clear()
                spare = _spares.setdefault(key, [])
            if len(spare) * value.nbytes < SPARE_BYTES:
                spare.append((value, memoryview(value)))
        elif kind is dict and depth < MAX_DEPTH:
            give_back(value, depth + 1)


def _own(value: Any) -> Any:
    """A private copy of a value of many numbers, taken at the call and summarised at the drain.

    A numpy array or CPU tensor is copied whole (one memcpy), a list shallowly; a tensor on another
    device is copied on its device (no wait for the device), and to the host off the caller's thread.
    """
    kind = type(value)
    if kind is list:
        return value.copy()
    if kind is tuple or kind is Summary or value is None:  # immutable (a Distribution of counts has no values)
        return value
    if kind is Distribution:
        return Distribution(_own(value.values), quantiles=value.quantiles, bounds=value.bounds, counts=value.counts)
    copy = getattr(value, "copy", None)  # numpy
    if kind.__module__ == "numpy" and callable(copy):
        if kind.__name__ == "ndarray":
            global _array, _frombuffer
            import numpy

            _array, _frombuffer = kind, numpy.frombuffer
            return _fresh(value) if value.ndim else copy()
        return copy()
    detach = getattr(value, "detach", None)  # torch
    if callable(detach):
        return detach().clone()
    return list(value)  # another sequence: its items as they are now
