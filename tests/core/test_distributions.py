"""Values that are many numbers: summarised at the poll or the call, carried by the record, read back from files.

Holds "Values that are many numbers are summarised": docs/guarantees.md#values-that-are-many-numbers-are-summarised-test_distributionspy
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from monitor_async import (
    Alert,
    AlertEvent,
    ConfigError,
    Distribution,
    LoggerMonitor,
    Monitor,
    Summary,
    SyncMonitor,
)
from monitor_async.backends import CSVSink, JSONLSink, MemorySink
from monitor_async.targets import EpisodeStats
from tests.support.checks import monitor_warnings, wait_until
from tests.support.cli import cli
from tests.support.targets import Settable

FIELDS = ("count", "mean", "min", "max", "p50", "p90", "p99")


def csv_values(path: Path) -> dict[str, list[float]]:
    """``{metric: [values...]}`` of a CSVSink file, read with ``csv``."""
    out: dict[str, list[float]] = {}
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["time", "name", "step", "metric", "value"]
    for row in rows[1:]:
        out.setdefault(row[3], []).append(float(row[4]))
    return out


def jsonl_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def expected(values: list[float]) -> dict[str, float]:
    """The summary numpy gives of ``values``: count, mean, min, max and the default quantiles."""
    array = np.asarray(values, dtype=np.float64)
    p50, p90, p99 = np.quantile(array, [0.5, 0.9, 0.99])
    return {"count": float(array.size), "mean": float(array.mean()), "min": float(array.min()),
            "max": float(array.max()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def close(a: dict[str, float], b: dict[str, float]) -> bool:
    return a.keys() == b.keys() and all(math.isclose(a[k], b[k], rel_tol=1e-9, abs_tol=1e-12) for k in a)


# ---------------------------------------------------------------------------- what a distribution is
async def test_lists_tuples_arrays_tensors_and_distribution_are_summarised_into_csv_and_jsonl(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    latencies = rng.exponential(0.2, size=5000)
    target = Settable({
        "size": 3,
        "list": [1.0, 2.0, 3.0, 4.0],
        "tuple": (5, 6, 7),
        "array": latencies,
        "matrix": np.arange(12.0).reshape(3, 4),  # flattened
        "tensor": torch.arange(100, dtype=torch.float32),
        "bf16": torch.arange(10, dtype=torch.bfloat16),  # a dtype numpy lacks
        "one": torch.tensor([2.5]),  # one element: a scalar, as before
        "explicit": Distribution([10.0, 20.0, 30.0], quantiles=[0.5]),
    })
    monitor = Monitor([CSVSink(tmp_path / "m.csv"), JSONLSink(tmp_path / "m.jsonl")], close_sinks=True)
    monitor.watch(target, name="server")
    await monitor.step()
    await monitor.stop(log_final=False)

    got = csv_values(tmp_path / "m.csv")
    summary = {f: got[f"server/array/{f}"][0] for f in FIELDS}
    assert close(summary, expected(latencies.tolist()))
    assert close({f: got[f"server/list/{f}"][0] for f in FIELDS}, expected([1.0, 2.0, 3.0, 4.0]))
    assert close({f: got[f"server/tuple/{f}"][0] for f in FIELDS}, expected([5, 6, 7]))
    assert close({f: got[f"server/matrix/{f}"][0] for f in FIELDS}, expected(list(range(12))))
    assert close({f: got[f"server/tensor/{f}"][0] for f in FIELDS}, expected(list(range(100))))
    assert got["server/bf16/count"] == [10.0] and got["server/bf16/max"] == [9.0]
    assert got["server/one"] == [2.5] and got["server/size"] == [3.0]
    assert got["server/explicit/p50"] == [20.0] and "server/explicit/p90" not in got, "its own quantiles"

    (line,) = jsonl_metrics(tmp_path / "m.jsonl")
    assert line["metrics"]["server/array/p99"] == pytest.approx(summary["p99"])
    assert line["metrics"]["server/list/count"] == 4.0
    assert monitor.stats()["values_dropped"] == 0


async def test_the_record_keeps_a_bounded_summary_never_the_array() -> None:
    values = np.random.default_rng(2).lognormal(size=1_000_000)
    target = Settable({"priorities": values})
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(target, name="rb")
    await monitor.step()
    (record,) = sink.records
    summary = record.distributions["rb/priorities"]
    assert isinstance(summary, Summary) and summary.count == 1_000_000
    assert len(summary.positive[1]) <= 160 and len(summary.negative[1]) <= 160, "at most 160 buckets per sign"
    assert sum(summary.positive[1]) + sum(summary.negative[1]) + summary.zero_count == summary.count
    values[:] = 0.0  # the target reuses its buffer: the record is not changed
    assert record.metrics["rb/priorities/max"] > 0.0
    kept = [getattr(summary, f.name) for f in dataclasses.fields(summary)]
    assert not any(isinstance(v, (np.ndarray, list)) for v in kept), "plain numbers and tuples only"


async def test_nan_and_inf_inside_are_counted_apart_and_an_empty_one_has_count_zero(tmp_path: Path) -> None:
    target = Settable({"returns": [1.0, math.nan, 3.0, math.inf, -math.inf], "none_yet": []})
    monitor = Monitor(JSONLSink(tmp_path / "m.jsonl"), close_sinks=True)
    monitor.watch(target, name="ep")
    await monitor.step()
    await monitor.stop(log_final=False)
    (line,) = jsonl_metrics(tmp_path / "m.jsonl")
    metrics = line["metrics"]
    assert metrics["ep/returns/count"] == 2.0 and metrics["ep/returns/mean"] == 2.0
    assert metrics["ep/returns/nan_count"] == 1.0 and metrics["ep/returns/inf_count"] == 2.0
    assert metrics["ep/none_yet/count"] == 0.0
    assert not any(k.startswith("ep/none_yet/") and k != "ep/none_yet/count" for k in metrics)


async def test_ragged_or_non_numbers_cost_that_key_only_counted_and_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    target = Settable({"ok": [1.0, 2.0], "ragged": [[1.0], [2.0, 3.0]], "words": ["a", "b"], "size": 4})
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(target, name="w")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.step()
        await monitor.step()
    assert set(sink.records[0].distributions) == {"w/ok"}
    assert sink.records[0].metrics["w/size"] == 4.0 and sink.records[0].metrics["w/ok/count"] == 2.0
    assert monitor.stats()["values_dropped"] == 4, "two keys, two polls"
    (warning,) = monitor_warnings(caplog)
    assert "'w/ragged'" in warning and "values_dropped" in warning


# ---------------------------------------------------------------------------- pushes
async def test_a_push_of_only_arrays_writes_its_summary(tmp_path: Path) -> None:
    monitor = Monitor(CSVSink(tmp_path / "m.csv"), close_sinks=True)
    monitor.log("actors", {"throughput": np.array([10.0, 20.0, 30.0, 40.0])}, step=1)
    await monitor.flush()
    await monitor.stop(log_final=False)
    got = csv_values(tmp_path / "m.csv")
    assert close({f: got[f"actors/throughput/{f}"][0] for f in FIELDS}, expected([10.0, 20.0, 30.0, 40.0]))


async def test_a_push_is_summarised_as_it_was_at_the_call() -> None:
    sink = MemorySink()
    monitor = Monitor(sink)
    buffer = np.ones(1000)
    tensor = torch.ones(50)
    values = [1.0, 1.0]
    binned = Distribution(bounds=[1.0], counts=[1, 2])
    monitor.log("learner", {"grads": buffer, "t": tensor, "l": values, "d": Distribution(buffer), "b": binned})
    buffer[:] = 5.0  # the caller reuses its buffers right after the call
    tensor.fill_(5.0)
    values.append(9.0)
    await monitor.flush()
    (record,) = sink.records
    assert record.metrics["learner/grads/max"] == 1.0 and record.metrics["learner/d/max"] == 1.0
    assert record.metrics["learner/t/max"] == 1.0
    assert record.metrics["learner/l/count"] == 2.0
    assert record.metrics["learner/b/count"] == 3.0, "values already binned"


async def test_pushes_copied_into_the_memory_of_earlier_ones_keep_their_own_values() -> None:
    """A drained push's copy is reused by the next push of that size and dtype: each record keeps its own values."""
    sink = MemorySink()
    monitor = Monitor(sink)
    rng = np.random.default_rng(3)
    kinds: dict[str, Callable[[], np.ndarray]] = {
        "flat": lambda: rng.normal(size=1000), "grid": lambda: rng.normal(size=(20, 50)),
        "strided": lambda: rng.normal(size=2000)[::2], "single": lambda: rng.normal(size=1000).astype(np.float32),
        "swapped": lambda: rng.normal(size=1000).astype(">f8"), "ints": lambda: rng.integers(0, 99, 1000),
    }
    sent: list[dict[str, np.ndarray]] = []
    for _ in range(4):  # rounds: from the second on, the copies reuse the first round's memory
        for _ in range(3):
            pushed = {name: make() for name, make in kinds.items()}
            kept = {name: value.copy() for name, value in pushed.items()}
            monitor.log("learner", pushed, step=len(sent))
            sent.append(kept)
            for value in pushed.values():
                value[...] = 0  # the caller reuses its arrays at once
        await monitor.flush()
    assert len(sink.records) == len(sent)
    for record, kept in zip(sink.records, sent, strict=True):
        for name, value in kept.items():
            want = expected(value.astype(np.float64).ravel().tolist())
            assert close({f: record.metrics[f"learner/{name}/{f}"] for f in FIELDS}, want), (record.step, name)


