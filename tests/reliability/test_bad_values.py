"""Bad stats() results are errors naming the watch, or values left out and counted.

Holds "Bad `stats()` results": docs/guarantees.md#bad-stats-results-test_bad_valuespy

A bad result never breaks a neighbour, never reaches a sink as garbage, and
what does reach CSV and JSONL files reads back exactly with csv and json.

The last test holds "One bad key or value costs only itself"
(docs/guarantees.md#one-bad-key-or-value-costs-only-itself-test_bad_keyspy): a value whose conversion raises
anything, a key that cannot be made a str, and a nested or lazy mapping
whose read raises cost only that value, left out and counted.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from monitor_async import Monitor
from monitor_async.backends import CSVSink, JSONLSink, MemorySink
from tests.support.checks import monitor_warnings
from tests.support.targets import Raising, Settable, Ticker

NOT_MAPPINGS = [
    pytest.param(None, "NoneType", id="None"),
    pytest.param([("x", 1.0)], "list", id="list"),
    pytest.param("x=1", "str", id="string"),
    pytest.param(3.5, "float", id="float"),
    pytest.param({1, 2}, "set", id="set"),
]


@pytest.mark.parametrize(("result", "type_name"), NOT_MAPPINGS)
async def test_a_result_that_is_not_a_mapping_is_a_poll_error_naming_watch_and_type(
    result: Any, type_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(Settable(result), name="collector")
    monitor.watch(Ticker(), name="healthy")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        logged = await monitor.step()
    assert set(logged) == {"healthy"}, "the neighbour is polled and logged in the same step"
    assert [r.name for r in sink.records] == ["healthy"], "nothing of the bad result reaches a sink"
    (warning,) = monitor_warnings(caplog)
    assert f"stats() of watch 'collector' returned {type_name}, expected a mapping" in warning
    assert monitor.stats()["polls_failed"] == 1


async def test_a_raising_stats_is_reported_once_per_streak_naming_watch_and_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    target = Raising(KeyError("shard 3"))
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(target, name="buffer")
    monitor.watch(Ticker(), name="healthy")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        for _ in range(3):
            await monitor.step()
        target.healthy = True
        await monitor.step()
        target.healthy = False
        await monitor.step()
    warnings = monitor_warnings(caplog)
    assert len(warnings) == 2, "one warning per failure streak, not per poll"
    assert all("stats() of watch 'buffer' raised KeyError('shard 3')" in w for w in warnings)
    assert monitor.stats()["polls_failed"] == 4
    assert [r.name for r in sink.records].count("healthy") == 5
    assert [r.name for r in sink.records].count("buffer") == 1


async def test_odd_values_are_kept_as_floats_or_left_out_and_counted() -> None:
    target = Settable(
        {
            "ok": 2.5,
            "int": 7,
            "flag": True,
            "off": False,
            "nan": math.nan,
            "inf": math.inf,
            "-inf": -math.inf,
            "huge": 10**400,
            "text": "fast",
            "none": None,
            "list": [1, 2],
            "mixed": [1, "x"],
            "nested": {"a": 1, "deep": {"b": 2.0, "nan": math.nan}},
        }
    )
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(target, name="t")
    logged = await monitor.step()
    assert logged["t"] == {
        "t/ok": 2.5,
        "t/int": 7.0,
        "t/flag": 1.0,
        "t/off": 0.0,
        # a list of numbers is a distribution: its summary (docs/distributions.md)
        "t/list/count": 2.0, "t/list/mean": 1.5, "t/list/min": 1.0, "t/list/max": 2.0,
        "t/list/p50": 1.5, "t/list/p90": 1.9, "t/list/p99": 1.99,
        "t/nested/a": 1.0,
        "t/nested/deep/b": 2.0,
    }
    assert all(type(v) is float for v in sink.records[0].metrics.values())
    # nan, inf, -inf, 10**400, "fast", None, [1, "x"], nested nan
    assert monitor.stats()["values_dropped"] == 8
    assert monitor.stats()["polls_failed"] == 0


async def test_numpy_scalars_and_zero_d_arrays_become_floats() -> None:
    np = pytest.importorskip("numpy")
    target = Settable(
        {
            "f32": np.float32(1.5),
            "f64": np.float64(0.25),
            "i64": np.int64(2**40),
            "u8": np.uint8(255),
            "b": np.bool_(True),
            "a0": np.array(3.0),
            "a0i": np.array(4, dtype=np.int32),
            "nan": np.float64("nan"),
            "inf": np.array(np.inf),
            "vector": np.arange(3),
            "text": np.str_("x"),
        }
    )
    monitor = Monitor(MemorySink())
    monitor.watch(target, name="np")
    logged = await monitor.step()
    assert logged["np"] == {
        "np/f32": 1.5,
        "np/f64": 0.25,
        "np/i64": float(2**40),
        "np/u8": 255.0,
        "np/b": 1.0,
        "np/a0": 3.0,
        "np/a0i": 4.0,
        # an array of several numbers is a distribution: its summary (docs/distributions.md)
        "np/vector/count": 3.0, "np/vector/mean": 1.0, "np/vector/min": 0.0, "np/vector/max": 2.0,
        "np/vector/p50": 1.0, "np/vector/p90": 1.8, "np/vector/p99": 1.98,
    }
    assert all(type(v) is float for v in logged["np"].values())
    assert monitor.stats()["values_dropped"] == 3  # nan, inf, text


WEIRD_KEYS = ["a,b", 'say "hi"', "two\nlines", "crlf\r\nend", "x/y/z", "tab\there", "ünïcødé ✓", "", 7]


async def test_keys_with_commas_quotes_newlines_and_slashes_read_back_from_csv_and_jsonl(
    tmp_path: Path,
) -> None:
    csv_path, jsonl_path = tmp_path / "m.csv", tmp_path / "m.jsonl"
    values = {key: float(i) + 0.5 for i, key in enumerate(WEIRD_KEYS)}
    watch = 'odd,"watch"\nname'
    monitor = Monitor([CSVSink(csv_path), JSONLSink(jsonl_path)], close_sinks=True)
    monitor.watch(Settable(values), name=watch)
    await monitor.step()
    await monitor.step()
    await monitor.stop(log_final=False)
    expected = {f"{watch}/{key}": value for key, value in values.items()}

    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["time", "name", "step", "metric", "value"]
    assert all(len(row) == 5 for row in rows[1:])
    assert {row[1] for row in rows[1:]} == {watch}
    assert [(row[3], float(row[4])) for row in rows[1:]] == list(expected.items()) * 2

    with open(jsonl_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    assert lines[-1] == "", "the file ends with a line break"
    objects = [json.loads(line) for line in lines[:-1]]
    assert len(objects) == 2, "a key with line breaks still gives one record per line"
    assert all(o["name"] == watch and o["metrics"] == expected for o in objects)


async def test_a_hundred_thousand_keys_are_capped_in_bounded_time_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    huge = {f"k{i}": i for i in range(100_000)}
    sink = MemorySink()
    monitor = Monitor(sink)  # max_values defaults to 10_000 per snapshot
    monitor.watch(Settable(huge), name="huge")
    monitor.watch(Ticker(), name="healthy")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        started = time.perf_counter()
        first = await monitor.step()
        second = await monitor.step()
        elapsed = time.perf_counter() - started
    assert elapsed < 3.0, f"two polls of 100,000 keys took {elapsed:.2f}s"
    assert len(first["huge"]) == len(second["huge"]) == 10_000
    assert list(first["huge"])[:2] == ["huge/k0", "huge/k1"], "the first values of the snapshot are kept"
    assert monitor.stats()["values_dropped"] == 2 * 90_000
    assert set(second) == {"huge", "healthy"}
    warnings = [w for w in monitor_warnings(caplog) if "max_values" in w]
    assert len(warnings) == 1, "the cap is reported once per watch, not per poll"
    assert "'huge'" in warnings[0] and "10000" in warnings[0]


async def test_the_value_cap_holds_across_nested_mappings(caplog: pytest.LogCaptureFixture) -> None:
    nested = {
        "gpu": {f"g{i}": i for i in range(8)},
        "a": 1,
        "b": 2,
        "deep": {"x": {f"d{i}": i for i in range(8)}, "y": 3},
        "c": 4,
    }  # 8 + 2 + 9 + 1 = 20 numeric values
    monitor = Monitor(MemorySink(), max_values=10)
    monitor.watch(Settable(nested), name="n")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        logged = await monitor.step()
    assert len(logged["n"]) == 10
    assert list(logged["n"]) == [f"n/gpu/g{i}" for i in range(8)] + ["n/a", "n/b"]
    assert monitor.stats()["values_dropped"] == 10
    assert any("'n'" in w and "max_values=10" in w for w in monitor_warnings(caplog))


@pytest.mark.parametrize("offload", ["inline", "thread"])
async def test_a_mapping_mutated_by_another_thread_while_read_is_copied_first(offload: str) -> None:
    class Gauge:
        """A scalar whose read lets other threads run (like a device sync), mid-iteration."""

        def item(self) -> float:
            time.sleep(1e-4)
            return 1.0

    inner: dict[str, Any] = {f"k{i}": float(i) if i % 100 else Gauge() for i in range(1_000)}
    live: dict[str, Any] = {f"k{i}": float(i) if i % 100 else Gauge() for i in range(1_000)}
    live["inner"] = inner
    stop = threading.Event()

    def mutate() -> None:
        while not stop.is_set():  # both dicts keep growing by 100 keys and shrinking back
            for j in range(100):
                live[f"extra{j}"] = inner[f"extra{j}"] = 1.0
            for j in range(100):
                del live[f"extra{j}"], inner[f"extra{j}"]

    class Live:
        def stats(self) -> dict[str, Any]:
            return live  # the target's own dicts, still being written to

    monitor = Monitor(MemorySink(), on_error="raise")
    monitor.watch(Live(), name="live", offload=offload)  # type: ignore[arg-type]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often so the reads and writes interleave
    mutator = threading.Thread(target=mutate, daemon=True)
    mutator.start()
    try:
        for _ in range(100):
            logged = await monitor.step()  # on_error="raise": any RuntimeError would surface here
            assert len(logged["live"]) >= 2_000
    finally:
        stop.set()
        mutator.join()
        sys.setswitchinterval(switch)
    assert monitor.stats()["polls_failed"] == 0


class FloatRaises:
    """``__float__`` raises AttributeError (a proxy whose backing object is gone)."""

    def __float__(self) -> float:
        raise AttributeError("'NoneType' object has no attribute 'value'")


class RemoteValue:
    """Every attribute read goes over a dead connection (``__getattr__`` raises ConnectionError)."""

    def __getattr__(self, name: str) -> Any:
        raise ConnectionError(f"lost the server while reading .{name}")


class ItemRaises:
    """``.item()`` raises KeyError (a tensor-like wrapper over a missing entry)."""

    def item(self) -> float:
        raise KeyError("shard 7")


class StrRaises:
    """A key whose ``__str__`` raises: it cannot be named, so its value is left out."""

    def __str__(self) -> str:
        raise LookupError("no name")

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        return self is other


class ReadRaises(Mapping[str, Any]):
    """A lazy mapping whose read of ``"broken"`` raises; the other keys read fine."""

    def __init__(self, **values: Any) -> None:
        self.values = values

    def __getitem__(self, key: str) -> Any:
        if key == "broken":
            raise BrokenPipeError("reading 'broken' failed")
        return self.values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


class ItemsRaise(dict):  # type: ignore[type-arg]
    """A nested mapping that cannot be read at all: copying it raises."""

    def copy(self) -> dict[str, Any]:
        raise OSError("device gone")

    def keys(self) -> Any:
        raise OSError("device gone")

    def __iter__(self) -> Iterator[str]:
        raise OSError("device gone")


@pytest.mark.parametrize("offload", ["inline", "thread"])
async def test_a_value_whose_conversion_raises_anything_drops_that_value_only(
    offload: str, caplog: pytest.LogCaptureFixture
) -> None:
    values = {
        "ok": 1.0,
        "float_raises": FloatRaises(),
        "remote": RemoteValue(),
        "item_raises": ItemRaises(),
        StrRaises(): 5.0,
        "nested": {"fine": 2.0, "remote": RemoteValue(), "gone": ItemsRaise(a=1.0)},
        "lazy": ReadRaises(good=3.0, broken=0.0),
        "last": 4.0,
    }
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(Settable(values), name="t", offload=offload)  # type: ignore[arg-type]
    monitor.watch(Settable(ReadRaises(good=3.0, broken=0.0)), name="lazy_top", offload=offload)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        logged = await monitor.step()
    assert logged["t"] == {"t/ok": 1.0, "t/nested/fine": 2.0, "t/lazy/good": 3.0, "t/last": 4.0}
    assert logged["lazy_top"] == {"lazy_top/good": 3.0}
    stats = monitor.stats()
    # float_raises, remote, item_raises, the unnameable key, nested remote, nested gone, lazy broken, top broken
    assert stats["values_dropped"] == 8
    assert stats["polls_failed"] == 0
    assert monitor_warnings(caplog) == []
    assert [r.name for r in sink.records] == ["t", "lazy_top"]


class EveryReadRaises(Mapping[str, Any]):
    """A mapping whose keys list fine but whose every read raises."""

    def __getitem__(self, key: str) -> Any:
        raise ConnectionError(f"reading {key!r}: the server is gone")

    def __iter__(self) -> Iterator[str]:
        return iter(["a", "b"])

    def __len__(self) -> int:
        return 2


@pytest.mark.parametrize("offload", ["inline", "thread"])
async def test_a_mapping_none_of_whose_values_can_be_read_is_a_poll_error_naming_the_watch(
    offload: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(Settable(EveryReadRaises()), name="remote", offload=offload)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        logged = await monitor.step()
    assert logged == {}
    assert sink.records == []
    assert monitor.stats()["polls_failed"] == 1
    warnings = monitor_warnings(caplog)
    assert len(warnings) == 1 and "'remote'" in warnings[0] and "the server is gone" in warnings[0]
