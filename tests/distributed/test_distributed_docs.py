"""docs/distributed.md runs as written: each ```python block in a fresh interpreter, the torchrun command as shown."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "distributed.md"
BLOCKS = re.findall(r"^```(python|bash)\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), re.S | re.M)
PYTHON = [code for kind, code in BLOCKS if kind == "python"]
BASH = [code for kind, code in BLOCKS if kind == "bash"]


def _env() -> dict[str, str]:
    return {
        **os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def test_the_page_has_its_examples() -> None:
    assert len(PYTHON) == 5 and len(BASH) == 1
    assert "torchrun" in BASH[0] and "ray.init" in PYTHON[-1]


@pytest.mark.parametrize("index", range(len(PYTHON)))
def test_python_block_runs_as_written(index: int, tmp_path: Path) -> None:
    code = PYTHON[index]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    if "collectors/all" in code and "ray" not in code:
        assert "'collectors/all/targets': 4.0" in done.stdout
        assert "'collectors/all/frames': 1000.0" in done.stdout
    if "ray.init" in code:
        assert "'collectors/all/frames': 100.0" in done.stdout
        assert "['host', 'node', 'pid']" in done.stdout
    if "learner/all" in code:
        assert "'learner/all/ranks': 1.0" in done.stdout
    if "pandas" in code:
        assert "rank=1" in done.stdout


def test_the_torchrun_example_runs_as_shown(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    command = shlex.split(BASH[0].strip())
    assert command[0] == "torchrun"
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun is not installed beside this Python")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    done = subprocess.run(
        [str(torchrun), *command[1:]], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    reduced = json.loads(done.stdout.strip().splitlines()[-1])
    assert reduced["learner/all/ranks"] == 2.0 and reduced["learner/all/stale"] == 0.0
    out = tmp_path / "runs" / "ddp"
    for rank in (0, 1):
        records = [json.loads(line) for line in (out / f"rank{rank}.jsonl").read_text().splitlines()]
        assert {r["source"]["rank"] for r in records} == {rank}
    assert len(list((out / "tb").glob("events.out.tfevents.*"))) == 1
    assert not list(out.glob("rank*/")), "TensorBoard stays on the main rank"