async def test_a_push_never_lends_the_callers_own_arrays() -> None:
    """A push the copy could not take whole is kept as the caller's: its arrays are never reused for later copies."""

    class Unlistable(list[float]):
        def __iter__(self) -> Any:
            raise TypeError("not today")

    sink = MemorySink()
    monitor = Monitor(sink, on_error="warn")
    mine = np.arange(1000.0)
    monitor.log("learner", {"mine": mine, "odd": Unlistable([1.0])})  # summarised; "odd" left out
    await monitor.flush()
    assert sink.records[-1].metrics["learner/mine/max"] == 999.0
    monitor.log("learner", {"other": np.ones(1000)})  # a copy of the same size and dtype: never into ``mine``
    await monitor.flush()
    assert mine.tolist() == list(range(1000))
    assert sink.records[-1].metrics["learner/other/max"] == 1.0


# ---------------------------------------------------------------------------- options
async def test_quantiles_on_the_monitor_and_per_watch() -> None:
    sink = MemorySink()
    monitor = Monitor(sink, quantiles=[0.1, 0.5, 0.9])
    data = list(range(101))
    monitor.watch(Settable({"x": data}), name="a")
    monitor.watch(Settable({"x": data}), name="b", quantiles=[0.25, 0.999])
    logged = await monitor.step()
    assert {k for k in logged["a"] if "/p" in k} == {"a/x/p10", "a/x/p50", "a/x/p90"}
    assert {k for k in logged["b"] if "/p" in k} == {"b/x/p25", "b/x/p99.9"}
    assert logged["b"]["b/x/p25"] == 25.0


