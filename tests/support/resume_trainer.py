"""A training script that checkpoints its monitor's state, run as a child process by the resume tests.

``python -m tests.support.resume_trainer RUN CHECKPOINT --mark M --until N [--pause P]``
trains step by step with a ``SyncMonitor`` (CSV, JSONL and TensorBoard sinks in
the folder RUN; wandb offline with ``--wandb DIR``, MLflow with ``--mlflow URL``),
saves ``{"step", "frames", "monitor": monitor.state_dict()}`` to CHECKPOINT every
100 steps, and starts from CHECKPOINT when it exists. Every value it logs holds
``mark`` (M), so the launches can be told apart. With ``--pause P`` it stops at
step P, flushes, writes ``RUN/paused`` and waits to be killed (SIGKILL);
otherwise it ends at step N. At its end it writes the alert events it saw to
``RUN/fired-<M>.json``. `run_launch` starts it; `wide` and `tensorboard_scalars`
read the run back with the CLI and with TensorBoard's own reader.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STEP_SECONDS = 0.005
"""How long a training step takes at least: frames move 10 per step, so a rate is at most 10 / STEP_SECONDS."""
EVERY = 100
"""Steps between two checkpoints."""


class Trainer:
    """The training loop's state, watched: its step, a frame counter, and the launch's mark."""

    def __init__(self, mark: float) -> None:
        self.step = 0
        self.frames = 0
        self.mark = mark

    def stats(self) -> dict[str, float]:
        return {"step": self.step, "frames": self.frames, "mark": self.mark}


def _sinks(run: Path, args: argparse.Namespace) -> list[Any]:
    from monitor_async.backends import CSVSink, JSONLSink, TensorBoardSink

    sinks: list[Any] = [CSVSink(run / "metrics.csv"), JSONLSink(run / "metrics.jsonl"), TensorBoardSink(run / "tb")]
    if args.wandb:
        from monitor_async.backends import WandbSink

        sinks.append(WandbSink(project="resume", dir=args.wandb, mode="offline"))
    if args.mlflow:
        from monitor_async.backends import MLflowSink

        sinks.append(MLflowSink(args.mlflow, experiment="resume"))
    return sinks


def main() -> None:
    from monitor_async import Alert, SyncMonitor

    parser = argparse.ArgumentParser()
    parser.add_argument("run", type=Path)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--mark", type=float, required=True)
    parser.add_argument("--until", type=int, default=400)
    parser.add_argument("--pause", type=int)
    parser.add_argument("--wandb")
    parser.add_argument("--mlflow")
    parser.add_argument("--after", type=float, default=5.0)
    args = parser.parse_args()
    fired: list[dict[str, Any]] = []
    monitor = SyncMonitor(
        _sinks(args.run, args), background=False,
        alerts=[Alert.stalled("train/frames", after=args.after), Alert.quiet("train", after=args.after)],
        notify=lambda event: fired.append(event.to_dict()),
    )
    trainer = Trainer(args.mark)
    monitor.watch(trainer, name="train", step="step", rate_keys=["frames"])
    if args.checkpoint.exists():
        checkpoint = pickle.loads(args.checkpoint.read_bytes())
        trainer.step, trainer.frames = checkpoint["step"], checkpoint["frames"]
        monitor.load_state_dict(checkpoint["monitor"])
    first = True
    while trainer.step < args.until:
        if not first:  # the first look is at the step it starts from (0, or the checkpoint's)
            trainer.step += 1
            trainer.frames += 10
        first = False
        monitor.step()
        if trainer.step % EVERY == 0:
            state = {"step": trainer.step, "frames": trainer.frames, "monitor": monitor.state_dict()}
            part = args.checkpoint.with_suffix(".part")
            part.write_bytes(pickle.dumps(state))
            os.replace(part, args.checkpoint)  # a kill never leaves half a checkpoint
        if trainer.step == args.pause:
            monitor.flush()
            (args.run / "paused").write_text(str(trainer.step))
            while True:  # killed here, between two checkpoints
                time.sleep(1)
        time.sleep(STEP_SECONDS)
    fired += [event.to_dict() for event in monitor.firing()]
    monitor.close()
    (args.run / f"fired-{args.mark:g}.json").write_text(json.dumps(fired))


def run_launch(
    run: Path, checkpoint: Path, mark: float, *, until: int = 400, pause: int | None = None,
    wandb: Path | None = None, mlflow: str | None = None, timeout: float = 120.0, after: float = 5.0,
) -> None:
    """Runs one launch of the script: to its end, or, with ``pause``, until it pauses there and is SIGKILLed."""
    command = [sys.executable, "-m", "tests.support.resume_trainer", str(run), str(checkpoint), "--mark", str(mark),
               "--until", str(until), "--after", str(after)]
    if pause is not None:
        command += ["--pause", str(pause)]
    if wandb is not None:
        command += ["--wandb", str(wandb)]
    if mlflow is not None:
        command += ["--mlflow", mlflow]
    run.mkdir(parents=True, exist_ok=True)
    paused = run / "paused"
    paused.unlink(missing_ok=True)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    child = subprocess.Popen(command, env=env, cwd=Path(__file__).resolve().parents[2])
    try:
        if pause is None:
            assert child.wait(timeout) == 0, f"the launch marked {mark} failed"
            return
        deadline = time.monotonic() + timeout
        while not paused.exists():
            assert child.poll() is None, f"the launch marked {mark} ended before its pause at step {pause}"
            assert time.monotonic() < deadline, f"the launch marked {mark} did not reach step {pause}"
            time.sleep(0.05)
        child.kill()  # SIGKILL: no stop(), no flush, no atexit
        child.wait(timeout)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout)


def wide(path: Path, *options: str) -> list[dict[str, str]]:
    """The rows ``monitor-async export --wide`` writes for the run at ``path`` (with ``options``)."""
    import csv
    import tempfile

    from tests.support.cli import cli

    out = Path(tempfile.mkdtemp()) / "wide.csv"  # beside no run
    done = cli("export", "--wide", str(out), *options, str(path))
    assert done.returncode == 0, done.stderr
    with out.open(newline="") as f:
        return list(csv.DictReader(f))


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag under ``folder`` as TensorBoard's own reader (``EventAccumulator``) holds it: (step, value)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(s.step, s.value) for s in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


if __name__ == "__main__":
    main()
