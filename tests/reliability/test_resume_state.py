"""``state_dict()`` / ``load_state_dict()``: what a state holds, and what a monitor does with a state it is given.

Holds "Resuming a run": docs/guarantees.md#resuming-a-run-test_resumepy

A state is plain (``json`` and ``pickle`` give it back equal); a state loaded
after polling began, or one that is not a state of this version, is refused
with a ``ConfigError`` naming what is wrong, and the monitor goes on as if it
had not been given; a state naming watches this monitor lacks is warned about
once and the rest resumes; a second load before polling replaces the first;
without a state a rerun is a new launch, kept apart as before. A checkpoint
older than a rotation of the CSV file supersedes the records in both files.
"""

from __future__ import annotations

import copy
import json
import pickle
import time
from pathlib import Path
from typing import Any

import pytest

from monitor_async import ConfigError, LoggerMonitor, SyncMonitor
from monitor_async.backends import CSVSink, JSONLSink
from tests.support.checks import monitor_warnings
from tests.support.resume_trainer import Trainer, wide


def launch(folder: Path, mark: float, steps: range, *, state: Any = None, take_at: int | None = None,
           names: tuple[str, ...] = ("train",), jsonl: bool = True) -> dict[str, Any] | None:
    """One launch writing CSV (and JSONL) to ``folder``: logs ``steps``, loading ``state`` first; the state at ``take_at``."""
    sinks: list[Any] = [CSVSink(folder / "metrics.csv")]
    if jsonl:
        sinks.append(JSONLSink(folder / "metrics.jsonl"))
    monitor = SyncMonitor(sinks, background=False)
    trainers = {name: Trainer(mark) for name in names}
    for name, trainer in trainers.items():
        monitor.watch(trainer, name=name, step="step")
    if state is not None:
        monitor.load_state_dict(state)
    taken = None
    for step in steps:
        for trainer in trainers.values():
            trainer.step, trainer.frames = step, 10 * step
        monitor.step()
        if step == take_at:
            taken = monitor.state_dict()
    monitor.close()
    return taken


def test_a_state_is_plain_and_survives_json_and_pickle(tmp_path: Path) -> None:
    state = launch(tmp_path, 1.0, range(5), take_at=3)
    assert state is not None
    assert json.loads(json.dumps(state)) == state
    assert pickle.loads(pickle.dumps(state)) == state
    assert state["watches"] == {"train": [3, pytest.approx(state["watches"]["train"][1])]}
    assert state["version"] == 1 and state["launch"]["id"]


def test_loading_after_polling_began_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    state = launch(tmp_path / "a", 1.0, range(3), take_at=2)
    monitor = SyncMonitor(CSVSink(tmp_path / "b.csv"), background=False)
    monitor.watch(Trainer(1.0), name="train", step="step")
    monitor.step()
    with pytest.raises(ConfigError, match="began polling already"):
        monitor.load_state_dict(state)  # type: ignore[arg-type]
    monitor.step()
    monitor.close()
    assert "__launch__" not in (tmp_path / "b.csv").read_text()


@pytest.mark.parametrize(("change", "said"), [
    (lambda s: "not a dict", "expected a dict, got str"),
    (lambda s: {**s, "format": "torch"}, "not 'monitor-async/state'"),
    (lambda s: {**s, "version": 99}, "version 99"),
    (lambda s: {**s, "watches": {"train": "300"}}, r"watches\['train'\] must be \[step, time\]"),
    (lambda s: {**s, "watches": {"train": [1.5, 0.0]}}, "the step must be an int"),
    (lambda s: {**s, "time": float("nan")}, "'time' must be a finite number"),
    (lambda s: {k: v for k, v in s.items() if k != "launch"}, "'launch' must be a dict"),
    (lambda s: {**s, "alerts": [1]}, "'alerts' must be a list of episodes"),
])
def test_a_corrupted_state_is_refused_naming_what_is_wrong(tmp_path: Path, change: Any, said: str) -> None:
    state = launch(tmp_path / "a", 1.0, range(3), take_at=2)
    for cls in (SyncMonitor, LoggerMonitor):
        monitor = cls(CSVSink(tmp_path / "b.csv"), background=False)
        monitor.watch(Trainer(2.0), name="train", step="step")
        with pytest.raises(ConfigError, match=said):
            monitor.load_state_dict(change(copy.deepcopy(state)))
        monitor.step()  # refused: the monitor goes on, a launch of its own
        monitor.close()
    assert "resumes" not in (tmp_path / "b.csv").read_text()


def test_a_state_from_a_monitor_with_other_watches_warns_once_and_resumes_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = launch(tmp_path, 1.0, range(8), take_at=4, names=("train", "gone"))
    launch(tmp_path, 2.0, range(4, 10), state=state, names=("train", "new"))
    warned = [w for w in monitor_warnings(caplog) if "load_state_dict" in w]
    assert len(warned) == 1 and "'gone'" in warned[0] and "'train'" not in warned[0]
    rows = wide(tmp_path / "metrics.csv")
    train = {int(r["step"]): float(r["train/mark"]) for r in rows if r["watch"] == "train"}
    assert train == {s: 1.0 if s <= 4 else 2.0 for s in range(10)}
    gone = [int(r["step"]) for r in rows if r["watch"] == "gone"]
    assert gone == [0, 1, 2, 3, 4], "what the missing watch logged after the checkpoint is superseded"
    assert [int(r["step"]) for r in rows if r["watch"] == "new"] == list(range(4, 10))


