"""Every Python block of the README and of docs/ runs as written.

Each ```python block is run on its own, in a fresh interpreter, in an empty
folder (so the files it writes land there), and must exit 0. A block must
define everything it uses: nothing is shared between blocks. A block whose
first line is ``# needs: pkg`` is skipped where ``pkg`` does not import
(AgileRL's page: its own venv runs it, see tests/integrations/test_agilerl.py).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```\s*$", re.S | re.M)


def _blocks() -> list[tuple[str, int, str]]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((str(page.relative_to(ROOT)), line, match.group(1)))
    return found


BLOCKS = _blocks()


def test_the_pages_have_python_examples() -> None:
    assert len(BLOCKS) >= 10, [(page, line) for page, line, _ in BLOCKS]


@pytest.mark.parametrize(("page", "line", "code"), BLOCKS, ids=[f"{p}:{n}" for p, n, _ in BLOCKS])
def test_example_runs_as_written(page: str, line: int, code: str, tmp_path: Path) -> None:
    assert "..." not in code.replace('"..."', ""), f"{page}:{line} holds a '...' placeholder"
    needs = re.match(r"# needs: (.+)\n", code)
    if needs is not None:
        for module in needs.group(1).split(","):
            if importlib.util.find_spec(module.strip()) is None:
                pytest.skip(f"{page}:{line} needs {module.strip()}")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, f"{page}:{line} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
