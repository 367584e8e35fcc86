"""`monitor-async show` and `export`, and reading runs: real files of the real sinks, torn lines, growing files."""

from __future__ import annotations

import asyncio
import csv
import json
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from monitor_async import Monitor, Record, RunNotFoundError
from monitor_async._cli.runs import Follower, find_run_files, load_run
from monitor_async.backends import CSVSink, JSONLSink
from tests.support.cli import CLI, cli

ODD = 'a,b "c"\nd'  # a watch name CSV must quote: comma, quotes, line break


class Trainer:
    def __init__(self) -> None:
        self.frames = 0

    def stats(self) -> dict[str, object]:
        self.frames += 1000
        return {"frames": self.frames, "loss": 1000.0 / self.frames, "mode": "train"}


class Server:
    def __init__(self) -> None:
        self.n = 0

    def stats(self) -> dict[str, float]:
        self.n += 1
        return {"requests": 10.0 * self.n, "queue": float(self.n % 3)}


@dataclass
class Runs:
    both: Path  # metrics.jsonl and metrics.csv, as the demo writes
    csv_only: Path
    jsonl_only: Path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("runs")
    out = Runs(root / "both", root / "csv", root / "jsonl")

    async def write() -> None:
        sinks = [
            CSVSink(out.both / "metrics.csv"), JSONLSink(out.both / "metrics.jsonl"),
            CSVSink(out.csv_only / "metrics.csv"), JSONLSink(out.jsonl_only / "metrics.jsonl"),
        ]
        monitor = Monitor(sinks, close_sinks=True)
        monitor.watch(Trainer(), name="trainer", step="frames")
        monitor.watch(Server(), name="server", rate_keys=["requests"])
        monitor.watch(Server(), name=ODD, rate_keys=[])
        for _ in range(5):
            await monitor.step()
            await asyncio.sleep(0.02)
        await monitor.stop(log_final=False)

    asyncio.run(write())
    return out


def key(r: Record) -> tuple[str, int | None, float, dict[str, float]]:
    return (r.name, r.step, r.time, r.metrics)


# ------------------------------------------------------------------------------------------ reading


def test_csv_and_jsonl_read_back_the_same_records(runs: Runs) -> None:
    from_csv = load_run(runs.csv_only)
    from_jsonl = load_run(runs.jsonl_only)
    assert (from_csv.kind, from_jsonl.kind) == ("csv", "jsonl")
    assert len(from_jsonl.records) == 15 and from_csv.skipped == from_jsonl.skipped == 0
    assert [key(r) for r in from_csv.records] == [key(r) for r in from_jsonl.records]
    assert ODD in from_csv.watches(), "a quoted name with a line break reads back whole"
    both = load_run(runs.both)
    assert both.kind == "jsonl" and [f.name for f in both.files] == ["metrics.jsonl"], "JSONL first, not both"


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_a_torn_last_line_waits_for_the_rest(runs: Runs, tmp_path: Path, kind: str) -> None:
    source = (runs.jsonl_only / "metrics.jsonl") if kind == "jsonl" else (runs.csv_only / "metrics.csv")
    data = source.read_bytes()
    path = tmp_path / source.name
    cut = data.rindex(b"\n", 0, len(data) - 1) + 1 + 7  # seven bytes into the last line
    path.write_bytes(data[:cut])
    follower = Follower(path, kind)
    first = follower.read_all()
    whole = load_run(source).records
    assert follower.skipped == 0, "a torn line is not an unreadable one"
    assert [key(r) for r in first] == [key(r) for r in whole[:-1]], "the torn record waits, whole"
    with path.open("ab") as f:
        f.write(data[cut:])
    rest = follower.read_all()
    assert [key(r) for r in first + rest] == [key(r) for r in whole]
    assert follower.skipped == 0


def test_a_csv_record_half_written_is_returned_once_whole(runs: Runs, tmp_path: Path) -> None:
    data = (runs.csv_only / "metrics.csv").read_bytes()
    lines = data.splitlines(keepends=True)
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"".join(lines[:-1]))  # the last record lacks its last row, as mid-write
    follower = Follower(path, "csv")
    before = follower.read()
    with path.open("ab") as f:
        f.write(lines[-1])
    after = follower.read() + follower.read()  # the second read finds the file quiet: the record is whole
    records = before + after
    assert [key(r) for r in records] == [key(r) for r in load_run(runs.csv_only).records]


