"""Values that are many numbers: a bounded summary made at the poll or the call, never the array.

A list or tuple of numbers, a numpy array, a torch tensor of more than one element (flattened) or a
[Distribution][monitor_async.Distribution] in a snapshot or a push becomes a `Summary`: count, sum,
min, max, quantiles exact for those values (numpy's default "linear" method), NaN and inf counted
apart, and OpenTelemetry's base-2 exponential histogram (at most ``MAX_BUCKETS`` buckets per sign), or
counts over explicit bounds. Summaries of several targets or ranks merge exactly (`merge`).

numpy is used when it is installed (imported on the first summary); without it lists and tuples
are summarised in pure Python with the same definitions.
"""

from __future__ import annotations

import math
from array import array as _floats_buffer
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence, Set
from contextlib import suppress
from itertools import pairwise
from numbers import Real
from typing import Any

from .checks import fractions, number, refuse
from .summary import (
    DEFAULT_QUANTILES,
    MAX_BUCKETS,
    MAX_SCALE,
    MIN_SCALE,
    Summary,
    _checked,
    _empty,
    _estimate,
    _lerp,
    _positions,
    coarsen,
    merge,
    quantile_name,
)

__all__ = [
    "DEFAULT_QUANTILES", "MAX_BUCKETS", "MAX_SCALE", "MIN_SCALE", "Distribution", "Summary", "coarsen", "merge",
    "quantile_name", "summarize",
]


class Distribution:
    """A value to be summarised as a distribution, with options per key.

    Args:
        values: the numbers (any sequence, numpy array or tensor); ``None`` with ``counts``.
        quantiles: overrides the monitor's and the watch's ``quantiles=``.
        bounds: explicit bucket upper bounds instead of the exponential histogram (bucket ``i`` holds
            ``bounds[i-1] < v <= bounds[i]``, the last one ``v > bounds[-1]``).
        counts: already binned values (``len(bounds) + 1`` counts), with ``bounds``; the sum, extremes
            and quantiles are then estimated from the buckets.

    Raises [ConfigError][monitor_async.ConfigError] for quantiles outside [0, 1], bounds that are not
    finite and increasing, or counts that do not fit them.

    Examples:
        >>> Distribution([1.0, 2.0, 3.0], quantiles=(0.5,)).values
        [1.0, 2.0, 3.0]
        >>> summarize(Distribution(bounds=[0.1, 1.0], counts=[5, 3, 0])).count
        8
    """

    __slots__ = ("bounds", "counts", "quantiles", "values")

    def __init__(
        self, values: Any = None, *, quantiles: Sequence[float] | None = None,
        bounds: Sequence[float] | None = None, counts: Sequence[int] | None = None,
    ) -> None:
        self.values = values
        self.quantiles = fractions("Distribution", "quantiles", quantiles, none=True)
        self.bounds = None if bounds is None else _check_bounds(bounds)
        self.counts = None if counts is None else _check_counts(counts, self.bounds)
        if (values is None) == (counts is None):
            raise refuse("Distribution", "values or counts", "given, one of them", (values, counts))


def _check_bounds(bounds: Sequence[float], owner: str = "Distribution") -> tuple[float, ...]:
    if isinstance(bounds, (str, bytes)) or not isinstance(bounds, Sequence):
        raise refuse(owner, "bounds", "a non-empty, strictly increasing sequence", bounds)
    out = tuple(number(owner, "bounds", b, above=False, low=None) + 0.0 for b in bounds)
    if not out or any(a >= b for a, b in pairwise(out)):
        raise refuse(owner, "bounds", "a non-empty, strictly increasing sequence", bounds)
    return out


def _check_counts(counts: Sequence[int], bounds: tuple[float, ...] | None) -> tuple[int, ...]:
    out = tuple(number("Distribution", "counts", n, integer=True, above=False) for n in counts)
    if bounds is None or len(out) != len(bounds) + 1:
        raise refuse("Distribution", "counts", "len(bounds) + 1 counts, with bounds", counts)
    return out


# ------------------------------------------------------------------ the scale
def _span(low: float, high: float, scale: int) -> int:
    """Buckets from ``log2(low)`` to ``log2(high)`` (as numbers already) at ``scale``."""
    factor = math.ldexp(1.0, scale)
    return math.ceil(high * factor) - math.ceil(low * factor) + 1


