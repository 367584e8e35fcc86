"""Integrations with the training libraries users already run.

Each lives in a module of its own, imported only when asked for
(``from monitor_async.integrations.sb3 import MonitorCallback`` needs the
``[sb3]`` extra), so ``import monitor_async`` imports none of them.
"""

from __future__ import annotations

__all__: list[str] = []
