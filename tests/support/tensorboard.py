"""TensorBoard runs read back with TensorBoard's own EventAccumulator, and CleanRL's ppo.py run as a script."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parents[2]
PPO = ROOT / "examples" / "cleanrl_ppo.py"
OURS = "from monitor_async.integrations.tensorboard import SummaryWriter\n"
TORCH = "from torch.utils.tensorboard import SummaryWriter\n"


def runs(log_dir: Path | str) -> dict[str, EventAccumulator]:
    """Every run under ``log_dir`` (the folders holding event files, ``"."`` for ``log_dir`` itself), loaded."""
    found = {}
    for folder, _, files in os.walk(log_dir):
        if any(name.startswith("events.out.tfevents") for name in files):
            acc = EventAccumulator(folder, size_guidance={"scalars": 0, "tensors": 0, "histograms": 0})
            acc.Reload()
            found[os.path.relpath(folder, log_dir)] = acc
    return found


def scalars(log_dir: Path | str) -> dict[tuple[str, str], list[tuple[int, float, float]]]:
    """``{(run, tag): [(step, value, wall_time), ...]}`` in step order, as TensorBoard charts them."""
    return {
        (run, tag): sorted((e.step, e.value, e.wall_time) for e in acc.Scalars(tag))
        for run, acc in runs(log_dir).items()
        for tag in acc.Tags()["scalars"]
    }


def steps(log_dir: Path | str) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """`scalars` without the wall times: what two writers of the same calls must agree on."""
    return {key: [(step, value) for step, value, _ in events] for key, events in scalars(log_dir).items()}


def others(log_dir: Path | str) -> dict[tuple[str, str, str], list[int]]:
    """``{(run, kind, tag): [step, ...]}`` of the tensors (text, hparams...) and histograms."""
    found: dict[tuple[str, str, str], list[int]] = {}
    for run, acc in runs(log_dir).items():
        for tag in acc.Tags()["tensors"]:
            found[(run, "tensors", tag)] = sorted(e.step for e in acc.Tensors(tag))
        for tag in acc.Tags()["histograms"]:
            found[(run, "histograms", tag)] = sorted(e.step for e in acc.Histograms(tag))
    return found


def ppo_script(folder: Path, import_line: str = OURS, name: str = "ppo.py") -> Path:
    """CleanRL's ppo.py in ``folder`` with ``import_line`` as its SummaryWriter import (ours as vendored)."""
    source = PPO.read_text()
    assert source.count(OURS) == 1, "the vendored ppo.py must import our SummaryWriter exactly once"
    script = folder / name
    script.write_text(source.replace(OURS, import_line))
    return script


def run_script(script: Path, args: Sequence[str], timeout: float = 600, env: dict[str, Any] | None = None) -> str:
    """``python <script> ARGS`` in the script's folder, as its users run it (CleanRL's ppo.py...); its output."""
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    environ.update(env or {})
    done = subprocess.run(
        [sys.executable, script.name, *args], cwd=script.parent, env=environ, capture_output=True, text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def only_run(folder: Path) -> Path:
    """The one run folder a CleanRL script made under ``folder/runs``."""
    (run,) = (folder / "runs").iterdir()
    return run
