"""The reduction benchmark (scenario 11) still runs: two real gloo ranks, tiny sizes, no figure asserted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed")

ROOT = Path(__file__).resolve().parents[2]


def test_reduce_scenario_measures_the_main_ranks_cpu_with_and_without(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", "reduce", "--set", "ranks=2", "--set", "interval=0.02",
         "--set", "warmup=0.5", "--set", "seconds=1.0", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(out.read_text(encoding="utf-8"))
    assert [r["unit"] for r in rows] == ["us", "share"]
    assert all(math.isfinite(r["ours"]) for r in rows)
    assert "reduced polls" in rows[0]["note"]
