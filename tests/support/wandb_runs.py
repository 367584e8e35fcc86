"""An offline wandb run read back with wandb's own transaction-log reader (``wandb leet inspect``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def transaction_log(wandb_dir: Path) -> list[dict[str, Any]]:
    """The records of the single offline run under ``wandb_dir``, via ``wandb leet inspect --json``."""
    [run_dir] = (wandb_dir / "wandb").glob("offline-run-*")
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_dir)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def history(wandb_dir: Path) -> list[dict[str, Any]]:
    """The run's history rows (``run.log`` calls, or what ``sync_tensorboard`` read), in order."""
    return [r["history"]["item"] for r in transaction_log(wandb_dir) if r["type"] == "history"]
