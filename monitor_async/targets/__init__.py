"""Built-in targets: objects with a ``stats()`` worth watching.

Each target is imported on first use, so ``import monitor_async`` never
imports its optional dependencies (``SystemStats`` needs the ``[system]``
extra, psutil; ``EpisodeStats.wrap`` needs gymnasium, the ``[gymnasium]`` extra).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._episodes import EpisodeStats
    from ._system import SystemStats

_LAZY: dict[str, str] = {"EpisodeStats": "._episodes", "SystemStats": "._system"}

__all__ = ["EpisodeStats", "SystemStats"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'monitor_async.targets' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
