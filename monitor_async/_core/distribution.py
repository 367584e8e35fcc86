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
from dataclasses import dataclass
from itertools import pairwise
from numbers import Real
from typing import Any

from .checks import fractions, number, refuse

__all__ = [
    "DEFAULT_QUANTILES", "MAX_BUCKETS", "MAX_SCALE", "MIN_SCALE", "Distribution", "Summary", "coarsen", "merge",
    "quantile_name", "summarize",
]

DEFAULT_QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)
MAX_BUCKETS = 160
"""The most buckets per sign of an exponential histogram (OpenTelemetry's default)."""
MAX_SCALE = 20
"""The finest scale chosen (OpenTelemetry's default): buckets 2**(2**-20) wide, when the values allow."""
MIN_SCALE = -10
"""The coarsest scale: buckets 2**1024 wide, enough for every float64 in two buckets."""


@dataclass(frozen=True, slots=True)
class Summary:
    """What a distribution became: bounded, immutable, picklable, shared by every sink.

    Attributes:
        count: the finite values summarised.
        sum, min, max: of the finite values (``min``/``max`` are NaN when ``count`` is 0).
        quantiles: ``((0.5, p50), (0.9, p90), ...)``, exact for these values; after `merge`, estimated
            from the histogram.
        nan_count, inf_count: the values left out of the rest.
        scale: the exponential histogram's scale (bucket ``i`` holds ``(base**i, base**(i+1)]``,
            ``base = 2 ** 2 ** -scale``).
        zero_count: values equal to 0.
        positive, negative: ``(offset, counts)`` of the positive and negative buckets (negative by magnitude).
        bounds: explicit upper bounds when given (then ``counts`` has ``len(bounds) + 1`` entries and
            the exponential fields are empty).
        counts: the counts over ``bounds``.
    """

    count: int
    sum: float
    min: float
    max: float
    quantiles: tuple[tuple[float, float], ...]
    nan_count: int = 0
    inf_count: int = 0
    scale: int = 0
    zero_count: int = 0
    positive: tuple[int, tuple[int, ...]] = (0, ())
    negative: tuple[int, tuple[int, ...]] = (0, ())
    bounds: tuple[float, ...] | None = None
    counts: tuple[int, ...] = ()

    @property
    def mean(self) -> float:
        """``sum / count`` (NaN for an empty one)."""
        return self.sum / self.count if self.count else float("nan")

    def buckets(self) -> list[tuple[float, float, int]]:
        """``[(lower, upper, count), ...]`` in increasing order, empty buckets left out (for TensorBoard, wandb).

        Zeros are the bucket ``(0.0, 0.0, zero_count)``; the open ends of explicit bounds are closed at
        ``min`` and ``max``.

        Examples:
            >>> summarize([1.0, 2.0, 3.0], bounds=[2.0]).buckets()
            [(1.0, 2.0, 2), (2.0, 3.0, 1)]
        """
        if self.bounds is not None:
            edges = (-math.inf, *self.bounds, math.inf)
            return [
                (max(edges[i], self.min), min(edges[i + 1], self.max), n)
                for i, n in enumerate(self.counts) if n
            ]
        out: list[tuple[float, float, int]] = []
        offset, counts = self.negative
        for i in range(len(counts) - 1, -1, -1):
            if counts[i]:
                out.append((-_power(offset + i + 1, self.scale), -_power(offset + i, self.scale), counts[i]))
        if self.zero_count:
            out.append((0.0, 0.0, self.zero_count))
        offset, counts = self.positive
        for i, n in enumerate(counts):
            if n:
                out.append((_power(offset + i, self.scale), _power(offset + i + 1, self.scale), n))
        return out

    def histogram(self) -> tuple[list[float], list[int]]:
        """``(edges, counts)``, contiguous: bucket ``i`` spans ``edges[i]`` to ``edges[i + 1]`` (what
        TensorBoard, wandb and Prometheus' ``le`` take).

        Every bucket from the lowest filled one to the highest is there, empty ones included; the
        zeros' bucket spans the gap between the negative and the positive buckets (only zeros lie in
        it); the open ends of explicit bounds are closed at ``min`` and ``max``. Empty for ``count`` 0.

        Examples:
            >>> summarize([-1.0, 0.0, 0.0, 4.0], bounds=[-2.0, 0.0, 2.0, 8.0, 9.0]).histogram()
            ([-2.0, 0.0, 2.0, 8.0], [3, 0, 1])
        """
        if not self.count:
            return [], []
        if self.bounds is not None:
            filled = [i for i, n in enumerate(self.counts) if n]
            first, last = filled[0], filled[-1]
            limits = [min(self.min, self.bounds[0]), *self.bounds, max(self.max, self.bounds[-1])]
            return limits[first:last + 2], list(self.counts[first:last + 1])
        scale = self.scale
        edges: list[float] = []
        counts: list[int] = []
        offset, below = self.negative
        if below:
            edges.append(-_power(offset + len(below), scale))
            for i in range(len(below) - 1, -1, -1):
                edges.append(-_power(offset + i, scale))
                counts.append(below[i])
        offset, above = self.positive
        if self.zero_count or (below and above):  # the zeros' bucket, or an empty one between the signs
            if not edges:
                edges.append(0.0)
            edges.append(_power(offset, scale) if above else 0.0)
            counts.append(self.zero_count)
        if above:
            if not edges:
                edges.append(_power(offset, scale))
            for i, n in enumerate(above):
                edges.append(_power(offset + i + 1, scale))
                counts.append(n)
        return edges, counts

    def scalars(self) -> dict[str, float]:
        """The summary as scalar keys: ``count``, ``mean``, ``min``, ``max``, ``p50``... (``nan_count`` and
        ``inf_count`` when not 0), the keys every sink writes as ``<watch>/<key>/<field>``.

        Fields that are not finite (the mean of an empty one) are left out.

        Examples:
            >>> summarize([1.0, 3.0, float("nan")]).scalars()
            {'count': 2.0, 'mean': 2.0, 'min': 1.0, 'max': 3.0, 'p50': 2.0, 'p90': 2.8, 'p99': 2.98, 'nan_count': 1.0}
        """
        out = {"count": float(self.count)}
        if self.count:
            for field, value in (("mean", self.mean), ("min", self.min), ("max", self.max)):
                if math.isfinite(value):
                    out[field] = value
            for q, value in self.quantiles:
                if math.isfinite(value):
                    out[quantile_name(q)] = value
        if self.nan_count:
            out["nan_count"] = float(self.nan_count)
        if self.inf_count:
            out["inf_count"] = float(self.inf_count)
        return out


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


