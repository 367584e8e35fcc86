"""A run killed and resumed from its checkpoint reads as one run, in every sink and reader.

Holds "Resuming a run": docs/guarantees.md#resuming-a-run-test_resumepy

A child process trains with ``SyncMonitor`` and checkpoints
``{"step", "frames", "monitor": monitor.state_dict()}`` every 100 steps; it is
SIGKILLed between two checkpoints, and another process loads the last one and
trains on, each launch's values marked. ``export --wide`` and TensorBoard's
``EventAccumulator`` then hold each step once, the later launch's after the
checkpoint; the JSONL file still holds both launches (``--launches all``);
rates stay within the true rate's range and no alert fires for the restart.
wandb (offline) and a real MLflow server see one run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.mlflow_server import MlflowServer
from tests.support.resume_trainer import STEP_SECONDS, run_launch, tensorboard_scalars, wide

AFTER = 8.0
"""The stalled and quiet rules' ``after``: the job stays down longer than that between the kill and the restart."""


def marks_by_step(rows: list[dict[str, str]]) -> dict[int, float]:
    """``{step: mark}`` of the ``train`` rows, failing when a step is there twice."""
    steps = [int(row["step"]) for row in rows if row["watch"] == "train"]
    assert len(steps) == len(set(steps)), "a step is there twice"
    return {int(row["step"]): float(row["train/mark"]) for row in rows if row["watch"] == "train"}


def expected(until: int, checkpoints: list[int]) -> dict[int, float]:
    """The mark each step 0..until must show: launch k+1 from the step after the k-th resume's checkpoint on."""
    return {step: 1.0 + sum(step > c for c in checkpoints) for step in range(until + 1)}


def test_a_killed_run_resumed_from_its_checkpoint_reads_as_one_run(tmp_path: Path) -> None:
    run, checkpoint = tmp_path / "run", tmp_path / "checkpoint.pkl"
    run_launch(run, checkpoint, 1.0, pause=250, after=AFTER)  # checkpoint at 200, killed at 250
    killed = time.monotonic()
    time.sleep(max(0.0, AFTER * 1.5 - (time.monotonic() - killed)))  # the job is down longer than `after`
    run_launch(run, checkpoint, 2.0, until=400, after=AFTER)

    want = expected(400, [200])
    for path in (run / "metrics.csv", run / "metrics.jsonl"):
        rows = wide(path)
        assert "launch" not in rows[0], "a resumed launch is not a launch apart"
        assert marks_by_step(rows) == want, path.name
        rates = [float(r["train/frames_per_second"]) for r in rows if r["train/frames_per_second"]]
        assert rates and all(0 < rate <= 10 / STEP_SECONDS * 1.01 for rate in rates), path.name

    scalars = tensorboard_scalars(run / "tb")
    steps = [step for step, _ in scalars["train/mark"]]
    assert steps == sorted(set(steps)), "TensorBoard holds each step once"
    assert dict(scalars["train/mark"]) == want
    rate_steps = [step for step, _ in scalars["train/frames_per_second"]]
    assert rate_steps == sorted(set(rate_steps))
    assert all(0 < v <= 10 / STEP_SECONDS * 1.01 for _, v in scalars["train/frames_per_second"])

    everything = wide(run / "metrics.jsonl", "--launches", "all")  # nothing was erased
    old = [int(r["step"]) for r in everything if r["launch"] == "1" and int(r["step"]) > 200]
    assert old == list(range(201, 251))
    assert {r["launch"] for r in everything} == {"1", "2"}

    shown = cli("show", str(run))
    assert shown.returncode == 0, shown.stderr
    assert "resumed the launch of pid" in shown.stdout and "train step 200; 50 records" in shown.stdout

    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert not [line for line in lines if "alert" in line], "no alert fired because of the restart"
    assert json.loads((run / "fired-2.json").read_text()) == []


def test_three_resumes_in_a_row_read_as_one_run(tmp_path: Path) -> None:
    run, checkpoint = tmp_path / "run", tmp_path / "checkpoint.pkl"
    run_launch(run, checkpoint, 1.0, pause=150)  # checkpoints at 100
    run_launch(run, checkpoint, 2.0, pause=260)  # from 100; checkpoints at 200
    run_launch(run, checkpoint, 3.0, pause=330)  # from 200; checkpoints at 300
    run_launch(run, checkpoint, 4.0, until=400)  # from 300

    want = expected(400, [100, 200, 300])
    assert marks_by_step(wide(run / "metrics.csv")) == want
    assert marks_by_step(wide(run / "metrics.jsonl")) == want
    assert dict(tensorboard_scalars(run / "tb")["train/mark"]) == want
    shown = cli("show", str(run / "metrics.csv")).stdout
    assert shown.count("resumed: ") == 3
    assert "train step 100; 50 records" in shown and "train step 200; 60 records" in shown
    assert "train step 300; 30 records" in shown


def test_wandb_continues_the_same_run(tmp_path: Path) -> None:
    wandb = pytest.importorskip("wandb")
    from tests.support.wandb_runs import transaction_log

    run, checkpoint, folder = tmp_path / "run", tmp_path / "checkpoint.pkl", tmp_path / "wandb"
    run_launch(run, checkpoint, 1.0, pause=150, wandb=folder)
    run_launch(run, checkpoint, 2.0, until=200, wandb=folder)
    runs = sorted((folder / "wandb").glob("offline-run-*"))
    assert len(runs) == 2, "wandb offline writes one folder per launch"
    assert len({path.name.rsplit("-", 1)[1] for path in runs}) == 1, "both launches log to one run id"
    history = [r["history"]["item"] for r in transaction_log(runs[1]) if r["type"] == "history"]
    resumed = [(h["train/step"], h["train/mark"]) for h in history if "train/mark" in h]
    assert resumed == [(s, 2.0) for s in range(101, 201)]
    assert wandb.__version__


def test_mlflow_continues_the_same_run(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    run, checkpoint = tmp_path / "run", tmp_path / "checkpoint.pkl"
    with MlflowServer(tmp_path / "mlflow") as server:
        run_launch(run, checkpoint, 1.0, pause=150, mlflow=server.url)
        run_launch(run, checkpoint, 2.0, until=200, mlflow=server.url)
        client = MlflowClient(server.url)
        experiment = client.get_experiment_by_name("resume")
        assert experiment is not None
        runs = client.search_runs([experiment.experiment_id])
        assert len(runs) == 1, "the resumed launch logs to the run it resumes"
        history = client.get_metric_history(runs[0].info.run_id, "train/mark")
        assert {m.step for m in history if m.value == 2.0} == set(range(101, 201))
        assert {m.step for m in history if m.value == 1.0} >= set(range(0, 101))
