"""The reference in the code: every public parameter is documented where users read it.

``help(Monitor)``, the IDE's hover and the generated API reference all read
the docstrings, so a parameter missing from its docstring is missing from the
documentation. The keyword TypedDicts that the sync facade forwards must
match the signatures they stand for.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, get_type_hints

import pytest

import monitor_async
from monitor_async import LoggerMonitor, Monitor, SyncMonitor
from monitor_async._runtime.options import MonitorOptions, WatchOptions


def _documented(fn: Callable[..., Any], *owners: Any) -> set[str]:
    """The names listed under ``Args:`` in the docstrings of ``fn`` and its owners."""
    text = "\n".join(inspect.getdoc(o) or "" for o in (fn, *owners))
    names: set[str] = set()
    for section in re.findall(r"^Args:\n((?:[ \t]+.*\n?|\n)*)", text, re.M):
        names.update(re.findall(r"^\s{4}\**(\w+)(?: \(.*?\))?:", section, re.M))
    return names


def _parameters(fn: Callable[..., Any]) -> list[str]:
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self" and not p.name.startswith("_") and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]


def _sinks() -> list[type]:
    from monitor_async import backends

    return [getattr(backends, name) for name in backends.__all__ if name.endswith("Sink") and name != "Sink"]


CALLABLES: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
    ("Monitor", Monitor.__init__, (Monitor,)),
    ("Monitor.watch", Monitor.watch, ()),
    ("Monitor.stop", Monitor.stop, ()),
    ("Monitor.log", Monitor.log, ()),
    ("SyncMonitor", SyncMonitor.__init__, (SyncMonitor,)),
    ("SyncMonitor.log", SyncMonitor.log, ()),
    ("LoggerMonitor", LoggerMonitor.__init__, (LoggerMonitor,)),
    ("Every", monitor_async.Every, ()),
]


@pytest.mark.parametrize(("label", "fn", "owners"), CALLABLES, ids=[c[0] for c in CALLABLES])
def test_every_parameter_of_the_core_api_is_documented(label: str, fn: Any, owners: tuple[Any, ...]) -> None:
    missing = set(_parameters(fn)) - _documented(fn, *owners)
    assert not missing, f"{label}: parameters missing from its docstring's Args: {sorted(missing)}"


@pytest.mark.parametrize("sink", _sinks(), ids=lambda s: s.__name__)
def test_every_parameter_of_a_builtin_sink_is_documented(sink: type) -> None:
    missing = set(_parameters(sink.__init__)) - _documented(sink.__init__, sink)
    assert not missing, f"{sink.__name__}: parameters missing from its docstring's Args: {sorted(missing)}"


def test_the_sync_facade_forwards_exactly_the_monitor_options() -> None:
    monitor = set(_parameters(Monitor.__init__)) - {"sinks"}
    assert set(get_type_hints(MonitorOptions)) == monitor


def test_the_watch_options_match_the_watch_signature() -> None:
    watch = set(_parameters(Monitor.watch)) - {"target"}
    assert set(get_type_hints(WatchOptions)) == watch


def test_the_version_is_one_string_read_by_the_build() -> None:
    from importlib.metadata import version

    assert monitor_async.__version__ == version("monitor-async")
