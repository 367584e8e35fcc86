"""Guarantee: a process ended by SIGTERM or SIGHUP stops its monitors as ``stop()`` does, then ends by that signal.

See [ending by signal](../../docs/guarantees.md#ending-by-signal-is-a-stop-test_signalspy). Each case runs a
child process whose watched counter stands at 99 after a first poll that logged 0; the child says it is ready
on its stdout, the test signals it and reads its CSV back.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor_async import Monitor, SyncMonitor
from monitor_async.backends import MemorySink

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")


@pytest.fixture(autouse=True)
def _default_handlers() -> Iterator[None]:
    """Each test starts from the default handlers, as a job does: a run under ``nohup`` inherits SIGHUP ignored
    (and children inherit it too), which the monitor rightly leaves alone."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    for sig in before:
        signal.signal(sig, signal.SIG_DFL)
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)

CHILD = textwrap.dedent(
    """
    import asyncio, signal, sys, threading, time
    from pathlib import Path
    from monitor_async import Monitor, SyncMonitor
    from monitor_async.backends import CSVSink

    folder, mode, theirs = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    count = int(sys.argv[4])
    options = dict(poll_interval=5)
    if sys.argv[5] == "off":
        options.update(handle_signals=False)
    if mode == "blocked":
        options.update(poll_timeout=0.5, stop_timeout=0.5)
    handled = threading.Event()

    class Counter:
        n = 0
        def stats(self):
            return {"n": self.n}

    def their_handler(signum, frame):
        # what a framework's handler finds: is the monitor's final snapshot on disk already?
        paths = [folder / f"m{i}.csv" for i in range(count)]
        on_disk = all(path.exists() and f"c/n,{counter.n:.1f}" in path.read_text() for path in paths)
        with open(folder / "theirs", "a") as file:
            file.write(f"{signum} {on_disk}\\n")
        if theirs == "returns":
            handled.set()
            return
        sys.exit(3)

    def first_poll_written():
        # from here on the monitor's code is idle until the next poll, so a handler that raises
        # SystemExit cannot land in it (where it would count as that code's failure)
        paths = [folder / f"m{i}.csv" for i in range(count)]
        return all(path.exists() and "c/n,0.0" in path.read_text() for path in paths)

    def install():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, their_handler)

    counter = Counter()
    if theirs in ("before", "returns"):
        install()
    if mode == "sync":
        monitors = [SyncMonitor(CSVSink(str(folder / f"m{i}.csv")), **options) for i in range(count)]
        for monitor in monitors:
            monitor.watch(counter, name="c")
            monitor.start()
        if theirs == "after":
            install()
        while not first_poll_written():
            time.sleep(0.01)
        counter.n = 99
        print("ready", flush=True)
        if theirs == "returns":
            handled.wait(60)
            counter.n = 150
            for monitor in monitors:
                monitor.close()
        else:
            time.sleep(60)
    else:
        async def main():
            async with Monitor(CSVSink(str(folder / "m0.csv")), **options) as monitor:
                monitor.watch(counter, name="c")
                if theirs == "after":
                    install()
                while not first_poll_written():
                    await asyncio.sleep(0.01)
                await monitor.flush()  # the write that put it there has ended too
                counter.n = 99
                print("ready", flush=True)
                if mode == "blocked":  # code that never awaits: the loop is blocked
                    end = time.monotonic() + 60
                    while time.monotonic() < end:
                        time.sleep(0.01)
                else:
                    await asyncio.sleep(60)
        asyncio.run(main())
    """
)


def _run(
    folder: Path, sig: int, mode: str = "sync", theirs: str = "none", count: int = 1, handle: bool = True
) -> tuple[int, float]:
    """Runs the child until it is ready, sends it ``sig``; returns its exit status and the seconds it took to end."""
    args = [str(folder), mode, theirs, str(count), "on" if handle else "off"]
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        assert child.stdout.readline() == "ready\n", child.stderr.read()
        sent = time.monotonic()
        child.send_signal(sig)
        status = child.wait(timeout=90)
        took = time.monotonic() - sent
        assert "Traceback" not in (errors := child.stderr.read()), errors
    return status, took


