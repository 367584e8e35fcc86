"""Resilient delivery (ResilientSink) against a real HTTP server on 127.0.0.1.

Holds "Network spools say what happened": docs/guarantees.md#network-spools-say-what-happened-testssinkstest_deliverypy-test_webhookpy

The sink under test is ``PostSink``: the few lines a user writes on the
public ``ResilientSink`` (urllib, JSON). The server is real: it refuses
connections when stopped, answers 503/429/400 when told, and can swallow a
reply. Each test checks one promise: retries and their waits, refusals
counted with the server's message, the spool on disk and its bound, replay in
order, replay by a later process after ``kill -9``, duplicates counted,
``stop()`` bounded, and RaySink's actor calls through the same delivery.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor_async import ConfigError, DeliveryError, Monitor, Record
from monitor_async.backends import Backoff, classify
from tests.support.checks import wait_until
from tests.support.network import DROP, PostSink, Receiver, steps
from tests.support.targets import Ticker

ROOT = Path(__file__).resolve().parents[2]
FAST = Backoff(first=0.05, cap=0.2)


@pytest.fixture
def server(receiver: Receiver) -> Iterator[Receiver]:
    """The module's receiver, emptied, answering 200 and accepting connections."""
    receiver.ensure_started()
    receiver.requests.clear()
    receiver.reply = lambda n, request: (200, {}, b"{}")
    yield receiver
    receiver.ensure_started()


def record(step: int, name: str = "w") -> Record:
    return Record(name, step, 1_700_000_000.0 + step, {f"{name}/x": float(step)})


def spool_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.batch"))


async def test_a_healthy_server_gets_every_batch_in_order_and_the_monitor_reports_the_figures(
    server: Receiver, tmp_path: Path
) -> None:
    sink = PostSink(server.url, spool_dir=tmp_path / "spool", name="post")
    monitor = Monitor(sink)
    monitor.watch(Ticker(), name="w", step="n")
    for _ in range(5):
        await monitor.step()  # write() waits for the server's answer while nothing else waits
    assert steps(server, "w") == [1, 2, 3, 4, 5]
    stats = monitor.stats()
    assert stats["sink/post/delivered"] == 5
    for key in ("retries", "spooled", "replayed", "spool_bytes", "rejected", "duplicates", "pending"):
        assert stats[f"sink/post/{key}"] == 0, key
    assert spool_files(tmp_path / "spool") == []  # a batch leaves the spool once acknowledged
    await sink.close()


async def test_503_is_retried_after_the_retry_after_the_server_asked_for(server: Receiver, tmp_path: Path) -> None:
    server.reply = lambda n, request: (503, {"Retry-After": "1"}, b"busy") if n == 0 else (200, {}, b"{}")
    async with PostSink(server.url, backoff=FAST) as sink:
        await sink.write([record(0)])  # returns: the batch waits in the spool
        assert sink.counters()["spooled"] == 1
        # the server notes its answer before the sink has read it: wait for the sink's side too
        await wait_until(lambda: len(server.answered(200)) == 1 and sink.counters()["delivered"] == 1, timeout=10)
        first, second = server.requests
        assert second.at - first.at >= 0.95  # Retry-After: 1 obeyed, not the 0.05 s backoff
        figures = sink.counters()
        assert (figures["retries"], figures["replayed"], figures["delivered"]) == (1, 1, 1)


async def test_429_and_5xx_are_retried_with_backoff_until_the_server_takes_the_batch(
    server: Receiver,
) -> None:
    answers = [429, 500, 502, 504, 200]
    server.reply = lambda n, request: (answers[n], {}, b"{}")
    async with PostSink(server.url, backoff=FAST) as sink:
        await sink.write([record(0)])
        # the server notes its answer before the sink has read it: wait for the sink's side too
        await wait_until(lambda: len(server.answered(200)) == 1 and sink.counters()["delivered"] == 1, timeout=10)
        assert [r.status for r in server.requests] == answers
        assert sink.counters()["retries"] == 4


