"""The summary of a distribution: exact quantiles, OpenTelemetry's exponential buckets, exact merges.

The guarantee: docs/guarantees.md#summaries-merge-exactly-and-every-sink-shows-their-histogram-test_distributionpy
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor_async import ConfigError
from monitor_async._core import distribution
from monitor_async._core.distribution import (
    HELD,
    MAX_BUCKETS,
    MAX_SCALE,
    Distribution,
    coarsen,
    merge,
    summarize,
)

QUANTILES = (0.0, 0.1, 0.5, 0.9, 0.99, 1.0)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
numbers = st.lists(finite, min_size=1, max_size=100)


def index(value: float, scale: int) -> int:
    """The OpenTelemetry spec's mapping of a magnitude to its bucket at ``scale``."""
    return math.ceil(float(np.log2(abs(value))) * 2.0**scale) - 1


def buckets_of(values: list[float], scale: int) -> tuple[dict[int, int], dict[int, int]]:
    """The bucket counts of ``values`` at ``scale``, computed value by value, by sign."""
    positive: dict[int, int] = {}
    negative: dict[int, int] = {}
    for v in values:
        if v:
            side = positive if v > 0 else negative
            side[index(v, scale)] = side.get(index(v, scale), 0) + 1
    return positive, negative


def as_dict(side: tuple[int, tuple[int, ...]]) -> dict[int, int]:
    offset, counts = side
    return {offset + i: c for i, c in enumerate(counts) if c}


@settings(max_examples=120, deadline=None)
@given(numbers)
def test_quantiles_min_max_equal_numpys(values: list[float]) -> None:
    s = summarize(np.array(values), QUANTILES)
    assert s.count == len(values)
    assert s.min == min(values) and s.max == max(values)
    expected = np.quantile(np.array(values), QUANTILES)
    np.testing.assert_array_equal([v for _, v in s.quantiles], expected)
    np.testing.assert_array_equal(summarize(values, QUANTILES).quantiles, s.quantiles)  # a plain list: the same


@settings(max_examples=120, deadline=None)
@given(numbers)
def test_buckets_follow_the_opentelemetry_mapping_at_the_finest_scale_that_fits(values: list[float]) -> None:
    s = summarize(values)
    positive, negative = buckets_of(values, s.scale)
    assert as_dict(s.positive) == positive and as_dict(s.negative) == negative
    assert s.zero_count == sum(1 for v in values if v == 0)
    assert len(s.positive[1]) <= MAX_BUCKETS and len(s.negative[1]) <= MAX_BUCKETS
    if s.scale < MAX_SCALE:  # one scale finer would not fit
        finer = buckets_of(values, s.scale + 1)
        assert any(side and max(side) - min(side) + 1 > MAX_BUCKETS for side in finer)
    assert sum(c for _, _, c in s.buckets()) == s.count


@settings(max_examples=120, deadline=None)
@given(st.lists(numbers, min_size=1, max_size=5))
def test_merge_of_parts_is_the_summary_of_the_whole(parts: list[list[float]]) -> None:
    whole = [v for part in parts for v in part]
    merged = merge([summarize(part) for part in parts], QUANTILES)
    one = summarize(whole, QUANTILES)
    assert (merged.count, merged.min, merged.max, merged.zero_count) == (one.count, one.min, one.max, one.zero_count)
    assert (merged.scale, merged.positive, merged.negative) == (one.scale, one.positive, one.negative)
    if math.isfinite(one.sum) and math.isfinite(merged.sum):  # the parts' sums added: equal up to rounding
        assert abs(merged.sum - one.sum) <= sum(abs(v) * 1e-9 for v in whole)
    estimated = dict(merged.quantiles)
    assert estimated[0.0] == one.min and estimated[1.0] == one.max
    for q, value in merged.quantiles:
        assert one.min <= value <= one.max, q


@settings(max_examples=100, deadline=None)
@given(numbers, st.integers(min_value=1, max_value=40))
def test_coarsen_joins_buckets_into_the_mapping_at_a_coarser_scale(values: list[float], limit: int) -> None:
    s = coarsen(summarize(values), limit)
    positive, negative = buckets_of(values, s.scale)
    assert as_dict(s.positive) == positive and as_dict(s.negative) == negative
    assert (len(s.positive[1]) <= limit and len(s.negative[1]) <= limit) or s.scale == -10
    assert (s.count, s.min, s.max, s.zero_count) == (len(values), min(values), max(values), values.count(0.0))


def test_a_merged_quantile_lies_in_the_bucket_of_the_exact_one() -> None:
    rng = np.random.default_rng(7)
    parts = [rng.lognormal(0.0, 1.0, 1000) for _ in range(16)]
    merged = merge([summarize(p) for p in parts])
    exact = np.quantile(np.concatenate(parts), [0.5, 0.9, 0.99])
    width = 2.0 ** 2.0**-merged.scale  # one bucket's ratio
    for (q, estimate), truth in zip(merged.quantiles, exact, strict=True):
        assert truth / width <= estimate <= truth * width, q