def _values(path: Path) -> list[float]:
    with path.open(newline="") as file:
        return [float(row["value"]) for row in csv.DictReader(file) if row["metric"] == "c/n"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_sync_monitor_stops_on_the_signal_and_the_process_ends_by_it(tmp_path: Path, sig: int) -> None:
    status, _ = _run(tmp_path, sig)
    assert status == -sig
    assert _values(tmp_path / "m0.csv")[-1] == 99.0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_monitor_on_the_main_threads_loop_stops_on_the_signal(tmp_path: Path, sig: int) -> None:
    status, _ = _run(tmp_path, sig, mode="async")
    assert status == -sig
    assert _values(tmp_path / "m0.csv")[-1] == 99.0


def test_every_monitor_of_the_process_stops(tmp_path: Path) -> None:
    status, _ = _run(tmp_path, signal.SIGTERM, count=3)
    assert status == -signal.SIGTERM
    for i in range(3):
        assert _values(tmp_path / f"m{i}.csv")[-1] == 99.0


def test_a_handler_installed_before_the_monitor_runs_after_its_stop(tmp_path: Path) -> None:
    status, _ = _run(tmp_path, signal.SIGTERM, theirs="before")
    assert status == 3  # what their handler chose
    assert (tmp_path / "theirs").read_text() == f"{int(signal.SIGTERM)} True\n"  # the snapshot was on disk first
    assert _values(tmp_path / "m0.csv")[-1] == 99.0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_handler_installed_after_the_monitor_runs_and_the_stop_still_happens(tmp_path: Path, mode: str) -> None:
    status, _ = _run(tmp_path, signal.SIGTERM, mode=mode, theirs="after")
    assert status == 3
    assert (tmp_path / "theirs").read_text().startswith(f"{int(signal.SIGTERM)} ")
    assert _values(tmp_path / "m0.csv")[-1] == 99.0


def test_a_process_its_handler_keeps_alive_goes_on_with_its_monitors_stopped(tmp_path: Path) -> None:
    status, _ = _run(tmp_path, signal.SIGHUP, theirs="returns")
    assert status == 0
    assert (tmp_path / "theirs").read_text() == f"{int(signal.SIGHUP)} True\n"
    assert _values(tmp_path / "m0.csv")[-1] == 99.0  # close() after it was a stop after a stop: nothing more


def test_handle_signals_false_leaves_the_default_behaviour(tmp_path: Path) -> None:
    status, _ = _run(tmp_path, signal.SIGTERM, handle=False)
    assert status == -signal.SIGTERM
    path = tmp_path / "m0.csv"
    assert 99.0 not in (_values(path) if path.exists() else [])


def test_a_blocked_main_loop_still_ends_by_the_signal_in_bounded_time(tmp_path: Path) -> None:
    status, took = _run(tmp_path, signal.SIGTERM, mode="blocked")
    assert status == -signal.SIGTERM
    assert took < 20.0  # the stop's bound (about 3 s here), with slack for a loaded machine


def test_handlers_are_installed_from_the_main_thread_and_restored_after_the_last_stop() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    first, second = SyncMonitor(MemorySink()), SyncMonitor(MemorySink())
    first.start()
    second.start()
    try:
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        first.close()
        assert signal.getsignal(signal.SIGHUP) is not before[signal.SIGHUP]
    finally:
        first.close()
        second.close()
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_handler_installed_after_the_monitor_stays_in_place_after_its_stop() -> None:
    def theirs(signum: int, frame: object) -> None:
        pass

    before = signal.getsignal(signal.SIGTERM)
    try:
        with SyncMonitor(MemorySink()):
            signal.signal(signal.SIGTERM, theirs)
        assert signal.getsignal(signal.SIGTERM) is theirs
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_monitor_started_outside_the_main_thread_installs_nothing_and_works() -> None:
    before = signal.getsignal(signal.SIGTERM)
    sink = MemorySink()
    seen: list[object] = []

    def elsewhere() -> None:
        with SyncMonitor(sink) as monitor:
            monitor.watch(stats_fn=lambda: {"x": 1}, name="x")
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(30)
    assert seen == [before] and sink.records


def test_handle_signals_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="Monitor: handle_signals must be True or False, got 'no'"):
        Monitor(handle_signals="no")  # type: ignore[arg-type]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() only")
def test_a_forked_child_ends_by_the_signal_at_once() -> None:
    code = textwrap.dedent(
        """
        import os, signal, sys, time
        from monitor_async import SyncMonitor
        from monitor_async.backends import MemorySink
        with SyncMonitor(MemorySink(), poll_interval=5) as monitor:
            monitor.watch(stats_fn=lambda: {"x": 1}, name="x")
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                os.write(write, b"r")
                time.sleep(60)
                os._exit(0)
            os.read(read, 1)
            start = time.monotonic()
            os.kill(pid, signal.SIGTERM)
            _, status = os.waitpid(pid, 0)
            print(os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1, time.monotonic() - start)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    sig, took = out.stdout.split()
    assert int(sig) == signal.SIGTERM and float(took) < 3.0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() only")
def test_a_forked_child_has_the_handlers_from_before_the_monitor() -> None:
    # what makes "at once" hold whenever the signal comes: no Python handler of ours is left in the child to
    # wait for its next bytecode (a signal just before a time.sleep() would wait the whole sleep)
    code = textwrap.dedent(
        """
        import os, signal
        from monitor_async import SyncMonitor
        from monitor_async.backends import MemorySink
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with SyncMonitor(MemorySink(), poll_interval=5) as monitor:
            monitor.watch(stats_fn=lambda: {"x": 1}, name="x")
            parent = signal.getsignal(signal.SIGTERM)
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                ok = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
                os.write(write, b"y" if ok else b"n")
                os._exit(0)
            os.waitpid(pid, 0)
            print(parent.__name__, os.read(read, 1).decode())
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["_on_signal", "y"], out.stdout
