"""The common background poll, finished in one piece (the fast branch of ``Watch.snapshot``), makes the records the full read makes.

A plain poll (known keys, finite ``float``/``int``/``bool`` values, no
schedule) is read by ``read_plain`` alone; anything else falls out to the
general reader. A user must not be able to tell which path a poll took:
the same names, values, rates, step and drop counts, poll after poll, while
the target's snapshots change shape under it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from monitor_async import Monitor
from monitor_async._runtime import watch as watch_module
from monitor_async._runtime.callers import InlineCaller
from monitor_async._runtime.watch import Watch
from monitor_async.backends import MemorySink
from tests.support.checks import wait_until


class Item:
    """A numpy-like scalar: read through ``item()`` by the full reader."""

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


# (snapshot, whether the one-piece path may finish it)
SCRIPT: list[tuple[dict[Any, Any], bool]] = [
    ({"frames": 0, "loss": 0.5, "ok": True}, False),  # the first poll: baselines
    ({"frames": 64, "loss": 0.4, "ok": True}, True),  # a rate
    ({"frames": 128, "loss": 0.3, "ok": False}, True),
    ({"frames": 100, "loss": 0.3, "ok": False}, True),  # a counter that went down: no rate
    ({"frames": 200, "loss": math.nan, "ok": True}, False),  # nan: left out, counted
    ({"frames": 300, "loss": 0.2, "ok": True, "workers": 4}, False),  # a new key
    ({"frames": 364, "loss": 0.2, "ok": True, "workers": 4}, True),
    ({"frames": 10**400, "loss": 0.2, "ok": True, "workers": 4}, False),  # too large for a float
    ({"frames": 400, "loss": "high", "ok": True, "workers": 4}, False),  # text: left out
    ({"frames": 500, "loss": Item(0.1), "ok": True, "workers": 4}, False),  # numpy-like
    ({"frames": 564, "loss": {"policy": 0.1, "value": 0.2}}, False),  # nested
    ({"frames": 600, "loss": math.inf, "ok": True, "workers": 4}, False),
    ({"frames": 664, "loss": 0.1, "ok": True, "workers": 4}, True),
    ({"frames": 700, 1: 1.0, "1": 2.0}, False),  # two keys, one name: the first is kept
    ({"frames": 764, 1: 1.0, "1": 2.0}, False),  # ... and from then on, always the careful path
]


def _watch(step_key: str | None = None, max_values: int = 1000) -> Watch:
    return Watch(
        target=None, name="rb", caller=InlineCaller(lambda: None, auto=False), schedule=None, step_key=step_key,
        rate_keys=None, log_on_start=True, log_on_close=True, interval=1.0, timeout=1.0, max_values=max_values,
    )


class OnePiece:
    """Tells whether a snapshot was finished in one piece: ``read_plain`` answered and the general ``read`` never ran."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fast: list[bool] = []
        self.general = 0
        plain, general = watch_module.read_plain, watch_module.read

        def spy_plain(*args: Any) -> Any:
            out = plain(*args)
            self.fast.append(out is not None)
            return out

        def spy_general(*args: Any) -> Any:
            self.general += 1
            return general(*args)

        monkeypatch.setattr(watch_module, "read_plain", spy_plain)
        monkeypatch.setattr(watch_module, "read", spy_general)

    def snapshot(self, watch: Watch, raw: Any) -> tuple[Any, int, bool]:
        """``watch.snapshot(raw)``, and whether it took the one-piece path."""
        self.fast.clear()
        before = self.general
        record, dropped = watch.snapshot(raw)
        return record, dropped, any(self.fast) and self.general == before


def _full(step_key: str | None = None, max_values: int = 1000) -> Watch:
    """A watch that always takes the general read (not plain)."""
    watch = _watch(step_key, max_values)
    watch.plain = False
    return watch


@pytest.mark.parametrize("step_key", [None, "frames"])
def test_each_poll_gives_the_record_of_the_full_read(monkeypatch: pytest.MonkeyPatch, step_key: str | None) -> None:
    clock = [100.0]
    monkeypatch.setattr(watch_module, "_monotonic", lambda: clock[0])
    monkeypatch.setattr(watch_module, "_time", lambda: 1e9 + clock[0])
    quick, full = _watch(step_key), _full(step_key)
    spy = OnePiece(monkeypatch)
    taken: list[int] = []
    rated: list[int] = []  # polls whose record has a rate
    for n, (raw, _) in enumerate(SCRIPT):
        clock[0] += 1.5
        record, dropped, one_piece = spy.snapshot(quick, raw)
        if one_piece:
            taken.append(n)
        expected, expected_dropped = full.snapshot(raw)
        assert record == expected, f"poll {n}: {raw}"
        assert dropped == expected_dropped, f"poll {n}: {raw}"
        assert (quick.baseline, quick.baseline_time) == (full.baseline, full.baseline_time)
        if expected is not None and "rb/frames_per_second" in expected.metrics:
            rated.append(n)
    # the one-piece path took exactly the plain polls (else this test compares nothing)
    assert taken == [n for n, (_, plain) in enumerate(SCRIPT) if plain]
    assert set(rated) & set(taken)  # rates were compared too


def test_a_snapshot_over_the_cap_and_a_sliver_of_time_take_the_full_read(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(watch_module, "_monotonic", lambda: clock[0])
    watch = _watch(max_values=2)
    watch.snapshot({"a": 1, "b": 2})
    spy = OnePiece(monkeypatch)
    clock[0] += 1.0
    assert spy.snapshot(watch, {"a": 1, "b": 2})[2]
    clock[0] += 1.0
    assert not spy.snapshot(watch, {"a": 1, "b": 2, "c": 3})[2]  # over max_values: the full read cuts and counts
    clock[0] += 1.0
    assert spy.snapshot(watch, {"a": 1, "b": 2})[2]
    watch.slots.start(0.0)  # polled by a background task from now on
    clock[0] += 0.1  # a tenth of the interval after the last record: its rates would be noise
    assert not spy.snapshot(watch, {"a": 1, "b": 2})[2]


class Script:
    """A target that answers with the next snapshot of ``SCRIPT`` at each call (the last one again at the end)."""

    def __init__(self) -> None:
        self.calls = 0

    def stats(self) -> dict[Any, Any]:
        raw = SCRIPT[min(self.calls, len(SCRIPT) - 1)][0]
        self.calls += 1
        return dict(raw)


async def test_background_polls_log_what_step_logs() -> None:
    """The same script polled by the timers (one-piece path) and by ``step()`` (full read) logs the same."""
    background, manual = MemorySink(), MemorySink()
    timed = Monitor(background, poll_interval=0.02)
    timed.watch(Script(), name="rb")
    stepped = Monitor(manual)
    stepped.watch(Script(), name="rb")
    await timed.start()
    try:
        await wait_until(lambda: timed.stats()["polls"] >= len(SCRIPT), timeout=10.0)
    finally:
        await timed.stop(log_final=False)
    for _ in range(len(SCRIPT)):
        await stepped.step()
    await stepped.stop(log_final=False)
    n = len(SCRIPT)

    def values(sink: MemorySink) -> list[dict[str, float]]:
        # rates depend on the time between polls: compared by presence, not value
        return [
            {k: (1.0 if k.endswith("_per_second") else v) for k, v in r.metrics.items()} for r in sink.records[:n]
        ]

    assert values(background) == values(manual)
    assert timed.stats()["values_dropped"] >= stepped.stats()["values_dropped"] > 0
    assert all(not math.isnan(v) for r in background.records for v in r.metrics.values())
