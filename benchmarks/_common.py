"""What every scenario shares: result rows, the fake targets and sinks, TorchRL lookup, cadence maths.

`Clocked`, `slot_share`, `on_time`, `share_on_time` and `origin` come from the tests' `tests.support.timing`, which holds them for both.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from monitor_async import Record
from monitor_async.backends import CSVSink

# The floors append through the file writer CSVSink itself uses, so that floor and ours differ by
# the monitor only: the one private name the suite imports (at the same path in every tree it runs on).
from monitor_async.backends._files import LineFile
from monitor_async.distributed import EMPTY_SOURCE
from tests.support.timing import Clocked, on_time, origin, share_on_time, slot_share

__all__ = [
    "RATE_NAMES",
    "Bare",
    "Clocked",
    "ClockedKeys",
    "LineFile",
    "NoopLogger",
    "NoopSink",
    "Row",
    "TwelveKeys",
    "best_rate",
    "has_torchrl",
    "loop_window",
    "new_record",
    "on_time",
    "origin",
    "quiet",
    "share_on_time",
    "slot_share",
    "torchrl_monitor",
    "window",
]


RATE_NAMES: dict[str, str] = {
    "frames": "frames_per_second",
    "batches": "batches_per_second",
    "write_count": "writes_per_second",
    "worker_frames": "worker_frames_per_second",
    "sample_calls": "samples_per_second",
    "samples_returned": "samples_returned_per_second",
}
"""TorchRL's counters and the names of their rates (what ``LoggerMonitor`` and our monitor derive)."""

_new = object.__new__
_set_name, _set_step, _set_time, _set_metrics, _set_source = (
    Record.__dict__[key].__set__ for key in ("name", "step", "time", "metrics", "source")
)


def new_record(name: str, step: int | None, time: float, metrics: dict[str, float]) -> Record:
    """``Record(name, step, time, metrics)`` the fastest way: the slots filled through their descriptors.

    What the monitor's poll path does; the floors use it so that making a
    record costs them no more than it costs the monitor.
    """
    record: Record = _new(Record)
    _set_name(record, name)
    _set_step(record, step)
    _set_time(record, time)
    _set_metrics(record, metrics)
    _set_source(record, EMPTY_SOURCE)
    return record


@dataclass
class Row:
    """One measured figure: ours, TorchRL's (when measured) and the goal it is held to.

    ``goal`` is ``("ratio", x)`` (ours / TorchRL >= x), ``("min", x)``
    (ours >= x), ``("max", x)`` (ours <= x), ``("below", x)`` (ours < x),
    ``("floor", x)`` (ours <= x times ``floor``: see :attr:`over_floor`) or
    ``None`` (reported only). ``unit`` is ``"/s"``, ``"share"``, ``"MB"``,
    ``"records"``, ``"s"`` or ``"us"``. ``who`` names what ``ours`` measured:
    our monitor, or ``"floor"`` (see :class:`Bare`).

    ``floor`` is the figure of a floor measured in the same run (the same
    work done the plain way, with no monitor); ``floor_ratio``, when set, is
    ours over the floor as the goal reads it (the median of per-round ratios,
    which the machine's drift from one round to the next disturbs less than
    the ratio of the medians).
    """

    scenario: str
    measure: str
    ours: float
    torchrl: float | None = None
    unit: str = "/s"
    goal: tuple[str, float] | None = None
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)
    who: str = "ours"
    floor: float | None = None
    floor_ratio: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.torchrl is None or self.torchrl <= 0:
            return None
        return self.ours / self.torchrl

    @property
    def over_floor(self) -> float | None:
        """Ours over the floor: ``floor_ratio`` when set, else ``ours / floor`` (``None`` with no floor)."""
        if self.floor_ratio is not None:
            return self.floor_ratio
        if self.floor is None or self.floor <= 0:
            return None
        return self.ours / self.floor

    @property
    def met(self) -> bool | None:
        if self.goal is None:
            return None
        kind, value = self.goal
        if kind == "ratio":
            ratio = self.ratio
            return None if ratio is None else ratio >= value
        if kind == "min":
            return self.ours >= value
        if kind == "max":
            return self.ours <= value
        if kind == "floor":
            over = self.over_floor
            return None if over is None else over <= value
        return self.ours < value

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Row:
        goal = data.get("goal")
        return cls(**{**data, "goal": None if goal is None else (str(goal[0]), float(goal[1]))})


