"""What the alert tests share: waiting until something holds, and a target whose counter can stop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from monitor_async import AlertEvent


async def until(check: Callable[[], bool], timeout: float = 15.0, what: str = "the condition") -> float:
    """Awaits until ``check()`` holds; returns the seconds it took (fails after ``timeout``)."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


class Moving:
    """A collector whose ``frames`` grows at each poll until ``running`` is cleared."""

    def __init__(self, **extra: Any) -> None:
        self.frames = 0
        self.running = True
        self.extra = extra

    def stats(self) -> dict[str, Any]:
        if self.running:
            self.frames += 100
        return {"frames": self.frames, **self.extra}


class Events(list[AlertEvent]):
    """A notifier that keeps every event it is given."""

    def __call__(self, event: AlertEvent) -> None:
        self.append(event)

    def states(self) -> list[tuple[str, str]]:
        return [(e.rule, e.state) for e in self]