async def test_a_4xx_is_never_retried_and_the_error_names_the_status_and_the_servers_message(
    server: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    server.reply = lambda n, request: (400, {}, b'{"message": "metric key w/x is not allowed"}')
    sink = PostSink(server.url, backoff=FAST, name="post")
    raising = Monitor(sink, on_error="raise")
    raising.watch(Ticker(), name="w")
    with pytest.raises(DeliveryError, match=r"HTTP 400.*metric key w/x is not allowed") as caught:
        await raising.step()
    assert caught.value.status == 400 and not caught.value.retryable

    warning = Monitor(sink, on_error="warn")
    warning.watch(Ticker(), name="w")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await warning.step()
    assert "400" in caplog.text and "metric key w/x is not allowed" in caplog.text
    await asyncio.sleep(0.3)  # several backoff periods: nothing is tried again
    assert len(server.requests) == 2
    stats = warning.stats()
    assert stats["sink/post/errors"] == 1 and stats["sink/post/rejected"] == 2
    assert stats["sink/post/retries"] == 0 and stats["sink/post/pending"] == 0
    await sink.close()


async def test_an_outage_fills_the_spool_on_disk_not_the_queue_and_replays_in_order_before_newer_records(
    server: Receiver, tmp_path: Path
) -> None:
    folder = tmp_path / "spool"
    sink = PostSink(server.url, spool_dir=folder, backoff=FAST, name="post")
    monitor = Monitor(sink, poll_interval=0.01, queue_size=16, batch_wait=0.0)
    monitor.watch(Ticker(), name="w", step="n")
    async with monitor:
        await wait_until(lambda: len(steps(server, "w")) >= 5)
        server.stop()  # connections refused from now on
        down = len(server.requests)
        await wait_until(lambda: sink.counters()["spooled"] >= 100, timeout=20)
        assert len(spool_files(folder)) > 1 and sink.counters()["spool_bytes"] > 0
        server.start()
        await wait_until(lambda: sink.counters()["replayed"] >= 100, timeout=20)
    got = steps(server, "w")
    assert got == list(range(1, len(got) + 1)), "every step once, in order"
    stats = monitor.stats()
    assert stats["sink/post/dropped"] == 0, "the monitor's queue never overflowed"
    assert stats["sink/post/retries"] >= 1 and stats["sink/post/pending"] == 0
    assert len(server.requests) > down and spool_files(folder) == []


async def test_the_spool_keeps_spool_bytes_at_most_dropping_its_oldest_batches(
    server: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.stop()
    folder = tmp_path / "spool"
    sink = PostSink(server.url, spool_dir=folder, spool_bytes=2_000, backoff=Backoff(first=5.0, cap=5.0))
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with sink:
            for step in range(40):
                await sink.write([record(step)])
            figures = sink.counters()
            assert figures["spool_bytes"] <= 2_000
            assert sum(f.stat().st_size for f in spool_files(folder)) <= 2_000
            assert figures["spool_dropped"] > 0 and figures["spool_dropped"] + figures["pending"] == 40
            server.start()
            await sink.flush()  # tries at once, not after the 5 s backoff
            assert sink.counters()["pending"] == 0
    kept = steps(server, "w")
    assert kept == list(range(40 - len(kept), 40)), "the newest batches are kept, in order"
    assert "spool" in caplog.text and "full" in caplog.text


async def test_a_lost_reply_is_sent_again_and_the_duplicate_is_counted(server: Receiver) -> None:
    server.reply = lambda n, request: DROP if n == 1 else (200, {}, b"{}")
    async with PostSink(server.url, backoff=FAST) as sink:
        await sink.write([record(0)])
        await sink.write([record(1)])  # the server keeps it, but its reply is lost
        await wait_until(lambda: sink.counters()["delivered"] == 2)
        await sink.write([record(2)])
        await sink.flush()
        assert steps(server, "w") == [0, 1, 2]
        assert [json.loads(r.body)["records"][0]["step"] for r in server.requests] == [0, 1, 1, 2]
        figures = sink.counters()
        assert figures["duplicates"] == 1 and figures["retries"] == 1


SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from monitor_async import Monitor
    from tests.support.network import PostSink
    from tests.support.targets import Ticker

    async def main():
        url, folder = sys.argv[1], sys.argv[2]
        sink = PostSink(url, spool_dir=folder)
        monitor = Monitor(sink, poll_interval=0.01, batch_wait=0.0)
        monitor.watch(Ticker(), name="w", step="n")
        async with monitor:
            while sink.counters()["spooled"] < 50:
                await asyncio.sleep(0.01)
            print("SPOOLED", flush=True)
            await asyncio.Event().wait()  # killed here, polling and spooling

    asyncio.run(main())
    """
)


async def test_a_spool_left_by_a_killed_process_is_replayed_by_the_next_sink_on_that_spool_dir(
    server: Receiver, tmp_path: Path
) -> None:
    folder = tmp_path / "spool"
    server.stop()  # the server is away for the whole life of the first process
    child = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, server.url, str(folder)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "SPOOLED"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    left = spool_files(folder)
    assert left, "the killed process left its batches on disk"
    server.start()
    async with PostSink(server.url, spool_dir=folder, name="next") as sink:
        await sink.flush()
        figures = sink.counters()
    got = steps(server, "w")
    assert len(got) >= 50 and got == list(range(1, len(got) + 1)), "every spooled step, once, in order"
    assert figures["replayed"] == len(got) and figures["pending"] == 0
    assert spool_files(folder) == []


async def test_stop_is_bounded_and_what_could_not_be_sent_stays_in_the_spool_where_the_log_says(
    server: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "spool"
    server.stop()
    sink = PostSink(server.url, spool_dir=folder, name="post")
    monitor = Monitor(sink, poll_interval=0.02, stop_timeout=2.0, close_sinks=True)
    monitor.watch(Ticker(), name="w", step="n")
    await monitor.start()
    await wait_until(lambda: sink.counters()["spooled"] >= 10)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        await monitor.stop()
    assert time.monotonic() - began < 2.0 + 1.5
    pending = int(sink.counters()["pending"])
    assert pending >= 10 and len(spool_files(folder)) > 0
    closing = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    assert closing and str(folder) in closing[-1] and f"{pending} records" in closing[-1]

    server.start()
    async with PostSink(server.url, spool_dir=folder) as later:
        await later.flush()
    got = steps(server, "w")
    assert got == list(range(1, pending + 1))


async def test_one_spool_dir_serves_one_sink_at_a_time(tmp_path: Path) -> None:
    first = PostSink("http://127.0.0.1:9", spool_dir=tmp_path)
    await first.open()
    with pytest.raises(ConfigError, match="in use by another sink"):
        await PostSink("http://127.0.0.1:9", spool_dir=tmp_path).open()
    await first.close()
    second = PostSink("http://127.0.0.1:9", spool_dir=tmp_path)
    await second.open()  # free again once the first one closed
    await second.close()


def test_bad_options_are_refused_at_construction_naming_the_sink_and_the_option(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="PostSink: spool_bytes"):
        PostSink("http://127.0.0.1:9", spool_bytes=0)
    with pytest.raises(ConfigError, match=r"PostSink: spool_dir .* is not a folder"):
        PostSink("http://127.0.0.1:9", spool_dir=tmp_path / "file")
    with pytest.raises(ConfigError, match="Backoff: cap"):
        Backoff(first=2.0, cap=1.0)


def test_failures_read_from_real_sockets(receiver: Receiver) -> None:
    import socket
    import urllib.request

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(OSError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
    assert (classify(refused.value).retry, classify(refused.value).sent) == (True, False)

    silent = socket.socket()  # accepts, never answers: a hung server
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    try:
        with pytest.raises(OSError) as timed_out:
            urllib.request.urlopen(f"http://127.0.0.1:{silent.getsockname()[1]}/", data=b"{}", timeout=0.3)
    finally:
        silent.close()
    assert (classify(timed_out.value).retry, classify(timed_out.value).sent) == (True, True)
    assert not classify(ValueError("a bug")).retry


async def test_ray_sink_calls_wait_in_the_spool_while_the_actor_restarts(ray_local: Any) -> None:
    from monitor_async.backends import MemorySink, RaySink

    sink = RaySink(MemorySink, actor_options={"max_restarts": 1}, delivery={"backoff": FAST})
    await sink.write([record(0)])
    ray_local.kill(sink.actor, no_restart=False)  # the actor dies and comes back, empty
    for step in range(1, 6):
        await sink.write([record(step)])  # never raises: batches wait while the actor is away
    await wait_until(lambda: sink.counters()["pending"] == 0, timeout=60)
    await sink.flush()
    kept = [r.step for r in await sink.call("records")]
    # ray.kill() lands a moment later: record 1 may still reach the old actor, which acknowledges
    # it and goes down with it; every batch the sink sent once the actor was away waited, in order
    assert kept in ([1, 2, 3, 4, 5], [2, 3, 4, 5])
    assert sink.counters()["retries"] >= 1
    await sink.close()


# ----------------------------------------------------------- spools that say what happened
class Silent:
    """A tracker that accepts TCP connections, reads, and never answers."""

    def __init__(self) -> None:
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[Any] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def test_a_close_cancelled_by_a_tracker_that_never_answers_still_says_what_stays_in_the_spool_and_where(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    silent = Silent()
    folder = tmp_path / "spool"
    sink = PostSink(silent.url, spool_dir=folder, timeout=60.0, name="silent")

    async def main() -> float:
        monitor = Monitor(sink, poll_interval=0.02, stop_timeout=0.5, close_sinks=True)
        monitor.watch(Ticker(), name="w", step="n")
        await monitor.start()
        await wait_until(lambda: sink.counters()["pending"] >= 10 and silent.held)
        began = time.monotonic()
        await monitor.stop()
        return time.monotonic() - began

    try:
        with caplog.at_level(logging.INFO, logger="monitor_async"):
            took = asyncio.run(main())
    finally:
        silent.close()
    assert took < 0.5 * 3 + 2.0, "stop() is bounded by stop_timeout"
    left = sum(int(p.stem.split("-")[1]) for p in spool_files(folder))
    assert left >= 10
    closing = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    assert closing, "the closing line is logged although close() was cancelled"
    assert f"{left} records" in closing[-1] and str(folder) in closing[-1]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (needs mount rights; skipped without them), unmounted afterwards."""
    folder = tmp_path / "small"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> None:
    """Fills the file system of ``folder`` to the last byte."""
    fd = os.open(folder / "ballast", os.O_WRONLY | os.O_CREAT)
    try:
        for size in (4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)


async def test_a_spool_on_a_full_file_system_sends_directly_names_the_folder_and_counts_what_is_lost(
    server: Receiver, small_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sink = PostSink(server.url, spool_dir=small_fs, backoff=FAST, name="full")
    await sink.open()
    fill(small_fs)
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        for step in range(1, 93):
            await sink.write([record(step)])
        await sink.flush()
        assert steps(server, "w") == list(range(1, 93)), "the server answers: nothing is lost"
        figures = sink.counters()
        assert figures["unspooled"] == 92 and figures["spool_dropped"] == 0 and figures["pending"] == 0
        server.stop()  # now nothing can take them: they are counted, with a word
        for step in range(93, 96):
            await sink.write([record(step)])
        await sink.close()
    figures = sink.counters()
    assert figures["spool_dropped"] == 3
    lines = [r.getMessage() for r in caplog.records]
    cannot = [line for line in lines if "cannot write" in line]
    assert len(cannot) == 1 and str(small_fs) in cannot[0] and "No space left" in cannot[0]
    lost = [line for line in lines if "lost" in line]
    assert lost and "3 records" in lost[-1] and str(small_fs) in lost[-1]


async def test_a_spool_folder_turned_read_only_sends_directly_and_names_the_folder(
    server: Receiver, small_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sink = PostSink(server.url, spool_dir=small_fs, backoff=FAST, name="ro")
    await sink.open()
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        for step in range(1, 93):
            await sink.write([record(step)])
        await sink.close()
    assert steps(server, "w") == list(range(1, 93))
    cannot = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(cannot) == 1 and str(small_fs) in cannot[0] and "Read-only" in cannot[0]
    assert sink.counters()["spool_dropped"] == 0


async def test_damaged_spool_files_are_named_and_never_called_a_full_spool(
    server: Receiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "spool"
    server.stop()
    sink = PostSink(server.url, spool_dir=folder, backoff=FAST)
    for step in (1, 2, 3):
        await sink.write([record(step)])
    await sink.close()
    first, second, _ = spool_files(folder)
    first.write_bytes(b"\x00\x17 not json")
    second.write_text('{"destination": null, "records": [{"bogus": 1}]}')
    server.start()
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with PostSink(server.url, spool_dir=folder, name="later") as later:
            await later.flush()
            figures = later.counters()
    assert steps(server, "w") == [3]
    assert figures["spool_dropped"] == 2
    lines = [r.getMessage() for r in caplog.records]
    assert not any("full" in line for line in lines), lines
    for damaged in (first, second):
        assert any(str(damaged) in line and "unreadable" in line for line in lines), lines


async def test_a_closed_network_sink_leaves_no_worker_thread_behind(server: Receiver) -> None:
    import threading

    async with PostSink(server.url, name="threads") as sink:
        await sink.write([record(1)])
        assert any(t.name.startswith("monitor-async-threads") for t in threading.enumerate())
    # well before a worker's 10 s idle timeout
    await wait_until(lambda: not any(t.name.startswith("monitor-async-threads") for t in threading.enumerate()),
                     timeout=3.0)
    assert steps(server, "w") == [1]


async def test_a_read_only_spool_left_by_an_earlier_run_is_still_sent_and_its_files_named(
    server: Receiver, small_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.stop()
    sink = PostSink(server.url, spool_dir=small_fs, backoff=FAST)
    for step in (1, 2):
        await sink.write([record(step)])
    await sink.close()
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    server.start()
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with PostSink(server.url, spool_dir=small_fs, name="later") as later:
            await later.flush()
    assert steps(server, "w") == [1, 2]
    cannot = [r.getMessage() for r in caplog.records if "cannot delete" in r.getMessage()]
    assert len(cannot) == 1 and str(small_fs) in cannot[0] and "sends it again" in cannot[0]
