"""Alert.unhealthy: a TorchRL-style server with health(), in a manager process that reports trouble, then is killed."""

from __future__ import annotations

import os
import signal
import time
from multiprocessing.managers import BaseManager
from typing import Any

from monitor_async import Alert, Monitor
from monitor_async.backends import MemorySink
from tests.support.checks import wait_until
from tests.support.sinks import Events

INTERVAL = 0.05


class InferenceServer:
    """Lives in the manager's process; its ``health()`` has TorchRL's fields."""

    def __init__(self) -> None:
        self.error: str | None = None

    def stats(self) -> dict[str, Any]:
        return {"requests": time.monotonic()}

    def health(self) -> dict[str, Any]:
        return {"process_alive": True, "pid": os.getpid(), "exitcode": None, "control_error": self.error}

    def fail(self, error: str | None) -> None:
        self.error = error


class ServerManager(BaseManager):
    pass


ServerManager.register("InferenceServer", InferenceServer, exposed=("stats", "health", "fail"))


async def test_a_control_error_fires_resolves_and_a_killed_server_fires_again() -> None:
    manager = ServerManager()
    manager.start()
    try:
        server: Any = manager.InferenceServer()  # type: ignore[attr-defined]
        events = Events()
        monitor = Monitor(MemorySink(), poll_interval=INTERVAL, notify=events, on_error="ignore",
                          alerts=[Alert.unhealthy("server", timeout=2.0, severity="critical")])
        monitor.watch(server, name="server")
        async with monitor:
            await wait_until(lambda: monitor.stats()["records"] >= 3)
            assert events == []
            server.fail("pipe closed")
            await wait_until(lambda: bool(events), what="the control error")
            assert events[0].state == "firing" and events[0].severity == "critical"
            assert "control_error='pipe closed'" in events[0].message
            server.fail(None)
            await wait_until(lambda: len(events) == 2, what="healthy again")
            assert events[1].state == "resolved"
            os.kill(server.health()["pid"], signal.SIGKILL)
            killed = time.monotonic()
            await wait_until(lambda: len(events) == 3, what="the killed server")
            assert time.monotonic() - killed < 2.0 + 2 * INTERVAL + 1.0
            assert events[2].state == "firing" and "unhealthy" in events[2].message
    finally:
        manager.shutdown()
