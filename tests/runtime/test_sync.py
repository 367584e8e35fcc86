"""SyncMonitor / LoggerMonitor: the sync facade, checked side by side with TorchRL's LoggerMonitor."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time
from typing import Any

import pytest

from monitor_async import Every, LoggerMonitor, SyncMonitor
from monitor_async.backends import LoggerSink, MemorySink, Report
from tests.support.sinks import RecordingLogger
from tests.support.targets import Counter, Settable

IMPLS = ["monitor_async"]
if importlib.util.find_spec("torchrl") is not None:
    IMPLS.append("torchrl")


@pytest.fixture(params=IMPLS)
def LM(request: pytest.FixtureRequest) -> Any:
    """LoggerMonitor: ours, and TorchRL's when installed (the same test must pass on both)."""
    if request.param == "torchrl":
        from torchrl.record.loggers.monitoring import LoggerMonitor as TorchRLMonitor

        return TorchRLMonitor
    return LoggerMonitor


class ReplayBuffer:
    def __init__(self) -> None:
        self.write_count = 0

    def stats(self) -> dict[str, Any]:
        return {"write_count": self.write_count, "size": min(self.write_count, 100), "kind": "lazy"}


def test_constructor_matches_torchrl(LM: Any) -> None:
    logger = RecordingLogger()
    with pytest.raises(ValueError, match="on_error"):
        LM(logger, on_error="loud")
    with pytest.raises(ValueError, match="poll_interval"):
        LM(logger, poll_interval=0)
    monitor = LM(logger=logger, poll_interval=0.5, background=False, on_error="ignore")
    assert monitor.watch(ReplayBuffer()) == "replaybuffer"
    assert monitor.watch(ReplayBuffer()) == "replaybuffer_1"
    with pytest.raises(ValueError, match="already registered"):
        monitor.watch(ReplayBuffer(), name="replaybuffer")
    with pytest.raises(TypeError, match="stats"):
        monitor.watch(object())
    monitor.stop(log_final=False)


def test_step_returns_logged_and_logger_called_before_returning(LM: Any) -> None:
    logger = RecordingLogger()
    rb = ReplayBuffer()
    monitor = LM(logger, background=False)
    monitor.watch(rb, name="rb", step="write_count")
    monitor.watch(Counter(), name="c", schedule=Every.counter("frames", 1000), log_on_start=False)
    rb.write_count = 10
    logged = monitor.step()
    assert logged == {"rb": {"rb/write_count": 10.0, "rb/size": 10.0}}  # non-numeric "kind" left out
    assert logger.calls == [({"rb/write_count": 10.0, "rb/size": 10.0}, 10)]
    monitor.stop(log_final=False)


def test_stop_logs_final_once_and_with_after_stop_logs_nothing(LM: Any) -> None:
    logger = RecordingLogger()
    with LM(logger, background=False) as monitor:
        monitor.watch(ReplayBuffer(), name="rb")
        monitor.step()
        monitor.stop()
        assert len(logger.calls) == 2
        monitor.stop()
    assert len(logger.calls) == 2
    assert not logger.closed


def test_counter_schedule_defaults_step_and_never_negative_rate(LM: Any) -> None:
    logger = RecordingLogger()
    target = Settable({"frames": 0})
    monitor = LM(logger, background=False)
    monitor.watch(target, name="col", schedule=Every.counter("frames", 100), log_on_start=False)
    assert monitor.step() == {}
    target.value = {"frames": 250}
    time.sleep(0.01)
    logged = monitor.step()
    assert logged["col"]["col/frames_per_second"] > 0
    assert logger.calls[-1][1] == 250
    target.value = {"frames": 10}
    assert monitor.step() == {}
    target.value = {"frames": 120}
    logged = monitor.step()
    assert logged["col"]["col/frames_per_second"] >= 0
    monitor.stop(log_final=False)


def test_background_polling_from_a_plain_script(LM: Any) -> None:
    logger = RecordingLogger()
    target = Counter()
    with LM(logger, poll_interval=0.05) as monitor:
        monitor.watch(target, name="c")
        deadline = time.monotonic() + 5
        while target.calls < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert target.calls >= 5
    assert len(logger.calls) >= 5
    final = logger.calls[-1][0]["c/frames"]
    assert final == target.frames


def test_our_logger_runs_on_the_sinks_worker_thread() -> None:
    logger = RecordingLogger()
    monitor = LoggerMonitor(logger, background=False)
    monitor.watch(Counter(), name="c")
    monitor.step()
    monitor.close()
    assert threading.current_thread().name not in logger.thread_names
    assert all(name.startswith("monitor-async-") for name in logger.thread_names)


def test_stop_from_another_thread() -> None:
    sink = MemorySink()
    monitor = SyncMonitor(sink, poll_interval=0.02)
    monitor.watch(Counter(), name="c")
    monitor.start()
    time.sleep(0.1)
    stopper = threading.Thread(target=monitor.stop)
    stopper.start()
    stopper.join(5)
    assert not stopper.is_alive()
    count = len(sink.records)
    time.sleep(0.1)
    assert len(sink.records) == count  # polling has stopped
    assert count >= 3


