"""The run readers read every file the sinks write, TorchRL's and TensorBoard's too, in bounded memory."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from monitor_async import AlertEvent, Monitor, Record
from monitor_async._cli.runs import Follower, load_run
from monitor_async._cli.show import describe
from monitor_async._cli.tail import tail
from monitor_async.backends import CSVSink, JSONLSink, TensorBoardSink
from tests.support.cli import cli


class Learner:
    """Frames by the hundred and a falling loss."""

    def __init__(self) -> None:
        self.n = 0

    def stats(self) -> dict[str, float]:
        self.n += 1
        return {"frames": 100.0 * self.n, "loss": 1.0 / self.n}


async def _write(sinks: list[object], polls: int = 4, push: bool = False, own: bool = False) -> None:
    monitor = Monitor(sinks, close_sinks=True)
    monitor.watch(Learner(), name="collector", step="frames")
    if own:
        monitor.watch(monitor, name="monitor")
    for i in range(polls):
        if push:
            monitor.log("train", {"reward": float(i)}, step=i)
        await monitor.step()
    await monitor.stop(log_final=False)


def _jsonl_lines(path: Path, n: int) -> None:
    line = '{"time":%d.0,"name":"rb","step":%d,"metrics":{"rb/size":%d.0,"rb/free":1.5}}\n'
    with path.open("w") as f:
        for i in range(0, n, 1000):
            f.write("".join(line % (j, j, j) for j in range(i, min(n, i + 1000))))


# ------------------------------------------------------------------------------ every file the sinks write


def test_a_csv_with_the_source_column_is_read(tmp_path: Path) -> None:
    asyncio.run(_write([CSVSink(tmp_path / "metrics.csv", source=True)]))
    assert (tmp_path / "metrics.csv").read_text().startswith("time,name,step,metric,value,source\n")
    out = cli("show", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "1 watch · 3 metrics · 4 records" in out.stdout and "step 100 → 400" in out.stdout


def test_an_empty_jsonl_never_hides_a_full_csv(tmp_path: Path) -> None:
    asyncio.run(_write([CSVSink(tmp_path / "metrics.csv")]))
    (tmp_path / "metrics.jsonl").write_text("")
    out = cli("show", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "(metrics.csv)" in out.stdout and "4 records" in out.stdout and "no records yet" not in out.stdout


def test_show_memory_does_not_grow_with_the_records(tmp_path: Path) -> None:
    peaks = []
    for n in (20_000, 200_000):
        path = tmp_path / f"m{n}.jsonl"
        _jsonl_lines(path, n)
        tracemalloc.start()
        lines = describe(load_run(path))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert f" · {n} records · " in lines[1], lines[1]
    assert peaks[1] < 1.5 * peaks[0] + (2 << 20), f"peak {peaks[0]} B for 20k records, {peaks[1]} B for 200k"


# ----------------------------------------------------------------------------------- tail and rotation


def test_tail_follows_a_file_replaced_at_its_path(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    line = '{"time":%d.0,"name":"rb","step":%d,"metrics":{"rb/size":%d.0}}\n'
    path.write_text("".join(line % (i, i, i) for i in range(50)))
    out = io.StringIO()

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(tail(path, interval=0.05, live=False, stream=out, stop=stop))

        async def until(text: str) -> None:
            deadline = time.monotonic() + 30
            while text not in out.getvalue():
                assert time.monotonic() < deadline, out.getvalue()[-500:]
                await asyncio.sleep(0.02)

        await until("size=49")
        with path.open("a") as f:  # written after tail's last read, then rotated away
            f.write("".join(line % (i, i, i) for i in range(50, 100)))
        path.rename(tmp_path / "metrics.jsonl.1")
        path.write_text("".join(line % (i, i, i) for i in range(100, 200)))  # longer than the old one was read
        await until("size=199")
        stop.set()
        await task

    asyncio.run(main())
    shown = [int(part.split("=")[1]) for part in out.getvalue().split() if part.startswith("size=")]
    assert sorted(set(shown)) == list(range(49, 200)), "every record after the history, none lost"


# ------------------------------------------------------------------------------------- errors


def test_unreadable_paths_and_missing_output_folders_are_one_line_errors(tmp_path: Path) -> None:
    asyncio.run(_write([JSONLSink(tmp_path / "run" / "metrics.jsonl")]))
    run = tmp_path / "run"
    for command in (["export", str(run), "--wide", str(tmp_path / "missing" / "w.csv")],
                    ["plot", str(run), "-o", str(tmp_path / "missing" / "p.png")],
                    ["export", str(run), "--wide", str(tmp_path)]):  # a folder where a file is expected
        out = cli(*command)
        assert out.returncode == 2, out
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert str(tmp_path) in out.stderr
    if os.geteuid() == 0:
        pytest.skip("running as root: chmod 000 does not keep root from reading, the unreadable-folder case "
                    "cannot be made here")
    os.chmod(run, 0)
    try:
        out = cli("show", str(run))
    finally:
        os.chmod(run, 0o755)
    assert out.returncode == 2 and "Traceback" not in out.stderr and str(run) in out.stderr, out


# -------------------------------------------------------------------------- whoever wrote the run


def test_a_torchrl_csvlogger_folder_is_read(tmp_path: Path) -> None:
    loggers = pytest.importorskip("torchrl.record.loggers.csv")
    logger = loggers.CSVLogger(exp_name="exp", log_dir=str(tmp_path))
    for step in range(5):
        logger.log_scalar("collector/frames", 100.0 * (step + 1), step=step)
        logger.log_scalar("collector/loss", 1.0 / (step + 1), step=step)
        logger.log_scalar("reward", float(step), step=step)
    del logger
    run = tmp_path / "exp"
    out = cli("show", str(run))
    assert out.returncode == 0, out.stderr
    assert "TorchRL CSVLogger" in out.stdout and "15 records" in out.stdout
    assert "collector  10 records · step 0 → 4" in out.stdout
    wide = tmp_path / "wide.csv"
    out = cli("export", str(run), "--wide", str(wide))
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(wide.open(newline="")))
    collector = [r for r in rows if r["watch"] == "collector"]
    assert [r["collector/frames"] for r in collector] == ["100.0", "200.0", "300.0", "400.0", "500.0"]
    assert [r["collector/loss"] for r in collector][-1] == "0.2", "one row per step"
    if __import__("importlib").util.find_spec("matplotlib"):
        out = cli("plot", str(run), "-o", str(tmp_path / "p.png"))
        assert out.returncode == 0 and "3 panels of 2 watches" in out.stdout, out


def test_tensorboard_event_files_are_read(tmp_path: Path) -> None:
    from tensorboardX import SummaryWriter

    asyncio.run(_write([TensorBoardSink(tmp_path / "ours")]))
    out = cli("show", str(tmp_path / "ours"))
    assert out.returncode == 0, out.stderr
    assert "TensorBoard" in out.stdout and "step 100 → 400" in out.stdout and "4 records" in out.stdout
    writer = SummaryWriter(str(tmp_path / "theirs"))
    for step in range(6):
        writer.add_scalar("train/loss", 1.0 / (step + 1), step)
    writer.close()
    out = cli("show", str(tmp_path / "theirs"))
    assert out.returncode == 0, out.stderr
    assert "train  6 records · step 0 → 5" in out.stdout
    wide = tmp_path / "wide.csv"
    assert cli("export", str(tmp_path / "theirs"), "--wide", str(wide)).returncode == 0
    out = cli("show", str(tmp_path))  # a folder of two runs is not read as one
    assert out.returncode == 1 and "the folders below it that hold runs include" in out.stderr, out
    last = [r["train/loss"] for r in csv.DictReader(wide.open(newline=""))][-1]
    assert float(last) == pytest.approx(1 / 6, rel=1e-6), "float32 in the event file"


def test_event_files_are_read_without_tensorboard_installed_and_a_torn_last_record_waits(tmp_path: Path) -> None:
    """Only the core (tensorboardX) is needed; a record still being written is read once it is whole."""
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    for step in range(5):
        writer.add_scalar("train/loss", 1.0 / (step + 1), step)
    writer.close()
    events = next(tmp_path.glob("events.out.tfevents.*"))
    whole = events.read_bytes()
    events.write_bytes(whole[:-7])  # the last record torn
    code = (
        "import sys; sys.modules['tensorboard'] = None\n"  # an import of tensorboard fails
        "from monitor_async._cli.main import main\n"
        f"raise SystemExit(main(['show', {str(tmp_path)!r}]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "train  4 records · step 0 → 3" in out.stdout, out.stdout
    follower = Follower(events, "tensorboard")
    assert [r.step for r in follower.read()] == [0, 1, 2, 3]
    events.write_bytes(whole)
    assert [r.step for r in follower.read()] == [4], "the torn record, once whole"


# ------------------------------------------------------------------------------------------ launches


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_launches_appending_to_one_file_are_kept_apart(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"metrics.{kind}"
    for _ in range(2):
        asyncio.run(_write([JSONLSink(path) if kind == "jsonl" else CSVSink(path)]))
    out = cli("show", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "2 launches appended to the same file" in out.stdout and f"(pid {os.getpid()})" in out.stdout
    assert "8 records" in out.stdout and "__launch__" not in out.stdout
    wide = tmp_path / "wide.csv"
    assert cli("export", str(tmp_path), "--wide", str(wide)).returncode == 0
    rows = list(csv.DictReader(wide.open(newline="")))
    assert [(r["launch"], r["step"]) for r in rows] == [(a, s) for a in "12" for s in ("100", "200", "300", "400")]
    if kind == "csv":
        pd = pytest.importorskip("pandas")
        frame = pd.read_csv(path)
        assert (frame["name"] == "__launch__").sum() == 1 and frame["value"].notna().all(), "pandas reads it"


# -------------------------------------------------------------------------------------------- alerts


def test_alerts_lists_firing_and_resolved_events_with_their_duration(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"

    async def main() -> None:
        async with JSONLSink(path) as sink:
            now = time.time()
            await sink.write([Record("collector", s, now + s, {"collector/frames": 10.0 * min(s, 3)})
                              for s in range(10)])
            base = ("stalled collector/frames", "warning", "collector", "collector/frames", 30.0, now + 3)
            await sink.alert(AlertEvent(base[0], "firing", *base[1:], now + 5, {}, "collector/frames stalled"))
            await sink.alert(AlertEvent(base[0], "resolved", *base[1:], now + 70, {}, "moves again"))
            await sink.alert(AlertEvent("nonfinite learner/loss", "firing", "critical", "learner", "learner/loss",
                                        float("nan"), now + 6, now + 6, {}, "learner/loss is nan"))

    asyncio.run(main())
    out = cli("alerts", str(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2
    assert "stalled collector/frames (collector) · firing → resolved after 1m 05s" in lines[0]
    assert "critical" in lines[1] and "firing, not resolved" in lines[1] and "learner/loss is nan" in lines[1]
    show = cli("show", str(tmp_path))
    assert show.returncode == 0 and show.stdout.count("\nalert ") == 2 and "10 records" in show.stdout
    if __import__("importlib").util.find_spec("matplotlib"):
        from monitor_async._cli.plot import figure

        fig, _, _ = figure(load_run(tmp_path))
        spans = [p for ax in fig.get_axes() for p in ax.patches]
        assert spans, "the firing interval is shaded on its metric's panel"


# ------------------------------------------------------------------------------------ pushed names, plot


def test_show_counts_pushed_names_apart_from_watches(tmp_path: Path) -> None:
    asyncio.run(_write([JSONLSink(tmp_path / "metrics.jsonl")], push=True, own=True))
    out = cli("show", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "2 watches, 1 pushed name · " in out.stdout


def test_plot_of_500_metrics_is_paged_and_bounded(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    with (tmp_path / "metrics.jsonl").open("w") as f:
        for step in range(3):
            metrics = {f"w{i // 50}/m{i}": float(step * i) for i in range(1, 501)}
            for watch in range(10):
                mine = {k: v for k, v in metrics.items() if k.startswith(f"w{watch}/")}
                f.write(json.dumps({"time": 1.0 + step, "name": f"w{watch}", "step": step, "metrics": mine}) + "\n")
    began = time.monotonic()
    out = cli("plot", str(tmp_path), "-o", str(tmp_path / "p.png"), timeout=300)
    took = time.monotonic() - began
    assert out.returncode == 0, out.stderr
    pages = sorted(tmp_path.glob("p-*.png"))
    assert len(pages) == 8 and "(8 pages)" in out.stdout and "past page 8" in out.stdout
    assert all(imread(p).shape[0] < 9000 for p in pages), "each page holds 32 panels at most"
    assert took < 240, f"{took:.0f} s"