@pytest.mark.parametrize("bad", [[50, 90], [], "0.5", [0.5, math.nan], [True]])
def test_bad_quantiles_are_a_config_error_naming_the_option(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"Monitor: quantiles must be"):
        Monitor(quantiles=bad)
    monitor = Monitor()
    with pytest.raises(ConfigError, match=r"watch: quantiles must be"):
        monitor.watch(Settable({}), name="x", quantiles=bad)
    assert monitor.watches() == {}, "nothing is registered"


def test_logger_monitor_leaves_sequences_out_as_torchrl_does_unless_asked() -> None:
    class Logger:
        def __init__(self) -> None:
            self.logged: list[dict[str, float]] = []

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            self.logged.append(dict(metrics))

    plain, asked = Logger(), Logger()
    snapshot = {"size": 3, "lengths": [1, 2, 3]}
    parity = LoggerMonitor(plain, background=False)
    parity.watch(Settable(snapshot), name="rb")
    parity.step()
    assert parity.stats()["values_dropped"] == 1
    parity.stop(log_final=False)
    summarising = LoggerMonitor(asked, background=False, distributions=True)
    summarising.watch(Settable(snapshot), name="rb")
    summarising.step()
    summarising.stop(log_final=False)
    assert plain.logged == [{"rb/size": 3.0}]
    assert asked.logged[0]["rb/lengths/p50"] == 2.0
    with SyncMonitor(MemorySink(), background=False) as sync:  # SyncMonitor summarises by default
        sync.watch(Settable(snapshot), name="rb")
        assert sync.step()["rb"]["rb/lengths/count"] == 3.0


