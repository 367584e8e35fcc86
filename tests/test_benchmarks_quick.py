"""The benchmark suite keeps running: tiny sizes, real monitors, no figure asserted.

The figures belong in ``benchmarks/RESULTS.md``; these tests only make sure
that every path a full run takes (our monitors, TorchRL's when it is
installed, the child-process runner, the results file) still works.
"""

from __future__ import annotations

import csv
import io
import math
import subprocess
import sys
from pathlib import Path

from benchmarks import bench_cadence, bench_core, bench_sinks, bench_trainer
from benchmarks._common import Bare, Row, TwelveKeys, has_torchrl, slot_share

ROOT = Path(__file__).resolve().parent.parent


def _sane(rows: list[Row]) -> None:
    assert rows
    for row in rows:
        assert math.isfinite(row.ours) and row.ours >= 0, row
        assert row.torchrl is None or (math.isfinite(row.torchrl) and row.torchrl >= 0), row


def test_core_scenario_measures_every_way_to_step_and_the_baseline() -> None:
    rows = bench_core.run(targets=5, steps=5, repeat=1, baseline=True)
    _sane(rows)
    assert [r.measure.split(",")[0] for r in rows] == [
        "SyncMonitor(background=False).step()",
        "await Monitor.step()",
        "SyncMonitor(background=True).step() via the portal",
    ]
    assert all(r.ours > 0 for r in rows)
    assert (rows[0].torchrl is not None) == has_torchrl()
    assert rows[0].goal == ("ratio", 1.0)


def test_hung_target_scenario_runs_and_stops_in_bounded_time() -> None:
    rows = bench_cadence.run_hung_target(seconds=0.3, baseline=False)
    _sane(rows)
    assert len(rows) == 2
    assert all(0.0 <= r.ours <= 1.0 and r.unit == "share" for r in rows)


def test_slot_share_counts_each_slot_once_and_late_polls_as_missed() -> None:
    # slots of 0.1 s from 0: on time, a burst in slot 1, nothing in slot 2, a late poll in slot 3
    assert slot_share([0.01, 0.11, 0.12, 0.13, 0.35], 0.0, 0.4, 0.1) == (3, 4)
    assert slot_share([], 0.0, 1.0, 0.5) == (0, 2)


def test_entry_point_runs_a_scenario_in_a_child_and_writes_the_results(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "memory", "--no-torchrl", "--output", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=100,
    )
    assert done.returncode == 0, done.stderr
    assert "[memory]" in done.stdout and "goals met" in done.stdout
    text = out.read_text(encoding="utf-8")
    assert "| scenario | measure | ours | TorchRL | ratio | goal | met |" in text
    assert "stalled sink" in text
    assert "python -m benchmarks --quick --only memory --no-torchrl" in text


def test_file_and_trainer_scenarios_measure_ours_beside_the_floor() -> None:
    files = bench_sinks.run(targets=3, steps=5, torchrl_steps=2, repeat=1, baseline=False)
    trainer = bench_trainer.run(targets=3, seconds=0.3, repeat=1, baseline=False)
    _sane(files + trainer)
    floors = [r for r in files + trainer if r.measure.startswith("floor:")]
    assert len(floors) == 2 and all(r.goal is None and r.ours > 0 and r.who == "floor" for r in floors)
    assert float(floors[1].note.rsplit(": ", 1)[1]) > 0.5  # the share of its slots the bare thread polled


def test_the_floor_polls_every_target_into_csv_rows_with_rates() -> None:
    bare = Bare([TwelveKeys(), TwelveKeys()])
    bare.rows()
    rows = list(csv.reader(io.StringIO(bare.rows().decode())))
    assert {row[1] for row in rows} == {"t0", "t1"}
    assert [row[3] for row in rows if row[1] == "t0"] == [
        f"t0/{key}" for key in TwelveKeys().stats()
    ] + ["t0/frames_per_second", "t0/writes_per_second"]
    assert float(next(row[4] for row in rows if row[3] == "t1/frames")) == 128.0