_CHECKED: dict[tuple[float, ...], tuple[float, ...]] = {}


def _checked(owner: str, quantiles: Sequence[float]) -> tuple[float, ...]:
    """``quantiles`` checked (`fractions`), once per tuple: the monitor passes the same one at every poll."""
    if type(quantiles) is tuple:
        known = _CHECKED.get(quantiles)
        if known is not None:
            return known
    checked = fractions(owner, "quantiles", quantiles)
    assert checked is not None
    if type(quantiles) is tuple and len(_CHECKED) < 256:
        _CHECKED[quantiles] = checked
    return checked


def quantile_name(q: float) -> str:
    """The scalar key of quantile ``q``: ``p50`` for 0.5, ``p99.9`` for 0.999.

    Examples:
        >>> quantile_name(0.5), quantile_name(0.999), quantile_name(0.05)
        ('p50', 'p99.9', 'p5')
    """
    name = _NAMES.get(q)
    if name is None:
        name = "p" + format(round(q * 100, 6), "g")
        if len(_NAMES) < 1024:
            _NAMES[q] = name
    return name


_NAMES: dict[float, str] = {}


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


def _power(index: int, scale: int) -> float:
    """``base ** index``, the lower edge of bucket ``index`` (``inf`` past the largest float)."""
    try:
        if scale <= 0:
            return math.ldexp(1.0, index << -scale)
        whole, part = divmod(index, 1 << scale)
        return math.ldexp(2.0 ** (part / (1 << scale)), whole)
    except OverflowError:
        return math.inf


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
def _positions(n: int, quantiles: Sequence[float]) -> list[tuple[int, int, float]]:
    """For each quantile the two ranks and the weight numpy's "linear" method interpolates with."""
    out = []
    for q in quantiles:
        virtual = (n - 1) * q
        below = min(max(math.floor(virtual), 0), n - 1)
        out.append((below, min(below + 1, n - 1), virtual - below))
    return out


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's ``_lerp``, term for term, so the quantiles equal ``np.quantile``'s."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


# ------------------------------------------------------------------ numpy
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
        array = array.astype(np.float64)
    return array.reshape(-1)