# ---------------------------------------------------------------------------- alerts
async def test_above_works_on_a_summary_key_and_nonfinite_says_how_many() -> None:
    events: list[AlertEvent] = []
    latencies = {"latency": [0.1] * 98 + [2.0, 3.0]}
    monitor = Monitor(MemorySink(), notify=events.append, alerts=[
        Alert.above("server/latency/p99", 0.5), Alert.nonfinite("server/*"),
    ])
    monitor.watch(Settable(latencies), name="server")
    await monitor.step()
    await monitor.step()
    await wait_until(lambda: any(e.metric == "server/latency/p99" and e.state == "firing" for e in events))
    latencies["latency"] = [0.1, math.nan, math.inf, math.nan]
    await monitor.step()
    await wait_until(lambda: any(e.rule.startswith("nonfinite") for e in events))
    (fired,) = [e for e in events if e.rule.startswith("nonfinite")]
    assert fired.state == "firing" and fired.metric == "server/latency"
    assert "2 NaN and 1 infinite values of 4" in fired.message
    latencies["latency"] = [0.1, 0.2]
    await monitor.step()
    await wait_until(lambda: any(e.rule.startswith("nonfinite") and e.state == "resolved" for e in events))
    assert [e.metric for e in monitor.firing() if e.rule.startswith("nonfinite")] == []


# ---------------------------------------------------------------------------- targets
async def test_episode_stats_reports_the_episodes_finished_since_the_last_poll() -> None:
    episodes = EpisodeStats(window=100)
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(episodes, name="ep", **episodes.watch_options)
    for r, n in [(10.0, 10), (20.0, 20), (30.0, 30)]:
        episodes.record(r, n)
    first = (await monitor.step())["ep"]
    episodes.record(100.0, 100)
    second = (await monitor.step())["ep"]
    third = (await monitor.step())["ep"]
    assert first["ep/returns/count"] == 3.0 and first["ep/returns/p50"] == 20.0 and first["ep/lengths/max"] == 30.0
    assert second["ep/returns/count"] == 1.0 and second["ep/returns/min"] == 100.0
    assert second["ep/return/mean"] == 40.0, "the scalars over the window stay beside them"
    assert third["ep/returns/count"] == 0.0


# ---------------------------------------------------------------------------- reductions
async def test_merge_over_a_group_of_targets_is_the_distribution_of_all_their_values() -> None:
    rng = np.random.default_rng(3)
    parts = [rng.normal(i, 1.0, size=2000) for i in range(16)]
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch([Settable({"returns": p}) for p in parts], name="actors", reduce={"returns": "merge"})
    logged = (await monitor.step())["actors/all"]
    everything = np.concatenate(parts)
    assert logged["actors/all/returns/count"] == 32_000.0
    assert logged["actors/all/returns/min"] == everything.min() and logged["actors/all/returns/max"] == everything.max()
    assert logged["actors/all/returns/mean"] == pytest.approx(everything.mean(), rel=1e-9)
    spread = everything.max() - everything.min()
    for q in (50, 90, 99):  # from the merged histogram: within a bucket's width
        assert abs(logged[f"actors/all/returns/p{q}"] - np.quantile(everything, q / 100)) < 0.05 * spread
    (merged,) = [r for r in sink.records if r.name == "actors/all"]
    assert merged.distributions["actors/all/returns"].count == 32_000


def test_merge_must_stand_alone() -> None:
    with pytest.raises(ConfigError, match="'merge' of key 'returns' must stand alone"):
        Monitor().watch([Settable({})], name="g", reduce={"returns": ["merge", "mean"]})


# ---------------------------------------------------------------------------- the CLI
def _run(tmp_path: Path) -> Path:
    async def write() -> None:
        monitor = Monitor([JSONLSink(tmp_path / "run" / "metrics.jsonl"), CSVSink(tmp_path / "run" / "m.csv")],
                          close_sinks=True, quantiles=[0.1, 0.5, 0.9, 0.99])
        values: dict[str, Any] = {"size": 1}
        monitor.watch(Settable(values), name="server", step="size")
        for step in range(1, 6):
            values["size"] = step
            values["latency"] = np.linspace(0.0, float(step), 101)
            await monitor.step()
        await monitor.stop(log_final=False)

    asyncio.run(write())
    return tmp_path / "run"


