"""What a distribution became, and how distributions combine: `Summary`, `merge`, `coarsen`.

A `Summary` is bounded whatever the number of values: count, sum, min, max, quantiles, NaN and inf
counted apart, and OpenTelemetry's base-2 exponential histogram (at most ``MAX_BUCKETS`` buckets per
sign) or counts over explicit bounds. Summaries of several targets or ranks merge exactly for counts,
sums, extremes and buckets (`merge`); how values become one is `distribution`'s.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from .checks import fractions

__all__ = ["DEFAULT_QUANTILES", "MAX_BUCKETS", "MAX_SCALE", "MIN_SCALE", "Summary", "coarsen", "merge", "quantile_name"]

_CHECKED: dict[tuple[float, ...], tuple[float, ...]] = {}
_NAMES: dict[float, str] = {}

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
            >>> from monitor_async._core.distribution import summarize
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
            >>> from monitor_async._core.distribution import summarize
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
            >>> from monitor_async._core.distribution import summarize
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


def _power(index: int, scale: int) -> float:
    """``base ** index``, the lower edge of bucket ``index`` (``inf`` past the largest float)."""
    try:
        if scale <= 0:
            return math.ldexp(1.0, index << -scale)
        whole, part = divmod(index, 1 << scale)
        return math.ldexp(2.0 ** (part / (1 << scale)), whole)
    except OverflowError:
        return math.inf


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


def _empty(quantiles: Sequence[float], bounds: Sequence[float] | None, nans: int = 0, infs: int = 0) -> Summary:
    nan = math.nan
    figures = tuple((q, nan) for q in quantiles)
    if bounds is not None:
        return Summary(0, 0.0, nan, nan, figures, nans, infs, bounds=tuple(bounds), counts=(0,) * (len(bounds) + 1))
    return Summary(0, 0.0, nan, nan, figures, nans, infs, MAX_SCALE)


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
        >>> from monitor_async._core.distribution import summarize
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
        >>> from monitor_async._core.distribution import summarize
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
