"""One labelling rule for sinks: ``sink/<label>/...`` in ``Monitor.stats()`` is the same wherever the sink runs.

The label is the sink's ``name=`` when given, else its class name lowercased without a
trailing ``sink`` (``CSVSink`` -> ``csv``), made unique with ``_1``, ``_2``...
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from monitor_async import Monitor, Record
from monitor_async.backends import CSVSink, JSONLSink, MemorySink, TensorBoardSink
from tests.support.targets import Counter


def _labels(stats: dict[str, float], prefix: str = "sink/") -> set[str]:
    return {key[len(prefix):].split("/", 1)[0] for key in stats if key.startswith(prefix)}


class ParquetSink:
    """A user's own sink, by its class name."""

    async def write(self, records: Sequence[Record]) -> None:
        pass

    async def flush(self) -> None:
        pass

    async def close(self) -> None:
        pass


class Recorder(ParquetSink):
    """A user's sink whose class name does not end in ``Sink``."""


async def test_built_in_and_user_sinks_are_labelled_by_their_class_name_without_sink(tmp_path: Path) -> None:
    sinks = [CSVSink(tmp_path / "m.csv"), JSONLSink(tmp_path / "m.jsonl"), TensorBoardSink(tmp_path / "tb"),
             MemorySink(), ParquetSink(), Recorder()]
    monitor = Monitor(sinks, close_sinks=True)
    monitor.watch(Counter(), name="c")
    async with monitor:
        await monitor.step()
        stats = monitor.stats()
    assert _labels(stats) == {"csv", "jsonl", "tensorboard", "memory", "parquet", "recorder"}
    assert stats["sink/csv/written"] >= 1


async def test_a_name_given_by_the_user_wins_and_repeats_are_numbered(tmp_path: Path) -> None:
    sinks = [CSVSink(tmp_path / "a.csv", name="train"), CSVSink(tmp_path / "b.csv"), CSVSink(tmp_path / "c.csv")]
    monitor = Monitor(sinks, close_sinks=True)
    monitor.watch(Counter(), name="c")
    async with monitor:
        await monitor.step()
        assert _labels(monitor.stats()) == {"train", "csv", "csv_1"}


def test_the_demo_labels_its_sinks_as_user_code_does(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "monitor_async", "demo", "--seconds", "2", "--logdir", str(tmp_path), "--no-console"],
        check=True, capture_output=True, timeout=120,
    )
    (jsonl,) = tmp_path.glob("*/metrics.jsonl")
    keys: set[str] = set()
    for line in jsonl.read_text().splitlines():
        row = json.loads(line)
        if isinstance(row.get("metrics"), dict):
            keys.update(row["metrics"])
    assert _labels(dict.fromkeys(keys, 0.0), prefix="monitor/sink/") == {"csv", "jsonl", "tensorboard"}
