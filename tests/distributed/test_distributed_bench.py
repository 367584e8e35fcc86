"""The reduction benchmark (scenario 11) still runs: two real gloo ranks, tiny sizes, no figure asserted."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch.distributed")

from benchmarks import bench_distributed


def test_reduce_scenario_measures_the_main_ranks_cpu_with_and_without() -> None:
    rows = bench_distributed.run_reduce(ranks=2, interval=0.02, warmup=0.5, seconds=1.0)
    assert [r.unit for r in rows] == ["us", "share"]
    assert all(math.isfinite(r.ours) for r in rows)
    assert "reduced polls" in rows[0].note
