"""wandb's offline runs read back with wandb's own transaction-log reader (``wandb leet inspect --json``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["transaction_log"]


def transaction_log(run_dir: Path) -> list[dict[str, Any]]:
    """The records of the offline run in ``run_dir`` (an ``offline-run-*`` folder), in order."""
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_dir)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]
