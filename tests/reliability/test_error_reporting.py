"""Reporting an error never fails.

Holds "Reporting an error never fails": docs/guarantees.md#reporting-an-error-never-fails-test_error_reportingpy

An exception whose ``__repr__`` and ``__str__`` raise, raised by a
``stats()`` (inline, thread-offloaded or async) or by a sink, is still one
counted failure with one warning per streak; the watch is polled again and
the writer keeps writing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from monitor_async import Monitor, Record
from monitor_async.backends import BaseSink, MemorySink
from tests.support.checks import monitor_warnings, wait_until
from tests.support.targets import Raising, Ticker


class Unprintable(Exception):
    """An error from a C extension whose repr and str both raise."""

    def __repr__(self) -> str:
        raise RuntimeError("repr of the error failed")

    def __str__(self) -> str:
        raise RuntimeError("str of the error failed")


class UnprintableTypeError(TypeError):
    """The same, as a TypeError (the monitor formats those with str())."""

    def __repr__(self) -> str:
        raise ValueError("repr failed")

    def __str__(self) -> str:
        raise ValueError("str failed")


class AsyncFailing(Raising):
    async def stats(self) -> dict[str, float]:  # type: ignore[override]
        return super().stats()


class UnreadableMapping(dict):  # type: ignore[type-arg]
    """A mapping whose iteration raises an unprintable TypeError."""

    def keys(self):  # type: ignore[no-untyped-def]
        raise UnprintableTypeError

    def __iter__(self):  # type: ignore[no-untyped-def]
        raise UnprintableTypeError

    def copy(self):  # type: ignore[no-untyped-def]
        raise UnprintableTypeError


class UnprintableSink(BaseSink):
    """A sink whose first ``failures`` writes raise ``Unprintable``; keeps the records of the others."""

    def __init__(self, failures: int) -> None:
        self.name = "unprintable"
        self.failures = failures
        self.attempts = 0
        self.records: list[Record] = []

    async def _write(self, records: Sequence[Record]) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise Unprintable
        self.records.extend(records)


@pytest.mark.parametrize("kind", ["inline", "thread", "async"])
async def test_a_stats_error_that_cannot_be_printed_is_one_counted_warned_failure(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = AsyncFailing(Unprintable()) if kind == "async" else Raising(Unprintable())
    sink = MemorySink()
    monitor = Monitor(sink)
    monitor.watch(target, name="broken", offload="thread" if kind == "thread" else "inline")
    monitor.watch(Ticker(), name="healthy")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        for _ in range(3):
            logged = await monitor.step()
            assert set(logged) == {"healthy"}
        target.healthy = True
        logged = await monitor.step()
    assert set(logged) == {"broken", "healthy"}, "the watch is polled again and recovers"
    assert monitor.stats()["polls_failed"] == 3
    (warning,) = monitor_warnings(caplog)
    assert "'broken'" in warning and "Unprintable" in warning


async def test_an_unprintable_error_while_reading_the_result_is_one_counted_warned_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Target:
        def stats(self) -> UnreadableMapping:
            return UnreadableMapping(x=1.0)

    monitor = Monitor(MemorySink())
    monitor.watch(Target(), name="unreadable")
    monitor.watch(Ticker(), name="healthy")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        for _ in range(2):
            assert set(await monitor.step()) == {"healthy"}
    assert monitor.stats()["polls_failed"] == 2
    (warning,) = monitor_warnings(caplog)
    assert "'unreadable'" in warning and "UnprintableTypeError" in warning


async def test_background_polling_goes_on_after_an_unprintable_error(caplog: pytest.LogCaptureFixture) -> None:
    target = Raising(Unprintable())
    monitor = Monitor(MemorySink(), poll_interval=0.01)
    monitor.watch(target, name="broken")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with monitor:
            await wait_until(lambda: target.calls >= 5)
    assert monitor.stats()["polls_failed"] >= 5
    raised = [w for w in monitor_warnings(caplog) if "raised" in w]
    assert len(raised) == 1, "one warning per failure streak"
    assert "stats() of watch 'broken' raised Unprintable(" in raised[0]


async def test_a_sink_error_that_cannot_be_printed_is_counted_and_the_writer_keeps_writing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = UnprintableSink(failures=2)
    monitor = Monitor(sink, poll_interval=0.01)
    monitor.watch(Ticker(), name="t")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with monitor:
            await wait_until(lambda: len(sink.records) >= 3)
    stats = monitor.stats()
    assert stats["sink/unprintable/errors"] == 2
    warnings = [w for w in monitor_warnings(caplog) if "'unprintable'" in w]
    assert len(warnings) == 1 and "Unprintable" in warnings[0]


def test_a_network_sink_classifies_an_error_that_cannot_be_printed() -> None:
    """The resilient delivery reads an error to decide whether to retry it: an unprintable one is not retried."""
    from monitor_async.backends import classify

    failure = classify(Unprintable())
    assert not failure.retry
    assert "Unprintable" in failure.message
