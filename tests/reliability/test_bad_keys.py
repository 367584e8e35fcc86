"""One bad key costs only itself.

Holds "One bad key or value costs only itself": docs/guarantees.md#one-bad-key-or-value-costs-only-itself-test_bad_keyspy

- A key that UTF-8 cannot encode (a lone surrogate, as ``surrogateescape``
  decoding leaves for a byte that is not UTF-8) is written escaped by the
  sinks whose format cannot carry it (``\\udcff`` as text in CSV rows and
  TensorBoard tags, counted as ``keys_escaped``); JSON escapes it itself and
  reads it back exactly; NUL is valid UTF-8 and reads back exactly
  everywhere. Never does such a key fail a batch: every other value and
  every other watch's record in it is written.
- A cycle in a ``stats()`` result is a poll error that says "cycle".
- Keys that collide after flattening (``"a/b"`` and ``{"a": {"b": ...}}``,
  ``1`` and ``"1"``) keep the first value, and the others are left out and
  counted; keys that PrometheusSink's name sanitising makes one
  (``"a/b"`` and ``"a.b"`` of one watch) keep the first series, the others
  are counted as ``keys_collided``. Nothing is silently overwritten.
"""

from __future__ import annotations

import asyncio
import csv
import json
import logging
from pathlib import Path
from typing import Any

import prometheus_client  # noqa: F401 - the module is skipped without it, like the sink it tests
import pytest
from tensorboard.backend.event_processing import event_accumulator

from monitor_async import Monitor
from monitor_async.backends import CSVSink, JSONLSink, MemorySink, PrometheusSink, TensorBoardSink
from tests.support.checks import monitor_warnings
from tests.support.network import scrape
from tests.support.targets import Settable, Ticker

SURROGATE = b"\xff".decode("utf-8", "surrogateescape")  # "\udcff"
ESCAPED = "\\udcff"


def tensorboard_tags(log_dir: Path) -> dict[str, list[float]]:
    acc = event_accumulator.EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def csv_rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:  # strict UTF-8: the file must decode
        return list(csv.reader(f))


async def _through_every_sink(
    tmp_path: Path, target: Settable, name: str, steps: int
) -> tuple[dict[str, float], dict[tuple[str, str | None], float]]:
    """``steps`` steps of ``target`` (as ``name``) and a healthy watch into CSV, JSONL, TensorBoard and
    Prometheus sinks under ``tmp_path``; the monitor's stats after stop and the Prometheus scrape."""
    prom_sink = PrometheusSink(port=0, name="prom")
    sinks = [
        CSVSink(tmp_path / "m.csv", name="csv"), JSONLSink(tmp_path / "m.jsonl", name="jsonl"),
        TensorBoardSink(tmp_path / "tb", name="tb"), prom_sink,
    ]
    monitor = Monitor(sinks, close_sinks=True)
    monitor.watch(target, name=name)
    monitor.watch(Ticker(), name="healthy")
    for _ in range(steps):
        await monitor.step()
    samples = await asyncio.to_thread(scrape, prom_sink.url)
    await monitor.stop(log_final=False)
    return monitor.stats(), samples


