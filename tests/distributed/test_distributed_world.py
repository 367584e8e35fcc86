"""Where am I, provenance on records, and what each sink does with ranks (one process; see test_distributed_ranks for real ranks)."""

from __future__ import annotations

import csv
import json
import pickle
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from monitor_async import ConfigError, Monitor, Record
from monitor_async.backends import (
    ConsoleSink,
    CSVSink,
    JSONLSink,
    LoggerSink,
    MemorySink,
    PrometheusSink,
    TensorBoardSink,
    WandbSink,
)
from monitor_async.distributed import Source, World, world
from tests.support.sinks import RecordingLogger
from tests.support.targets import Collector

RANK1 = World(rank=1, world_size=4, host="n1")


# ------------------------------------------------------------------ world()
def test_world_reads_each_launcher_in_order() -> None:
    torchrun = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    assert (world(environ=torchrun).rank, world(environ=torchrun).found) == (3, "env")
    slurm = world(environ={"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1"})
    assert (slurm.rank, slurm.world_size, slurm.local_rank, slurm.found) == (5, 6, 1, "slurm")
    mpi = world(environ={"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    assert (mpi.rank, mpi.world_size, mpi.local_rank, mpi.found) == (2, 3, 0, "mpi")
    single = world(environ={"RANK": "x", "WORLD_SIZE": "2"})
    assert (single.rank, single.world_size, single.main, single.found) == (0, 1, True, "single")
    assert world(environ={"RANK": "4", "WORLD_SIZE": "2"}).found == "single"  # out of range: skipped


def test_importing_the_distributed_module_never_imports_torch() -> None:
    code = "import monitor_async, monitor_async.distributed as d, sys; d.world(); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


def test_a_bad_world_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="World: rank must be"):
        World(rank=2, world_size=2)
    with pytest.raises(ConfigError, match="Monitor: world must be"):
        Monitor(world={"rank": 1})  # type: ignore[arg-type]


# ------------------------------------------------------------------ Record.source
def test_source_is_empty_in_one_process_and_the_rank_in_a_job_of_several() -> None:
    single = Monitor(MemorySink(), world=World())
    single.watch(Collector(), name="c")
    ranked = Monitor(sink := MemorySink(), world=RANK1)
    ranked.watch(Collector(), name="c")

    async def both() -> None:
        await single.step()
        await ranked.step()

    import asyncio

    asyncio.run(both())
    assert dict(single.sinks[0].records[0].source) == {}
    record = sink.records[0]
    assert record.source == {"rank": 1} and isinstance(record.source, Source)
    with pytest.raises(TypeError):
        record.source["rank"] = 2  # type: ignore[index]
    assert pickle.loads(pickle.dumps(record)) == record


def test_a_record_built_with_a_dict_source_gets_a_read_only_one() -> None:
    record = Record("w", None, 0.0, {"w/x": 1.0}, {"rank": 2, "host": "a"})
    assert isinstance(record.source, Source) and record.with_source({"pid": 7}).source == {
        "rank": 2, "host": "a", "pid": 7,
    }


# ------------------------------------------------------------------ ranks= on every sink
@pytest.mark.parametrize(
    ("make", "default"),
    [
        (lambda p, **k: TensorBoardSink(p, **k), "main"),
        (lambda p, **k: WandbSink(project="x", dir=str(p), **k), "main"),
        (lambda p, **k: ConsoleSink(**k), "main"),
        (lambda p, **k: CSVSink(p / "m.csv", **k), "all"),
        (lambda p, **k: JSONLSink(p / "m.jsonl", **k), "all"),
        (lambda p, **k: PrometheusSink(port=None, **k), "all"),
        (lambda p, **k: MemorySink(**k), "all"),
        (lambda p, **k: LoggerSink(RecordingLogger(), **k), "all"),
    ],
)
def test_every_sink_takes_ranks_with_trackers_on_the_main_rank_by_default(
    make: object, default: str, tmp_path: Path
) -> None:
    assert make(tmp_path).ranks == default  # type: ignore[operator]
    assert make(tmp_path, ranks="all").ranks == "all"  # type: ignore[operator]
    with pytest.raises(ConfigError, match=r"ranks must be 'main' or 'all', got 'every'"):
        make(tmp_path, ranks="every")  # type: ignore[operator]


async def test_a_main_rank_sink_is_never_opened_on_another_rank(tmp_path: Path) -> None:
    tb = TensorBoardSink(tmp_path / "tb")
    csv_path = tmp_path / "rank{rank}.csv"
    monitor = Monitor([tb, CSVSink(csv_path, name="csv")], world=RANK1, close_sinks=True)
    monitor.watch(Collector(), name="c")
    await monitor.step()
    await monitor.stop()
    assert [c.label for c in monitor._channels] == ["csv"]
    assert not (tmp_path / "tb").exists(), "the main-rank sink touched the disk on rank 1"
    assert "sink/tensorboard/written" not in monitor.stats()


def test_rank_in_a_path_and_a_tracker_folder_per_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert CSVSink(tmp_path / "m_{rank}.csv").path == tmp_path / "m_2.csv"
    assert JSONLSink(str(tmp_path / "r{rank}" / "m.jsonl")).path == tmp_path / "r2" / "m.jsonl"
    assert TensorBoardSink(tmp_path, ranks="all").log_dir == str(tmp_path / "rank2")
    assert TensorBoardSink(tmp_path / "tb{rank}", ranks="all").log_dir == str(tmp_path / "tb2")
    assert TensorBoardSink(tmp_path).log_dir == str(tmp_path)


# ------------------------------------------------------------------ sinks keep the source
RECORDS = [
    Record("learner", 1, 10.0, {"learner/loss": 0.5}, {"rank": 1}),
    Record("learner", 1, 10.0, {"learner/loss": 0.25}, {"rank": 0, "host": "a,b"}),
    Record("plain", None, 11.0, {"plain/x": 1.0}),
]


async def test_jsonl_writes_source_when_there_is_one(tmp_path: Path) -> None:
    async with JSONLSink(tmp_path / "m.jsonl") as sink:
        await sink.write(RECORDS)
    lines = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [line.get("source") for line in lines] == [{"rank": 1}, {"rank": 0, "host": "a,b"}, None]


async def test_csv_source_column_reads_back_with_csv_reader_and_pandas(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    async with CSVSink(path, source=True) as sink:
        await sink.write(RECORDS)
    rows = list(csv.reader(path.open()))
    assert rows[0] == ["time", "name", "step", "metric", "value", "source"]
    assert [row[5] for row in rows[1:]] == ["rank=1", "rank=0;host=a,b", ""]
    pandas = pytest.importorskip("pandas")
    frame = pandas.read_csv(path, keep_default_na=False)
    assert list(frame["source"]) == ["rank=1", "rank=0;host=a,b", ""]
    assert list(frame["value"]) == [0.5, 0.25, 1.0]


async def test_csv_has_a_source_column_by_default_on_a_rank_of_several(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert CSVSink(tmp_path / "a.csv").header.startswith(b"time,name,step,metric,value\n")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert CSVSink(tmp_path / "b.csv").header == b"time,name,step,metric,value,source\n"
    assert CSVSink(tmp_path / "c.csv", source=False).header == b"time,name,step,metric,value\n"


async def test_prometheus_labels_carry_the_source() -> None:
    async with PrometheusSink(port=0) as sink:
        await sink.write(RECORDS)
        import asyncio

        page = (await asyncio.to_thread(urllib.request.urlopen, sink.url)).read().decode()
    assert 'monitor_async_loss{host="",rank="1",watch="learner"} 0.5' in page
    assert 'monitor_async_loss{host="a,b",rank="0",watch="learner"} 0.25' in page
    assert 'monitor_async_x{watch="plain"} 1.0' in page