def test_show_prints_the_latest_quantiles_of_each_distribution(tmp_path: Path) -> None:
    run = _run(tmp_path)
    out = cli("show", str(run / "metrics.jsonl"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    (head,) = [line for line in lines if line.strip().startswith("distribution")]
    assert head.split() == ["distribution", "count", "mean", "p10", "p50", "p90", "p99"]
    (row,) = [line for line in lines if line.strip().startswith("latency")]
    assert row.split() == ["latency", "101", "2.5", "0.5", "2.5", "4.5", "4.95"]
    assert not any(line.strip().startswith("latency/p50") for line in lines), "not repeated in the metric table"


def test_export_wide_has_the_summary_columns(tmp_path: Path) -> None:
    run = _run(tmp_path)
    target = tmp_path / "wide.csv"
    out = cli("export", str(run / "m.csv"), "--wide", str(target))
    assert out.returncode == 0, out.stderr
    with target.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["server/latency/p50"]) for r in rows] == [0.5, 1.0, 1.5, 2.0, 2.5]
    assert {"server/latency/count", "server/latency/p99", "server/latency/max"} <= set(rows[0])


def test_plot_draws_the_median_with_its_band(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from monitor_async._cli.plot import panels
    from monitor_async._cli.runs import load_run

    run = _run(tmp_path)
    found, _ = panels(load_run(run / "metrics.jsonl"))
    (band,) = [p for p in found if p.metric == "latency"]
    assert band.title == "latency (p50, band p10 to p90)"
    assert band.y == [0.5, 1.0, 1.5, 2.0, 2.5]
    assert band.low == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5]) and band.high == pytest.approx([0.9, 1.8, 2.7, 3.6, 4.5])
    assert not any(p.metric.startswith("latency/p") for p in found)
    out = cli("plot", str(run / "metrics.jsonl"), "-o", str(tmp_path / "plot.png"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------- tensors on a device
class DeviceTensor:
    """A tensor on a GPU as the monitor sees one: ``device.type == "cuda"``; ``cpu()`` notes where it ran.

    (No GPU here: its copy to the host is a real CPU tensor, made where the monitor asks for it.)
    """

    __module__ = "torch.cuda_stand_in"

    class _Device:
        type = "cuda"

    device = _Device()

    def __init__(self, values: list[float]) -> None:
        self.values = values
        self.copied_on_loop: list[bool] = []

    def numel(self) -> int:
        return len(self.values)

    def detach(self) -> DeviceTensor:
        return self

    def cpu(self) -> torch.Tensor:
        try:
            asyncio.get_running_loop()
            self.copied_on_loop.append(True)
        except RuntimeError:
            self.copied_on_loop.append(False)
        return torch.tensor(self.values)


async def test_a_tensor_on_a_device_is_copied_on_a_worker_thread_never_on_the_loop() -> None:
    polled = DeviceTensor([1.0, 2.0, 3.0])
    pushed = DeviceTensor([4.0, 5.0])
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(Settable({"q": polled, "size": 1}), name="learner")
    await monitor.step()  # the record follows, once read on a worker thread
    await wait_until(lambda: monitor.stats()["records"] == 1)
    assert monitor.watches() == {"learner": "thread"}, "its stats() and reads run on a worker thread from now on"
    monitor.log("actor", {"grads": pushed})
    await monitor.flush()
    await wait_until(lambda: monitor.stats()["records"] == 2)
    await monitor.step()  # on the worker thread now: the record comes with the step
    await monitor.flush()
    assert polled.copied_on_loop == [False, False] and pushed.copied_on_loop == [False]
    learner = [r for r in sink.records if r.name == "learner"]
    assert learner[0].metrics["learner/q/p50"] == 2.0 and learner[0].metrics["learner/size"] == 1.0
    (actor,) = [r for r in sink.records if r.name == "actor"]
    assert actor.metrics["actor/grads/count"] == 2.0


def test_a_record_with_or_without_distributions_pickles_as_ray_and_processes_need() -> None:
    import pickle

    from monitor_async import Record
    from monitor_async._core.distribution import summarize
    from monitor_async._core.record import Source, new_record

    plain = Record("rb", 1, 0.0, {"rb/size": 3.0}, {"rank": 1})
    assert pickle.loads(pickle.dumps(plain)) == plain
    summary = summarize([1.0, 2.0, 3.0])
    summarised = new_record("rb", 2, 1.0, {"rb/q/count": 3.0}, Source({"rank": 1}), {"rb/q": summary})
    back = pickle.loads(pickle.dumps(summarised))
    assert back == summarised and back.distributions["rb/q"] == summary
