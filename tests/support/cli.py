"""The command line as a user runs it: ``python -m monitor_async ...`` in a child process."""

from __future__ import annotations

import subprocess
import sys

CLI = [sys.executable, "-m", "monitor_async"]
"""The command that starts ``monitor-async`` with this interpreter."""


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs ``monitor-async ARGS`` to its end; its output is captured as text."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)
