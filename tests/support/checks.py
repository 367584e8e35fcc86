"""Waiting until a condition holds, on the loop or on a thread, and reading what the monitor logged or is writing."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def _waiting(predicate: Callable[[], object], start: float, timeout: float, what: str) -> bool:
    """Whether ``predicate()`` does not hold yet; fails the test once ``timeout`` seconds have passed."""
    if predicate():
        return False
    if time.monotonic() - start > timeout:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")
    return True


async def wait_until(
    predicate: Callable[[], object], timeout: float = 15.0, period: float = 0.005, what: str = "the condition"
) -> float:
    """Polls ``predicate()`` on the loop until it holds; returns the seconds it took (fails after ``timeout``)."""
    start = time.monotonic()
    while _waiting(predicate, start, timeout, what):
        await asyncio.sleep(period)
    return time.monotonic() - start


def wait_until_sync(
    predicate: Callable[[], object], timeout: float = 15.0, period: float = 0.005, what: str = "the condition"
) -> float:
    """`wait_until` for plain threads."""
    start = time.monotonic()
    while _waiting(predicate, start, timeout, what):
        time.sleep(period)
    return time.monotonic() - start


def monitor_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages logged on the ``monitor_async`` logger at WARNING or above."""
    return [r.getMessage() for r in caplog.records if r.name == "monitor_async" and r.levelno >= logging.WARNING]


def live_jsonl(path: Path) -> list[dict[str, Any]]:
    """The objects of a JSONL file another process is still writing: its complete lines only.

    A concurrent ``read`` may see a batch's ``os.write`` partly done, so the text after the last
    newline is left for the next read: the rule of the run readers' ``Parser.feed``
    (``monitor_async._cli.parsers``), which make entries where the tests want the raw objects.
    """
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]
