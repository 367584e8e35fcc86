"""Nothing is lost on a graceful stop (property-based).

Holds "Nothing lost on a graceful stop": docs/guarantees.md#nothing-lost-on-a-graceful-stop-test_graceful_stop_propertypy

Over random target counts, kinds of stats(), intervals, schedules, batch
sizes and waits, sink speeds and queue sizes large enough not to drop, and whichever
way the monitor is stopped: every record the monitor produced is written
exactly once, in per-target poll order, to every sink (a real JSONL file
included).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor_async import Every, Monitor
from monitor_async.backends import JSONLSink
from tests.support.sinks import RecordingSink


class Target:
    """``n`` counts this target's polls; ``kind`` says how its stats() runs."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.n = 0

    def snapshot(self) -> dict[str, float]:
        self.n += 1
        return {"n": self.n}

    async def astats(self) -> dict[str, float]:
        await asyncio.sleep(0)
        return self.snapshot()


schedules = st.one_of(
    st.none(),
    st.sampled_from([0.003, 0.01, 0.03]).map(Every.seconds),
    st.integers(1, 4).map(lambda n: Every.counter("n", n)),
)
watches = st.lists(
    st.tuples(st.sampled_from(["inline", "thread", "async"]), st.sampled_from([0.002, 0.005, 0.01]), schedules),
    min_size=1,
    max_size=6,
)


async def scenario(
    folder: Path,
    spec: list[tuple[str, float, Every | None]],
    max_batch: int,
    queue_size: int,
    batch_wait: float,
    delay: float,
    run_for: float,
    how: str,
    log_final: bool,
) -> None:
    fast, slow = RecordingSink("fast"), RecordingSink("slow", delay=delay)
    jsonl = JSONLSink(folder / "m.jsonl", name="jsonl")
    monitor = Monitor(
        [fast, slow, jsonl], max_batch=max_batch, queue_size=queue_size, batch_wait=batch_wait, close_sinks=True
    )
    for i, (kind, interval, schedule) in enumerate(spec):
        target = Target(kind)
        fn: Any = target.astats if kind == "async" else target.snapshot
        offload = "thread" if kind == "thread" else "inline"
        monitor.watch(
            target, name=f"t{i}", stats_fn=fn, offload=offload, poll_interval=interval, schedule=schedule,
            rate_keys=[], log_on_close=log_final,
            timeout=2.0,  # not the subject here: a 2 ms default timeout fails polls on a loaded machine
        )
    if how == "stop":
        await monitor.start()
        await asyncio.sleep(run_for)
        await monitor.stop()
    elif how == "async-with":
        async with monitor:
            await asyncio.sleep(run_for)
    else:
        task = asyncio.create_task(monitor.run())
        await asyncio.sleep(run_for)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    stats = monitor.stats()
    produced = int(stats["records"])
    for label in ("fast", "slow", "jsonl"):
        assert stats[f"sink/{label}/dropped"] == 0, "the queues are large enough not to drop"
        assert stats[f"sink/{label}/written"] == produced
        assert stats[f"sink/{label}/errors"] == 0

    path = folder / "m.jsonl"  # opened lazily: no record, no file
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    from_file = [(o["name"], o["metrics"][o["name"] + "/n"]) for o in map(json.loads, lines)]
    per_sink: list[dict[str, list[float]]] = []
    for sequence in (
        [(r.name, r.metrics[r.name + "/n"]) for r in fast.records],
        [(r.name, r.metrics[r.name + "/n"]) for r in slow.records],
        from_file,
    ):
        assert len(sequence) == produced, "every record exactly once"
        per_target: dict[str, list[float]] = {}
        for name, n in sequence:
            per_target.setdefault(name, []).append(n)
        for name, values in per_target.items():
            assert values == sorted(set(values)), f"{name}: out of order or duplicated: {values}"
        per_sink.append(per_target)
    assert per_sink[0] == per_sink[1] == per_sink[2], "every sink holds the same records"
    if log_final:
        assert len(per_sink[0]) == len(spec), "the final snapshot of every watch was written"


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=watches,
    max_batch=st.integers(1, 64),
    queue_size=st.integers(2_000, 20_000),
    batch_wait=st.sampled_from([0.0, 0.01, 0.25, 60.0]),
    delay=st.sampled_from([0.0, 0.001, 0.004]),
    run_for=st.sampled_from([0.0, 0.03, 0.15]),
    how=st.sampled_from(["stop", "async-with", "cancel-run"]),
    log_final=st.booleans(),
)
def test_every_record_produced_before_stop_is_written_once_in_order_to_every_sink(
    spec: list[tuple[str, float, Every | None]],
    max_batch: int,
    queue_size: int,
    batch_wait: float,
    delay: float,
    run_for: float,
    how: str,
    log_final: bool,
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(
            scenario(Path(folder), spec, max_batch, queue_size, batch_wait, delay, run_for, how, log_final)
        )
