"""The benchmark suite keeps running: tiny sizes, real monitors, no figure asserted.

The figures belong in ``benchmarks/RESULTS.md``; these tests only make sure
that every path a full run takes (our monitors, TorchRL's when it is
installed, the child-process runner, the results file, old against new)
still works. They run ``python -m benchmarks`` as a user does, and read
what it prints and the rows it writes with ``--json``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=timeout,
    )


def _rows(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    out = tmp_path / f"rows-{len(list(tmp_path.iterdir()))}.json"
    done = _bench(*args, "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    rows: list[dict[str, Any]] = json.loads(out.read_text(encoding="utf-8"))
    _sane(rows)
    return rows


def _sane(rows: list[dict[str, Any]]) -> None:
    assert rows
    for row in rows:
        assert math.isfinite(row["ours"]) and row["ours"] >= 0, row
        assert row["torchrl"] is None or (math.isfinite(row["torchrl"]) and row["torchrl"] >= 0), row


def test_core_scenario_measures_every_way_to_step_and_the_baseline(tmp_path: Path) -> None:
    rows = _rows(tmp_path, "--only", "core", "--set", "targets=5", "--set", "steps=5", "--set", "repeat=1")
    assert [r["measure"].split(",")[0] for r in rows] == [
        "SyncMonitor(background=False).step()",
        "await Monitor.step()",
        "SyncMonitor(background=True).step() via the portal",
    ]
    assert all(r["ours"] > 0 for r in rows)
    assert (rows[0]["torchrl"] is not None) == (importlib.util.find_spec("torchrl") is not None)
    assert rows[0]["goal"] == ["ratio", 1.0]


def test_hung_target_scenario_runs_and_stops_in_bounded_time(tmp_path: Path) -> None:
    rows = _rows(tmp_path, "--only", "hung_target", "--set", "seconds=0.3", "--no-torchrl")
    assert len(rows) == 2
    assert all(0.0 <= r["ours"] <= 1.0 and r["unit"] == "share" for r in rows)


@pytest.mark.parametrize("check", ["slot_share", "on_time", "bookkeeping_floor", "floor_goal", "plain_thread", "bare_floor"])
def test_the_suites_own_floors_and_helpers_do_what_they_claim(check: str) -> None:
    # slot_share: each slot counts once, a late poll leaves its slot empty; on_time: scenario 7's slots are read
    # from a target's first polls, so a first poll late at start-up moves no later slot; bookkeeping_floor: scenario 7's
    # least-bookkeeping floor makes the records floor's records and skips missed slots; floor_goal: a floor
    # goal holds ours to a multiple of the floor and survives JSON; plain_thread: scenario 6's plain thread
    # appends the rows CSVSink writes; bare_floor: the CSV floor polls every target into rows with rates
    done = _bench("--check", check, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"check {check}: ok"]


def test_a_failing_or_unknown_check_is_named() -> None:
    done = _bench("--check", "no_such_check", timeout=60)
    assert done.returncode == 2 and "no_such_check" in done.stderr


def test_entry_point_runs_a_scenario_in_a_child_and_writes_the_results(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    out.write_text("# old\n\n## History\n\nOne line per full run.\n\n- 2026-01-01 00:00 UTC, abc1234: kept\n")
    done = _bench("--quick", "--only", "memory", "--no-torchrl", "--output", str(out), timeout=100)
    assert done.returncode == 0, done.stderr
    assert "[memory]" in done.stdout and "goals met" in done.stdout
    text = out.read_text(encoding="utf-8")
    assert "| scenario | measure | ours | TorchRL | ratio | goal | met |" in text
    assert "stalled sink" in text
    assert "python -m benchmarks --quick --only memory --no-torchrl" in text
    # the run's raw output stays on the terminal, and how a scenario is measured in its module's docstring
    assert "```" not in text and "### How each scenario is measured" not in text
    assert "memory while a sink is stalled" not in text
    # the history is kept, and a quick run of one scenario adds no line to it
    history = text[text.index("## History"):]
    assert [t for t in history.splitlines() if t.startswith("- ")] == ["- 2026-01-01 00:00 UTC, abc1234: kept"]


def test_the_results_file_is_the_latest_table_its_notes_and_one_line_per_run() -> None:
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "| scenario | measure | ours | TorchRL | ratio | goal | met |" in text
    assert "### Notes on the figures" in text and "```" not in text
    history = text[text.index("## History"):].splitlines()
    assert any(t.startswith("- ") for t in history)


def test_file_and_trainer_scenarios_measure_ours_beside_the_floor(tmp_path: Path) -> None:
    files = _rows(tmp_path, "--only", "files", "--no-torchrl", "--set", "targets=3", "--set", "steps=5",
                  "--set", "torchrl_steps=2", "--set", "repeat=1")
    trainer = _rows(tmp_path, "--only", "trainer", "--no-torchrl", "--set", "targets=3", "--set", "seconds=0.3",
                    "--set", "repeat=1")
    floors = [r for r in files + trainer if r["measure"].startswith("floor:")]
    assert len(floors) == 7 and all(r["goal"] is None and r["ours"] > 0 and r["who"] == "floor" for r in floors)
    speeds = [r for r in floors[1:] if r["measure"].startswith("floor: speed kept")]
    assert len(speeds) == 2
    assert all(float(r["note"].rsplit(": ", 1)[1]) > 0.5 for r in speeds)  # the share of its slots each floor polled
    cpu = next(r for r in trainer if r["goal"] is not None and r["goal"][0] == "floor")
    assert cpu["unit"] == "us" and cpu["goal"] == ["floor", 1.1]
    assert cpu["floor"] is not None and cpu["floor"] > 0 and cpu["floor_ratio"] is not None
    # the goal's floor is the bare asyncio loop making the same polls and writes, measured beside it
    loop = next(r for r in floors if r["measure"] == "floor: CPU per poll, bare asyncio loop thread")
    plain = next(r for r in floors if r["measure"] == "floor: CPU per poll, plain polling thread, no event loop")
    assert math.isclose(cpu["floor"], loop["ours"], rel_tol=1e-6)
    silent = next(r for r in floors if "writing nothing" in r["measure"])  # the event loop's own floor, ratio beside
    assert math.isclose(silent["floor"], plain["ours"], rel_tol=1e-6) and silent["floor_ratio"] > 0
    # the least a monitor's writer must do beyond the bare loop: keep each tick's records and format them later
    queued = next(r for r in floors if "keeping each tick's records" in r["measure"])
    assert math.isclose(queued["floor"], loop["ours"], rel_tol=1e-6) and queued["floor_ratio"] > 0
    assert "ours / queued floor round by round" in cpu["note"]


def test_scale_scenario_measures_the_floors_beside_the_monitor(tmp_path: Path) -> None:
    rows = _rows(tmp_path, "--only", "scale", "--set", "targets=40", "--set", "interval=0.25", "--set", "warmup=0.3",
                 "--set", "seconds=0.5", "--set", "groups=4", "--no-torchrl")
    dropped = next(r for r in rows if r["measure"].startswith("records dropped"))
    assert dropped["goal"] == ["max", 0.0] and dropped["unit"] == "records"
    cpu = next(r for r in rows if r["goal"] is not None and r["goal"][0] == "floor")
    assert cpu["goal"] == ["floor", 1.5]
    # the goal reads the median of the per-round ratios of ours to the goal's floor, both measured in each round
    assert cpu["floor_ratio"] > 0 and "per-round ratios" in cpu["note"]
    plain = next(r["ours"] for r in rows if "plain" in r["measure"])
    assert [r["who"] for r in rows].count("floor") == 4
    records = next(r for r in rows if "checked records" in r["measure"])  # ours over it is in its note
    assert records["ours"] > 0 and records["floor"] == plain and "this floor" in records["note"]
    booked = next(r for r in rows if "bookkeeping" in r["measure"])  # the goal's floor
    assert booked["ours"] > 0 and booked["floor"] == plain and "this floor" in booked["note"]
    assert cpu["floor"] == booked["ours"]


def test_against_runs_both_trees_by_turns_and_prints_old_against_new(tmp_path: Path) -> None:
    # this tree against itself: the table, both trees' turns and their noise
    out = tmp_path / "against.md"
    done = _bench("--against", str(ROOT), "--only", "memory", "--quick", "--output", str(out), timeout=200)
    assert done.returncode == 0, done.stdout + done.stderr
    turns = [t.split(" (")[0] for t in done.stdout.splitlines() if t.startswith("[memory] turn")]
    assert turns == ["[memory] turn 1 old", "[memory] turn 1 new", "[memory] turn 2 new", "[memory] turn 2 old"]
    assert "| scenario | measure | old | new | new/old | noise old | noise new |" in done.stdout
    row = next(t for t in done.stdout.splitlines() if t.startswith("| 8. stalled sink"))
    cols = [c.strip() for c in row.split("|")]  # "", scenario, measure, old, new, new/old, noise old, noise new, ""
    assert len(cols) == 9, row
    for figure, noise in ((cols[3], cols[6]), (cols[4], cols[7])):
        # each tree's spread between its turns; none to give when the turns' median is 0 (no heap growth)
        assert noise.endswith("%") or (noise == "n/a" and float(figure.split()[0]) == 0), row
    assert "| scenario | measure | old | new |" in out.read_text(encoding="utf-8")


def test_against_a_directory_that_is_no_checkout_is_refused(tmp_path: Path) -> None:
    done = _bench("--against", str(tmp_path), "--only", "memory", timeout=60)
    assert done.returncode == 2 and "not a checkout" in done.stderr


def test_summarywriter_scenario_times_ours_beside_torchs_and_tensorboardxs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    rows = _rows(tmp_path, "--only", "summarywriter", "--quick", "--no-torchrl")
    goals = {r["measure"]: r["goal"] for r in rows}
    assert goals["ours: add_scalar at the caller, us a call (goal: <= 1.5 us)"] == ["max", 1.5]
    assert [r["goal"] for r in rows if r["measure"].startswith("ours vs")] == [["ratio", 20.0], ["ratio", 20.0]]
    written = next(r for r in rows if r["measure"].startswith("values in the event file"))
    assert written["ours"] == 1.0


@pytest.mark.timeout(600)
def test_a_long_scenario_writes_its_own_section_and_keeps_the_latest_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tyro")
    out = tmp_path / "RESULTS.md"
    out.write_text((ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8"), encoding="utf-8")
    before = out.read_text(encoding="utf-8")
    latest = before[before.index("## Latest run"):before.index("### Notes on the figures")]
    done = _bench("--quick", "--only", "cleanrl", "--no-torchrl", "--set", "total_timesteps=512", "--output", str(out),
                  timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text(encoding="utf-8")
    assert latest in text  # the latest full run is kept
    section = text[text.index("## Long scenarios"):text.index("## History")]
    assert "--only cleanrl" in section and "18. CleanRL ppo.py" in section
    assert text.count("## Long scenarios") == 1
