"""Every numeric option of every public class is checked alike, at construction.

[Configuration errors at construction](../../docs/guarantees.md#configuration-errors-at-construction-test_configurationpy):
``True``, NaN, infinity, ``-1``, ``0`` and a string given to a numeric option
raise a [ConfigError][monitor_async.ConfigError] (a ``ValueError``) in one
shape, ``"<owner>: <option> must be <what is allowed>, got <value>"``, unless
the value is one the option allows (``0`` for a wait that may be none...).
The options are read from the signatures, so a new one without a case here
fails `test_every_numeric_option_has_a_case`.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import monitor_async
import monitor_async.backends as backends
import monitor_async.targets as targets
from monitor_async import Alert, ConfigError, Every, LoggerMonitor, Monitor, SyncMonitor
from monitor_async.backends import Backoff
from monitor_async.distributed import Reduce, World
from tests.support.targets import Ticker

BAD: dict[str, Any] = {"True": True, "nan": math.nan, "inf": math.inf, "-1": -1, "0": 0, "string": "1"}

NUMERIC = re.compile(r"\b(int|float)\b")

NOT_CONFIGURED = {
    # values and events, not things a user configures with options
    "Record", "Report", "AlertEvent", "Failure", "Source", "Summary",
    # contracts and bases without options of their own
    "Sink", "BaseSink", "ThreadedSink",
    # rules are made by Alert's factories (each has its case below), not by the dataclass itself
    "Alert",
}


@dataclass
class Case:
    """How to give one callable an option, whose name its errors carry, and the bad values each option allows."""

    owner: str
    build: Callable[[str, Any, Path], Any]
    allows: dict[str, set[str]] = field(default_factory=dict)


def _monitor(option: str, value: Any, _: Path) -> Any:
    return Monitor(**{option: value})


def _watch(option: str, value: Any, _: Path) -> Any:
    return Monitor().watch(Ticker(), name="t", **{option: value})


def _sync(option: str, value: Any, _: Path) -> Any:
    SyncMonitor(background=False, **{option: value}).close()


def _sync_watch(option: str, value: Any, _: Path) -> Any:
    monitor = SyncMonitor(background=False)
    try:
        monitor.watch(Ticker(), name="t", **{option: value})
    finally:
        monitor.close()


def _logger_monitor(option: str, value: Any, _: Path) -> Any:
    LoggerMonitor(**{option: value}).close()


def _alert(kind: str, *args: Any, **given: Any) -> Callable[[str, Any, Path], Any]:
    return lambda option, value, _: getattr(Alert, kind)(*args, **{**given, option: value})


def _sink(cls_name: str, *args: Any, **given: Any) -> Callable[[str, Any, Path], Any]:
    def build(option: str, value: Any, tmp: Path) -> Any:
        made = [tmp / arg if arg == "<dir>" else arg for arg in args]
        return getattr(backends, cls_name)(*made, **given, **{option: value})

    return build


def _callback(option: str, value: Any, _: Path) -> Any:
    from monitor_async.integrations.sb3 import MonitorCallback

    monitor = SyncMonitor(background=False)
    try:
        return MonitorCallback(monitor, **{option: value})
    finally:
        monitor.close()


def _tail(option: str, value: Any, tmp: Path) -> Any:
    from monitor_async._cli.tail import tail

    stop = asyncio.Event()
    stop.set()
    return asyncio.run(tail(tmp, stop=stop, **{option: value}))


CASES: dict[str, Case] = {
    "Monitor": Case("Monitor", _monitor, {"batch_wait": {"0"}}),
    "Monitor.watch": Case("watch", _watch),
    "SyncMonitor": Case("Monitor", _sync, {"batch_wait": {"0"}}),
    "SyncMonitor.watch": Case("watch", _sync_watch),
    "LoggerMonitor": Case("Monitor", _logger_monitor, {"batch_wait": {"0"}}),
    "Reduce": Case("reduce", lambda option, value, _: Reduce({"x": "mean"}, **{option: value})),
    "Every": Case("Every", lambda option, value, _: Every(kind="seconds", **{option: value})),
    "Every.seconds": Case("Every", lambda option, value, _: Every.seconds(**{option: value})),
    "Every.counter": Case("Every", lambda option, value, _: Every.counter("frames", **{option: value})),
    "Alert.above": Case("Alert.above", _alert("above", "learner/loss", threshold=1.0),
                        {"after": {"0"}, "threshold": {"-1", "0"}}),
    "Alert.below": Case("Alert.below", _alert("below", "learner/loss", threshold=1.0),
                        {"after": {"0"}, "threshold": {"-1", "0"}}),
    "Alert.stalled": Case("Alert.stalled", _alert("stalled", "collector/frames"), {"after": {"0"}}),
    "Alert.quiet": Case("Alert.quiet", _alert("quiet", "collector"), {"after": {"0"}}),
    "Alert.unhealthy": Case("Alert.unhealthy", _alert("unhealthy", "server")),
    "Alert.blocked": Case("Alert.blocked", _alert("blocked"), {"after": {"0"}}),
    "World": Case("World", lambda option, value, _: World(**{option: value}), {"rank": {"0"}, "local_rank": {"0"}}),
    "Backoff": Case("Backoff", lambda option, value, _: Backoff(**{option: value})),
    "ResilientSink": Case("ResilientSink", _sink("ResilientSink")),
    "ConsoleSink": Case("ConsoleSink", _sink("ConsoleSink", stream=sys.stderr), {"min_interval": {"0"}}),
    "TensorBoardSink": Case("TensorBoardSink", _sink("TensorBoardSink", "<dir>")),
    "MLflowSink": Case("MLflowSink", _sink("MLflowSink", "http://127.0.0.1:9")),
    "OTLPSink": Case("OTLPSink", _sink("OTLPSink", "http://127.0.0.1:9/v1/metrics")),
    "PrometheusSink": Case("PrometheusSink", _sink("PrometheusSink"), {"port": {"0"}}),
    "Webhook": Case("Webhook", _sink("Webhook", "http://127.0.0.1:9/hook"), {"group_window": {"0"}}),
    "SystemStats": Case("SystemStats", lambda option, value, _: targets.SystemStats(gpu=False, **{option: value})),
    "Distribution": Case("Distribution", lambda option, value, _: monitor_async.Distribution(
        # counts: one bad count among them (a count of 0 is allowed)
        **({"bounds": [1.0], "counts": [value, 1]} if option == "counts" else {"values": [1.0], option: value})
    ), {"counts": {"0"}}),
    "EpisodeStats": Case("EpisodeStats", lambda option, value, _: targets.EpisodeStats(**{option: value})),
    "MonitorCallback": Case("MonitorCallback", _callback, {"verbose": {"0"}}),
    "tail": Case("tail", _tail),
}


def _options_of(fn: Callable[..., Any]) -> Iterator[str]:
    """The numeric options of ``fn``, from its signature (a ``**options: Unpack[X]`` read from ``X``)."""
    for param in inspect.signature(fn).parameters.values():
        annotation = str(param.annotation)
        if param.kind is param.VAR_KEYWORD:
            unpacked = re.fullmatch(r"Unpack\[(\w+)\]", annotation)
            if unpacked is not None:
                options = vars(sys.modules[fn.__module__])[unpacked.group(1)]
                yield from (k for k, v in options.__annotations__.items() if NUMERIC.search(str(v)))
        elif param.kind is not param.VAR_POSITIONAL and NUMERIC.search(annotation):
            yield param.name


def _public() -> Iterator[tuple[str, Callable[..., Any]]]:
    """Every public callable that takes options: the classes users build, the watch, the factories, ``tail``."""
    from monitor_async._cli.tail import tail
    from monitor_async.integrations.sb3 import MonitorCallback, MonitorWriter

    classes: dict[str, Any] = {}
    for module in (monitor_async, backends, targets):
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and not issubclass(value, BaseException) and name not in NOT_CONFIGURED:
                classes[name] = value
    classes.update(World=World, Reduce=Reduce, MonitorCallback=MonitorCallback, MonitorWriter=MonitorWriter)
    yield from classes.items()
    yield "Monitor.watch", Monitor.watch
    yield "SyncMonitor.watch", SyncMonitor.watch
    yield "Every.seconds", Every.seconds
    yield "Every.counter", Every.counter
    for kind in ("above", "below", "stalled", "quiet", "unhealthy", "blocked"):
        yield f"Alert.{kind}", getattr(Alert, kind)
    yield "tail", tail


def _numeric_options() -> set[tuple[str, str]]:
    found = set()
    for name, fn in _public():
        options = set(_options_of(fn))
        if name == "LoggerMonitor":  # **options: Any, forwarded to Monitor as SyncMonitor's are
            options |= set(_options_of(SyncMonitor))
        found |= {(name, option) for option in options}
    return found


OPTIONS = sorted(_numeric_options())


def test_every_numeric_option_has_a_case() -> None:
    missing = sorted({name for name, _ in OPTIONS} - set(CASES))
    assert not missing, f"public callables with numeric options and no case here: {missing}"
    assert len(OPTIONS) > 40, OPTIONS  # the enumeration found the options, not nothing


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize(("owner", "option"), OPTIONS, ids=[f"{o}-{p}" for o, p in OPTIONS])
def test_a_bad_number_is_a_config_error_naming_owner_option_and_value(
    owner: str, option: str, bad: str, tmp_path: Path
) -> None:
    case = CASES[owner]
    value = BAD[bad]
    if bad in case.allows.get(option, set()):
        case.build(option, value, tmp_path)  # allowed: no error
        return
    with pytest.raises(ConfigError) as info:
        case.build(option, value, tmp_path)
    message = str(info.value)
    assert case.owner.lower() in message.lower(), message
    assert f"{option} must be" in message, message
    assert f"got {value!r}" in message, message
    assert isinstance(info.value, ValueError)


RANKED = ("CSVSink", "JSONLSink", "TensorBoardSink", "ConsoleSink", "MemorySink", "PrometheusSink", "Webhook",
          "MLflowSink", "OTLPSink", "LoggerSink")

CHOICES: list[tuple[str, str, Callable[[str, Any, Path], Any]]] = [
    ("Monitor", "on_error", _monitor),
    ("watch", "offload", _watch),
    ("reduce", "via", CASES["Reduce"].build),
    ("Every", "kind", lambda option, value, _: Every(interval=1, **{option: value})),
    ("Webhook", "format", CASES["Webhook"].build),
    ("alert rule", "severity", _alert("quiet", "collector", after=1)),
    ("SystemStats", "gpu", lambda option, value, _: targets.SystemStats(**{option: value})),
]


def _ranked(name: str) -> Callable[[str, Any, Path], Any]:
    if name == "LoggerSink":
        return lambda option, value, _: backends.LoggerSink(print, **{option: value})
    first = {"CSVSink": ("<dir>",), "JSONLSink": ("<dir>",), "TensorBoardSink": ("<dir>",),
             "Webhook": ("http://127.0.0.1:9/hook",), "MLflowSink": ("http://127.0.0.1:9",)}
    return _sink(name, *first.get(name, ()))


@pytest.mark.parametrize("bad", ["nope", None, 1])
@pytest.mark.parametrize(
    ("owner", "option", "build"),
    CHOICES + [(name, "ranks", _ranked(name)) for name in RANKED],
    ids=[f"{o}-{p}" for o, p, _ in CHOICES] + [f"{name}-ranks" for name in RANKED],
)
def test_a_bad_choice_is_a_config_error_listing_what_is_allowed(
    owner: str, option: str, build: Callable[[str, Any, Path], Any], bad: Any, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        build(option, bad, tmp_path)
    message = str(info.value)
    assert owner.lower() in message.lower(), message
    assert f"{option} must be" in message and f"got {bad!r}" in message, message
