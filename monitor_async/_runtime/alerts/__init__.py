"""How alert rules are evaluated: the trackers (`trackers`), the engine that holds them (`engine`), the loop-lag probe (`lag`).

What the rules are, and how a pattern names watches and keys, is
``monitor_async._core.alerts``'s.
"""

from __future__ import annotations

from .engine import Engine
from .lag import LoopLag

__all__ = ["Engine", "LoopLag"]
