"""SystemStats against the real host: real psutil, real threads, files, sockets and processes."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("psutil")

from monitor_async import Monitor
from monitor_async.backends import MemorySink
from monitor_async.targets import SystemStats

HOST_KEYS = {
    "cpu/percent",
    "memory/used_bytes",
    "memory/available_bytes",
    "memory/percent",
    "process/rss_bytes",
    "process/cpu_percent",
    "process/threads",
    "process/open_fds",
    "net/sent_bytes",
    "net/recv_bytes",
}


def test_stats_reports_host_and_process_figures() -> None:
    stats = SystemStats(gpu=False).stats()
    assert stats.keys() >= HOST_KEYS
    assert all(isinstance(v, float) for v in stats.values())
    assert 0.0 <= stats["cpu/percent"] <= 100.0
    assert 0.0 < stats["memory/percent"] < 100.0
    assert stats["memory/available_bytes"] > 0
    assert stats["process/rss_bytes"] > 1_000_000
    assert stats["process/threads"] >= 1
    assert not any(key.startswith("gpu/") for key in stats)


def test_keys_are_stable_from_poll_to_poll() -> None:
    system = SystemStats(gpu=False)
    assert system.stats().keys() == system.stats().keys()


PROCESS_FIGURES = """
import json, sys, tempfile, threading
from monitor_async.targets import SystemStats
system = SystemStats(gpu=False)
before = system.stats()
release = threading.Event()
threads = [threading.Thread(target=release.wait, daemon=True) for _ in range(5)]
folder = tempfile.mkdtemp()
files = [open(f"{folder}/f{i}", "w") for i in range(10)]
for t in threads:
    t.start()
during = system.stats()
release.set()
print(json.dumps([before, during]))
"""


def test_process_figures_follow_threads_and_open_files() -> None:
    # in a fresh process: this test session's own threads and files come and go meanwhile
    out = subprocess.run([sys.executable, "-c", PROCESS_FIGURES], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, during = json.loads(out.stdout)
    assert during["process/threads"] == before["process/threads"] + 5
    assert during["process/open_fds"] == before["process/open_fds"] + 10


def test_process_cpu_percent_sees_a_busy_loop() -> None:
    system = SystemStats(gpu=False)
    system.stats()
    end = time.perf_counter() + 0.4
    x = 0
    while time.perf_counter() < end:
        x += 1
    assert system.stats()["process/cpu_percent"] > 10.0  # one busy core is ~100


def send_over_loopback(nbytes: int) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        received = 0

        def drain() -> None:
            nonlocal received
            conn, _ = server.accept()
            with conn:
                while chunk := conn.recv(1 << 16):
                    received += len(chunk)

        reader = threading.Thread(target=drain)
        reader.start()
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"x" * nbytes)
        reader.join(timeout=30)
        assert received == nbytes


async def test_network_counters_are_cumulative_and_give_rates_through_a_monitor() -> None:
    sink = MemorySink()
    system = SystemStats(gpu=False)
    monitor = Monitor(sink)
    monitor.watch(system, name="system", **system.watch_options)
    assert monitor.watches()["system"] == "inline"
    await monitor.step()
    send_over_loopback(4_000_000)
    await monitor.step()
    first, second = sink.records
    sent = second.metrics["system/net/sent_bytes"] - first.metrics["system/net/sent_bytes"]
    assert sent >= 4_000_000  # loopback traffic counts; other traffic only adds
    assert second.metrics["system/net/sent_bytes_per_second"] > 0
    assert "system/net/recv_bytes_per_second" in second.metrics
    assert "system/net/sent_bytes_per_second" not in first.metrics


def test_watching_another_process_by_pid() -> None:
    code = "import sys, time; b = bytearray(300_000_000); print('ready', flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        stats = SystemStats(gpu=False, pid=child.pid).stats()
        assert stats["process/rss_bytes"] >= 300_000_000
        assert stats["process/threads"] >= 1
    finally:
        child.kill()
        child.wait()
    with pytest.raises(ValueError, match=f"process {child.pid}"):
        SystemStats(gpu=False, pid=child.pid)


def test_gpu_option_is_validated() -> None:
    with pytest.raises(ValueError, match="gpu must be"):
        SystemStats(gpu="yes")  # type: ignore[arg-type]


def test_gpu_true_reports_gpus_or_says_why_it_cannot() -> None:
    if importlib.util.find_spec("pynvml") is None:
        with pytest.raises(ImportError, match="nvidia-ml-py"):
            SystemStats(gpu=True)
        assert SystemStats(gpu="auto").gpus == 0
        return
    try:
        system = SystemStats(gpu=True)
    except RuntimeError as exc:  # NVML present, but no driver or no device on this host
        assert "SystemStats(gpu=True)" in str(exc)
        assert SystemStats(gpu="auto").gpus == 0
        return
    stats = system.stats()
    assert system.gpus >= 1
    assert system.offload == "thread"
    assert "gpu/0/memory_total_bytes" in stats


def test_stats_is_cheap_enough_to_poll_inline() -> None:
    system = SystemStats(gpu=False)
    system.stats()
    n = 50
    start = time.perf_counter()
    for _ in range(n):
        system.stats()
    per_call = (time.perf_counter() - start) / n
    # the monitor's auto mode moves a target to a thread past 5 ms per call; stay well clear of it
    assert per_call < 0.005, f"SystemStats.stats() took {per_call * 1e3:.2f} ms per call"
    assert system.offload == "inline"


def test_missing_psutil_gives_an_import_error_naming_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['psutil'] = None\n"
        "import monitor_async.targets\n"
        "try:\n"
        "    from monitor_async.targets import SystemStats\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "monitor-async[system]" in out.stdout
