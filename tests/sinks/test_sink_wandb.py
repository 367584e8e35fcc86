"""WandbSink: real wandb in offline mode, read back with wandb's own transaction-log reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from monitor_async import Monitor
from monitor_async.backends import WandbSink
from tests.support.distributions import RETURNS, dist_record
from tests.support.targets import Collector
from tests.support.wandb_runs import transaction_log as run_log

wandb = pytest.importorskip("wandb")


def transaction_log(wandb_dir: Path) -> list[dict[str, Any]]:
    """The records of the single offline run under ``wandb_dir``, via ``wandb leet inspect --json``."""
    [run_dir] = (wandb_dir / "wandb").glob("offline-run-*")
    return run_log(run_dir)


async def test_a_created_run_gets_one_axis_per_watch_and_is_finished(wandb_offline: Path) -> None:
    sink = WandbSink(project="monitor-async-tests", dir=str(wandb_offline))
    assert wandb.run is None, "constructing the sink does not start a run"
    monitor = Monitor(sink, close_sinks=True)
    monitor.watch(Collector(), name="collector", step="frames", rate_keys=[])
    monitor.watch(Collector(), name="rb", rate_keys=[])
    for _ in range(3):
        await monitor.step()
    assert sink.run.summary["collector/frames"] == 300
    await monitor.stop(log_final=False)
    assert wandb.run is None, "the sink finishes the run it created"
    assert monitor.stats()["sink/wandb/errors"] == 0.0

    records = transaction_log(wandb_offline)
    metrics = [r["metric"] for r in records if r["type"] == "metric"]
    for name in ("collector", "rb"):
        assert {"name": f"{name}/step", "options": {"defined": True}} in metrics
        assert any(m.get("glob_name") == f"{name}/*" and m.get("step_metric") == f"{name}/step" for m in metrics)
    history = [r["history"]["item"] for r in records if r["type"] == "history"]
    collector = [(h["collector/step"], h["collector/frames"]) for h in history if "collector/step" in h]
    assert collector == [(100, 100), (200, 200), (300, 300)]
    rb = [(h["rb/step"], h["rb/frames"], h["rb/size"]) for h in history if "rb/step" in h]
    assert rb == [(0, 100, 7.25), (1, 200, 7.25), (2, 300, 7.25)]
    assert all(not any(k.startswith("collector/") for k in h) for h in history if "rb/step" in h)
    [run] = [r["run"] for r in records if r["type"] == "run"]
    assert run["project"] == "monitor-async-tests"


async def test_a_given_or_active_run_is_used_and_left_running(wandb_offline: Path) -> None:
    run = wandb.init(project="monitor-async-tests", dir=str(wandb_offline))
    given, active = WandbSink(run, name="given"), WandbSink(name="active")
    monitor = Monitor([given, active], close_sinks=True)
    monitor.watch(Collector(), name="a", rate_keys=[])
    await monitor.step()
    await monitor.stop(log_final=False)
    assert given.run is run and active.run is run
    assert wandb.run is run, "a run the sinks did not create is not finished by them"
    run.log({"user/metric": 1.0})
    assert run.summary["a/frames"] == 100 and run.summary["a/step"] == 0
    run.finish()
    history = [r["history"]["item"] for r in transaction_log(wandb_offline) if r["type"] == "history"]
    assert [h["a/frames"] for h in history if "a/frames" in h] == [100, 100]
    assert "user/metric" in history[-1]


async def test_writing_after_close_raises(wandb_offline: Path) -> None:
    sink = WandbSink(mode="offline", dir=str(wandb_offline))
    await sink.close()  # never opened: no run was created
    assert wandb.run is None
    with pytest.raises(RuntimeError, match="'wandb' is closed"):
        await sink.write([])


def test_a_run_and_init_arguments_together_are_rejected() -> None:
    with pytest.raises(ValueError, match="pass one or the other"):
        WandbSink(object(), project="x")


async def test_alerts_reach_the_run_with_their_level_and_state_in_the_title(wandb_offline: Path) -> None:
    from monitor_async import AlertEvent

    def event(state: str, severity: str, watch: str) -> AlertEvent:
        return AlertEvent("stalled */frames", state, severity, watch, f"{watch}/frames", 100.0,  # type: ignore[arg-type]
                          1.0, 2.0, {}, f"{watch}/frames has not increased for 62 s")

    sink = WandbSink(project="monitor-async-tests", dir=str(wandb_offline))
    monitor = Monitor(sink, close_sinks=True)
    monitor.watch(Collector(), name="collector", rate_keys=[])
    await monitor.step()
    await sink.alert(event("firing", "warning", "collector"))
    await sink.alert(event("firing", "critical", "rb"))
    await sink.alert(event("resolved", "warning", "collector"))
    await monitor.stop(log_final=False)

    alerts = [r["alert"] for r in transaction_log(wandb_offline) if r["type"] == "alert"]
    assert [(a["title"], a["level"], a["text"]) for a in alerts] == [
        ("firing: stalled */frames · collector", "WARN", "collector/frames has not increased for 62 s"),
        ("firing: stalled */frames · rb", "ERROR", "rb/frames has not increased for 62 s"),
        ("resolved: stalled */frames · collector", "INFO", "collector/frames has not increased for 62 s"),
    ]


async def test_an_alert_before_any_record_opens_the_run_and_titles_stay_under_64(wandb_offline: Path) -> None:
    from monitor_async import AlertEvent

    long = "stalled " + "x" * 80
    sink = WandbSink(project="monitor-async-tests", dir=str(wandb_offline))
    await sink.alert(AlertEvent(long, "firing", "critical", "w", None, None, 1.0, 2.0, {"rank": 3}, ""))
    await sink.close()
    [alert] = [r["alert"] for r in transaction_log(wandb_offline) if r["type"] == "alert"]
    assert len(alert["title"]) < 64 and alert["title"].startswith("firing: stalled xxx")
    assert alert["text"] == long and alert["level"] == "ERROR", "the rule stands in for an empty message"


async def test_a_monitor_rule_that_fires_lands_in_the_offline_run(wandb_offline: Path) -> None:
    import asyncio

    from monitor_async import Alert

    class Stuck:
        def stats(self) -> dict[str, float]:
            return {"frames": 100.0}

    fired: list[Any] = []
    sink = WandbSink(project="monitor-async-tests", dir=str(wandb_offline))
    monitor = Monitor(sink, poll_interval=0.05, close_sinks=True, notify=fired.append,
                      alerts=[Alert.stalled("stuck/frames", after=0.3)])
    monitor.watch(Stuck(), name="stuck")
    async with monitor:
        for _ in range(600):
            if fired:
                break
            await asyncio.sleep(0.05)
    assert fired, "the rule fired"
    [alert] = [r["alert"] for r in transaction_log(wandb_offline) if r["type"] == "alert"]
    assert alert["title"] == "firing: stalled stuck/frames" and alert["level"] == "WARN"
    assert alert["text"].startswith("stuck/frames has not increased for ")


async def test_a_distribution_is_a_histogram_in_the_runs_history(wandb_offline: Path) -> None:
    wide = [float(i) for i in range(600)]
    records = [
        dist_record("learner", {"returns": RETURNS}, step=10),
        dist_record("learner", {"returns": []}, step=20),  # empty: its count only, no histogram
        dist_record("server", {"latency": wide}, bounds=[i + 0.5 for i in range(599)]),
    ]
    async with WandbSink(project="monitor-async-tests", dir=str(wandb_offline)) as sink:
        await sink.write(records)
    history = [r["history"]["item"] for r in transaction_log(wandb_offline) if r["type"] == "history"]
    first, second, third = history
    # wandb's history keeps a histogram as "<key>._type", "<key>.bins" and "<key>.values"
    assert first["learner/returns._type"] == "histogram" and first["learner/step"] == 10
    bins, values = first["learner/returns.bins"], first["learner/returns.values"]
    assert len(bins) == len(values) + 1 and bins == sorted(bins) and sum(values) == len(RETURNS)
    for v in RETURNS:  # each value in a bin that holds it
        assert any(lo <= v <= hi and n for lo, hi, n in zip(bins, bins[1:], values, strict=False)), v
    assert first["learner/returns/p50"] == pytest.approx(0.75) and first["learner/returns/count"] == 10
    assert not any(k.startswith("learner/returns.") for k in second) and second["learner/returns/count"] == 0
    wide_values, wide_bins = third["server/latency.values"], third["server/latency.bins"]
    assert len(wide_values) == 300 and sum(wide_values) == 600  # 600 explicit buckets joined in pairs (512 at most)
    assert wide_bins[0] == 0.0 and wide_bins[-1] == 599.0
