"""The main job: `monitor-async demo`, read back with the formats' own readers."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from monitor_async import __version__

CLI = [sys.executable, "-m", "monitor_async"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def _check_run(run_dir: Path) -> None:
    rows = list(csv.reader((run_dir / "metrics.csv").open(newline="")))
    assert rows[0] == ["time", "name", "step", "metric", "value"]
    assert all(len(row) == 5 for row in rows)
    names = {row[1] for row in rows[1:]}
    assert {"collector", "replay_buffer", "inference", "learner", "monitor"} <= names
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert {r["name"] for r in records} == names
    assert any("collector/frames_per_second" in r["metrics"] for r in records)
    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert len(tags) >= 5
    assert "collector/frames" in tags
    frames = acc.Scalars("collector/frames")
    assert [e.step for e in frames] == [int(e.value) for e in frames]


def test_demo_writes_csv_jsonl_and_tensorboard(tmp_path: Path) -> None:
    out = subprocess.run(
        [*CLI, "demo", "--seconds", "3", "--logdir", str(tmp_path), "--no-console"],
        capture_output=True, text=True, timeout=60, env=_env(),
    )
    assert out.returncode == 0, out.stderr
    (run_dir,) = tmp_path.iterdir()
    _check_run(run_dir)
    assert f"tensorboard --logdir {run_dir / 'tensorboard'}" in out.stdout
    assert "sink/csv/dropped: 0" in out.stdout
    assert "metrics.csv" in out.stdout and "metrics.jsonl" in out.stdout


def test_sigint_leaves_whole_files_and_the_summary(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*CLI, "demo", "--seconds", "60", "--logdir", str(tmp_path), "--no-console"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            runs = list(tmp_path.iterdir())
            if runs and (runs[0] / "metrics.csv").exists() and (runs[0] / "metrics.csv").stat().st_size > 500:
                break
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "interrupted: stopped cleanly" in stdout
    assert "tensorboard --logdir" in stdout
    assert "Traceback" not in stderr
    _check_run(next(tmp_path.iterdir()))


def test_help_and_version() -> None:
    out = subprocess.run(CLI, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "demo" in out.stdout and "usage" in out.stdout
    out = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == f"monitor-async {__version__}"
    out = subprocess.run([*CLI, "demo", "--help"], capture_output=True, text=True, timeout=30)
    assert "--seconds" in out.stdout and "--logdir" in out.stdout and "--no-console" in out.stdout
