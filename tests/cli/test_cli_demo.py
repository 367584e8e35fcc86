"""The first command: `monitor-async demo`, read back with the formats' own readers, its closing lines run."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

from monitor_async import __version__
from tests.support.cli import CLI
from tests.support.terminal import Terminal, last_frame

WATCHES = {"collector", "replay_buffer", "inference", "learner"}
# everything the demo does not need: with these unimportable, it must still run (the light install)
OPTIONAL = ["tensorboard", "matplotlib", "pandas", "wandb", "ray", "prometheus_client", "psutil", "pynvml",
            "torch", "torchrl", "tqdm", "starlette", "uvicorn", "hypothesis"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def _check_run(run_dir: Path) -> None:
    rows = list(csv.reader((run_dir / "metrics.csv").open(newline="")))
    assert rows[0] == ["time", "name", "step", "metric", "value"]
    assert all(len(row) == 5 for row in rows)
    names = {row[1] for row in rows[1:]}
    assert {*WATCHES, "monitor"} <= names
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    lines_read = [json.loads(line) for line in lines]
    records = [r for r in lines_read if "alert" not in r and "launch" not in r]  # alert and launch lines are no records
    assert {r["name"] for r in records} == names
    assert any("collector/frames_per_second" in r["metrics"] for r in records)
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert len(tags) >= 5
    assert "collector/frames" in tags
    frames = acc.Scalars("collector/frames")
    assert [e.step for e in frames] == [int(e.value) for e in frames]


def _commands(stdout: str) -> list[str]:
    """The commands under the closing 'look at it:' line."""
    return [line.strip() for line in stdout.split("look at it:\n", 1)[1].splitlines() if line.strip()]


def test_demo_writes_csv_jsonl_and_tensorboard_and_prints_commands_that_work(tmp_path: Path) -> None:
    logdir = tmp_path / "my runs"  # a space: the printed commands quote paths
    out = subprocess.run(
        [*CLI, "demo", "--seconds", "3", "--logdir", str(logdir), "--no-console"],
        capture_output=True, text=True, timeout=60, env=_env(),
    )
    assert out.returncode == 0, out.stderr
    (run_dir,) = logdir.iterdir()
    _check_run(run_dir)
    assert re.search(r"\n\d+ records from \d+ polls of 5 watches; 0 dropped, 0 errors\.\n", out.stdout)
    assert "sink " not in out.stdout, "a sink is named only when it dropped records or failed"
    assert "alert" not in out.stdout, "Alert.defaults() fires nothing on a healthy run"
    assert re.search(r"\n\d+ non-numeric values left out \(collector: policy='ppo'\)\.\n", out.stdout)
    assert "metrics.csv" in out.stdout and "metrics.jsonl" in out.stdout
    commands = _commands(out.stdout)
    assert commands == [
        f"monitor-async show {shlex.quote(str(run_dir))}",
        f"monitor-async plot {shlex.quote(str(run_dir))}",
        f"tensorboard --logdir {shlex.quote(str(logdir))}",
    ]
    # the first two work as printed
    show = subprocess.run(
        [*CLI, *shlex.split(commands[0])[1:]], capture_output=True, text=True, timeout=60, env=_env()
    )
    assert show.returncode == 0, show.stderr
    assert "5 watches" in show.stdout and "collector" in show.stdout
    plot = subprocess.run(
        [*CLI, *shlex.split(commands[1])[1:]], capture_output=True, text=True, timeout=120, env=_env()
    )
    assert plot.returncode == 0, plot.stderr
    assert (run_dir / "plot.png").stat().st_size > 10_000
    # TensorBoard, pointed at the logdir, names the run after its folder (not ".")
    multiplexer = EventMultiplexer().AddRunsFromDirectory(str(logdir))
    assert list(multiplexer.Runs()) == [run_dir.name]


def test_with_only_the_core_and_rich_the_demo_runs_and_says_what_to_install(tmp_path: Path) -> None:
    block = f"import sys; sys.modules.update(dict.fromkeys({OPTIONAL!r})); "
    out = subprocess.run(
        [sys.executable, "-c", block + "from monitor_async._cli.main import main; sys.exit(main(sys.argv[1:]))",
         "demo", "--seconds", "2", "--logdir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=_env(),
    )
    assert out.returncode == 0, out.stderr
    (run_dir,) = tmp_path.iterdir()
    commands = _commands(out.stdout)
    assert commands[1:] == [
        f"pip install matplotlib && monitor-async plot {run_dir}",
        f"pip install tensorboard && tensorboard --logdir {tmp_path}",
    ]


def test_on_an_80x24_terminal_the_table_shows_every_watch(tmp_path: Path) -> None:
    term = Terminal([*CLI, "demo", "--seconds", "4", "--logdir", str(tmp_path)], columns=80, rows=24)
    code, stderr = term.finish(timeout=60)
    assert code == 0, stderr
    frame = last_frame(term.text(), "monitor-async demo · ")
    assert len(frame) <= 24 and max(map(len, frame)) <= 80
    names = {line.split("│")[1].strip() for line in frame if line.startswith("│ ")} - {"watch", ""}
    assert names == WATCHES
    assert "more" not in "\n".join(frame) and "…" not in "\n".join(frame)
    assert frame[-1].startswith("monitor: polls "), "the monitor's own line, under the table"
    assert frame[0].startswith("monitor-async demo · 5 watches · "), "as many watches as the closing line says"
    assert re.search(r"\n\d+ records from \d+ polls of 5 watches; ", term.text())


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
    assert f"tensorboard --logdir {tmp_path}" in stdout
    assert "Traceback" not in stderr
    _check_run(next(tmp_path.iterdir()))


def test_help_and_version() -> None:
    out = subprocess.run(CLI, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "usage" in out.stdout
    for command in ("demo", "show", "plot", "tail", "export"):
        assert command in out.stdout
    out = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == f"monitor-async {__version__}"
    out = subprocess.run([*CLI, "demo", "--help"], capture_output=True, text=True, timeout=30)
    assert "--seconds" in out.stdout and "--logdir" in out.stdout and "--no-console" in out.stdout
    assert "--stall" in out.stdout


STALLED = "ALERT warning: collector/frames has not increased for "
# the closing lines list the alerts that fired (on a loaded machine a blocked-loop warning may join it)
FIRED = re.compile(r"\n\d+ alerts? fired:\n(  .*\n)*  warning: collector/frames has not increased for \d")


def test_demo_stall_shows_the_alert_above_the_table_on_a_terminal(tmp_path: Path) -> None:
    term = Terminal([*CLI, "demo", "--stall", "--seconds", "8", "--logdir", str(tmp_path)], columns=80, rows=24)
    at = term.wait_for(STALLED, timeout=60)
    assert term.text().find("monitor-async demo · ", at) > at, "above the table"
    code, stderr = term.finish(timeout=60)
    assert code == 0, stderr
    text = term.text()
    frame = text[: text.rindex("monitor-async demo · ")].rstrip("\n").splitlines()
    assert frame[-1].startswith(STALLED), "still firing in the last frame: the collector never resumes"
    assert FIRED.search(text)
    assert "after 2.4 s" in text and "fires 1.6 s later" in text, "the demo says what it does on purpose"


def test_demo_stall_without_a_console_names_the_alert_in_its_closing_lines(tmp_path: Path) -> None:
    out = subprocess.run(
        [*CLI, "demo", "--stall", "--seconds", "5", "--logdir", str(tmp_path), "--no-console"],
        capture_output=True, text=True, timeout=60, env=_env(),
    )
    assert out.returncode == 0, out.stderr
    assert FIRED.search(out.stdout)
    assert "collector/frames has not increased" in out.stderr, "and the monitor_async logger warned"
    run_dir = next(tmp_path.iterdir())
    _check_run(run_dir)
    events = [json.loads(line)["alert"] for line in (run_dir / "metrics.jsonl").open() if '"alert"' in line]
    assert {(e["rule"], e["state"]) for e in events} >= {("stalled collector/frames", "firing")}