def _summary_of_array(np: Any, array: Any, quantiles: Sequence[float], bounds: Sequence[float] | None) -> Summary:
    with np.errstate(over="ignore"):  # finite values whose sum is past the largest float: the sum is inf
        total = float(array.sum())
    nans = infs = 0
    if not math.isfinite(total):  # a NaN or an inf inside (or finite values whose sum overflows)
        finite = np.isfinite(array)
        kept = int(np.count_nonzero(finite))
        if kept < array.size:
            nans = int(np.count_nonzero(np.isnan(array)))
            infs = array.size - kept - nans
            array = array[finite]
            total = float(array.sum())
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
    counts = np.bincount(logs.astype(np.intp), minlength=spans[0] + spans[1] + (above > below)).tolist()
    if len(counts) != spans[0] + spans[1] + (above > below):
        raise ArithmeticError(f"numpy's log2 is not monotonic here: {len(counts)} buckets for {spans}")
    return Summary(
        n, total, low, high, figures, nans, infs, scale, above - below,
        (firsts[0] - 1, tuple(counts[:spans[0]])) if spans[0] else (0, ()),
        (firsts[2] - 1, tuple(counts[spans[0]:spans[0] + spans[1]])) if spans[1] else (0, ()),
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
def _empty(quantiles: Sequence[float], bounds: Sequence[float] | None, nans: int = 0, infs: int = 0) -> Summary:
    nan = math.nan
    figures = tuple((q, nan) for q in quantiles)
    if bounds is not None:
        return Summary(0, 0.0, nan, nan, figures, nans, infs, bounds=tuple(bounds), counts=(0,) * (len(bounds) + 1))
    return Summary(0, 0.0, nan, nan, figures, nans, infs, MAX_SCALE)


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


def _estimate(
    buckets: Sequence[tuple[float, float, int]], n: int, low: float, high: float, quantiles: Sequence[float]
) -> tuple[tuple[float, float], ...]:
    """Quantiles from buckets, by numpy's "linear" method over the values placed evenly in their buckets.

    The ``k``-th of the ``c`` values of a bucket sits at ``(k + 0.5) / c`` of its width (its edges kept
    within ``[low, high]``); the smallest and largest are ``low`` and ``high``, which are exact.
    """
    starts = []
    before = 0
    for _, _, count in buckets:
        starts.append(before)
        before += count

    def value(rank: int) -> float:
        if rank <= 0:
            return low
        if rank >= n - 1:
            return high
        i = bisect_right(starts, rank) - 1
        lower, upper, count = buckets[i]
        lower, upper = max(lower, low), min(upper, high)
        return lower + (upper - lower) * ((rank - starts[i] + 0.5) / count)

    out = []
    for q, (first, second, t) in zip(quantiles, _positions(n, quantiles), strict=True):
        estimate = value(first) if t == 0 else _lerp(value(first), value(second), t)
        out.append((q, min(max(estimate, low), high)))
    return tuple(out)


def merge(summaries: Sequence[Summary], quantiles: Sequence[float] = DEFAULT_QUANTILES) -> Summary:
    """One `Summary` of several (targets, ranks): counts, sums, extremes and buckets exact, quantiles from the buckets.

    Exponential histograms are brought to the coarsest of their scales (and coarser while a sign has
    more than ``MAX_BUCKETS`` buckets); explicit ones must share their bounds. Raises ``ValueError``
    when they cannot be merged (different bounds, or explicit with exponential).

    Examples:
        >>> whole = merge([summarize([1.0, 2.0]), summarize([3.0, 4.0])])
        >>> whole.count, whole.sum, whole.min, whole.max
        (4, 10.0, 1.0, 4.0)
    """
    if quantiles and quantiles is not DEFAULT_QUANTILES:
        quantiles = _checked("merge", quantiles)
    if not summaries:
        return _empty(quantiles, None)
    kinds = {s.bounds for s in summaries}
    if len(kinds) > 1:
        raise ValueError(
            "cannot merge distributions with different buckets: "
            + ", ".join(sorted("exponential" if k is None else f"bounds {list(k)}" for k in kinds))
        )
    bounds = summaries[0].bounds
    full = [s for s in summaries if s.count]
    nans = sum(s.nan_count for s in summaries)
    infs = sum(s.inf_count for s in summaries)
    if not full:
        return _empty(quantiles, bounds, nans, infs)
    n = sum(s.count for s in full)
    try:
        total = math.fsum(s.sum for s in full)
    except OverflowError:  # sums past the largest float: inf, as numpy's sum would say
        total = sum(s.sum for s in full)
    low, high = min(s.min for s in full), max(s.max for s in full)
    if bounds is not None:
        counts = tuple(sum(column) for column in zip(*(s.counts for s in summaries), strict=True))
        merged = Summary(n, total, low, high, (), nans, infs, bounds=bounds, counts=counts)
    else:
        scales = [s.scale for s in full]
        scale = min(scales)
        while scale > MIN_SCALE and not all(
            _width([side for s in full for side in [getattr(s, sign)]], scales, scale) <= MAX_BUCKETS
            for sign in ("positive", "negative")
        ):
            scale -= 1
        sides = [_add_sides([s.positive for s in full], scales, scale),
                 _add_sides([s.negative for s in full], scales, scale)]
        merged = Summary(
            n, total, low, high, (), nans, infs, scale, sum(s.zero_count for s in full),
            (sides[0][0], tuple(sides[0][1])), (sides[1][0], tuple(sides[1][1])),
        )
    if len(full) == 1 and tuple(q for q, _ in full[0].quantiles) == tuple(quantiles):
        figures = full[0].quantiles  # one part: its exact quantiles
    elif not quantiles:
        figures = ()
    else:
        figures = _estimate(merged.buckets(), n, low, high, quantiles)
    return Summary(
        merged.count, merged.sum, merged.min, merged.max, figures, merged.nan_count, merged.inf_count,
        merged.scale, merged.zero_count, merged.positive, merged.negative, merged.bounds, merged.counts,
    )


def coarsen(summary: Summary, buckets: int) -> Summary:
    """``summary`` with its exponential histogram at the finest scale where each sign has at most ``buckets``.

    Each bucket of the result is a union of the original's, so counts stay exact; explicit bounds
    and histograms that fit already are returned as they are.

    Examples:
        >>> s = summarize([float(i) for i in range(1, 1001)])
        >>> len(s.positive[1]), len(coarsen(s, 10).positive[1]), coarsen(s, 10).count
        (81, 6, 1000)
    """
    if summary.bounds is not None:
        return summary
    shift = 0
    sides = [summary.positive, summary.negative]
    while summary.scale - shift > MIN_SCALE and any(_width([side], [0], -shift) > buckets for side in sides):
        shift += 1
    if not shift:
        return summary
    positive, negative = (_downscale(side, shift) for side in sides)
    return Summary(
        summary.count, summary.sum, summary.min, summary.max, summary.quantiles, summary.nan_count,
        summary.inf_count, summary.scale - shift, summary.zero_count, (positive[0], tuple(positive[1])),
        (negative[0], tuple(negative[1])),
    )


def _downscale(side: tuple[int, Sequence[int]], shift: int) -> tuple[int, list[int]]:
    """``side``'s buckets ``shift`` scales coarser: bucket ``i`` goes into ``i >> shift``."""
    offset, counts = side
    if not counts or not shift:
        return offset, list(counts)
    start = offset >> shift
    out = [0] * (((offset + len(counts) - 1) >> shift) - start + 1)
    for i, c in enumerate(counts):
        out[((offset + i) >> shift) - start] += c
    return start, out


def _width(sides: Sequence[tuple[int, Sequence[int]]], scales: Sequence[int], scale: int) -> int:
    """How many buckets ``sides`` (each at its scale) span together at ``scale``."""
    ends = [
        (offset >> (s - scale), (offset + len(counts) - 1) >> (s - scale))
        for (offset, counts), s in zip(sides, scales, strict=True) if counts
    ]
    return max(last for _, last in ends) - min(first for first, _ in ends) + 1 if ends else 0


def _add_sides(sides: Sequence[tuple[int, Sequence[int]]], scales: Sequence[int], scale: int) -> tuple[int, list[int]]:
    """The buckets of ``sides`` (each at its scale) added at ``scale``."""
    parts = [_downscale(side, s - scale) for side, s in zip(sides, scales, strict=True) if side[1]]
    if not parts:
        return (0, [])
    start = min(offset for offset, _ in parts)
    out = [0] * (max(offset + len(counts) for offset, counts in parts) - start)
    for offset, counts in parts:
        for i, c in enumerate(counts):
            out[offset - start + i] += c
    return start, out