def _fit(ranges: Sequence[tuple[float, float]]) -> int:
    """The finest scale at which each ``(log2 of the smallest, log2 of the largest)`` magnitude fits ``MAX_BUCKETS``."""
    widest = max((high - low for low, high in ranges), default=0.0)
    scale = MAX_SCALE if widest <= 0 else max(MIN_SCALE, min(MAX_SCALE, int(math.log2(MAX_BUCKETS / widest)) + 1))
    while scale > MIN_SCALE and any(_span(low, high, scale) > MAX_BUCKETS for low, high in ranges):
        scale -= 1
    while scale < MAX_SCALE and all(_span(low, high, scale + 1) <= MAX_BUCKETS for low, high in ranges):
        scale += 1
    return scale


# ------------------------------------------------------------------ quantiles


# ------------------------------------------------------------------ numpy
CHUNK = 500
"""Values numpy works on in one call without releasing the GIL (it releases it past 500)."""

HELD = 2048
"""Arrays of ``CHUNK`` to this many values are summarised in pieces of ``CHUNK``, holding the GIL.

numpy releases the GIL in each call on more than ``CHUNK`` values; while a caller's thread runs
Python without a pause (a training loop between two pushes), the thread that released it waits up
to the interpreter's switch interval (5 ms) to have it back, for each such call. A summary in
pieces costs a little more CPU and never waits: pushes of 1,000-value arrays at 1,000 a second are
summarised as they come. Larger arrays are summarised whole, the fastest when the GIL is free.
"""

_np: Any = None
_no_numpy = False


def _numpy() -> Any:
    global _np, _no_numpy
    if _np is None and not _no_numpy:
        try:
            import numpy
        except ImportError:
            _no_numpy = True
        else:
            _np = numpy
    return _np


def _array(np: Any, values: Any) -> Any:
    """``values`` as a flat float64 numpy array (a view when it already is one), or TypeError/ValueError."""
    if type(values) is np.ndarray:
        array = values
    elif type(values).__module__.startswith("torch") and hasattr(values, "detach"):
        tensor = values.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        try:
            array = tensor.numpy()
        except TypeError:  # bfloat16 and other kinds numpy has no dtype for
            array = tensor.double().numpy()
    elif isinstance(values, (str, bytes, Mapping, Set)):
        raise TypeError(f"{type(values).__name__} is not a sequence of numbers")
    else:
        array = None
        if (type(values) is list or type(values) is tuple) and values and type(values[0]) is float:
            # the common list of floats: array's strict float conversion is numpy's fastest reader; when
            # not all are floats numpy's own reading says what the list holds
            with suppress(TypeError, OverflowError):
                array = np.frombuffer(_floats_buffer("d", values), dtype=np.float64)
        if array is None:
            try:
                array = np.asarray(values)
            except ValueError as exc:
                raise ValueError(f"{type(values).__name__} with ragged nesting (sequences of different lengths)") from exc
    kind = array.dtype.kind
    if kind == "O":
        if array.ndim == 0:
            raise TypeError(f"{type(values).__name__} is not a sequence of numbers")
        array = np.asarray(_floats(array.tolist(), type(values).__name__), dtype=np.float64)
    elif kind not in "fiub":
        what = {"U": "str", "S": "bytes"}.get(kind, str(array.dtype))
        raise TypeError(f"{type(values).__name__} holding {what} values, expected numbers")
    if array.dtype != np.float64:
        array = _float64(np, array)
    return array.reshape(-1)


def _float64(np: Any, array: Any) -> Any:
    """``array`` as float64: piece by piece in the sizes `_summary_held` takes (numpy holds the GIL then)."""
    size = int(array.size)
    if not (CHUNK < size <= HELD and array.flags.c_contiguous):
        return array.astype(np.float64)
    flat = array.reshape(-1)
    out = np.empty(size)
    for i in range(0, size, CHUNK):
        out[i:i + CHUNK] = flat[i:i + CHUNK]
    return out