@settings(max_examples=200, deadline=None)
@given(numbers, st.lists(finite, min_size=1, max_size=8, unique=True).map(sorted))
def test_explicit_bounds_count_each_value_in_its_upper_inclusive_bucket(values: list[float], bounds: list[float]) -> None:
    s = summarize(values, bounds=bounds)
    expected = [0] * (len(bounds) + 1)
    for v in values:
        expected[sum(1 for b in bounds if b < v)] += 1
    assert s.bounds == tuple(bounds) and list(s.counts) == expected
    assert merge([summarize(values[:1], bounds=bounds), summarize(values[1:], bounds=bounds)]).counts == s.counts


def test_nan_and_inf_are_counted_apart_and_an_empty_one_has_count_zero() -> None:
    s = summarize([1.0, float("nan"), float("inf"), -float("inf"), 3.0])
    assert (s.count, s.sum, s.nan_count, s.inf_count, s.min, s.max) == (2, 4.0, 1, 2, 1.0, 3.0)
    assert s.scalars() == {"count": 2.0, "mean": 2.0, "min": 1.0, "max": 3.0, "p50": 2.0, "p90": 2.8,
                           "p99": 2.98, "nan_count": 1.0, "inf_count": 2.0}
    empty = summarize([])
    assert empty.count == 0 and empty.scalars() == {"count": 0.0} and empty.buckets() == []
    assert summarize([float("nan")] * 3).scalars() == {"count": 0.0, "nan_count": 3.0}


def _data(kind: str, size: int) -> np.ndarray:
    rng = np.random.default_rng(size)
    values = rng.normal(size=size)
    if kind == "positive":
        return np.abs(values) + 1e-3
    if kind == "negative":
        return -np.abs(values) - 1e-3
    if kind == "zeros":
        values[::7] = 0.0
        values[3] = -0.0
        return values
    if kind == "ties":
        return np.round(values, 1)
    if kind == "constant":
        return np.full(size, 2.5)
    if kind == "nonfinite":
        values[::50] = np.nan
        values[5] = np.inf
        values[6] = -np.inf
        return values
    if kind == "wide":
        return rng.lognormal(0.0, 20.0, size) * np.where(rng.random(size) < 0.5, -1.0, 1.0)
    return values


