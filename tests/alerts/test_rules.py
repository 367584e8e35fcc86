"""Each rule through the public API: a real Monitor polling fake targets on its loop, events read from notify=."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

import pytest

from monitor_async import Alert, AlertEvent, ConfigError, Every, Monitor, SyncMonitor
from monitor_async.backends import MemorySink
from tests.support.checks import wait_until
from tests.support.sinks import Events
from tests.support.targets import Moving

INTERVAL = 0.05


def _fired(events: Events, rule: str) -> list[AlertEvent]:
    return [e for e in events if e.rule == rule and e.state == "firing"]


async def test_a_counter_that_stops_fires_once_within_after_plus_two_polls_and_resolves_when_it_moves() -> None:
    events = Events()
    target = Moving()
    after = 0.5
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, alerts=[Alert.stalled("collector/frames", after=after)],
                      notify=events)
    monitor.watch(target, name="collector")
    async with monitor:
        await wait_until(lambda: target.frames >= 300)
        target.running = False
        stopped = time.monotonic()
        await wait_until(lambda: bool(_fired(events, "stalled collector/frames")), what="the stall")
        took = time.monotonic() - stopped
        assert took <= after + 2 * INTERVAL + 0.3  # the last increase may land one poll after `running` cleared
        await asyncio.sleep(3 * INTERVAL)
        assert len(_fired(events, "stalled collector/frames")) == 1, "fires once per episode"
        event = monitor.firing()[0]
        assert (event.watch, event.metric, event.severity, event.value) == ("collector", "collector/frames",
                                                                             "warning", float(target.frames))
        assert "collector/frames has not increased for" in event.message
        assert f"last value {target.frames}" in event.message
        assert monitor.stats()["alerts_firing"] == 1.0
        target.running = True
        await wait_until(lambda: ("stalled collector/frames", "resolved") in events.states(), what="the resolve")
        assert monitor.firing() == []
    stats = monitor.stats()
    assert stats["alerts_fired"] == 1.0 and stats["alerts_firing"] == 0.0


async def test_a_reset_counts_as_movement_and_unless_holds_the_rule() -> None:
    events = Events()

    class Resetting:
        def __init__(self) -> None:
            self.frames = 1000
            self.completed = 0

        def stats(self) -> dict[str, int]:
            self.frames = self.frames - 100 if self.frames > 0 else 0  # always down: resets, never a stall
            return {"frames": self.frames, "completed": self.completed}

    finished = Moving(completed=0)
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events, alerts=[
        Alert.stalled("reset/frames", after=0.3),
        Alert.stalled("done/frames", after=0.3, unless="completed"),
    ])
    monitor.watch(Resetting(), name="reset")
    monitor.watch(finished, name="done")
    async with monitor:
        await asyncio.sleep(0.3)
        finished.extra["completed"] = 1
        finished.running = False
        await asyncio.sleep(1.0)
        assert _fired(events, "stalled done/frames") == []
        finished.extra["completed"] = 0  # not finished after all: the stall counts from the last increase
        await wait_until(lambda: bool(_fired(events, "stalled done/frames")))
    assert [e for e in events if e.rule == "stalled reset/frames"] == [] or all(
        "reset/frames" in e.message for e in events if e.rule == "stalled reset/frames"
    )


async def test_unless_set_while_the_counter_moves_holds_the_stall_and_cleared_lets_it_fire() -> None:
    """The engine takes a moving counter's records on a short path; ``unless`` set on one of them still holds."""
    events = Events()
    target = Moving(completed=0)
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events,
                      alerts=[Alert.stalled("w/frames", after=0.3, unless="completed")])
    monitor.watch(target, name="w")
    async with monitor:
        await wait_until(lambda: target.frames >= 500)
        target.extra["completed"] = 1  # set while frames still grows
        await wait_until(lambda: target.frames >= 1000)
        target.running = False
        await asyncio.sleep(0.9)  # three times after: held
        assert _fired(events, "stalled w/frames") == []
        target.extra["completed"] = 0
        await wait_until(lambda: bool(_fired(events, "stalled w/frames")), what="the stall once unless is cleared")
        target.running = True
        await wait_until(lambda: ("stalled w/frames", "resolved") in events.states(), what="the resolve")
        target.running = False  # a second episode: the short path is off while firing, on again after
        await wait_until(lambda: len(_fired(events, "stalled w/frames")) == 2, what="the second stall")


