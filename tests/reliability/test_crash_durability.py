"""The file sinks keep only whole CSV rows and JSONL lines, whatever happens to the writer.

Holds "Crash-safe files": docs/guarantees.md#crash-safe-files-test_crash_durabilitypy

- A subprocess polls 20 targets every millisecond into a CSVSink and a
  JSONLSink and is killed with SIGKILL while writing, three times over on the
  same files (each run appends to what the last one left, and cuts away any
  partial line the kill left). Every row and every line on disk parses, the
  files end with a line break, and each target's values only ever increase.
- A write cut short by a file size limit is taken back.
- Processes appending to one file write one header and only whole rows.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from monitor_async import Monitor
    from monitor_async.backends import CSVSink, JSONLSink

    class Worker:
        def __init__(self, i):
            self.i, self.n = i, 0
        def stats(self):
            self.n += 1
            return {"n": self.n, "frames": self.n * 64, "queue": self.n % 7, "loss": 1 / self.n,
                    "odd, \\"key\\"\\nname": self.i}

    async def main():
        folder = sys.argv[1]
        monitor = Monitor([CSVSink(folder + "/m.csv"), JSONLSink(folder + "/m.jsonl")],
                          poll_interval=0.001, on_error="raise")
        for i in range(20):
            monitor.watch(Worker(i), name=f"run{sys.argv[2]}/w{i}")
        async with monitor:
            await asyncio.Event().wait()

    asyncio.run(main())
    """
)

HEADER = ["time", "name", "step", "metric", "value"]


def lines_on_disk(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def test_sigkill_while_writing_leaves_only_whole_rows_and_lines(tmp_path: Path) -> None:
    csv_path, jsonl_path = tmp_path / "m.csv", tmp_path / "m.jsonl"
    for run in range(3):
        before = lines_on_disk(jsonl_path)
        proc = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(tmp_path), str(run)], stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 30
            # let it write a good amount, then kill it mid-stream
            while lines_on_disk(jsonl_path) < before + 2_000 and proc.poll() is None:
                assert time.monotonic() < deadline, "the monitor wrote too little"
                time.sleep(0.02)
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == -signal.SIGKILL

    csv_text = csv_path.read_text(encoding="utf-8")
    assert csv_text.endswith("\n"), f"torn last CSV row: {csv_text[-200:]!r}"
    rows = list(csv.reader(io.StringIO(csv_text, newline="")))
    assert rows[0] == HEADER and HEADER not in rows[1:], "the header is written once"
    csv_series: dict[str, list[float]] = {}
    for row in rows[1:]:
        assert len(row) == 5, f"torn CSV row: {row!r}"
        float(row[0])
        value = float(row[4])
        assert row[3].startswith(row[1] + "/")
        if row[3].endswith("/n"):
            csv_series.setdefault(row[1], []).append(value)

    jsonl_text = jsonl_path.read_text(encoding="utf-8")
    assert jsonl_text.endswith("\n"), f"torn last JSONL line: {jsonl_text[-200:]!r}"
    jsonl_series: dict[str, list[float]] = {}
    for line in jsonl_text.splitlines():
        record = json.loads(line)  # a torn line raises here
        if set(record) == {"launch"}:  # each later run marks its launch: a whole line too
            continue
        assert set(record) == {"time", "name", "step", "metrics"}
        assert len(record["metrics"]) >= 5
        jsonl_series.setdefault(record["name"], []).append(record["metrics"][record["name"] + "/n"])

    assert len(jsonl_series) == 60, "20 watches in each of the 3 runs reached the file"
    for series in (csv_series, jsonl_series):
        for name, values in series.items():
            assert values == [float(i) for i in range(1, len(values) + 1)], f"{name}: lost or reordered"


FSIZE_SCRIPT = textwrap.dedent(
    """
    import asyncio, resource, signal, sys
    from monitor_async import Record
    from monitor_async.backends import CSVSink

    # the file may not grow past 20,000 bytes: the write that crosses it is cut short
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    async def main():
        sink = CSVSink(sys.argv[1])
        n = 0
        try:
            while True:
                await sink.write([Record("w", None, float(n + i), {f"w/k{j}": float(j) for j in range(30)})
                                  for i in range(3)])
                n += 3
        except OSError as exc:
            print(exc)
        await sink.close()

    asyncio.run(main())
    """
)


def test_a_write_cut_short_by_a_size_limit_is_taken_back(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    done = subprocess.run(
        [sys.executable, "-c", FSIZE_SCRIPT, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert f"CSVSink cannot append to {str(path)!r}: File too large" in done.stdout
    data = path.read_bytes()
    assert len(data) < 20_000 and data.endswith(b"\n")
    rows = list(csv.reader(io.StringIO(data.decode(), newline="")))
    assert rows[0] == HEADER
    assert all(len(row) == 5 for row in rows[1:])
    assert len(rows[1:]) % 90 == 0, "only whole batches: the one that did not fit left nothing"


APPENDER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from monitor_async import Record
    from monitor_async.backends import CSVSink

    async def main():
        name = sys.argv[2]
        async with CSVSink(sys.argv[1]) as sink:
            for n in range(300):
                await sink.write([Record(name, None, float(n), {f"{name}/k{j}": float(j) for j in range(30)})])

    asyncio.run(main())
    """
)


def test_processes_appending_to_one_file_write_one_header_and_only_whole_rows(tmp_path: Path) -> None:
    path = tmp_path / "shared.csv"
    procs = [
        subprocess.Popen([sys.executable, "-c", APPENDER_SCRIPT, str(path), f"p{i}"], stderr=subprocess.PIPE, text=True)
        for i in range(3)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    rows = list(csv.reader(io.StringIO(path.read_text(), newline="")))
    assert rows[0] == HEADER and HEADER not in rows[1:], "the header is written once"
    assert all(len(row) == 5 for row in rows[1:])
    for i in range(3):
        times = [float(row[0]) for row in rows[1:] if row[1] == f"p{i}"]
        assert len(times) == 300 * 30
        assert times == sorted(times), "each process's batches are whole and in order"
