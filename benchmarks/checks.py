"""The suite's checks of its own measuring code: ``python -m benchmarks --check [NAME,...]``.

A floor is only worth its goal if it does the work it claims: these checks
run each floor and helper on a few targets and assert what it made. Each
prints ``check NAME: ok``, or the failed assertion (and the run exits 1).
"""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from monitor_async import Alert, Record

from . import bench_alerts, bench_scale, bench_trainer
from ._common import Bare, ClockedKeys, Row, TwelveKeys, on_time, slot_share
from .report import fmt_goal

__all__ = ["CHECKS"]


def slot_share_counts_each_slot_once() -> None:
    """Each slot counts once; a late poll leaves its own slot empty."""
    # slots of 0.1 s from 0: on time, a burst in slot 1, nothing in slot 2, a late poll in slot 3
    assert slot_share([0.01, 0.11, 0.12, 0.13, 0.35], 0.0, 0.4, 0.1) == (3, 4)
    assert slot_share([], 0.0, 1.0, 0.5) == (0, 2)


def on_time_reads_the_slots_from_the_first_polls() -> None:
    """A first poll made late at start-up moves no later slot; a late poll in the window is counted late."""
    # slots at 0, 1, 2...: the first poll 60 ms late, then on its slots, the one at 5 s 80 ms late
    times = [0.06, 1.0, 2.0, 3.0, 4.0, 5.08, 6.0, 7.0]
    assert on_time(times, 0.5, 7.5, 1.0, 0.05) == (5, 6), on_time(times, 0.5, 7.5, 1.0, 0.05)
    # two slots skipped after start-up: the slots are still read from the polls that came
    assert on_time([0.0, 3.0, 4.0, 5.0], 0.5, 5.5, 1.0, 0.05) == (2, 4)
    assert on_time([], 0.0, 1.0, 0.5, 0.05) == (0, 0)


def bookkeeping_floor_makes_the_records_floors_records() -> None:
    """Scenario 7's bookkeeping floor makes the records floor's records and skips missed slots."""
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


def floor_goal_survives_json() -> None:
    """A floor goal holds ours to a multiple of the floor, and a row survives its JSON line."""
    row = Row("s", "m", 12.0, unit="us", goal=("floor", 1.2), floor=10.0)
    assert row.over_floor == 1.2 and row.met is True
    assert Row("s", "m", 12.0, unit="us", goal=("floor", 1.2), floor=10.0, floor_ratio=1.3).met is False
    assert Row("s", "m", 12.0, unit="us", goal=("floor", 1.2)).met is None
    back = Row.from_json(json.loads(json.dumps(row.as_json())))
    assert back == row and back.floor == 10.0
    assert fmt_goal(row) == "<= 1.2x floor 10.0 us (now 1.20x)", fmt_goal(row)


def plain_thread_appends_csvsink_rows() -> None:
    """Scenario 6's plain-thread floor appends the rows our CSVSink writes, rates included."""
    with tempfile.TemporaryDirectory(prefix="monitor-async-check-") as tmp:
        path = Path(tmp) / "plain.csv"
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


def bare_floor_polls_into_csv_rows_with_rates() -> None:
    """The CSV scenarios' floor polls every target into CSV rows, with the counters' rates."""
    bare = Bare([TwelveKeys(), TwelveKeys()])
    bare.rows()
    rows = list(csv.reader(io.StringIO(bare.rows().decode())))
    assert {row[1] for row in rows} == {"t0", "t1"}
    assert [row[3] for row in rows if row[1] == "t0"] == [
        f"t0/{key}" for key in TwelveKeys().stats()
    ] + ["t0/frames_per_second", "t0/writes_per_second"]
    assert float(next(row[4] for row in rows if row[3] == "t1/frames")) == 128.0


def learner_targets_carry_two_default_counters() -> None:
    """Scenario 14's RL-like targets carry two counters the default stalled rules watch; scenario 7's none."""
    stalled = [rule.target for rule in Alert.defaults() if rule.kind == "stalled"]

    def watched(target: bench_scale.Tiny) -> list[str]:
        return sorted(key for key in target.stats() for rule in stalled if fnmatch.fnmatchcase(f"t0/{key}", rule))

    assert watched(bench_alerts.Learner()) == ["frames", "write_count"], watched(bench_alerts.Learner())
    assert watched(bench_scale.Tiny()) == []


CHECKS: dict[str, Callable[[], None]] = {
    "slot_share": slot_share_counts_each_slot_once,
    "on_time": on_time_reads_the_slots_from_the_first_polls,
    "bookkeeping_floor": bookkeeping_floor_makes_the_records_floors_records,
    "floor_goal": floor_goal_survives_json,
    "plain_thread": plain_thread_appends_csvsink_rows,
    "bare_floor": bare_floor_polls_into_csv_rows_with_rates,
    "alerts_learner": learner_targets_carry_two_default_counters,
}
"""Every check by name, in the order ``--check`` runs them."""