async def test_a_hung_target_goes_quiet_and_stalls() -> None:
    events = Events()
    target = Moving()
    release = asyncio.Event()

    async def stats() -> dict[str, Any]:
        if not target.running:
            await release.wait()
        return target.stats()

    after = 0.5
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events, on_error="ignore", alerts=[
        Alert.quiet("learner", after=after), Alert.stalled("learner/frames", after=after, severity="critical"),
    ])
    monitor.watch(stats_fn=stats, name="learner")
    async with monitor:
        await wait_until(lambda: target.frames >= 300)
        target.running = False
        hung = time.monotonic()
        await wait_until(lambda: len({e.rule for e in events}) == 2, what="quiet and stalled")
        assert time.monotonic() - hung <= after + 2 * INTERVAL + 0.3
        severities = {e.rule: e.severity for e in events}
        assert severities == {"quiet learner": "warning", "stalled learner/frames": "critical"}
        target.running = True
        release.set()
        await wait_until(lambda: sum(e.state == "resolved" for e in events) == 2, what="both resolved")


async def test_a_pushed_name_that_stops_logging_goes_quiet() -> None:
    events = Events()
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events, alerts=[Alert.quiet("trainer", after=0.3)])
    async with monitor:
        for _ in range(5):
            monitor.log("trainer", {"loss": 1.0})
            await asyncio.sleep(0.05)
        assert events == []
        await wait_until(lambda: bool(events), what="the quiet push")
        assert events[0].watch == "trainer" and events[0].state == "firing"
        monitor.log("trainer", {"loss": 1.0})
        await wait_until(lambda: len(events) == 2)
        assert events[1].state == "resolved"


async def test_a_nan_is_reported_within_one_poll_named_with_its_value_and_still_left_out() -> None:
    events = Events()
    sink = MemorySink()
    values: dict[str, Any] = {"loss": 0.5, "nested": {"grad": 1.0}}
    monitor = Monitor(sink, poll_interval=INTERVAL, notify=events, alerts=[Alert.nonfinite()])
    monitor.watch(stats_fn=lambda: values, name="learner")
    monitor.watch(stats_fn=lambda: values, name="threaded", offload="thread")
    async with monitor:
        await wait_until(lambda: len(sink.records) >= 4)
        values["loss"] = math.nan
        values["nested"] = {"grad": math.inf}
        await wait_until(lambda: len({(e.watch, e.metric) for e in events}) == 4, timeout=5 * INTERVAL + 5)
        fired = {(e.watch, e.metric): e.value for e in events}
        assert math.isnan(fired["learner", "learner/loss"]) and fired["learner", "learner/nested/grad"] == math.inf
        assert math.isnan(fired["threaded", "threaded/loss"]), "a thread-offloaded target's NaN is seen too"
        assert "learner/loss is nan" in next(e.message for e in events if e.metric == "learner/loss")
        assert all("learner/loss" not in r.metrics or math.isfinite(r.metrics["learner/loss"]) for r in sink.records)
        monitor.log("pushed", {"reward": math.nan})
        await wait_until(lambda: any(e.metric == "pushed/reward" for e in events))
        values["loss"] = 0.25
        await wait_until(lambda: any(e.metric == "learner/loss" and e.state == "resolved" for e in events))
    assert monitor.stats()["values_dropped"] > 0


async def test_above_and_below_hold_for_after_seconds_like_prometheus_for() -> None:
    events = Events()
    values = {"loss": 1.0, "fps": 500.0}
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events, alerts=[
        Alert.above("learner/loss", 10.0), Alert.below("learner/fps", 100.0, after=0.4),
    ])
    monitor.watch(stats_fn=lambda: values, name="learner")
    async with monitor:
        await asyncio.sleep(0.2)
        values["loss"] = 50.0
        values["fps"] = 10.0
        await wait_until(lambda: _fired(events, "learner/loss above 10") != [])
        at = time.monotonic()
        assert _fired(events, "learner/fps below 100") == []
        await wait_until(lambda: _fired(events, "learner/fps below 100") != [])
        assert time.monotonic() - at >= 0.2
        values["loss"] = 1.0
        await wait_until(lambda: ("learner/loss above 10", "resolved") in events.states())


