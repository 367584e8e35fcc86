"""Fake targets: the user's objects, healthy or misbehaving (their BaseExceptions are in `hostile`)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any


class Collector:
    """A cumulative frame counter and a fixed-size buffer."""

    def __init__(self) -> None:
        self.frames = 0

    def stats(self) -> dict[str, float]:
        self.frames += 100
        return {"frames": self.frames, "size": 7.25}


class Counter:
    """``frames`` grows by ``step`` at each stats() call; ``extra`` is answered as it is."""

    def __init__(self, step: int = 10, **extra: Any) -> None:
        self.frames = 0
        self.step = step
        self.calls = 0
        self.extra = extra

    def stats(self) -> dict[str, Any]:
        self.calls += 1
        self.frames += self.step
        return {"frames": self.frames, **self.extra}


class Moving:
    """``frames`` grows by 100 at each poll until ``running`` is cleared (a collector that stops)."""

    def __init__(self, **extra: Any) -> None:
        self.frames = 0
        self.running = True
        self.extra = extra

    def stats(self) -> dict[str, Any]:
        if self.running:
            self.frames += 100
        return {"frames": self.frames, **self.extra}


class Settable:
    """Answers whatever ``.value`` is."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def stats(self) -> Any:
        return self.value


class Ticker:
    """``n`` grows by one per call, from any thread; remembers when each call happened."""

    def __init__(self, **extra: Any) -> None:
        self.n = 0
        self.times: list[float] = []
        self.extra = extra
        self._lock = threading.Lock()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            self.n += 1
            self.times.append(time.monotonic())
            return {"n": self.n, **self.extra}

    @property
    def calls(self) -> int:
        return len(self.times)


class Raising:
    """``stats()`` raises ``error`` every time (or returns ``{"x": 1}`` once ``healthy`` is set)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error or RuntimeError("collector lost its worker")
        self.healthy = False
        self.calls = 0

    def stats(self) -> dict[str, float]:
        self.calls += 1
        if self.healthy:
            return {"x": 1.0}
        raise self.error


class HungAsync:
    """``async def stats()`` that does not return until ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls = 0

    async def stats(self) -> dict[str, float]:
        self.calls += 1
        await self.release.wait()
        return {"x": 1.0}


class AsyncHung:
    """``async def stats()`` that never returns; counts how many calls are pending at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.running = 0
        self.most_running = 0
        self.cancelled = 0

    async def stats(self) -> dict[str, float]:
        self.calls += 1
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
        return {"x": 1.0}


class BlockingHung:
    """A sync ``stats()`` that blocks its thread until ``release`` is set (a dead server)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.calls = 0
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def stats(self) -> dict[str, float]:
        with self._lock:
            self.calls += 1
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        self.entered.set()
        self.release.wait()
        with self._lock:
            self.running -= 1
        return {"x": 1.0}
