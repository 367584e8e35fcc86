"""Hostile user objects for the reliability suite: targets and sinks that raise what they should not,
swallow their cancellation, or hang on purpose; and ways to run a scenario so that a broken promise
fails the test instead of ending the test session (a ``KeyboardInterrupt``) or hanging it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from monitor_async import Record
from monitor_async.backends import BaseSink, ThreadedSink


def stray_cancel() -> BaseException:
    """A ``CancelledError`` nobody asked for: raised by user code, not by a cancel of its task."""
    return asyncio.CancelledError("raised by the user's code")


ESCAPES: dict[str, Callable[[], BaseException]] = {
    "KeyboardInterrupt": lambda: KeyboardInterrupt("plugin pressed Ctrl-C"),
    "SystemExit": lambda: SystemExit(3),
    "CancelledError": stray_cancel,
}
"""The BaseExceptions that user code raises on a bad day, by name."""


class RaisingStats:
    """A target whose ``stats()`` raises ``make()`` every time: ``how`` is "sync" or "async"."""

    def __init__(self, make: Callable[[], BaseException], how: str = "sync") -> None:
        self.make = make
        self.calls = 0
        if how == "async":
            self.stats = self._async_stats  # type: ignore[method-assign]

    def stats(self) -> dict[str, float]:
        self.calls += 1
        raise self.make()

    async def _async_stats(self) -> dict[str, float]:
        self.calls += 1
        await asyncio.sleep(0)
        raise self.make()


class RaisingSink(BaseSink):
    """An async sink whose every write raises ``make()``."""

    def __init__(self, name: str, make: Callable[[], BaseException]) -> None:
        self.name = name
        self.make = make
        self.attempts = 0

    async def _write(self, records: Sequence[Record]) -> None:
        self.attempts += 1
        await asyncio.sleep(0)
        raise self.make()


class RaisingThreadSink(ThreadedSink):
    """A blocking sink whose every ``write_blocking`` raises ``make()`` on its worker thread."""

    def __init__(self, name: str, make: Callable[[], BaseException]) -> None:
        self.name = name
        self.make = make
        self.attempts = 0

    def write_blocking(self, records: Sequence[Record]) -> None:
        self.attempts += 1
        raise self.make()


class Swallower:
    """Waits on the loop until ``released``, swallowing every cancellation on the way."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = False
        self.cancels = 0

    async def hang(self) -> None:
        self.entered.set()
        while not self.released:
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                self.cancels += 1


class SwallowingSink(BaseSink):
    """An async sink whose ``hangs`` method ("write", "flush" or "close") ignores cancellation."""

    def __init__(self, name: str, hangs: str) -> None:
        self.name = name
        self.hangs = hangs
        self.swallower = Swallower()
        self.records: list[Record] = []

    async def _write(self, records: Sequence[Record]) -> None:
        if self.hangs == "write":
            await self.swallower.hang()
        self.records.extend(records)

    async def _flush(self) -> None:
        if self.hangs == "flush":
            await self.swallower.hang()

    async def _close(self) -> None:
        if self.hangs == "close":
            await self.swallower.hang()


class SwallowingStats:
    """A target whose ``async def stats()`` hangs and ignores cancellation."""

    def __init__(self) -> None:
        self.swallower = Swallower()
        self.calls = 0

    async def stats(self) -> dict[str, float]:
        self.calls += 1
        await self.swallower.hang()
        return {"x": 1.0}


class GateSink(BaseSink):
    """An async sink whose writes wait (cooperatively) until ``gate`` (a threading.Event) is set."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.records: list[Record] = []

    async def _write(self, records: Sequence[Record]) -> None:
        self.entered.set()
        while not self.gate.is_set():
            await asyncio.sleep(0.01)
        self.records.extend(records)


def run_isolated(main: Callable[[], Coroutine[Any, Any, Any]], timeout: float = 30.0) -> Any:
    """Runs ``main()`` on a new loop in a daemon thread of its own; returns its result.

    A ``KeyboardInterrupt`` or ``SystemExit`` that escapes, or a run that does
    not end within ``timeout`` seconds, fails the test (rather than ending the
    whole test session, or hanging it). Unlike ``asyncio.run``, it does not
    wait forever for tasks left behind on purpose (user code that ignores its
    cancellation): they get a second, then the loop closes.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        loop = asyncio.new_event_loop()
        try:
            outcome["value"] = loop.run_until_complete(main())
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc
        finally:
            left = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.wait(left, timeout=1.0))
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    thread = threading.Thread(target=target, name="isolated-scenario", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"the scenario did not end within {timeout}s")
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, AssertionError):
            raise error
        raise AssertionError(f"{error!r} escaped from the scenario") from error
    return outcome["value"]


def call_within(fn: Callable[[], Any], timeout: float) -> tuple[Any, float]:
    """Calls ``fn()`` on a daemon thread; returns its result and how long it took.

    Fails the test when it does not return within ``timeout`` seconds (the
    thread is left behind), or re-raises what it raised.
    """
    outcome: dict[str, Any] = {}

    def target() -> None:
        started = time.monotonic()
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc
        outcome["took"] = time.monotonic() - started

    thread = threading.Thread(target=target, name="bounded-call", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"{getattr(fn, '__name__', fn)!r} did not return within {timeout}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"], outcome["took"]