def test_a_second_load_before_polling_replaces_the_first(tmp_path: Path) -> None:
    early = launch(tmp_path, 1.0, range(6), take_at=2)
    late = launch(tmp_path / "other", 1.0, range(6), take_at=4)
    assert early is not None and late is not None
    late = {**late, "launch": early["launch"], "time": early["time"] + 1e-3}  # the same launch, a later checkpoint
    monitor = SyncMonitor(CSVSink(tmp_path / "metrics.csv"), background=False)
    trainer = Trainer(2.0)
    monitor.watch(trainer, name="train", step="step")
    monitor.load_state_dict(early)
    monitor.load_state_dict(late)
    for step in range(4, 8):
        trainer.step = step
        monitor.step()
    monitor.close()
    marks = {int(r["step"]): float(r["train/mark"]) for r in wide(tmp_path / "metrics.csv")}
    assert marks == {s: 1.0 if s <= 4 else 2.0 for s in range(8)}


def test_without_a_state_a_rerun_is_a_new_launch_kept_apart(tmp_path: Path) -> None:
    launch(tmp_path, 1.0, range(5))
    launch(tmp_path, 2.0, range(5))
    rows = wide(tmp_path / "metrics.csv")
    assert [(r["launch"], int(r["step"])) for r in rows] == [("1", s) for s in range(5)] + [("2", s) for s in range(5)]
    assert "resumes" not in (tmp_path / "metrics.jsonl").read_text()


def test_a_checkpoint_older_than_a_rotation_supersedes_the_records_of_both_files(tmp_path: Path) -> None:
    monitor = SyncMonitor(CSVSink(tmp_path / "metrics.csv"), background=False)
    trainer = Trainer(1.0)
    monitor.watch(trainer, name="train", step="step")
    state = None
    for step in range(10):
        trainer.step = step
        monitor.step()
        if step == 3:
            state = monitor.state_dict()
        if step == 5:
            (tmp_path / "metrics.csv").rename(tmp_path / "metrics-1.csv")  # rotated; 6.. go to a new file
    monitor.close()
    launch(tmp_path, 2.0, range(3, 8), state=state, jsonl=False)
    assert (tmp_path / "metrics-1.csv").exists()
    marks = marks_of(wide(tmp_path))
    assert marks == {s: 1.0 if s <= 3 else 2.0 for s in range(8)}


def marks_of(rows: list[dict[str, str]]) -> dict[int, float]:
    steps = [int(r["step"]) for r in rows]
    assert len(steps) == len(set(steps)), "a step is there twice"
    return {int(r["step"]): float(r["train/mark"]) for r in rows}


class Frames:
    """A counter that moves only when told to."""

    def __init__(self) -> None:
        self.frames = 0

    def stats(self) -> dict[str, float]:
        return {"frames": self.frames}


def test_an_episode_firing_at_the_checkpoint_keeps_its_since_and_a_restart_alone_fires_nothing(tmp_path: Path) -> None:
    from monitor_async import Alert, AlertEvent

    def stalled(events: list[AlertEvent]) -> SyncMonitor:
        return SyncMonitor(CSVSink(tmp_path / "metrics.csv"), background=False, poll_interval=0.05,
                           alerts=[Alert.stalled("t/frames", after=0.2)], notify=events.append)

    first: list[AlertEvent] = []
    monitor = stalled(first)
    monitor.watch(Frames(), name="t")
    monitor.step()
    deadline = time.monotonic() + 10
    while not monitor.firing() and time.monotonic() < deadline:
        time.sleep(0.05)
        monitor.step()
    [fired] = monitor.firing()
    state = monitor.state_dict()
    monitor.close()
    assert [(e["rule"], e["since"]) for e in state["alerts"]] == [(fired.rule, fired.since)]

    again: list[AlertEvent] = []  # still stalled after the restart: the same episode goes on
    monitor = stalled(again)
    monitor.watch(Frames(), name="t")
    monitor.load_state_dict(state)
    monitor.step()
    deadline = time.monotonic() + 10
    while not monitor.firing() and time.monotonic() < deadline:
        time.sleep(0.05)
        monitor.step()
    [refired] = monitor.firing()
    monitor.close()
    assert refired.since == fired.since, "one episode across the restart"

    moving: list[AlertEvent] = []  # moving after the restart: nothing fires, however long it was down
    monitor = stalled(moving)
    target = Frames()
    monitor.watch(target, name="t")
    monitor.load_state_dict(state)
    for _ in range(6):
        target.frames += 1
        monitor.step()
        time.sleep(0.05)
    monitor.close()
    assert moving == []


def test_pushed_names_resume_too_in_tensorboard_and_the_files(tmp_path: Path) -> None:
    from monitor_async.backends import TensorBoardSink
    from tests.support.resume_trainer import tensorboard_scalars

    def pushes(mark: float, steps: range, state: Any = None, take_at: int | None = None) -> Any:
        monitor = SyncMonitor([TensorBoardSink(tmp_path / "tb"), JSONLSink(tmp_path / "metrics.jsonl")],
                              background=False)
        if state is not None:
            monitor.load_state_dict(state)
        taken = None
        for step in steps:
            monitor.log("learner", {"loss": mark}, step=step)
            monitor.step()
            if step == take_at:
                taken = monitor.state_dict()
        monitor.close()
        return taken

    state = pushes(1.0, range(10), take_at=4)
    assert state["pushed"]["learner"][0] == 4
    pushes(2.0, range(5, 8), state=state)
    want = {s: 1.0 if s <= 4 else 2.0 for s in range(8)}
    assert dict(tensorboard_scalars(tmp_path / "tb")["learner/loss"]) == want
    rows = wide(tmp_path / "metrics.jsonl")
    assert {int(r["step"]): float(r["learner/loss"]) for r in rows} == want and len(rows) == 8