async def test_a_pattern_rule_tracks_each_watch_on_its_own_under_one_name() -> None:
    events = Events()
    targets = [Moving() for _ in range(3)]
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events,
                      alerts=[Alert.stalled("*/frames", after=0.3, name="stall")])
    for i, target in enumerate(targets):
        monitor.watch(target, name=f"fleet_{i}")
    async with monitor:
        await asyncio.sleep(0.2)
        targets[0].running = targets[2].running = False
        await wait_until(lambda: len(events) == 2)
        await asyncio.sleep(0.2)
    assert sorted(e.watch for e in events) == ["fleet_0", "fleet_2"]
    assert {e.rule for e in events} == {"stall"}


async def test_stop_ends_evaluation_and_stopped_time_does_not_count() -> None:
    events = Events()
    target = Moving()
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events,
                      alerts=[Alert.stalled("c/frames", after=0.6), Alert.quiet("c", after=0.6)])
    monitor.watch(target, name="c")
    await monitor.start()
    await asyncio.sleep(0.2)
    target.running = False
    await monitor.stop()
    await asyncio.sleep(1.0)  # longer than `after`, stopped
    assert events == [], "no event after stop()"
    target.running = True
    await monitor.start()
    await asyncio.sleep(0.3)
    await monitor.stop()
    assert events == [], "the time stopped did not count toward after"


def test_invalid_rules_are_refused_naming_the_rule_the_watch_and_the_parameter() -> None:
    with pytest.raises(ConfigError, match=r"'stalled c/frames'.*after"):
        Alert.stalled("c/frames", after=-1)
    with pytest.raises(ConfigError, match=r"severity"):
        Alert.quiet("c", after=5, severity="fatal")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"'<watch>/<key>'"):
        Alert.stalled("frames", after=5)
    with pytest.raises(ConfigError, match=r"'quiet slow'.*after=1s.*poll interval \(5s\).*'slow'"):
        Monitor(alerts=[Alert.quiet("slow", after=1)]).watch(stats_fn=dict, name="slow", poll_interval=5)
    monitor = Monitor()
    monitor.watch(stats_fn=dict, name="slow", poll_interval=5)
    with pytest.raises(ConfigError, match=r"'stalled slow/frames'.*'slow'"):
        monitor.alert(Alert.stalled("slow/frames", after=2))
    with pytest.raises(ConfigError, match=r"alerts must be a list"):
        Monitor(alerts=Alert.quiet("x", after=1))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"no health\(\) method"):
        monitor.alert(Alert.unhealthy("slow"))


async def test_a_rule_over_a_key_that_never_appears_warns_once_naming_the_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, alerts=[Alert.stalled("c/frmes", after=1)])
    monitor.watch(stats_fn=lambda: {"frames": 1, "batches": 2}, name="c")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with monitor:
            await asyncio.sleep(0.3)
    warned = [r.getMessage() for r in caplog.records if "c/frmes" in r.getMessage()]
    assert len(warned) == 1
    assert "c/batches" in warned[0] and "c/frames" in warned[0]


async def test_alert_while_running_and_defaults_fire_for_a_stalled_counter() -> None:
    events = Events()
    target = Moving()
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events)
    monitor.watch(target, name="collector")
    async with monitor:
        monitor.alert(Alert.stalled("collector/frames", after=0.3))
        await asyncio.sleep(0.2)
        target.running = False
        await wait_until(lambda: bool(events))
    assert events[0].rule == "stalled collector/frames"
    defaults = Alert.defaults()
    assert {r.kind for r in defaults} == {"quiet", "nonfinite", "stalled", "blocked"}
    assert {r.target for r in defaults if r.kind == "stalled"} == {"*/frames", "*/write_count", "*/batches",
                                                                  "*/sample_calls"}


def test_sync_monitor_takes_rules_and_lists_what_fires() -> None:
    events = Events()
    target = Moving()
    with SyncMonitor(MemorySink(), poll_interval=INTERVAL, notify=[events], notify_timeout=2.0,
                     alerts=[Alert.stalled("c/frames", after=0.3)]) as monitor:
        monitor.watch(target, name="c")
        time.sleep(0.2)
        target.running = False
        deadline = time.monotonic() + 10
        while not monitor.firing() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [e.rule for e in monitor.firing()] == ["stalled c/frames"]
        monitor.alert(Alert.quiet("c", after=1.0))
        assert monitor.stats()["alerts_firing"] == 1.0


