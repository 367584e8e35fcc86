"""Invalid configuration is a ValueError at construction, naming the option.

Holds "Configuration errors at construction": docs/guarantees.md#configuration-errors-at-construction-test_configurationpy

Nothing is started (no loop thread, no task) before the error, so a typo
never surfaces minutes later from a background task.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import pytest

from monitor_async import Every, LoggerMonitor, Monitor, SyncMonitor
from tests.support.targets import Ticker

BAD_OPTIONS = [
    ("poll_interval", 0),
    ("poll_interval", -1.0),
    ("poll_interval", math.nan),
    ("poll_interval", math.inf),
    ("poll_interval", "1"),
    ("queue_size", 0),
    ("queue_size", -5),
    ("queue_size", 2.5),
    ("queue_size", True),
    ("max_batch", 0),
    ("max_batch", -1),
    ("max_batch", 1.5),
    ("poll_timeout", 0),
    ("poll_timeout", -0.5),
    ("poll_timeout", math.nan),
    ("batch_wait", -0.1),
    ("batch_wait", math.nan),
    ("batch_wait", math.inf),
    ("batch_wait", "0.5"),
    ("batch_wait", True),
    ("on_error", "explode"),
    ("on_error", None),
    ("on_error", "RAISE"),
]


@pytest.mark.parametrize("cls", [Monitor, SyncMonitor, LoggerMonitor])
@pytest.mark.parametrize(("option", "value"), BAD_OPTIONS)
def test_bad_monitor_options_raise_value_error_naming_the_option(cls: Any, option: str, value: Any) -> None:
    threads = threading.active_count()
    with pytest.raises(ValueError, match=option):
        cls(**{option: value})
    assert threading.active_count() == threads, "nothing was started"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"offload": "process"}, "offload"),
        ({"offload": None}, "offload"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"poll_interval": -2}, "poll_interval"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1.0}, "timeout"),
    ],
)
@pytest.mark.parametrize("cls", [Monitor, SyncMonitor])
def test_bad_watch_options_raise_value_error_and_register_nothing(
    cls: Any, options: dict[str, Any], match: str
) -> None:
    monitor = cls(background=False) if cls is SyncMonitor else cls()
    with pytest.raises(ValueError, match=match):
        monitor.watch(Ticker(), name="t", **options)
    assert monitor.stats()["watches"] == 0
    monitor.watch(Ticker(), name="t")  # the name is still free


@pytest.mark.parametrize("key", [3, b"frames", ("frames",), 1.5])
def test_a_counter_schedule_key_that_is_not_a_string_is_rejected(key: Any) -> None:
    with pytest.raises(ValueError, match="counter key"):
        Every.counter(key, 100)
    with pytest.raises(ValueError, match="counter key"):
        Every(kind="counter", interval=100, key=key)


def test_a_foreign_schedule_object_is_validated_at_watch() -> None:
    @dataclass
    class TorchRLEvery:  # any object with kind / interval / key, like TorchRL's Every
        kind: str
        interval: float
        key: Any = None

    monitor = Monitor()
    with pytest.raises(ValueError, match="counter key"):
        monitor.watch(Ticker(), name="t", schedule=TorchRLEvery("counter", 10, 7))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="counter key"):
        monitor.watch(Ticker(), name="t", schedule=TorchRLEvery("counter", 10))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interval must be"):
        monitor.watch(Ticker(), name="t", schedule=TorchRLEvery("seconds", 0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        monitor.watch(Ticker(), name="t", schedule=TorchRLEvery("hourly", 1))  # type: ignore[arg-type]
    assert monitor.stats()["watches"] == 0


@pytest.mark.parametrize("interval", [0, -1, math.nan])
def test_schedule_intervals_must_be_strictly_positive(interval: float) -> None:
    with pytest.raises(ValueError, match="interval must be"):
        Every.seconds(interval)
    with pytest.raises(ValueError, match="interval must be"):
        Every.counter("frames", interval)
