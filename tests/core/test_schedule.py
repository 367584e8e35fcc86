from __future__ import annotations

import asyncio

import pytest

from monitor_async import Every, Monitor
from monitor_async.backends import MemorySink
from tests.support.targets import Settable


def test_every_validation_messages() -> None:
    with pytest.raises(ValueError, match="kind"):
        Every(kind="hourly", interval=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interval must be"):
        Every.seconds(0)
    with pytest.raises(ValueError, match="interval must be"):
        Every.counter("frames", -5)
    with pytest.raises(ValueError, match="counter key"):
        Every(kind="counter", interval=10)
    with pytest.raises(ValueError, match="string"):
        Every(kind="counter", interval=10, key=3)  # type: ignore[arg-type]


async def test_counter_logs_on_crossings_once_and_rebaselines_on_decrease() -> None:
    target = Settable({"frames": 0})
    monitor = Monitor(MemorySink())
    monitor.watch(target, name="c", schedule=Every.counter("frames", 100))
    assert "c" in await monitor.step()  # log_on_start
    target.value = {"frames": 50}
    assert await monitor.step() == {}
    target.value = {"frames": 350}  # crosses 100, 200, 300 -> one log
    logged = await monitor.step()
    assert logged["c"]["c/frames"] == 350.0
    target.value = {"frames": 399}
    assert await monitor.step() == {}
    target.value = {"frames": 20}  # reset: re-baseline, no log, no negative rate
    assert await monitor.step() == {}
    target.value = {"frames": 99}
    assert await monitor.step() == {}
    target.value = {"frames": 100}
    logged = await monitor.step()
    assert logged["c"]["c/frames"] == 100.0
    assert logged["c"]["c/frames_per_second"] > 0


async def test_counter_schedule_key_is_default_step() -> None:
    sink = MemorySink()
    target = Settable({"frames": 1234})
    monitor = Monitor(sink)
    monitor.watch(target, name="c", schedule=Every.counter("frames", 100))
    await monitor.step()
    assert sink.records[-1].step == 1234


async def test_seconds_schedule() -> None:
    monitor = Monitor(MemorySink())
    monitor.watch(Settable({"x": 1}), name="s", schedule=Every.seconds(0.3))
    assert "s" in await monitor.step()
    assert await monitor.step() == {}
    await asyncio.sleep(0.35)
    assert "s" in await monitor.step()
    assert await monitor.step() == {}


async def test_log_on_start_false_only_baselines() -> None:
    target = Settable({"frames": 100})
    monitor = Monitor(MemorySink())
    monitor.watch(target, name="c", log_on_start=False)
    assert await monitor.step() == {}
    target.value = {"frames": 300}
    logged = await monitor.step()
    assert logged["c"]["c/frames"] == 300.0
    assert logged["c"]["c/frames_per_second"] > 0


async def test_no_schedule_logs_every_poll() -> None:
    monitor = Monitor(MemorySink())
    monitor.watch(Settable({"x": 1}), name="a")
    for _ in range(3):
        assert "a" in await monitor.step()