def _summary_of_array(np: Any, array: Any, quantiles: Sequence[float], bounds: Sequence[float] | None) -> Summary:
    if CHUNK < array.size <= HELD:
        return _summary_held(np, array, quantiles, bounds)
    (array,), total, nans, infs = _finite(np, [array])
    n = int(array.size)
    if n == 0:
        return _empty(quantiles, bounds, nans, infs)
    low, high = float(array.min()), float(array.max())
    # The values nearest 0 on each side are found by the same partition as the quantiles: in sorted
    # order the negatives take ranks [0, below), the zeros [below, above), the positives the rest.
    below = int(np.count_nonzero(array < 0)) if low < 0 else 0
    above = n - int(np.count_nonzero(array)) + below if low <= 0 <= high else below
    spots = _positions(n, quantiles)
    ranks = {r for first, second, _ in spots for r in (first, second)}
    if bounds is None and 0 < below < n:
        ranks.add(below - 1)
    if bounds is None and 0 < above < n:
        ranks.add(above)
    ordered = np.partition(array, sorted(ranks)) if ranks else array
    figures = tuple((q, _lerp(float(ordered[a]), float(ordered[b]), t)) for q, (a, b, t) in zip(quantiles, spots, strict=True))
    if bounds is not None:
        counts = np.bincount(np.searchsorted(np.asarray(bounds), array), minlength=len(bounds) + 1)
        return Summary(n, total, low, high, figures, nans, infs, bounds=tuple(bounds), counts=tuple(counts.tolist()))
    scale, positive, negative = _exponential(np, (array,), ordered, low, high, below, above)
    return Summary(n, total, low, high, figures, nans, infs, scale, above - below, positive, negative)


def _finite(np: Any, pieces: list[Any]) -> tuple[list[Any], float, int, int]:
    """``pieces`` (arrays) without their NaN and inf, the sum of what is left, and how many NaN and inf there were."""
    with np.errstate(over="ignore"):  # finite values whose sum is past the largest float: the sum is inf
        total = sum([float(piece.sum()) for piece in pieces], -0.0)  # -0.0: one piece's sum as it is
        if math.isfinite(total):
            return pieces, total, 0, 0
        nans = infs = 0  # a NaN or an inf inside (or finite values whose sum overflows)
        kept = []
        for piece in pieces:
            finite = np.isfinite(piece)
            count = int(np.count_nonzero(finite))
            if count < piece.size:
                nan = int(np.count_nonzero(np.isnan(piece)))
                nans += nan
                infs += int(piece.size) - count - nan
                piece = piece[finite]
            kept.append(piece)
        if nans or infs:
            total = sum([float(piece.sum()) for piece in kept], -0.0)
        return kept, total, nans, infs


def _summary_held(np: Any, array: Any, quantiles: Sequence[float], bounds: Sequence[float] | None) -> Summary:
    """`_summary_of_array` in pieces of at most ``CHUNK`` values, holding the GIL throughout (see ``HELD``).

    The sort is Python's (numpy's releases the GIL at any size); the quantiles, the extremes and the
    values nearest 0 are read from it, the buckets counted piece by piece.
    """
    pieces, total, nans, infs = _finite(np, [array[i:i + CHUNK] for i in range(0, int(array.size), CHUNK)])
    ordered: list[float] = []
    for piece in pieces:
        ordered += piece.tolist()
    ordered.sort()  # Python's sort: numpy's releases the GIL at any size
    n = len(ordered)
    if n == 0:
        return _empty(quantiles, bounds, nans, infs)
    low, high = ordered[0], ordered[-1]
    below, above = bisect_left(ordered, 0.0), bisect_right(ordered, 0.0)  # -0.0 is a zero, as for numpy
    figures = tuple(
        (q, _lerp(ordered[a], ordered[b], t)) for q, (a, b, t) in zip(quantiles, _positions(n, quantiles), strict=True)
    )
    if bounds is not None:
        at_most = [bisect_right(ordered, bound) for bound in bounds]  # values <= each bound
        counts = [at_most[0], *(b - a for a, b in pairwise(at_most)), n - at_most[-1]]
        return Summary(n, total, low, high, figures, nans, infs, bounds=tuple(bounds), counts=tuple(counts))
    scale, positive, negative = _exponential(np, pieces, ordered, low, high, below, above)
    return Summary(n, total, low, high, figures, nans, infs, scale, above - below, positive, negative)


