"""examples/async_server.py: started as a real server on a free loopback port, scraped over HTTP."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
pytest.importorskip("psutil")

from tests.support.network import free_port, scrape

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "async_server.py"


def wait_for(base: str, server: subprocess.Popen[str], ready: tuple[str, str], timeout: float = 60.0) -> dict[
    tuple[str, str | None], float
]:
    deadline = time.monotonic() + timeout
    while True:
        if server.poll() is not None:
            raise AssertionError(f"the example exited with {server.returncode}: {server.communicate()[1]}")
        try:
            samples = scrape(base + "/metrics")
            if ready in samples:
                return samples
        except (urllib.error.URLError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"the example did not serve {ready} within {timeout}s")
        time.sleep(0.1)


@pytest.fixture
def server() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--port", str(port), "--poll-interval", "0.2", "--clients", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)


def test_example_serves_the_watched_metrics_and_shuts_down_cleanly(
    server: tuple[str, subprocess.Popen[str]],
) -> None:
    base, process = server
    samples = wait_for(base, process, ("monitor_async_requests", "inference"))
    assert samples[("monitor_async_requests", "inference")] == 0.0
    assert samples[("monitor_async_process_rss_bytes", "system")] > 0
    assert samples[("monitor_async_memory_available_bytes", "system")] > 0
    assert ("monitor_async_polls", "monitor") in samples

    for observation in ([0.1, -0.3, 0.7], [1.0, 2.0], [0.0]):
        request = urllib.request.Request(
            base + "/act", data=json.dumps({"observation": observation}).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert 0 <= json.loads(response.read())["action"] < 4

    # the monitor polls on the server's loop: the three requests show up in a later scrape
    deadline = time.monotonic() + 30
    while scrape(base + "/metrics")[("monitor_async_requests", "inference")] < 3.0:
        assert time.monotonic() < deadline, "the served requests never reached /metrics"
        time.sleep(0.1)
    final = scrape(base + "/metrics")
    assert final[("monitor_async_requests", "inference")] == 3.0
    assert final[("monitor_async_batches", "inference")] >= 1.0
    assert final[("monitor_async_polls", "monitor")] > samples[("monitor_async_polls", "monitor")]

    process.send_signal(signal.SIGTERM)  # uvicorn runs the lifespan shutdown: monitor.stop()
    out, err = process.communicate(timeout=30)
    # uvicorn re-raises the signal it handled once shutdown is complete
    assert process.returncode in (0, -signal.SIGTERM), err
    assert re.search(r"monitor stopped: [1-9]\d* polls, 0 records dropped", out), (out, err)