@pytest.mark.parametrize("size", [501, 1000, 1999, HELD])
@pytest.mark.parametrize("kind", ["normal", "positive", "negative", "zeros", "ties", "constant", "nonfinite", "wide"])
@pytest.mark.parametrize("bounds", [None, (-1.0, 0.0, 0.5, 2.0)])
def test_an_array_summarised_in_pieces_is_the_summary_of_the_whole(
    kind: str, size: int, bounds: tuple[float, ...] | None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = _data(kind, size)
    pieces = summarize(values, QUANTILES, bounds)
    monkeypatch.setattr(distribution, "HELD", 0)  # every array whole, as numpy summarises it in one call each
    whole = summarize(values, QUANTILES, bounds)
    assert dataclasses.replace(pieces, sum=0.0) == dataclasses.replace(whole, sum=0.0)
    assert pieces.sum == pytest.approx(whole.sum, rel=1e-12, abs=1e-9)
    np.testing.assert_array_equal([v for _, v in pieces.quantiles], np.quantile(values[np.isfinite(values)], QUANTILES))


@pytest.mark.parametrize("make", [
    lambda a: a.astype(np.float32), lambda a: (a * 100).astype(np.int64), lambda a: a.reshape(10, -1),
    lambda a: a[::2], lambda a: a.astype(">f8"), lambda a: torch.from_numpy(a.copy()),
])
def test_other_dtypes_and_layouts_summarised_in_pieces_match_the_whole(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    values = make(_data("normal", 2000))
    pieces = summarize(values)
    monkeypatch.setattr(distribution, "HELD", 0)
    whole = summarize(values)
    assert dataclasses.replace(pieces, sum=0.0) == dataclasses.replace(whole, sum=0.0)


def test_a_summary_of_a_thousand_values_never_waits_for_the_gil() -> None:
    """A thread summarising while another runs Python without a pause is never held up by it.

    numpy releases the GIL in a call on more than 500 values, and the releasing thread then waits up
    to the switch interval to have it back (here 50 ms, the default 5 ms made ten times as long):
    eleven of numpy's calls for one summary could wait that long each. A summary in pieces of at most
    500 values waits once, for the GIL to start with.
    """
    values = _data("normal", 1000)
    summarize(values)  # numpy imported, everything warm
    done = threading.Event()
    took: list[float] = []

    def summarise() -> None:
        started = time.perf_counter()
        for _ in range(20):
            summarize(values)
        took.append(time.perf_counter() - started)
        done.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.05)
    try:
        worker = threading.Thread(target=summarise)
        worker.start()
        spins = 0
        while not done.is_set():  # pure Python, never releasing the GIL by itself
            spins += 1
        worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert took[0] < 0.5, f"20 summaries took {took[0]:.2f} s beside a busy thread: the GIL was released and waited for"


def test_arrays_tensors_and_nested_lists_are_flattened() -> None:
    grid = [[1.0, 2.0], [3.0, 4.0]]
    expected = summarize([1.0, 2.0, 3.0, 4.0])
    assert summarize(grid) == expected
    assert summarize(np.array(grid, dtype=np.float32)) == expected
    assert summarize(torch.tensor(grid)) == expected
    assert summarize(torch.tensor(grid, dtype=torch.bfloat16)) == expected
    assert summarize(torch.tensor(grid, requires_grad=True)) == expected
    assert summarize(np.arange(1, 5)) == expected
    assert summarize((1, 2, 3, 4)) == expected
    assert summarize([True, False]).count == 2


@pytest.mark.parametrize(("value", "error", "message"), [
    ([1.0, [2.0, 3.0]], ValueError, "ragged"),
    ([[1.0, 2.0], [3.0]], ValueError, "ragged"),
    ([1.0, "2.0"], TypeError, "list holding str"),
    ([1.0, None], TypeError, "list holding NoneType"),
    ({"a": 1.0}, TypeError, "dict is not a sequence of numbers"),
    ("123", TypeError, "str is not a sequence of numbers"),
    (np.array(["a", "b"]), TypeError, "ndarray holding str"),
])
def test_what_is_not_numbers_is_refused_saying_what(value: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        summarize(value)


def test_distribution_options_and_values_already_binned() -> None:
    s = summarize(Distribution([1.0, 2.0, 3.0, 4.0], quantiles=(0.5,), bounds=[2.0, 3.0]))
    assert s.quantiles == ((0.5, 2.5),) and s.counts == (2, 1, 1)
    assert s.buckets() == [(1.0, 2.0, 2), (2.0, 3.0, 1), (3.0, 4.0, 1)]
    binned = summarize(Distribution(bounds=[0.1, 0.5, 1.0], counts=[0, 4, 4, 0], quantiles=(0.25, 0.75)))
    assert (binned.count, binned.min, binned.max, binned.counts) == (8, 0.1, 1.0, (0, 4, 4, 0))
    assert binned.sum == pytest.approx(4 * 0.3 + 4 * 0.75)
    assert 0.1 <= dict(binned.quantiles)[0.25] <= 0.5 <= dict(binned.quantiles)[0.75] <= 1.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"values": [1.0], "quantiles": [50]}, "Distribution: quantiles must be"),
    ({"values": [1.0], "bounds": [2.0, 1.0]}, "Distribution: bounds must be a non-empty, strictly increasing"),
    ({"values": [1.0], "bounds": [float("nan")]}, "Distribution: bounds must be"),
    ({"bounds": [1.0], "counts": [1]}, r"Distribution: counts must be len\(bounds\) \+ 1 counts"),
    ({"bounds": [1.0], "counts": [1, -1]}, "Distribution: counts must be an integer >= 0"),
    ({}, "Distribution: values or counts must be given"),
])
def test_bad_distribution_options_are_a_config_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Distribution(**kwargs)  # type: ignore[arg-type]


def test_merge_refuses_different_buckets() -> None:
    with pytest.raises(ValueError, match="different buckets"):
        merge([summarize([1.0], bounds=[1.0]), summarize([1.0])])
    assert merge([]) == summarize([])
    one = summarize([1.0, 5.0])
    assert merge([one, summarize([])]).quantiles == one.quantiles  # one part: its exact quantiles


def test_buckets_are_increasing_and_hold_their_values() -> None:
    values = [-8.0, -1.0, 0.0, 0.0, 1.0, 3.0, 1e300]
    spans = summarize(values).buckets()
    assert spans == sorted(spans) and all(lo <= hi for lo, hi, _ in spans)
    assert (0.0, 0.0, 2) in spans and sum(c for _, _, c in spans) == len(values)
    for v in values:  # (lower, upper] for a positive value, [lower, upper) for a negative one
        assert any(lo < v <= hi if v > 0 else lo <= v < hi if v < 0 else lo == hi == 0 for lo, hi, _ in spans), v


def test_lists_are_summarised_without_numpy() -> None:
    script = textwrap.dedent("""
        import sys
        sys.modules["numpy"] = None  # as if it were not installed
        from monitor_async._core.distribution import summarize, merge
        s = summarize([[3.0, 1.0], [2.0, float("nan")]], (0.5, 0.9))
        print(s.count, s.min, s.max, s.nan_count, s.quantiles, s.scale, s.positive[0], sum(s.positive[1]))
        print(merge([s, summarize([4.0])]).count)
        try:
            summarize([1.0, "x"])
        except TypeError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60).stdout
    s = summarize([[3.0, 1.0], [2.0, float("nan")]], (0.5, 0.9))
    assert out.splitlines() == [
        f"3 1.0 3.0 1 ((0.5, 2.0), (0.9, 2.8)) {s.scale} {s.positive[0]} 3",
        "4",
        "list holding str ('x'), expected numbers",
    ]
