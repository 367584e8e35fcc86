"""Real ranks: torch.distributed with gloo on 127.0.0.1, two and four processes, one of them frozen then killed.

Each rank runs tests/support/rank_worker.py: a monitor with a per-rank JSONL file, a
main-rank TensorBoard folder and ``reduce=`` across the ranks through the
job's TCPStore. Nothing here is mocked: the ranks are processes, the store is
torch's, the freeze is SIGSTOP and the death SIGKILL.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch.distributed")

from tests.support.checks import live_jsonl
from tests.support.network import free_port

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "support" / "rank_worker.py"
INTERVAL = 0.05


class Job:
    """``size`` rank processes of one gloo job, writing under ``out``."""

    def __init__(self, out: Path, size: int, *extra: str) -> None:
        self.out = out
        port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        for rank in range(size):
            env = {
                **os.environ, "RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(rank),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            }
            self.procs.append(subprocess.Popen(
                [sys.executable, str(WORKER), str(out), str(INTERVAL), *extra], env=env,
                stdout=(out / f"out{rank}.txt").open("wb"), stderr=subprocess.STDOUT,
            ))

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            for rank, proc in enumerate(self.procs):
                if proc.poll() not in (None, 0, -signal.SIGKILL):
                    raise AssertionError(f"rank {rank} failed:\n{(self.out / f'out{rank}.txt').read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.02)

    def ready(self) -> None:
        self.wait_for("every rank to start", lambda: all((self.out / f"ready{r}").exists() for r in range(len(self.procs))))

    def records(self, rank: int) -> list[dict[str, Any]]:
        return [line for line in live_jsonl(self.out / f"rank{rank}.jsonl") if "name" in line]

    def alerts(self, rank: int) -> list[dict[str, Any]]:
        """The alert events in rank ``rank``'s JSONL file."""
        return [line["alert"] for line in live_jsonl(self.out / f"rank{rank}.jsonl") if "alert" in line]

    def reduced(self) -> list[dict[str, float]]:
        return [r["metrics"] for r in self.records(0) if r["name"] == "learner/all"]

    def stop(self, alive: list[int], timeout: float = 60.0) -> None:
        (self.out / "stop").write_text("")
        for rank in alive:
            try:
                code = self.procs[rank].wait(timeout)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"rank {rank} did not stop within {timeout} s") from None
            assert code == 0, f"rank {rank} exited {code}:\n{(self.out / f'out{rank}.txt').read_text()}"

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def times(self, rank: int) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.out / f"times{rank}.json").read_text())
        return data


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Callable[..., Job]]:
    jobs: list[Job] = []

    def start(size: int, *extra: str) -> Job:
        jobs.append(Job(tmp_path, size, *extra))
        return jobs[-1]

    yield start
    for started in jobs:
        started.kill_all()