_Side = tuple[int, tuple[int, ...]]


def _exponential(
    np: Any, pieces: Sequence[Any], ordered: Any, low: float, high: float, below: int, above: int
) -> tuple[int, _Side, _Side]:
    """The scale and the positive and negative buckets of the finite values in ``pieces`` (arrays), ``ordered``
    holding them sorted at least at ranks ``below - 1`` and ``above`` (the values nearest 0 on each side):
    one log2 and one bincount for all the values of a piece."""
    n = sum(int(piece.size) for piece in pieces)
    # log2 of each side's smallest and largest magnitude, by the same log2 as every value's below
    ends = np.log2(np.array([
        (low if above == 0 else float(ordered[above])) if above < n else 1.0, high if above < n else 1.0,
        -(high if below == n else float(ordered[below - 1])) if below else 1.0, -low if below else 1.0,
    ]))
    ranges = [(float(ends[0]), float(ends[1]))] * (above < n) + [(float(ends[2]), float(ends[3]))] * (below > 0)
    scale = _fit(ranges)
    factor = math.ldexp(1.0, scale)
    firsts = [math.ceil(float(end) * factor) for end in ends]  # bucket index + 1 of each end
    spans = [firsts[1] - firsts[0] + 1 if above < n else 0, firsts[3] - firsts[2] + 1 if below else 0]
    width = spans[0] + spans[1] + (above > below)
    counts = None
    for array in pieces:
        if below:
            logs = np.log2(np.abs(array)) if above == below else _log2_nonzero(np, array)
            logs *= factor
            np.ceil(logs, out=logs)
            # one bincount: positive bucket i at i - first, negative ones after them
            logs -= np.where(array < 0, firsts[2] - spans[0], firsts[0])
            if above > below:
                logs[array == 0] = spans[0] + spans[1]
        else:
            logs = np.log2(array) if above == 0 else _log2_nonzero(np, array)
            logs *= factor
            np.ceil(logs, out=logs)
            logs -= firsts[0]
            if above > below:
                logs[array == 0] = spans[0]
        found = np.bincount(logs.astype(np.intp), minlength=width)
        if len(found) != width:
            raise ArithmeticError(f"numpy's log2 is not monotonic here: {len(found)} buckets for {spans}")
        counts = found if counts is None else counts + found
    listed = [] if counts is None else counts.tolist()
    return (
        scale,
        (firsts[0] - 1, tuple(listed[:spans[0]])) if spans[0] else (0, ()),
        (firsts[2] - 1, tuple(listed[spans[0]:spans[0] + spans[1]])) if spans[1] else (0, ()),
    )


def _log2_nonzero(np: Any, array: Any) -> Any:
    """``log2(abs(array))`` with 0 where ``array`` is 0 (those are counted apart)."""
    magnitudes = np.abs(array)
    return np.log2(magnitudes, out=np.zeros_like(magnitudes), where=magnitudes > 0)


# ------------------------------------------------------------------ pure Python
def _floats(values: Sequence[Any], name: str) -> list[float]:
    """``values`` (lists and tuples) flattened to floats, or TypeError (a non-number) / ValueError (ragged nesting)."""
    out: list[float] = []
    lengths: list[int] = []
    leaves: list[bool | None] = []

    def walk(items: Sequence[Any], depth: int) -> None:
        if depth == len(lengths):
            lengths.append(len(items))
            leaves.append(None)
        elif lengths[depth] != len(items):
            raise ValueError(f"{name} with ragged nesting (sequences of different lengths)")
        for item in items:
            nested = isinstance(item, (list, tuple))
            if leaves[depth] is nested:  # numbers here before, a sequence now (or the other way)
                raise ValueError(f"{name} with ragged nesting (numbers beside sequences)")
            leaves[depth] = not nested
            if nested:
                walk(item, depth + 1)
            elif isinstance(item, Real) and not isinstance(item, (str, bytes)):
                try:
                    out.append(float(item))
                except OverflowError:  # an int past the largest float
                    big: Any = item
                    out.append(math.inf if big > 0 else -math.inf)
            else:
                raise TypeError(f"{name} holding {type(item).__name__} ({item!r:.40}), expected numbers")

    walk(values, 0)
    return out