class TwelveKeys:
    """A collector-like target: 12 scalars per snapshot, two of them growing counters (so rates are derived)."""

    def __init__(self) -> None:
        self.frames = 0

    def stats(self) -> dict[str, Any]:
        self.frames += 64
        frames = self.frames
        return {
            "frames": frames,
            "write_count": frames // 2,
            "size": 50_000,
            "capacity": 100_000,
            "loss": 0.4321,
            "lr": 3e-4,
            "queue_depth": 3,
            "workers": 4,
            "latency_ms": 1.25,
            "ok": True,
            "reward_mean": -12.5,
            "reward_std": 3.75,
        }


class Bare:
    """The floor of the CSV scenarios: what polling the targets into CSV rows costs with no monitor at all.

    :meth:`rows` calls every target's ``stats()``, builds its namespaced
    float dict and the rates of the counters TorchRL derives rates from, and
    formats one CSV row per value with ``CSVSink.format`` (the same text our
    sink writes). Nothing else: no records queue, no schedule, no checks of
    the values, no counters, no error handling. An implementation of the
    contract can hardly do less per snapshot: a goal that this misses is out
    of reach on the machine, whatever the monitor does.
    """

    def __init__(self, targets: Sequence[Any]) -> None:
        self.targets = [(f"t{i}", f"t{i}/", target) for i, target in enumerate(targets)]
        self.rates = [(key, rate) for key, rate in RATE_NAMES.items()]
        self.pairs: dict[str, list[tuple[str, str]]] = {}  # per target: its (counter, rate) keys
        self.last: dict[str, tuple[float, dict[str, float]]] = {}
        self.csv = CSVSink("never-opened.csv")  # only its format() is used

    def rows(self) -> bytes:
        """One poll of every target, as the CSV rows ``CSVSink`` would append for it."""
        text: str = self.csv.format(self.records())
        return text.encode()

    def records(self) -> list[Record]:
        """One poll of every target, as records (what :meth:`rows` formats)."""
        return [
            new_record(name, None, time.time(), self.metrics(name, prefix, target))
            for name, prefix, target in self.targets
        ]

    def metrics(self, name: str, prefix: str, target: Any) -> dict[str, float]:
        """One poll of ``target``: its ``prefix``-namespaced float dict and the rates of its counters."""
        metrics = {prefix + key: float(value) for key, value in target.stats().items()}
        now = time.monotonic()
        pairs = self.pairs.get(name)
        if pairs is None:
            pairs = self.pairs[name] = [
                (prefix + key, prefix + rate) for key, rate in self.rates if prefix + key in metrics
            ]
        counters = {key: metrics[key] for key, _ in pairs}
        before = self.last.get(name)
        if before is not None:
            elapsed = now - before[0]
            for key, rate in pairs:
                metrics[rate] = (counters[key] - before[1][key]) / elapsed
        self.last[name] = (now, counters)
        return metrics


class ClockedKeys(TwelveKeys):
    """The 12-key target, noting when each ``stats()`` call began."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def stats(self) -> dict[str, Any]:
        self.times.append(time.monotonic())
        return super().stats()


class NoopSink:
    """A monitor-async sink that does nothing: the cost measured is the monitor's alone."""

    name = "noop"

    async def write(self, records: Sequence[Any]) -> None:
        return None

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        return None


class NoopLogger:
    """A TorchRL-style logger that does nothing (the cheapest possible ``log_metrics``)."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        return None


def has_torchrl() -> bool:
    return importlib.util.find_spec("torchrl") is not None


def torchrl_monitor() -> Any:
    """TorchRL's ``LoggerMonitor`` class, or ``None`` when torchrl is not installed."""
    if not has_torchrl():
        return None
    from torchrl.record.loggers.monitoring import LoggerMonitor

    return LoggerMonitor


def quiet() -> None:
    """Keeps expected warnings (a hung target, a sink falling behind) out of the benchmark output."""
    for name in ("monitor_async", "torchrl"):
        logging.getLogger(name).setLevel(logging.ERROR)


def window(warmup: float, seconds: float) -> tuple[float, float, float, float]:
    """Sleeps through ``warmup``, then measures ``(wall0, wall1, cpu0, cpu1)`` of the process over ``seconds``."""
    time.sleep(warmup)
    wall0, cpu0 = time.monotonic(), time.process_time()
    time.sleep(seconds)
    return wall0, time.monotonic(), cpu0, time.process_time()


async def loop_window(warmup: float, seconds: float) -> tuple[float, float, float, float]:
    """:func:`window` on a running event loop: the loop goes on meanwhile."""
    await asyncio.sleep(warmup)
    wall0, cpu0 = time.monotonic(), time.process_time()
    await asyncio.sleep(seconds)
    return wall0, time.monotonic(), cpu0, time.process_time()


def best_rate(runs: Sequence[float]) -> float:
    """The best of repeated throughput runs (as ``timeit`` does: noise only ever slows a run down)."""
    return max(runs)