def test_on_error_raise_in_background_is_reraised_from_stop() -> None:
    target = Settable({"x": 1})
    monitor = SyncMonitor(MemorySink(), poll_interval=0.02, on_error="raise")
    monitor.watch(target, name="t")
    monitor.start()
    time.sleep(0.05)
    target.value = "broken"
    time.sleep(0.1)
    with pytest.raises(TypeError, match="'t' returned str"):
        monitor.stop()
    monitor.stop()  # raised once


def test_sync_monitor_with_async_stats_target() -> None:
    class Server:
        def __init__(self) -> None:
            self.requests = 0

        async def stats(self) -> dict[str, int]:
            await asyncio.sleep(0)
            self.requests += 1
            return {"requests": self.requests}

    sink = MemorySink()
    for background in (False, True):
        monitor = SyncMonitor(sink, background=background)
        monitor.watch(Server(), name=f"server_{background}")
        assert monitor.step()[f"server_{background}"][f"server_{background}/requests"] == 1.0
        monitor.close()
    assert len(sink.records) == 4  # one step + one final snapshot each


def test_calling_from_its_own_loop_thread_raises() -> None:
    monitor = SyncMonitor(MemorySink(), poll_interval=0.02)
    errors: list[BaseException] = []

    class Nasty:
        def stats(self) -> dict[str, int]:
            try:
                monitor.stats()
            except RuntimeError as exc:
                errors.append(exc)
            return {"x": 1}

    monitor.watch(Nasty(), name="nasty")
    monitor.start()
    time.sleep(0.1)
    monitor.stop()
    assert errors and "own event loop thread" in str(errors[0])


def test_step_inside_a_running_loop_falls_back_to_the_portal() -> None:
    monitor = SyncMonitor(MemorySink(), background=False)
    monitor.watch(Counter(), name="c")

    async def inside() -> dict[str, dict[str, float]]:
        return monitor.step()

    assert asyncio.run(inside())["c"]["c/frames"] == 10.0
    assert monitor.step()["c"]["c/frames"] == 20.0
    monitor.close()


def test_agilerl_style_logger_gets_reports_with_namespaced_dict() -> None:
    class AgileLogger:
        def __init__(self) -> None:
            self.reports: list[Report] = []

        def write(self, report: Report) -> None:
            self.reports.append(report)

    logger = AgileLogger()
    monitor = SyncMonitor(logger, background=False)
    monitor.watch(Counter(), name="collector", step="frames")
    monitor.step()
    monitor.close()
    first = logger.reports[0]
    values = first.to_dict()
    # one wide row: the values, the step, the rate's column (not measured yet) and the report's x-axis
    assert list(values) == ["train/global_step", "collector/frames", "collector/step", "collector/frames_per_second"]
    assert values["collector/frames"] == 10.0 and values["collector/step"] == 10.0
    assert values["train/global_step"] == 1.0 and values["collector/frames_per_second"] != values["collector/frames_per_second"]
    assert first.to_nonscalar_dict() == {}
    assert "collector/frames" in str(first)
    assert isinstance(monitor.monitor.sinks[0], LoggerSink)


def test_log_scalar_only_logger() -> None:
    class ScalarLogger:
        def __init__(self) -> None:
            self.scalars: list[tuple[str, float, int | None]] = []

        def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
            self.scalars.append((name, value, step))

    logger = ScalarLogger()
    monitor = LoggerMonitor(logger, background=False)
    monitor.watch(Counter(), name="c", step="frames")
    monitor.step()
    monitor.stop(log_final=False)
    assert logger.scalars == [("c/frames", 10.0, 10)]


def test_not_a_logger_is_a_clear_type_error() -> None:
    with pytest.raises(TypeError, match="neither a sink nor a logger"):
        SyncMonitor(object())


def test_real_torchrl_csv_logger_and_replay_buffer(tmp_path: Any) -> None:
    pytest.importorskip("torchrl")
    import csv

    import torch
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.record import CSVLogger

    logger = CSVLogger(exp_name="drop_in", log_dir=str(tmp_path))
    rb = ReplayBuffer(storage=LazyTensorStorage(100))
    monitor = LoggerMonitor(logger, background=False)
    monitor.watch(rb, name="replay_buffer", schedule=Every.counter("write_count", 50), log_on_start=False)
    assert monitor.step() == {}
    rb.extend(torch.arange(60))
    logged = monitor.step()
    assert logged["replay_buffer"]["replay_buffer/write_count"] == 60.0
    monitor.stop()
    files = list(tmp_path.rglob("replay_buffer/write_count.csv"))
    assert files, list(tmp_path.rglob("*"))
    rows = list(csv.reader(files[0].open()))
    assert rows[0][0] == "60" and float(rows[0][1]) == 60.0
