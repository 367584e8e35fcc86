"""Everyday use: no silent misconfiguration, honest rates, ``Every.seconds`` on a grid, stats_fn alone.

The clock of a watch's schedule and rates is ``monitor_async._runtime.watch._monotonic``;
the schedule tests drive it by hand so that they test the rule, not the machine.
"""

from __future__ import annotations

import gc
import itertools
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

import monitor_async._runtime.watch as watch_module
from monitor_async import Every, Monitor, SyncMonitor
from monitor_async.backends import MemorySink
from tests.support.targets import Settable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock()
    monkeypatch.setattr(watch_module, "_monotonic", fake)
    yield fake


# ------------------------------------------------------------ misconfiguration
async def test_a_counter_key_absent_from_the_snapshot_warns_once_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    monitor = Monitor(MemorySink())
    monitor.watch(Settable({"frames": 10, "size": 3}), name="c", schedule=Every.counter("frmes", 100))
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        for _ in range(5):
            await monitor.step()
    warnings = [r.getMessage() for r in caplog.records if "frmes" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "'c'" in warnings[0] and "frames" in warnings[0] and "size" in warnings[0]


def test_a_background_sync_monitor_never_started_warns_when_collected(caplog: pytest.LogCaptureFixture) -> None:
    monitor = SyncMonitor(MemorySink())
    monitor.watch(Settable({"x": 1}), name="forgotten")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        del monitor
        gc.collect()
    text = caplog.text
    assert "forgotten" in text and "start()" in text and "with" in text


def test_a_started_or_manual_sync_monitor_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        used = SyncMonitor(MemorySink())
        used.watch(Settable({"x": 1}), name="used")
        with used:
            pass
        manual = SyncMonitor(MemorySink(), background=False)
        manual.watch(Settable({"x": 1}), name="manual")
        empty = SyncMonitor(MemorySink())
        del used, manual, empty
        gc.collect()
    assert "start()" not in caplog.text


def test_a_background_sync_monitor_never_started_warns_at_exit() -> None:
    code = textwrap.dedent(
        """
        import logging
        from monitor_async import SyncMonitor
        from monitor_async.backends import MemorySink

        class T:
            def stats(self):
                return {"x": 1}

        logging.basicConfig()
        monitor = SyncMonitor(MemorySink())
        monitor.watch(T(), name="forgotten")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "forgotten" in done.stderr and "start()" in done.stderr


async def test_stats_fn_alone_needs_no_target() -> None:
    monitor = Monitor(MemorySink())
    name = monitor.watch(name="queue", stats_fn=lambda: {"depth": 3})
    assert name == "queue"
    assert await monitor.step() == {"queue": {"queue/depth": 3.0}}
    with pytest.raises(TypeError, match="stats"):
        monitor.watch()


# ------------------------------------------------------------------ rates
async def test_a_rate_over_less_than_half_the_interval_is_left_out_of_the_final_snapshot(clock: Clock) -> None:
    target = Settable({"frames": 0})
    sink = MemorySink()
    monitor = Monitor(sink, poll_interval=1.0)
    monitor.watch(target, name="c")
    await monitor.step()
    clock.now += 1.0
    target.value = {"frames": 1000}
    logged = await monitor.step()
    assert logged["c"]["c/frames_per_second"] == pytest.approx(1000.0)
    clock.now += 0.01  # the final snapshot, right after the last poll
    target.value = {"frames": 1030}
    await monitor.stop()
    final = sink.records[-1].metrics
    assert final["c/frames"] == 1030.0
    assert "c/frames_per_second" not in final


async def test_counters_that_did_not_move_log_a_rate_of_zero_after_a_full_interval(clock: Clock) -> None:
    target = Settable({"frames": 500})
    monitor = Monitor(MemorySink(), poll_interval=1.0)
    monitor.watch(target, name="c")
    await monitor.step()
    clock.now += 1.0
    logged = await monitor.step()
    assert logged["c"]["c/frames_per_second"] == 0.0


# ---------------------------------------------------------- seconds on a grid
async def _log_times(clock: Clock, every: float, poll_times: list[float]) -> list[float]:
    monitor = Monitor(MemorySink(), poll_interval=1.0)
    monitor.watch(Settable({"x": 1}), name="s", schedule=Every.seconds(every))
    start = clock.now
    logged_at = []
    for t in poll_times:
        clock.now = start + t
        if "s" in await monitor.step():
            logged_at.append(t)
    return logged_at


async def test_every_seconds_logs_on_its_grid_not_one_poll_late(clock: Clock) -> None:
    polls = [float(t) for t in range(0, 21)]
    assert await _log_times(clock, 5.0, polls) == [0.0, 5.0, 10.0, 15.0, 20.0]


async def test_every_seconds_skips_missed_due_times_without_catching_up(clock: Clock) -> None:
    polls = [0.0, 1.0, 12.5, 13.0, 15.0, 16.0, 20.0]
    assert await _log_times(clock, 5.0, polls) == [0.0, 12.5, 15.0, 20.0]


@pytest.mark.parametrize("every", [2.0, 3.0, 5.0])
async def test_every_seconds_mean_spacing_is_within_five_percent_with_jittery_polls(
    clock: Clock, every: float
) -> None:
    # polls every 1 s that each land 0 to 30% late, as a busy machine would make them
    polls = [k * 1.0 + 0.3 * ((k * 7919) % 10) / 10 for k in range(0, int(every * 21) + 1)]
    times = await _log_times(clock, every, polls)
    spacing = [b - a for a, b in itertools.pairwise(times)][:20]
    assert len(spacing) == 20
    assert abs(sum(spacing) / len(spacing) - every) <= 0.05 * every
