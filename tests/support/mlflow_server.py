"""A real MLflow tracking server on 127.0.0.1 (``mlflow server``, SQLite store), for the tests and benchmarks.

``kill()`` ends it with SIGKILL (the whole process group it started: the
``mlflow server`` launcher and its uvicorn worker), ``start()`` brings it
back on the same port and the same store, as a crashed server restarted by
its supervisor would be.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from tests.support.network import free_port

__all__ = ["MlflowServer"]


class MlflowServer:
    """``mlflow server`` with a SQLite backend store and an artifact root under ``folder``.

    Args:
        folder: where the store (``mlflow.db``), the artifacts and the server's log go.
        startup: seconds to wait for ``/health`` to answer.
    """

    def __init__(self, folder: Path, startup: float = 120.0) -> None:
        self.folder = folder
        self.port = free_port()
        self.startup = startup
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> float:
        """Starts the server and waits until it answers; returns how long that took (seconds)."""
        began = time.monotonic()
        self.folder.mkdir(parents=True, exist_ok=True)
        log = open(self.folder / f"server-{self.starts}.log", "wb")  # noqa: SIM115 - kept by the child
        self.starts += 1
        command = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
            "--default-artifact-root", str(self.folder / "artifacts"),
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
        ]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        deadline = began + self.startup
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.process.returncode}; see {self.folder}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.url}/health", timeout=1) as reply:
                if reply.status == 200:
                    return time.monotonic() - began
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"mlflow server did not answer within {self.startup:g} s; see {self.folder}")

    def kill(self) -> None:
        """SIGKILL to the server's process group (its launcher and its worker); waits for the launcher."""
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def __enter__(self) -> MlflowServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.kill()
