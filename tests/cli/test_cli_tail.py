"""`monitor-async tail`: a real writer process, tail on a real 80x24 pty (and on a pipe), Ctrl-C as SIGINT."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import CLI
from tests.support.terminal import Terminal, last_frame

WRITER = """
import asyncio, sys
from monitor_async import Monitor
from monitor_async.backends import CSVSink

class Ticker:
    n = 0
    def stats(self):
        self.n += 1
        return {"n": self.n, "half": 0.5}

async def main():
    monitor = Monitor(CSVSink(sys.argv[1]), poll_interval=0.05)
    monitor.watch(Ticker(), name="ticker", step="n")
    async with monitor:
        await asyncio.sleep(120)

asyncio.run(main())
"""


def _wait_for_file(path: Path, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.stat().st_size > 0):
        assert proc.poll() is None, "the writer exited"
        assert time.monotonic() < deadline, f"{path} was not written within {timeout}s"
        time.sleep(0.05)


@pytest.fixture
def demo_run(tmp_path: Path) -> Iterator[Path]:
    """A demo writing into a run folder for a minute (stopped at the end of the test)."""
    writer = subprocess.Popen([*CLI, "demo", "--seconds", "60", "--logdir", str(tmp_path), "--no-console"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob("*/metrics.jsonl")):
            assert time.monotonic() < deadline and writer.poll() is None
            time.sleep(0.05)
        (run_dir,) = tmp_path.iterdir()
        _wait_for_file(run_dir / "metrics.jsonl", writer)  # type: ignore[arg-type]
        yield run_dir
    finally:
        writer.terminate()
        writer.wait(timeout=30)


def _collector_step(frame: list[str]) -> int:
    row = next(line for line in frame if line.startswith("│ collector"))
    return int(row.split("│")[2])


def test_tail_shows_the_console_table_of_a_growing_run_and_ctrl_c_exits_cleanly(demo_run: Path) -> None:
    term = Terminal([*CLI, "tail", str(demo_run), "--interval", "0.2"], columns=80, rows=24)
    try:
        title = f"tail {demo_run.name} · "
        at = term.wait_for("│ inference", timeout=30)
        first = last_frame(term.text(), title)
        assert all(len(line) <= 80 for line in first) and len(first) <= 24
        names = {line.split("│")[1].strip() for line in first if line.startswith("│ ")} - {"watch", ""}
        assert names == {"collector", "replay_buffer", "inference", "learner"}
        assert first[-1].startswith("monitor: polls "), "the monitor's summary line, as the console sink shows it"
        step = _collector_step(first)
        deadline = time.monotonic() + 30
        while _collector_step(last_frame(term.text(), title)) <= step:  # it follows the file as it grows
            assert time.monotonic() < deadline, "the table did not move on"
            term.wait_for(title, after=at + 1, timeout=30)
            at = term.text().rindex(title)
            time.sleep(0.2)
    finally:
        term.proc.send_signal(signal.SIGINT)
        code, stderr = term.finish(timeout=30)
    assert code == 0, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert "│ collector" in term.text()[term.text().rindex(title):], "the table stays on screen"


def test_tail_on_a_pipe_prints_a_line_per_record_of_a_growing_csv(tmp_path: Path) -> None:
    path = tmp_path / "run" / "metrics.csv"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)])
    tail: subprocess.Popen[str] | None = None
    try:
        _wait_for_file(path, writer)
        tail = subprocess.Popen([*CLI, "tail", str(path.parent), "--interval", "0.1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        enough = threading.Event()

        def read() -> None:
            assert tail is not None and tail.stdout is not None
            for line in tail.stdout:
                lines.append(line)
                if len(lines) >= 20:
                    enough.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert enough.wait(30), f"tail printed {lines}"
        steps = [int(re.search(r" step=(\d+) ", line).group(1)) for line in lines]  # type: ignore[union-attr]
        assert all(re.fullmatch(r"[\d:]{8} ticker step=\d+ n=\d+ half=0\.5\n", line) for line in lines), lines
        assert steps[1:] == list(range(steps[0] + 1, steps[0] + len(steps))), "every record once, in order"
        tail.send_signal(signal.SIGINT)
        assert tail.wait(timeout=30) == 0
        assert tail.stderr is not None
        stderr = tail.stderr.read()
        assert "Traceback" not in stderr
    finally:
        for proc in (tail, writer):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