async def test_keys_utf8_cannot_encode_are_escaped_and_counted_never_failing_a_batch(tmp_path: Path) -> None:
    bad = {"ok": 1.0, SURROGATE + "x": 2.0, "nul\0key": 3.0}
    stats, samples = await _through_every_sink(tmp_path, Settable(bad), "t", steps=2)

    for label in ("csv", "jsonl", "tb", "prom"):
        assert stats[f"sink/{label}/errors"] == 0, f"{label}: a batch failed"
        assert stats[f"sink/{label}/written"] == 4, f"{label}: every record of both watches is written"
    assert stats["sink/csv/keys_escaped"] == 2  # one value per poll
    assert stats["sink/tb/keys_escaped"] == 2

    rows = csv_rows(tmp_path / "m.csv")
    assert rows[0] == ["time", "name", "step", "metric", "value"]
    assert [(r[1], r[3], float(r[4])) for r in rows[1:]] == [
        ("t", "t/ok", 1.0), ("t", f"t/{ESCAPED}x", 2.0), ("t", "t/nul\0key", 3.0), ("healthy", "healthy/n", 1.0),
        ("t", "t/ok", 1.0), ("t", f"t/{ESCAPED}x", 2.0), ("t", "t/nul\0key", 3.0), ("healthy", "healthy/n", 2.0),
    ]

    with open(tmp_path / "m.jsonl", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    assert [line["metrics"] for line in lines if line["name"] == "t"] == [{f"t/{k}": v for k, v in bad.items()}] * 2

    tags = tensorboard_tags(tmp_path / "tb")
    assert tags == {
        "t/ok": [1.0, 1.0], f"t/{ESCAPED}x": [2.0, 2.0], "t/nul\0key": [3.0, 3.0], "healthy/n": [1.0, 2.0]
    }

    assert samples[("monitor_async_ok", "t")] == 1.0
    assert samples[("monitor_async_x", "t")] == 2.0  # sanitised: anything but [a-zA-Z0-9_] becomes "_"
    assert samples[("monitor_async_nul_key", "t")] == 3.0
    assert samples[("monitor_async_n", "healthy")] == 2.0


async def test_a_watch_name_utf8_cannot_encode_is_escaped_in_every_sink(tmp_path: Path) -> None:
    name = "w" + SURROGATE
    stats, samples = await _through_every_sink(tmp_path, Settable({"x": 1.5}), name, steps=1)
    for label in ("csv", "jsonl", "tb", "prom"):
        assert stats[f"sink/{label}/errors"] == 0, f"{label}: a batch failed"
        assert stats[f"sink/{label}/written"] == 2
    rows = csv_rows(tmp_path / "m.csv")
    assert [(r[1], r[3], float(r[4])) for r in rows[1:]] == [
        (f"w{ESCAPED}", f"w{ESCAPED}/x", 1.5), ("healthy", "healthy/n", 1.0)
    ]
    with open(tmp_path / "m.jsonl", encoding="utf-8") as f:
        assert json.loads(f.readline())["name"] == name, "JSON escapes it and reads it back exactly"
    assert tensorboard_tags(tmp_path / "tb") == {f"w{ESCAPED}/x": [1.5], "healthy/n": [1.0]}
    assert samples[("monitor_async_x", f"w{ESCAPED}")] == 1.5
    assert samples[("monitor_async_n", "healthy")] == 1.0
    assert stats["sink/prom/keys_escaped"] == 1


async def test_a_cycle_is_a_poll_error_that_says_cycle(caplog: pytest.LogCaptureFixture) -> None:
    looped: dict[str, Any] = {"x": 1.0}
    looped["self"] = looped
    inner: dict[str, Any] = {"y": 2.0}
    deep: dict[str, Any] = {"a": {"b": inner}}
    inner["back"] = deep
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(Settable(looped), name="looped")
    monitor.watch(Settable(deep), name="deep", offload="thread")
    monitor.watch(Ticker(), name="healthy")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        logged = await monitor.step()
        logged_again = await monitor.step()
    assert set(logged) == set(logged_again) == {"healthy"}
    warnings = monitor_warnings(caplog)
    assert len(warnings) == 2, warnings
    looped_warning = next(w for w in warnings if "'looped'" in w)
    deep_warning = next(w for w in warnings if "'deep'" in w)
    assert "cycle" in looped_warning and "'looped/self'" in looped_warning
    assert "cycle" in deep_warning and "'deep/a/b/back'" in deep_warning
    assert "RecursionError" not in looped_warning + deep_warning
    assert monitor.stats()["polls_failed"] == 4


async def test_a_mapping_seen_twice_is_no_cycle() -> None:
    shared = {"u": 1.0}
    monitor = Monitor(MemorySink(), on_error="raise")
    monitor.watch(Settable({"a": shared, "b": {"c": shared}}), name="t")
    logged = await monitor.step()
    assert logged["t"] == {"t/a/u": 1.0, "t/b/c/u": 1.0}


async def test_a_thousand_levels_of_nesting_are_a_poll_error_not_a_crash(caplog: pytest.LogCaptureFixture) -> None:
    deep: dict[str, Any] = {"x": 1.0}
    for _ in range(1_000):
        deep = {"d": deep}
    monitor = Monitor(MemorySink())
    monitor.watch(Settable(deep), name="deep")
    monitor.watch(Ticker(), name="healthy")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        logged = await monitor.step()
    assert set(logged) == {"healthy"}
    (warning,) = monitor_warnings(caplog)
    assert "'deep'" in warning and "levels" in warning and "RecursionError" not in warning


COLLIDING = [
    pytest.param({"a/b": 1.0, "a": {"b": 2.0}}, {"t/a/b": 1.0}, "'t/a/b'", id="flat-then-nested"),
    pytest.param({"a": {"b": 2.0}, "a/b": 1.0}, {"t/a/b": 2.0}, "'t/a/b'", id="nested-then-flat"),
    pytest.param({1: 1.0, "1": 2.0, "z": 3.0}, {"t/1": 1.0, "t/z": 3.0}, "'t/1'", id="int-and-str"),
    pytest.param({"x": {"y/z": 1.0, "y": {"z": 2.0}}}, {"t/x/y/z": 1.0}, "'t/x/y/z'", id="inside-nested"),
]


@pytest.mark.parametrize(("values", "expected", "key"), COLLIDING)
@pytest.mark.parametrize("offload", ["inline", "thread"])
async def test_keys_that_collide_after_flattening_keep_the_first_and_count_the_rest(
    values: dict[Any, Any], expected: dict[str, float], key: str, offload: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(Settable(values), name="t", offload=offload)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        for _ in range(3):
            logged = await monitor.step()
            assert logged["t"] == expected
    assert monitor.stats()["values_dropped"] == 3
    assert monitor.stats()["polls_failed"] == 0
    (warning,) = monitor_warnings(caplog)  # once per watch, not per poll
    assert "'t'" in warning and key in warning and "values_dropped" in warning


async def test_prometheus_keys_that_sanitise_to_one_name_keep_the_first_series_and_count_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with PrometheusSink(port=0, name="prom") as sink:
        monitor = Monitor(sink)
        monitor.watch(Settable({"a/b": 1.0, "a.b": 2.0, "a-b": 3.0}), name="w")
        monitor.watch(Settable({"a.b": 4.0}), name="other")  # another watch's series: no clash
        with caplog.at_level(logging.WARNING, logger="monitor_async"):
            await monitor.step()
            await monitor.step()
        samples = await asyncio.to_thread(scrape, sink.url)
    assert samples[("monitor_async_a_b", "w")] == 1.0
    assert samples[("monitor_async_a_b", "other")] == 4.0
    assert monitor.stats()["sink/prom/keys_collided"] == 4  # "a.b" and "a-b", twice
    warnings = [w for w in monitor_warnings(caplog) if "prom" in w]
    assert len(warnings) == 1, warnings
    assert "'w/a.b'" in warnings[0] and "'w/a/b'" in warnings[0] and "monitor_async_a_b" in warnings[0]