async def test_patterns_name_the_watches_and_keys_fnmatch_names() -> None:
    events = Events()
    names = ["fleet_0", "fleet_1", "fleet_2", "fleet_10", "learner"]
    targets = {name: Moving() for name in names}
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events, alerts=[
        Alert.stalled("fleet_[02]/fram?s", after=0.3, name="ranged"),  # not frames_per_second, the rate
        Alert.stalled("*_10/frames", after=0.3, name="suffix"),
        Alert.stalled("learner/frames", after=0.3, name="exact"),
    ])
    with pytest.raises(ConfigError, match=r"'ranged'.*'fleet_2'"):  # the rule concerns it: its after is too short
        monitor.watch(Moving(), name="fleet_2", poll_interval=1.0)
    monitor.watch(Moving(), name="fleet_20", poll_interval=1.0)  # no rule concerns these
    monitor.watch(Moving(), name="fleet_1/frames", poll_interval=1.0)
    for name, target in targets.items():
        monitor.watch(target, name=name)
    async with monitor:
        await asyncio.sleep(0.2)
        for target in targets.values():
            target.running = False
        await wait_until(lambda: len(events) >= 4, what="the four stalls")
        await asyncio.sleep(0.2)
    assert sorted((e.rule, e.watch, e.state) for e in events) == [
        ("exact", "learner", "firing"), ("ranged", "fleet_0", "firing"), ("ranged", "fleet_2", "firing"),
        ("suffix", "fleet_10", "firing"),
    ]


def test_the_rules_timer_looks_as_often_as_the_fastest_watch_added_or_left() -> None:
    # the period is kept between looks (not found again over every watch at each one), so a watch
    # that comes or goes must change it: a faster watch is looked at as often as it is polled
    monitor = Monitor(MemorySink(), poll_interval=1.0, alerts=[Alert.stalled("*/frames", after=60.0)])
    monitor.watch(Moving(), name="slow")
    assert monitor._alerts.period() == 1.0
    monitor.watch(Moving(), name="fast", poll_interval=0.05)
    assert monitor._alerts.period() == 0.05
    monitor.unwatch("fast")
    assert monitor._alerts.period() == 1.0
    monitor.alert(Alert.stalled("*/frames", name="soon", after=2.0))
    assert monitor._alerts.period() == 0.5


async def test_a_counter_still_across_stop_and_start_stalls_after_after_seconds_of_running_time() -> None:
    # a stalled rule on a watch's counter reads when it last moved from the watch at the timer's looks:
    # the moves before stop() are read before the clock stops, so the time stopped never counts
    events = Events()
    target = Moving()
    after = 0.6
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events,
                      alerts=[Alert.stalled("c/frames", after=after)])
    monitor.watch(target, name="c")
    await monitor.start()
    await wait_until(lambda: target.frames >= 800)  # moving for less than after: the rule has not looked yet
    target.running = False  # still from here on, the final snapshot included: the last move was just before stop()
    await monitor.stop()
    await asyncio.sleep(2 * after)
    await monitor.start()
    started = time.monotonic()
    await asyncio.sleep(after / 2)
    assert _fired(events, "stalled c/frames") == [], "the time stopped counted toward after"
    await wait_until(lambda: bool(_fired(events, "stalled c/frames")), what="the stall")
    assert time.monotonic() - started <= after + 2 * INTERVAL + 0.3
    await monitor.stop()


@pytest.mark.parametrize("every", [None, Every.seconds(2 * INTERVAL)], ids=["each poll", "a schedule"])
async def test_a_stall_fires_and_resolves_on_a_watch_with_or_without_a_schedule(every: Every | None) -> None:
    # without a schedule the rule reads the watch's counters; with one it reads the records: the same events
    events = Events()
    target = Moving(completed=0)
    after = 0.4
    monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events,
                      alerts=[Alert.stalled("w/frames", after=after, unless="completed")])
    monitor.watch(target, name="w", schedule=every)
    async with monitor:
        await wait_until(lambda: target.frames >= 300)
        target.running = False
        stopped = time.monotonic()
        await wait_until(lambda: bool(_fired(events, "stalled w/frames")), what="the stall")
        assert time.monotonic() - stopped <= after + 3 * INTERVAL + 0.3
        assert f"last value {target.frames}" in _fired(events, "stalled w/frames")[0].message
        target.running = True
        await wait_until(lambda: ("stalled w/frames", "resolved") in events.states(), what="the resolve")
        target.extra["completed"] = 1  # finished: held, no second episode
        target.running = False
        await asyncio.sleep(3 * after)
        assert len(_fired(events, "stalled w/frames")) == 1
