"""Memory is bounded by configuration, not by the shape of the input.

Holds "Memory is bounded by configuration, not by input": docs/guarantees.md#memory-is-bounded-by-configuration-not-by-input-test_bounded_cachespy

A target with 1,000 stable keys and one key that changes at every poll (a
key with an id or a time in it) makes every record's key order new. The
caches each sink keeps to format records fast (CSVSink's row templates and
quoted names, JSONLSink's names, PrometheusSink's routes from keys to
series) hold at most about their ``cache_bytes`` however many polls go by;
measured with tracemalloc over the allocations made by the sinks' own code.
(TensorBoardSink keeps nothing per key, only a record count per watch name.)
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from monitor_async import Monitor
from monitor_async.backends import CSVSink, JSONLSink, PrometheusSink

POLLS = 300
BUDGET = 1 << 20
SINK_CODE = "*/backends/*"


class OneKeyChanges:
    """1,000 stable keys and one whose name changes at every poll."""

    def __init__(self) -> None:
        self.base = {f"stable_metric_{i}": float(i) for i in range(1_000)}
        self.n = 0

    def stats(self) -> dict[str, float]:
        self.n += 1
        values = dict(self.base)
        values[f"request_{self.n}_latency"] = 0.5
        return values


def held_by_sinks() -> int:
    """Bytes currently allocated by code in the backends package (the sinks' caches and state)."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, SINK_CODE)])
    return sum(stat.size for stat in snapshot.statistics("filename"))


def make_sink(kind: str, tmp_path: Path) -> Any:
    if kind == "csv":
        sink: Any = CSVSink(tmp_path / "m.csv")
    elif kind == "jsonl":
        sink = JSONLSink(tmp_path / "m.jsonl")
    else:
        sink = PrometheusSink(port=None, max_series=1_100)
    sink.cache_bytes = BUDGET  # configuration, not input shape, bounds the caches
    return sink


@pytest.mark.parametrize("kind", ["csv", "jsonl", "prometheus"])
async def test_a_key_that_changes_every_poll_keeps_the_sinks_memory_bounded(kind: str, tmp_path: Path) -> None:
    sink = make_sink(kind, tmp_path)
    monitor = Monitor(sink, close_sinks=True)
    monitor.watch(OneKeyChanges(), name="server", rate_keys=[])
    tracemalloc.start()
    try:
        for _ in range(20):  # warm-up: the stable keys are known, the sink open
            await monitor.step()
        held = [held_by_sinks()]
        for n in range(POLLS):
            await monitor.step()
            if n % 7 == 6:  # not a divisor of the caches' fill-and-clear period
                held.append(held_by_sinks())
    finally:
        tracemalloc.stop()
        await monitor.stop(log_final=False)
    stats = monitor.stats()
    assert stats[f"sink/{sink.label}/errors"] == 0
    growth = max(held) - held[0]
    # one poll's record is about 1,000 keys: the budget plus one record's worth, at most
    assert growth < BUDGET + 256_000, f"{kind}: the sink's memory grew by {growth / 1e6:.2f} MB over {POLLS} polls"
    assert held[-1] - held[len(held) // 2] < BUDGET + 256_000, f"{kind}: still growing: {held}"
