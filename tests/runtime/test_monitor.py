"""The async core: watch/unwatch, values, rates, background polling, channels, lifecycle."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from monitor_async import Monitor, Record
from monitor_async.backends import MemorySink
from tests.support.sinks import FailingSink, StallSink
from tests.support.targets import Collector, Counter, HungAsync, Settable


def test_watch_names_duplicates_and_missing_stats() -> None:
    monitor = Monitor()
    assert monitor.watch(Collector()) == "collector"
    assert monitor.watch(Collector()) == "collector_1"
    assert monitor.watch(Collector()) == "collector_2"
    with pytest.raises(ValueError, match="already registered"):
        monitor.watch(Collector(), name="collector")
    with pytest.raises(TypeError, match="stats"):
        monitor.watch(object())
    assert monitor.watch(object(), name="fn", stats_fn=lambda: {"a": 1}) == "fn"
    monitor.unwatch("collector_1")
    with pytest.raises(KeyError):
        monitor.unwatch("collector_1")


@pytest.mark.parametrize(
    ("option", "value"),
    [("poll_interval", 0), ("poll_interval", -1.0), ("queue_size", 0), ("max_batch", 0), ("poll_timeout", 0)],
)
def test_invalid_configuration_is_rejected_at_construction(option: str, value: float) -> None:
    with pytest.raises(ValueError, match=option):
        Monitor(**{option: value})  # type: ignore[arg-type]


def test_unknown_on_error_is_rejected() -> None:
    with pytest.raises(ValueError, match="on_error"):
        Monitor(on_error="explode")  # type: ignore[arg-type]


async def test_values_are_namespaced_flattened_and_filtered() -> None:
    sink = MemorySink()
    monitor = Monitor(sink)
    target = Settable(
        {"a": 1, "b": 2.5, "flag": True, "s": "text", "nan": float("nan"), "inf": float("inf"),
         "big": 10**400, "nested": {"x": 3, "deep": {"y": 4}}, "none": None}
    )
    monitor.watch(target, name="t")
    logged = await monitor.step()
    assert logged == {"t": {"t/a": 1.0, "t/b": 2.5, "t/flag": 1.0, "t/nested/x": 3.0, "t/nested/deep/y": 4.0}}
    assert monitor.stats()["values_dropped"] == 5
    assert sink.records[0].metrics == logged["t"]
    assert all(type(v) is float for v in sink.records[0].metrics.values())


async def test_numpy_scalars_and_arrays_become_floats() -> None:
    np = pytest.importorskip("numpy")
    monitor = Monitor(MemorySink())
    monitor.watch(Settable({"f": np.float32(1.5), "i": np.int64(7), "a0": np.array(2.0), "vec": np.ones(3)}), name="n")
    logged = await monitor.step()
    summary = {f"n/vec/{field}": 1.0 for field in ("mean", "min", "max", "p50", "p90", "p99")}
    assert logged["n"] == {"n/f": 1.5, "n/i": 7.0, "n/a0": 2.0, "n/vec/count": 3.0, **summary}  # a distribution


async def test_non_mapping_result_is_an_error_naming_watch_and_type(caplog: pytest.LogCaptureFixture) -> None:
    monitor = Monitor(MemorySink())
    monitor.watch(Settable([1, 2]), name="collector")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        assert await monitor.step() == {}
    assert "stats() of watch 'collector' returned list, expected a mapping" in caplog.text
    assert monitor.stats()["polls_failed"] == 1

    raising = Monitor(MemorySink(), on_error="raise")
    raising.watch(Settable(None), name="rb")
    with pytest.raises(TypeError, match="'rb' returned NoneType"):
        await raising.step()


async def test_warn_once_per_failure_streak(caplog: pytest.LogCaptureFixture) -> None:
    target = Settable("oops")
    monitor = Monitor(MemorySink())
    monitor.watch(target, name="t")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        for _ in range(3):
            await monitor.step()
        target.value = {"x": 1}
        await monitor.step()
        target.value = "oops"
        await monitor.step()
    assert caplog.text.count("watch 't'") == 2
    assert monitor.stats()["polls_failed"] == 4


async def test_rates_default_table_custom_keys_and_resets() -> None:
    target = Settable({"frames": 0, "sample_calls": 0, "other": 0})
    monitor = Monitor(MemorySink())
    monitor.watch(target, name="d")
    monitor.watch(target, name="k", stats_fn=lambda: target.value, rate_keys=["other", "frames"])
    await monitor.step()
    await asyncio.sleep(0.05)
    target.value = {"frames": 100, "sample_calls": 10, "other": 5}
    logged = await monitor.step()
    assert set(logged["d"]) == {"d/frames", "d/sample_calls", "d/other", "d/frames_per_second", "d/samples_per_second"}
    assert set(logged["k"]) == {"k/frames", "k/sample_calls", "k/other", "k/other_per_second", "k/frames_per_second"}
    assert 0 < logged["d"]["d/frames_per_second"] < 100 / 0.04
    target.value = {"frames": 50, "sample_calls": 11, "other": 5}
    logged = await monitor.step()
    assert "d/frames_per_second" not in logged["d"]  # negative delta: no rate
    assert logged["d"]["d/samples_per_second"] > 0


async def test_a_counter_reported_late_still_gets_its_rate() -> None:
    target = Settable({"other": 1})
    monitor = Monitor(MemorySink())
    monitor.watch(target, name="c")
    for _ in range(3):  # polls that never mention "frames"
        assert "c/frames_per_second" not in (await monitor.step())["c"]
    target.value = {"other": 1, "frames": 10}
    await monitor.step()  # the first poll with the counter: its baseline
    await asyncio.sleep(0.02)
    target.value = {"other": 1, "frames": 30}
    logged = await monitor.step()
    assert logged["c"]["c/frames_per_second"] > 0


async def test_stats_kwargs_and_step_key() -> None:
    sink = MemorySink()
    calls = []

    def stats_fn(workers: str = "main") -> dict[str, int]:
        calls.append(workers)
        return {"write_count": 42}

    monitor = Monitor(sink)
    monitor.watch(object(), name="rb", stats_fn=stats_fn, stats_kwargs={"workers": "both"}, step="write_count")
    await monitor.step()
    assert calls == ["both"]
    assert sink.records[0].step == 42
    assert isinstance(sink.records[0], Record)


async def test_per_target_intervals_in_background() -> None:
    fast, slow = Counter(), Counter()
    monitor = Monitor(MemorySink(), poll_interval=0.5)
    monitor.watch(fast, name="fast", poll_interval=0.02)
    monitor.watch(slow, name="slow")
    async with monitor:
        await asyncio.sleep(0.6)
    assert fast.calls >= 12
    assert 2 <= slow.calls <= 4  # start, 0.5 s, final


async def test_hung_async_target_does_not_delay_healthy_one() -> None:
    hung, healthy = HungAsync(), Counter()
    monitor = Monitor(MemorySink(), poll_interval=0.05)
    monitor.watch(hung, name="hung", timeout=0.2)
    monitor.watch(healthy, name="healthy")
    await monitor.start()
    await asyncio.sleep(1.0)
    started = time.monotonic()
    await monitor.stop()
    assert time.monotonic() - started < 2.0
    assert healthy.calls >= 15  # ~20 expected at 50 ms
    assert monitor.stats()["polls_timed_out"] >= 3


async def test_stop_is_bounded_with_a_hung_target_and_a_hung_sink(caplog: pytest.LogCaptureFixture) -> None:
    stall = StallSink(name="stuck")
    memory = MemorySink()
    monitor = Monitor([stall, memory], poll_interval=0.05, stop_timeout=0.5)
    monitor.watch(HungAsync(), name="hung", timeout=0.3)
    monitor.watch(Counter(), name="ok")
    await monitor.start()
    await asyncio.sleep(0.2)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.stop()
    assert time.monotonic() - started < 2.5
    assert "'stuck' did not drain" in caplog.text
    assert "final snapshot of watch 'hung' skipped" in caplog.text
    assert memory.records[-1].name == "ok"  # the healthy sink got the final snapshot


async def test_stalled_sink_drops_oldest_and_polling_goes_on() -> None:
    stall = StallSink(name="slow")
    memory = MemorySink()
    target = Counter()
    monitor = Monitor([stall, memory], queue_size=5, max_batch=2, poll_interval=0.01)
    monitor.watch(target, name="c")
    await monitor.start()
    while target.calls < 40:
        await asyncio.sleep(0.01)
    stats = monitor.stats()
    assert stats["sink/slow/queued"] == 5
    assert stats["sink/slow/dropped"] >= 30
    assert stats["sink/memory/dropped"] == 0
    stall.gate.set()
    await monitor.stop()
    frames = [r.metrics["c/frames"] for r in stall.records]
    assert frames == sorted(frames)
    assert frames[-1] == target.frames  # the newest (final) record survived
    assert len(memory.records) == target.calls


async def test_failing_sink_does_not_stop_another(caplog: pytest.LogCaptureFixture) -> None:
    bad, good = FailingSink(name="bad"), MemorySink()
    monitor = Monitor([bad, good])
    monitor.watch(Counter(), name="c")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        for _ in range(3):
            await monitor.step()
    assert len(good.records) == 3
    assert monitor.stats()["sink/bad/errors"] == 3
    assert caplog.text.count("sink 'bad' failed to write") == 1
    assert "disk on fire" in caplog.text


async def test_per_target_order_is_kept_under_batching() -> None:
    sink = MemorySink()
    targets = [Counter(step=1) for _ in range(5)]
    monitor = Monitor(sink, max_batch=3, poll_interval=0.005)
    for i, t in enumerate(targets):
        monitor.watch(t, name=f"t{i}")
    async with monitor:
        await asyncio.sleep(0.3)
    for i in range(5):
        series = sink.series(f"t{i}/frames")
        assert series == sorted(series) and len(series) == targets[i].calls


async def test_cancelling_run_flushes_final_snapshot() -> None:
    sink = MemorySink()
    target = Counter()
    monitor = Monitor(sink, poll_interval=10)
    monitor.watch(target, name="c")
    task = asyncio.create_task(monitor.run())
    while not sink.records:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert target.calls == 2
    assert sink.series("c/frames") == [10.0, 20.0]
    assert sink.flushes >= 1


async def test_stop_ends_run_and_is_idempotent() -> None:
    sink = MemorySink()
    monitor = Monitor(sink, poll_interval=10)
    monitor.watch(Counter(), name="c", log_on_close=False)
    task = asyncio.create_task(monitor.run())
    await asyncio.sleep(0.05)
    await monitor.stop(log_final=True)
    await asyncio.wait_for(task, 2)
    await monitor.stop()
    assert len(sink.records) == 2  # start + the one final snapshot


async def test_unwatch_while_running() -> None:
    a, b = Counter(), Counter()
    monitor = Monitor(MemorySink(), poll_interval=0.02)
    monitor.watch(a, name="a")
    monitor.watch(b, name="b")
    await monitor.start()
    await asyncio.sleep(0.1)
    monitor.unwatch("a")
    frozen = a.calls
    late = monitor.watch(Counter(), name="late")
    await asyncio.sleep(0.1)
    await monitor.stop()
    assert a.calls == frozen
    assert b.calls > frozen
    assert late == "late"
    assert monitor.stats()["watches"] == 2


async def test_monitor_watches_itself() -> None:
    sink = MemorySink(name="mem")
    monitor = Monitor(sink)
    monitor.watch(Counter(), name="c")
    monitor.watch(monitor, name="monitor")
    await monitor.step()
    logged = await monitor.step()
    keys = set(logged["monitor"])
    for key in ("polls", "polls_failed", "polls_timed_out", "polls_missed", "records", "values_dropped", "watches",
                "sink/mem/queued", "sink/mem/written", "sink/mem/dropped", "sink/mem/errors", "sink/mem/write_seconds"):
        assert f"monitor/{key}" in keys
    assert logged["monitor"]["monitor/sink/mem/written"] == 2.0


async def test_on_error_raise_in_background_stops_and_reraises() -> None:
    target = Settable({"x": 1})
    monitor = Monitor(MemorySink(), poll_interval=0.02, on_error="raise")
    monitor.watch(target, name="t")
    task = asyncio.create_task(monitor.run())
    await asyncio.sleep(0.05)
    target.value = 7
    with pytest.raises(TypeError, match="'t' returned int"):
        await asyncio.wait_for(task, 2)
    await monitor.stop()  # already raised: not raised again


async def test_sink_labels_are_unique_and_close_sinks() -> None:
    a, b, c = MemorySink(), MemorySink(), MemorySink(name="mine")
    monitor = Monitor([a, b, c], close_sinks=True)
    stats = monitor.stats()
    assert {"sink/memory/written", "sink/memory_1/written", "sink/mine/written"} <= set(stats)
    monitor.watch(Counter(), name="c")
    await monitor.step()
    await monitor.stop()
    with pytest.raises(RuntimeError, match="closed"):
        await a.write([])

    keep = MemorySink()
    monitor = Monitor(keep)
    monitor.watch(Counter(), name="c")
    await monitor.stop()
    await keep.write([])  # not closed: the monitor does not own it


async def test_drift_free_cadence_skips_missed_slots() -> None:
    class Slow:
        calls = 0

        async def stats(self) -> dict[str, int]:
            self.calls += 1
            await asyncio.sleep(0.12)
            return {"x": 1}

    slow = Slow()
    monitor = Monitor(MemorySink(), poll_interval=0.05, poll_timeout=1.0)
    monitor.watch(slow, name="slow", log_on_close=False)
    await monitor.start()
    await asyncio.sleep(1.0)
    await monitor.stop()
    assert slow.calls <= 8  # ~1 s / 0.15 s, never bursting to 20
    assert monitor.stats()["polls_missed"] >= 8


async def test_the_final_snapshot_of_a_step_already_logged_is_not_written_again(tmp_path: Path) -> None:
    from monitor_async import Every
    from monitor_async.backends import CSVSink

    class Buffer:
        write_count = 0

        def stats(self) -> dict[str, int]:
            return {"write_count": self.write_count, "size": 3}

    buffer = Buffer()
    path = tmp_path / "m.csv"
    monitor = Monitor(CSVSink(path))
    monitor.watch(buffer, name="rb", schedule=Every.counter("write_count", 10), step="write_count")
    for _ in range(3):
        buffer.write_count += 10
        await monitor.step()
    await monitor.stop()
    steps = [line.split(",")[2] for line in path.read_text().splitlines()[1:] if line.split(",")[3] == "rb/write_count"]
    assert steps == sorted(set(steps)), f"each step once: {steps}"
    assert steps[-1] == "30"
