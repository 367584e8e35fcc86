"""Values that are many numbers: a bounded summary made at the poll or the call, never the array.

A list or tuple of numbers, a numpy array, a torch tensor of more than one element (flattened) or a
[Distribution][monitor_async.Distribution] in a snapshot or a push becomes a `Summary`: count, sum,
min, max, quantiles exact for those values, NaN and inf counted apart, and OpenTelemetry's base-2
exponential histogram (at most ``MAX_BUCKETS`` buckets per sign), or counts over explicit bounds.
Summaries of several targets or ranks merge exactly (`merge`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_QUANTILES", "MAX_BUCKETS", "Distribution", "Summary", "merge", "summarize"]

DEFAULT_QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)
MAX_BUCKETS = 160
"""The most buckets per sign of an exponential histogram (OpenTelemetry's default)."""


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
        """``[(lower, upper, count), ...]`` in increasing order, empty buckets left out (for TensorBoard, wandb)."""
        raise NotImplementedError

    def scalars(self) -> dict[str, float]:
        """The summary as scalar keys: ``count``, ``mean``, ``min``, ``max``, ``p50``... (``nan_count`` and
        ``inf_count`` when not 0), the keys every sink writes as ``<watch>/<key>/<field>``."""
        raise NotImplementedError


class Distribution:
    """A value to be summarised as a distribution, with options per key.

    Args:
        values: the numbers (any sequence, numpy array or tensor); ``None`` with ``counts``.
        quantiles: overrides the monitor's and the watch's ``quantiles=``.
        bounds: explicit bucket upper bounds instead of the exponential histogram.
        counts: already binned values (``len(bounds) + 1`` counts), with ``bounds``.

    Examples:
        >>> Distribution([1.0, 2.0, 3.0], quantiles=(0.5,)).values
        [1.0, 2.0, 3.0]
    """

    __slots__ = ("bounds", "counts", "quantiles", "values")

    def __init__(
        self, values: Any = None, *, quantiles: Sequence[float] | None = None,
        bounds: Sequence[float] | None = None, counts: Sequence[int] | None = None,
    ) -> None:
        self.values = values
        self.quantiles = None if quantiles is None else tuple(quantiles)
        self.bounds = None if bounds is None else tuple(bounds)
        self.counts = None if counts is None else tuple(counts)


def summarize(values: Any, quantiles: Sequence[float] = DEFAULT_QUANTILES, bounds: Sequence[float] | None = None) -> Summary:
    """The `Summary` of a sequence of numbers (list, tuple, numpy array, tensor, `Distribution`).

    Raises ``TypeError``/``ValueError`` for ragged nesting or non-numbers (the caller counts and warns
    a drop of that key).
    """
    raise NotImplementedError


def merge(summaries: Sequence[Summary], quantiles: Sequence[float] = DEFAULT_QUANTILES) -> Summary:
    """One `Summary` of several (targets, ranks): counts, sums, extremes and buckets exact, quantiles from the buckets."""
    raise NotImplementedError