def _summary_of_floats(values: list[float], quantiles: Sequence[float], bounds: Sequence[float] | None) -> Summary:
    finite = [v for v in values if v - v == 0.0]
    nans = infs = 0
    if len(finite) < len(values):
        nans = sum(1 for v in values if v != v)
        infs = len(values) - len(finite) - nans
    n = len(finite)
    if n == 0:
        return _empty(quantiles, bounds, nans, infs)
    ordered = sorted(finite)
    figures = tuple((q, _lerp(ordered[a], ordered[b], t)) for q, (a, b, t) in zip(quantiles, _positions(n, quantiles), strict=True))
    total, low, high = math.fsum(ordered), ordered[0], ordered[-1]
    if bounds is not None:
        counts = [0] * (len(bounds) + 1)
        for v in ordered:
            counts[bisect_left(bounds, v)] += 1
        return Summary(n, total, low, high, figures, nans, infs, bounds=tuple(bounds), counts=tuple(counts))
    positive = [math.log2(v) for v in ordered if v > 0]
    negative = [math.log2(-v) for v in ordered if v < 0]
    zeros = n - len(positive) - len(negative)
    scale = _fit([(min(side), max(side)) for side in (positive, negative) if side])
    factor = math.ldexp(1.0, scale)
    sides: list[tuple[int, tuple[int, ...]]] = []
    for side in (positive, negative):
        if not side:
            sides.append((0, ()))
            continue
        indexes = [math.ceil(v * factor) - 1 for v in side]
        offset = min(indexes)
        counts = [0] * (max(indexes) - offset + 1)
        for i in indexes:
            counts[i - offset] += 1
        sides.append((offset, tuple(counts)))
    return Summary(n, total, low, high, figures, nans, infs, scale, zeros, sides[0], sides[1])


# ------------------------------------------------------------------ the two entry points


def summarize(values: Any, quantiles: Sequence[float] = DEFAULT_QUANTILES, bounds: Sequence[float] | None = None) -> Summary:
    """The `Summary` of a sequence of numbers (list, tuple, numpy array, tensor, `Distribution`).

    Raises ``TypeError``/``ValueError`` for ragged nesting or non-numbers (the caller counts and warns
    a drop of that key).

    Examples:
        >>> s = summarize([3.0, 1.0, float("nan"), 2.0])
        >>> s.count, s.min, s.max, s.nan_count, dict(s.quantiles)[0.5]
        (3, 1.0, 3.0, 1, 2.0)
    """
    if quantiles and quantiles is not DEFAULT_QUANTILES:
        quantiles = _checked("summarize", quantiles)
    if bounds is not None:
        bounds = _check_bounds(bounds, "summarize")
    if type(values) is Distribution:  # its options were checked when it was made
        if values.quantiles is not None:
            quantiles = values.quantiles
        if values.bounds is not None:
            bounds = values.bounds
        if values.counts is not None:
            assert values.bounds is not None
            return _binned(values.bounds, values.counts, quantiles)
        values = values.values
    np = _numpy()
    if np is None:
        if not isinstance(values, (list, tuple)):
            raise TypeError(f"{type(values).__name__} is not a list or tuple of numbers (numpy is not installed)")
        return _summary_of_floats(_floats(values, type(values).__name__), quantiles, bounds)
    return _summary_of_array(np, _array(np, values), quantiles, bounds)


def _binned(bounds: tuple[float, ...], counts: tuple[int, ...], quantiles: Sequence[float]) -> Summary:
    """The summary of values already binned: sum, extremes and quantiles estimated from the buckets.

    The open buckets' values are taken to lie at their one bound.
    """
    n = sum(counts)
    if n == 0:
        return _empty(quantiles, bounds)
    edges = [(bounds[0], bounds[0]), *pairwise(bounds), (bounds[-1], bounds[-1])]
    filled = [i for i, c in enumerate(counts) if c]
    low, high = edges[filled[0]][0], edges[filled[-1]][1]
    total = sum(c * (a + b) / 2 for c, (a, b) in zip(counts, edges, strict=True))
    figures = _estimate([(a, b, c) for (a, b), c in zip(edges, counts, strict=True) if c], n, low, high, quantiles)
    return Summary(n, total, low, high, figures, bounds=bounds, counts=counts)