def test_unreadable_lines_are_skipped_and_counted(runs: Runs, tmp_path: Path) -> None:
    lines = (runs.jsonl_only / "metrics.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "metrics.jsonl").write_text("".join([*lines[:3], "not json\n", '{"name": 3}\n', *lines[3:]]))
    run = load_run(tmp_path)
    assert run.skipped == 2 and len(run.records) == 15
    out = cli("show", str(tmp_path))
    assert out.returncode == 0 and "2 unreadable lines skipped" in out.stdout


def test_a_file_cut_short_is_read_again_from_its_start(runs: Runs, tmp_path: Path) -> None:
    data = (runs.jsonl_only / "metrics.jsonl").read_bytes()
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(data)
    follower = Follower(path, "jsonl")
    assert len(follower.read()) == 15
    path.write_bytes(data[: data.index(b"\n") + 1])
    assert len(follower.read()) == 1


def test_a_directory_with_no_run_fails_with_a_clear_message(runs: Runs, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.csv").write_text("a,b\n1,2\n")  # a CSV, but not one CSVSink wrote
    for command in (["show"], ["plot"], ["tail"], ["export", "--wide", str(tmp_path / "x.csv")]):
        out = cli(command[0], str(empty), *command[1:])
        assert out.returncode == 1, out
        assert out.stderr.strip() == (
            f"monitor-async {command[0]}: no run in {empty}: it holds no .jsonl file of JSONLSink, "
            "no .csv file of CSVSink, no TorchRL CSVLogger folder (scalars/*.csv) "
            "and no TensorBoard event file (events.out.tfevents.*)"
        )
        assert "Traceback" not in out.stderr
    out = cli("show", str(runs.both.parent))
    assert out.returncode == 1 and "the folders below it that hold runs include" in out.stderr
    assert str(runs.both) in out.stderr, "the parent of runs points at them"
    out = cli("show", str(tmp_path / "nowhere"))
    assert out.returncode == 1 and "does not exist" in out.stderr
    with pytest.raises(RunNotFoundError, match="not a file a sink wrote"):
        find_run_files(empty / "notes.csv")
    with pytest.raises(FileNotFoundError):  # RunNotFoundError is one
        load_run(empty)


# --------------------------------------------------------------------------------------------- show


def test_show_prints_watches_metrics_first_and_last_values_and_rates(runs: Runs) -> None:
    out = cli("show", str(runs.both))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith(f"run: {runs.both}  (metrics.jsonl)\n")
    assert re.search(r"\n3 watches · 8 metrics · 15 records · \d{4}-\d\d-\d\d [\d:]{8} → [\d:]{8} \(\d\.\d s\)\n",
                     text)
    block = text.split("\ntrainer  ", 1)[1].split("\n\n", 1)[0].splitlines()
    assert re.fullmatch(r"5 records · step 1000 → 5000 · [\d:]{8} → [\d:]{8}", block[0])
    table = {row.split()[0]: row.split()[1:] for row in block[2:]}
    assert table["frames"][:2] == ["1k", "5k"] and table["frames"][2].endswith("k/s")
    assert table["loss"] == ["1", "0.2"]
    assert "mode" not in table, "left-out strings are not in the files"
    server = text.split("\nserver  ", 1)[1].split("\n\n", 1)[0].splitlines()
    assert "step" not in server[0], "no step range for a watch without a step"
    assert server[2].split()[:3] == ["requests", "10", "50"]


def test_show_while_another_process_appends(tmp_path: Path) -> None:
    writer = subprocess.Popen([*CLI, "demo", "--seconds", "30", "--logdir", str(tmp_path), "--no-console"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        # until the first rows are in (the demo opens its files a few seconds before it writes)
        while not any(f.stat().st_size > 64 for f in tmp_path.glob("*/metrics.csv")) and time.monotonic() < deadline:
            time.sleep(0.1)
        (run_dir,) = tmp_path.iterdir()
        counts = []
        for source in [run_dir, run_dir / "metrics.csv"] * 3:
            out = cli("show", str(source))
            assert out.returncode == 0, out.stderr
            assert "unreadable" not in out.stdout, "a line being written is never taken for a bad one"
            found = re.search(r" (\d+) records · ", out.stdout)
            counts.append(int(found.group(1)) if found else 0)
            time.sleep(0.3)
        assert counts[-1] > counts[0] > 0, counts
    finally:
        writer.terminate()
        writer.wait(timeout=30)


def test_metric_globs_select(runs: Runs) -> None:
    out = cli("show", str(runs.both), "--metric", "*loss*", "--metric", "server/requests")
    assert out.returncode == 0, out.stderr
    assert "2 watches · 2 metrics" in out.stdout and "frames" not in out.stdout
    out = cli("show", str(runs.both), "--metric", "nothing*")
    assert out.returncode == 1 and "no metric" in out.stderr and "nothing*" in out.stderr


# ------------------------------------------------------------------------------------------- export


def test_export_wide_reads_back_with_csv(runs: Runs, tmp_path: Path) -> None:
    out_path = tmp_path / "wide.csv"
    out = cli("export", str(runs.csv_only), "--wide", str(out_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"wrote {out_path}: 15 rows of 3 watches"
    with out_path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0])
    assert header[:3] == ["watch", "step", "time"]
    assert header[3:6] == ["trainer/frames", "trainer/loss", "trainer/frames_per_second"], "grouped by watch"
    assert f"{ODD}/requests" in header
    long = [r for r in csv.reader((runs.csv_only / "metrics.csv").open(newline=""))][1:]
    by_row = {(r["watch"], r["time"]): r for r in rows}
    for when, name, step, metric, value in long:
        row = by_row[(name, when)]
        assert row["step"] == step and row[metric] == value, "the same text: values read back exactly"
    trainer = [r for r in rows if r["watch"] == "trainer"]
    assert [r["step"] for r in trainer] == ["1000", "2000", "3000", "4000", "5000"]
    assert all(r["server/requests"] == "" for r in trainer), "empty where a watch has no such metric"


def test_export_wide_reads_back_with_pandas(runs: Runs, tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    out_path = tmp_path / "wide.csv"
    assert cli("export", str(runs.jsonl_only), "--wide", str(out_path)).returncode == 0
    frame = pd.read_csv(out_path)
    assert frame.shape == (15, 3 + 8)
    trainer = frame[frame["watch"] == "trainer"].set_index("step")
    assert trainer.index.is_unique and list(trainer.index) == [1000, 2000, 3000, 4000, 5000]
    assert trainer["trainer/loss"].tolist() == [1.0, 0.5, 1000.0 / 3000, 0.25, 0.2]
    assert frame["time"].is_monotonic_increasing


def test_export_merges_records_of_one_step_and_writes_to_stdout(tmp_path: Path) -> None:
    lines = [
        {"time": 1.0, "name": "rb", "step": 7, "metrics": {"rb/size": 1.0}},
        {"time": 2.0, "name": "rb", "step": 7, "metrics": {"rb/size": 2.0, "rb/free": 5.0}},  # the same step
        {"time": 3.0, "name": "x", "step": None, "metrics": {"x/a": 1.5}},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = cli("export", str(tmp_path), "--wide", "-")
    assert out.returncode == 0, out.stderr
    assert out.stdout.replace("\r\n", "\n") == (
        "watch,step,time,rb/size,rb/free,x/a\n"
        "rb,7,2.0,2.0,5.0,\n"
        "x,,3.0,,,1.5\n"
    )


def test_output_cut_short_by_a_pipe_is_no_error(tmp_path: Path) -> None:
    line = '{"time":%d.0,"name":"rb","step":%d,"metrics":{"rb/size":%d.0,"rb/free":1.5}}\n'
    (tmp_path / "metrics.jsonl").write_text("".join(line % (i, i, i) for i in range(20_000)))  # > a pipe's buffer
    for command in (["export", str(tmp_path), "--wide", "-"], ["show", str(tmp_path)]):
        out = subprocess.run(f"{shlex.join([*CLI, *command])} | head -c 10", shell=True, capture_output=True,
                             text=True, timeout=60)
        assert "Traceback" not in out.stderr and "Broken pipe" not in out.stderr, out.stderr
