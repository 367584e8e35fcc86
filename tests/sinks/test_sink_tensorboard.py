"""TensorBoardSink: event files read back with TensorBoard's own EventAccumulator."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from tensorboard.backend.event_processing import event_accumulator

from monitor_async import Monitor, Record
from monitor_async.backends import TensorBoardSink
from tests.support.distributions import RETURNS, dist_record
from tests.support.targets import Collector


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float, float]]]:
    """``{tag: [(step, value, wall_time), ...]}`` as TensorBoard reads it."""
    acc = event_accumulator.EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


async def test_monitor_steps_read_back_by_tensorboard(tmp_path: Path) -> None:
    log_dir = tmp_path / "tb"
    sink = TensorBoardSink(log_dir)
    assert not log_dir.exists(), "constructing the sink must not touch the disk"
    monitor = Monitor(sink, close_sinks=True)
    monitor.watch(Collector(), name="collector", step="frames", rate_keys=[])
    monitor.watch(Collector(), name="rb", rate_keys=[])
    for _ in range(3):
        await monitor.step()
    await monitor.stop(log_final=False)
    got = scalars(log_dir)
    assert set(got) == {"collector/frames", "collector/size", "rb/frames", "rb/size"}
    assert [(s, v) for s, v, _ in got["collector/frames"]] == [(100, 100.0), (200, 200.0), (300, 300.0)]
    assert [(s, v) for s, v, _ in got["rb/frames"]] == [(0, 100.0), (1, 200.0), (2, 300.0)]
    assert [s for s, _, _ in got["rb/size"]] == [0, 1, 2]
    assert all(v == 7.25 for _, v, _ in got["rb/size"])
    times = [t for _, _, t in got["rb/frames"]]
    assert times == sorted(times) and times[0] > 1e9


async def test_walltime_is_the_record_time_and_tags_are_the_metric_keys(tmp_path: Path) -> None:
    weird = {"w/a,b": 1.0, 'w/say "hi"': 2.0, "w/two words": 3.0, "w/ünï": 4.0}
    async with TensorBoardSink(tmp_path) as sink:
        await sink.write([Record(name="w", step=None, time=1700000000.5, metrics=weird)])
        await sink.write([Record(name="w", step=None, time=1700000001.5, metrics=weird)])
    got = scalars(tmp_path)
    assert set(got) == set(weird)
    for tag, value in weird.items():
        assert got[tag] == [(0, value, 1700000000.5), (1, value, 1700000001.5)]


async def test_flush_makes_events_visible_before_close(tmp_path: Path) -> None:
    sink = TensorBoardSink(tmp_path, flush_secs=3600)
    monitor = Monitor(sink)
    monitor.watch(Collector(), name="c", rate_keys=[])
    await monitor.step()
    await monitor.step()
    await monitor.flush()
    assert [v for _, v, _ in scalars(tmp_path)["c/frames"]] == [100.0, 200.0]
    await sink.close()


async def test_a_log_dir_that_is_a_file_is_reported_through_on_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_dir = tmp_path / "events"
    not_a_dir.write_text("")
    monitor = Monitor(TensorBoardSink(not_a_dir, name="tb"), on_error="warn")
    monitor.watch(Collector(), name="c")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.step()
    assert monitor.stats()["sink/tb/errors"] == 1.0
    [warning] = [r.getMessage() for r in caplog.records if r.name == "monitor_async"]
    assert "'tb'" in warning and "TensorBoardSink cannot write event files under" in warning


async def test_writing_after_close_raises(tmp_path: Path) -> None:
    sink = TensorBoardSink(tmp_path)
    async with sink:
        await sink.write([Record(name="t", step=3, time=1.0, metrics={"t/x": 1.0})])
    with pytest.raises(RuntimeError, match="'tensorboard' is closed"):
        await sink.write([Record(name="t", step=4, time=2.0, metrics={"t/x": 2.0})])
    assert scalars(tmp_path)["t/x"] == [(3, 1.0, 1.0)]


async def test_sinks_reopened_on_one_folder_keep_every_event_in_order(tmp_path: Path) -> None:
    # twelve reopenings, most in one second: TensorBoard reads the files in name order, which must
    # be the order they were opened in (the tenth file must not sort before the second)
    for step in range(12):
        async with TensorBoardSink(tmp_path) as sink:
            await sink.write([Record(name="t", step=step, time=float(step + 1), metrics={"t/x": float(step)})])
    assert sum(f.startswith("events.out.tfevents.") for f in os.listdir(tmp_path)) == 12
    assert [(s, v) for s, v, _ in scalars(tmp_path)["t/x"]] == [(s, float(s)) for s in range(12)]


def test_bad_options_are_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match="TensorBoardSink: flush_secs must be"):
        TensorBoardSink("runs", flush_secs=0)
    with pytest.raises(TypeError, match="log_dir must be a str"):
        TensorBoardSink(None)  # type: ignore[arg-type]


async def test_a_distribution_is_a_histogram_beside_its_summary_scalars(tmp_path: Path) -> None:
    records = [
        dist_record("server", {"latency": [0.01 * (i + 1) for i in range(100)]}, step=5, time=1700000000.0),
        dist_record("learner", {"returns": RETURNS}, time=1700000001.0),
        dist_record("learner", {"returns": RETURNS[:4]}, time=1700000002.0, bounds=[-5.0, 0.0, 5.0]),
    ]
    async with TensorBoardSink(tmp_path) as sink:
        await sink.write(records)
    acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={event_accumulator.HISTOGRAMS: 0})
    acc.Reload()  # size_guidance: every histogram event (TensorBoard keeps one per tag by default)
    assert set(acc.Tags()["histograms"]) == {"server/latency", "learner/returns"}
    [latency] = acc.Histograms("server/latency")
    h = latency.histogram_value
    assert (latency.step, latency.wall_time) == (5, 1700000000.0)
    assert (h.num, h.min, h.max) == (100, 0.01, 1.0) and h.sum == pytest.approx(50.5)
    assert sum(h.bucket) == 100 and list(h.bucket_limit) == sorted(h.bucket_limit)
    assert h.bucket_limit[-1] >= 1.0 and len(h.bucket) <= 160
    exponential, explicit = acc.Histograms("learner/returns")
    assert [exponential.step, explicit.step] == [0, 1]
    h = exponential.histogram_value
    assert (h.num, h.min, h.max, h.sum) == (10, -12.5, 40.0, sum(RETURNS))
    # each value counted in the bucket whose limits hold it, a bucket's left edge the previous limit
    lefts = [h.bucket_limit[0] - 1e9, *h.bucket_limit[:-1]]
    for v in RETURNS:
        [i] = [i for i, (lo, hi) in enumerate(zip(lefts, h.bucket_limit, strict=True)) if lo < v <= hi or lo == v < 0]
        assert h.bucket[i] > 0
    h = explicit.histogram_value
    assert list(h.bucket_limit) == [-5.0, 0.0] and list(h.bucket) == [1, 3]  # -12.5 | -3, 0, 0
    assert got_scalars(tmp_path)["server/latency/p50"] == [(5, pytest.approx(0.505))]
    assert set(acc.Tags()["scalars"]) >= {"learner/returns/p99", "learner/returns/count", "server/latency/mean"}


def got_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    return {tag: [(s, v) for s, v, _ in events] for tag, events in scalars(log_dir).items()}


async def test_a_watched_list_becomes_a_histogram_per_poll(tmp_path: Path) -> None:
    class Episodes:
        def __init__(self) -> None:
            self.polls = 0

        def stats(self) -> dict[str, object]:
            self.polls += 1
            return {"frames": 100 * self.polls, "returns": [float(self.polls * i) for i in range(1, 11)]}

    monitor = Monitor(TensorBoardSink(tmp_path), close_sinks=True)
    monitor.watch(Episodes(), name="env", step="frames", rate_keys=[])
    for _ in range(3):
        await monitor.step()
    await monitor.stop(log_final=False)
    acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={event_accumulator.HISTOGRAMS: 0})
    acc.Reload()
    got = [(e.step, e.histogram_value.num, e.histogram_value.max) for e in acc.Histograms("env/returns")]
    assert got == [(100, 10, 10.0), (200, 10, 20.0), (300, 10, 30.0)]
    assert got_scalars(tmp_path)["env/returns/p50"] == [(100, 5.5), (200, 11.0), (300, 16.5)]