def _share(times: list[float], start: float, end: float) -> float:
    """Share of INTERVAL slots in [start, end) with a poll (the slot grid of the first poll in it)."""
    inside = [t for t in times if start <= t < end]
    slots = int((end - start) / INTERVAL)
    return len({int((t - start) // INTERVAL) for t in inside}) / slots


def _longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest time without a poll in [start, end)."""
    inside = [start, *(t for t in times if start <= t < end), end]
    return max(b - a for a, b in itertools.pairwise(inside))


def _kept_cadence(times: list[float], start: float, end: float, frozen: float) -> None:
    """The rank polled on through the other's freeze and death.

    A monitor that waited for the frozen rank would go at least ``frozen``
    seconds without a poll; a busy machine (this suite shares two cores)
    only makes polls a little late, so the share of slots is held loosely.
    """
    gap = _longest_gap(times, start, end)
    assert gap < frozen / 2, f"no poll for {gap:.2f} s while the other rank was frozen for {frozen} s"
    share = _share(times, start, end)
    assert share >= 0.75, f"kept only {share:.2f} of its slots"


def test_two_ranks_reduce_through_the_store_and_keep_the_tracker_on_the_main_rank(
    job: Callable[[int], Job], tmp_path: Path,
) -> None:
    two = job(2)
    two.ready()
    assert json.loads((tmp_path / "ready0").read_text())["found"] == "torch.distributed"
    two.wait_for("a reduction over both ranks", lambda: any(m["learner/all/ranks"] == 2 for m in two.reduced()))
    two.stop([0, 1])
    full = next(m for m in two.reduced() if m["learner/all/ranks"] == 2)
    assert full["learner/all/loss"] == 0.5
    assert full["learner/all/frames"] == 300.0
    assert full["learner/all/step_time"] == 0.02
    assert full["learner/all/stale"] == 0.0
    for rank in (0, 1):
        records = two.records(rank)
        assert {r["source"]["rank"] for r in records} == {rank}
        assert {r["name"] for r in records} == ({"learner", "learner/all"} if rank == 0 else {"learner"})
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(events) == 1, "only the main rank writes the TensorBoard folder"
    pid0 = json.loads((tmp_path / "ready0").read_text())["pid"]
    assert f".{pid0}." in events[0].name


def test_four_ranks_merge_their_distributions_into_one_on_the_main_rank(job: Callable[[int], Job]) -> None:
    four = job(4)
    four.ready()
    four.wait_for("a reduction over four ranks", lambda: any(m["learner/all/ranks"] == 4 for m in four.reduced()))
    four.stop([0, 1, 2, 3])
    full = next(m for m in four.reduced() if m["learner/all/ranks"] == 4)
    # each rank's 100 returns (100 * rank + 0..99): the merged distribution is 0..399, exact in count, sum and extremes
    assert full["learner/all/returns/count"] == 400.0
    assert full["learner/all/returns/mean"] == 199.5
    assert (full["learner/all/returns/min"], full["learner/all/returns/max"]) == (0.0, 399.0)
    for q, exact in [(50, 199.5), (90, 359.1), (99, 395.01)]:  # from the merged buckets: within a bucket's width
        assert abs(full[f"learner/all/returns/p{q}"] - exact) <= exact * 0.05, q
    own = [r["metrics"] for r in four.records(2) if r["name"] == "learner"]
    assert own[0]["learner/returns/min"] == 200.0 and own[0]["learner/returns/count"] == 100.0


def test_a_frozen_then_killed_rank_delays_no_other_rank(job: Callable[[int], Job]) -> None:
    four = job(4)
    four.ready()
    four.wait_for("a reduction over four ranks", lambda: any(m["learner/all/ranks"] == 4 for m in four.reduced()))
    frozen_at = time.monotonic()
    four.procs[2].send_signal(signal.SIGSTOP)
    four.wait_for(
        "rank 2 left out as stale",
        lambda: any(m["learner/all/ranks"] == 3 and m["learner/all/stale"] == 1 for m in four.reduced()),
    )
    left_out = next(m for m in four.reduced() if m["learner/all/stale"] == 1)
    assert left_out["learner/all/loss"] == pytest.approx((0 + 1 + 3) / 3)
    assert left_out["learner/all/frames"] == 100 + 200 + 400
    time.sleep(1.0)  # frozen a while longer: the window the cadence below is measured on
    four.procs[2].kill()
    four.procs[2].wait()
    time.sleep(1.0)  # and dead a while
    ended_at = time.monotonic()
    four.stop([0, 1, 3])
    for rank in (0, 1, 3):
        data = four.times(rank)
        _kept_cadence(data["times"], frozen_at, ended_at, frozen=ended_at - frozen_at - 1.0)
        assert data["stop_seconds"] < 10


def test_the_store_host_frozen_and_killed_delays_no_other_rank(job: Callable[[int], Job]) -> None:
    two = job(2)
    two.ready()
    two.wait_for("a reduction over both ranks", lambda: any(m["learner/all/ranks"] == 2 for m in two.reduced()))
    frozen_at = time.monotonic()
    two.procs[0].send_signal(signal.SIGSTOP)  # rank 0 hosts the job's TCPStore: rank 1's publishing hangs
    time.sleep(1.5)
    two.procs[0].kill()
    two.procs[0].wait()
    time.sleep(1.0)
    ended_at = time.monotonic()
    two.stop([1])
    data = two.times(1)
    _kept_cadence(data["times"], frozen_at, ended_at, frozen=1.5)
    assert data["stop_seconds"] < 10
    assert len(two.records(1)) >= 0.9 * (ended_at - frozen_at) / INTERVAL, "rank 1 stopped writing"


def test_the_main_rank_reports_a_stalled_rank_then_a_killed_one_naming_each_rank(
    job: Callable[..., Job], tmp_path: Path,
) -> None:
    """Alert rules on a reduce= watch: evaluated on rank 0 from the board, with no collective, events naming the rank."""
    after = 1.0
    three = job(3, str(after))
    three.ready()
    three.wait_for("a reduction over three ranks", lambda: any(m["learner/all/ranks"] == 3 for m in three.reduced()))
    stalled_at = time.time()
    (tmp_path / "stall1").write_text("")

    def fired(rule: str) -> list[dict[str, Any]]:
        return [e for e in three.alerts(0) if e["rule"] == rule and e["state"] == "firing"]

    three.wait_for("rank 1's stall on rank 0", lambda: bool(fired("stalled learner/frames")))
    stall = fired("stalled learner/frames")[0]
    assert stall["source"]["rank"] == 1 and stall["watch"] == "learner" and stall["metric"] == "learner/frames"
    assert "on rank 1" in stall["message"]
    # the last increase may land up to a poll after the file appears; the board adds a publish interval
    assert stall["time"] - stalled_at <= after + 2 * INTERVAL + 1.0, stall
    killed_at = time.time()
    three.procs[2].kill()
    three.procs[2].wait()
    three.wait_for("rank 2 quiet on rank 0", lambda: bool(fired("quiet learner")))
    quiet = fired("quiet learner")[0]
    assert quiet["source"]["rank"] == 2 and "rank 2" in quiet["message"]
    assert quiet["time"] - killed_at <= after + 2 * INTERVAL + 1.0, quiet
    three.stop([0, 1])
    assert {e["source"]["rank"] for e in three.alerts(0)} <= {1, 2}, "rank 0 itself is fine"
    assert three.alerts(1) == [] and three.alerts(2) == [], "other ranks leave a reduced watch's rules to rank 0"
