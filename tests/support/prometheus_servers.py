"""A real Prometheus and a real Alertmanager on 127.0.0.1, each with a generated config and a store of its own.

The binaries are the Debian packages' (``prometheus``, ``prometheus-alertmanager``) or the upstream
release's (``alertmanager``). Where one is missing, `binary` skips the tests that need it, except
in CI (``CI`` set, as ``.ci/run`` does), which installs them: there a missing binary fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import pytest

from tests.support.network import free_port

__all__ = ["AlertmanagerServer", "PrometheusServer", "binary", "eventually"]

T = TypeVar("T")


def binary(package: str, *names: str) -> str:
    """The path of the first of ``names`` on ``PATH``; else skips the test (fails it in CI), naming ``package``."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    reason = f"needs {names[0]} on PATH (apt-get install {package})"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI installs it (.ci/run), so a skip there would hide that these tests never ran")
    pytest.skip(reason)


async def eventually(
    read: Callable[[], T], holds: Callable[[T], object], what: str, timeout: float = 60.0, period: float = 0.2
) -> T:
    """Calls the blocking ``read()`` on a thread until ``holds(answer)``; returns that answer (fails after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = await asyncio.to_thread(read)
        if holds(answer):
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; the last answer: {answer!r}")
        await asyncio.sleep(period)


class _Server:
    """A server binary on ``127.0.0.1:<free port>`` started from ``folder``; ended by its PID."""

    package = ""
    names: tuple[str, ...] = ()

    def __init__(self, folder: Path, startup: float = 60.0) -> None:
        self.executable = binary(self.package, *self.names)
        self.folder = folder
        self.port = free_port()
        self.startup = startup
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arguments(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        """Starts the server and waits until ``/-/ready`` answers 200."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                [self.executable, *self.arguments()], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + self.startup
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.names[0]} exited with {self.process.returncode}: see {self.folder / 'server.log'}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as reply:
                if reply.status == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.names[0]} was not ready within {self.startup:g} s: see {self.folder / 'server.log'}")

    def stop(self) -> None:
        """SIGTERM to the server's PID (SIGKILL if it lingers); waits for it."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=15)

    def get(self, path: str, **query: str) -> Any:
        """``GET path?query`` as JSON (blocks the caller)."""
        address = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        with urllib.request.urlopen(address, timeout=10) as reply:
            return json.load(reply)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.stop()


class PrometheusServer(_Server):
    """``prometheus`` scraping ``targets`` (``{job: port on 127.0.0.1}``) every ``interval`` seconds."""

    package = "prometheus"
    names = ("prometheus",)

    def __init__(self, folder: Path, targets: Mapping[str, int], interval: float = 1.0) -> None:
        super().__init__(folder)
        self.targets = dict(targets)
        self.interval = interval

    def arguments(self) -> list[str]:
        every = f"{int(self.interval * 1000)}ms"
        config = {  # JSON is YAML
            "global": {"scrape_interval": every, "scrape_timeout": every, "evaluation_interval": every},
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                for job, port in self.targets.items()
            ],
        }
        (self.folder / "prometheus.yml").write_text(json.dumps(config, indent=2))
        return [
            f"--config.file={self.folder / 'prometheus.yml'}", f"--storage.tsdb.path={self.folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """An instant query through ``/api/v1/query``: ``[(labels, value), ...]`` of the vector it returns."""
        answer = self.get("/api/v1/query", query=promql)
        assert answer["status"] == "success", answer
        return [(series["metric"], float(series["value"][1])) for series in answer["data"]["result"]]


class AlertmanagerServer(_Server):
    """``alertmanager`` routing every alert to a receiver that sends nothing, grouped by ``group_by``."""

    package = "prometheus-alertmanager"
    names = ("prometheus-alertmanager", "alertmanager")

    def __init__(self, folder: Path, group_by: Sequence[str] = ("alertname",), resolve_timeout: str = "5m",
                 port: int | None = None) -> None:
        super().__init__(folder)
        self.group_by = list(group_by)
        self.resolve_timeout = resolve_timeout
        if port is not None:
            self.port = port

    def arguments(self) -> list[str]:
        config = {  # JSON is YAML
            "global": {"resolve_timeout": self.resolve_timeout},
            "route": {"receiver": "nobody", "group_by": self.group_by, "group_wait": "1s", "group_interval": "1s",
                      "repeat_interval": "1h"},
            "receivers": [{"name": "nobody"}],
        }
        (self.folder / "alertmanager.yml").write_text(json.dumps(config, indent=2))
        return [
            f"--config.file={self.folder / 'alertmanager.yml'}", f"--storage.path={self.folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=",
        ]

    def alerts(self) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts``: the alerts active now (a resolved one is no longer listed)."""
        answer: list[dict[str, Any]] = self.get("/api/v2/alerts")
        return answer

    def groups(self) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts/groups``: the alerts as the route groups them."""
        answer: list[dict[str, Any]] = self.get("/api/v2/alerts/groups")
        return answer

