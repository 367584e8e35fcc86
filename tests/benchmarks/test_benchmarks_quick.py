"""The benchmark suite keeps running: tiny sizes, real monitors, no figure asserted.

The figures belong in ``benchmarks/RESULTS.md``; these tests only make sure
that every path a full run takes (our monitors, TorchRL's when it is
installed, the child-process runner, the results file) still works.
"""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import bench_cadence, bench_core, bench_scale, bench_sinks, bench_trainer
from benchmarks._common import Bare, ClockedKeys, Row, TwelveKeys, has_torchrl, slot_share
from benchmarks.run import fmt_goal
from monitor_async import Record

ROOT = Path(__file__).resolve().parents[2]


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
    assert len(floors) == 6 and all(r.goal is None and r.ours > 0 and r.who == "floor" for r in floors)
    speeds = [r for r in floors[1:] if r.measure.startswith("floor: speed kept")]
    assert len(speeds) == 2
    assert all(float(r.note.rsplit(": ", 1)[1]) > 0.5 for r in speeds)  # the share of its slots each floor polled
    cpu = next(r for r in trainer if r.goal is not None and r.goal[0] == "floor")
    assert cpu.unit == "us" and cpu.floor is not None and cpu.floor > 0 and cpu.floor_ratio is not None
    silent = next(r for r in floors if "writing nothing" in r.measure)  # the event loop's own floor, ratio beside
    assert silent.floor == cpu.floor and silent.floor_ratio is not None and silent.floor_ratio > 0


def test_scale_scenario_measures_the_floors_before_the_monitor() -> None:
    rows = bench_scale.run(targets=40, interval=0.25, warmup=0.3, seconds=0.5, groups=4, baseline=False)
    _sane(rows)
    dropped = next(r for r in rows if r.measure.startswith("records dropped"))
    assert dropped.goal == ("max", 0.0) and dropped.unit == "records"
    cpu = next(r for r in rows if r.goal is not None and r.goal[0] == "floor")
    assert cpu.floor is not None and cpu.floor == next(r.ours for r in rows if "plain" in r.measure)
    assert [r.who for r in rows].count("floor") == 4
    records = next(r for r in rows if "checked records" in r.measure)  # ours over it is in its note
    assert records.ours > 0 and records.floor == cpu.floor and "this floor" in records.note
    booked = next(r for r in rows if "bookkeeping" in r.measure)
    assert booked.ours > 0 and booked.floor == cpu.floor and "this floor" in booked.note


def test_the_bookkeeping_floor_makes_the_records_floors_records_and_skips_missed_slots() -> None:
    from collections import deque

    parts = bench_scale._record_parts([bench_scale.Tiny() for _ in range(4)], 2)
    slots = bench_scale._slot_parts([bench_scale.Tiny() for _ in range(4)], 2, time.monotonic(), 0.5)
    assert [[s.name for s in group] for group in slots] == [[name for name, _, _ in group] for group in parts]
    made: deque[Record] = deque()
    floor: deque[Record] = deque()
    bench_scale._booked_group(slots[0], made, 0.5)
    bench_scale._record_group(parts[0], floor)
    assert [(r.name, r.metrics) for r in made] == [(r.name, r.metrics) for r in floor]
    # the second call of t0's stats(): the first named the keys
    assert made[0].metrics == {"t0/calls": 2.0, "t0/queue_depth": 3.0, "t0/latency_ms": 1.5, "t0/ok": 1.0}
    first = slots[0][0]
    assert first.slot == 1  # slot 1 is still ahead
    first.origin -= 1.2  # now 1.2 s into its slots: slot 2 (at 1.0 s) is past, slot 3 (1.5 s) ahead
    before = time.monotonic()
    bench_scale._booked_group(slots[0], made, 0.5)
    assert first.slot == 3  # slot 2 skipped, not caught up
    assert first.since >= before and len(made) == 4


def test_a_floor_goal_holds_ours_to_a_multiple_of_the_floor_and_survives_json() -> None:
    row = Row("s", "m", 12.0, unit="us", goal=("floor", 1.2), floor=10.0)
    assert row.over_floor == 1.2 and row.met is True
    assert Row("s", "m", 12.0, unit="us", goal=("floor", 1.2), floor=10.0, floor_ratio=1.3).met is False
    assert Row("s", "m", 12.0, unit="us", goal=("floor", 1.2)).met is None
    back = Row.from_json(json.loads(json.dumps(row.as_json())))
    assert back == row and back.floor == 10.0
    assert fmt_goal(row) == "<= 1.2x floor 10.0 us (now 1.20x)"


def test_the_plain_thread_floor_appends_the_rows_csvsink_writes(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    plain = bench_trainer.PlainThread([ClockedKeys(), ClockedKeys()], path, 0.02, every=0.03)
    plain.start()
    time.sleep(0.15)
    plain.stop()
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    assert rows[0] == ["time", "name", "step", "metric", "value"]
    assert {row[1] for row in rows[1:]} == {"t0", "t1"} and {row[2] for row in rows[1:]} == {""}
    keys = [f"t0/{key}" for key in TwelveKeys().stats()]
    t0 = [row[3] for row in rows[1:] if row[1] == "t0"]
    assert t0[:12] == keys  # the first poll: no rates yet
    assert t0[12:26] == [*keys, "t0/frames_per_second", "t0/writes_per_second"]
    assert float(next(row[4] for row in rows if row[3] == "t1/frames_per_second")) > 0


def test_the_floor_polls_every_target_into_csv_rows_with_rates() -> None:
    bare = Bare([TwelveKeys(), TwelveKeys()])
    bare.rows()
    rows = list(csv.reader(io.StringIO(bare.rows().decode())))
    assert {row[1] for row in rows} == {"t0", "t1"}
    assert [row[3] for row in rows if row[1] == "t0"] == [
        f"t0/{key}" for key in TwelveKeys().stats()
    ] + ["t0/frames_per_second", "t0/writes_per_second"]
    assert float(next(row[4] for row in rows if row[3] == "t1/frames")) == 128.0


def test_ticks_probe_times_a_tick_of_the_timers_beside_scenario_7s_floors() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.ticks", "--targets", "400", "--rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=100,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["warm", "cold"]
    for line in lines:
        figures = [part.rsplit(" µs", 1)[0].rsplit(" ", 1) for part in line.split(": ", 1)[1].split(", ")]
        assert [name for name, _ in figures] == [
            "plain thread", "records floor", "bookkeeping floor", "a tick of the timers",
        ], line
        assert all(float(us) > 0 for _, us in figures), line
