"""Stable-Baselines3 in two lines: ``model.learn(..., callback=MonitorCallback(monitor))``.

Needs the ``[sb3]`` extra (stable-baselines3).
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Mapping
from typing import Any

try:
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import KVWriter
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "monitor_async.integrations.sb3 needs stable-baselines3: pip install stable-baselines3 (or the extra: monitor-async[sb3])"
    ) from exc

from .._core.checks import number

__all__ = ["MonitorCallback", "MonitorWriter"]


class MonitorWriter(KVWriter):  # type: ignore[misc, unused-ignore]
    """An SB3 logger output that pushes every scalar SB3 records to a monitor with ``log()``.

    ``"rollout/ep_rew_mean"`` becomes ``log("rollout", {"ep_rew_mean": ...},
    step=num_timesteps)``; non-scalars are left out ([SB3](integrations/sb3.md)).

    Args:
        monitor: a `SyncMonitor` or `Monitor`.
        prefix: put before every pushed name (``"sb3/"`` gives ``sb3/rollout/...``).
        name: the pushed name of keys without a section (not a watch's name).
    """

    def __init__(self, monitor: Any, *, prefix: str = "", name: str = "sb3_logger") -> None:
        self.monitor = monitor
        self.prefix = prefix
        self.name = name

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]], step: int = 0) -> None:
        sections: dict[str, dict[str, float]] = {}
        for key, value in key_values.items():
            if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy's scalars are Real
                continue
            section, _, rest = key.partition("/")
            if not rest:
                section, rest = self.name, key
            sections.setdefault(self.prefix + section, {})[rest] = float(value)
        for section, values in sections.items():
            self.monitor.log(section, values, step=int(step))

    def close(self) -> None:
        return None  # the monitor is not ours to close


class MonitorCallback(BaseCallback):  # type: ignore[misc, unused-ignore]
    """An SB3 callback that watches the model and forwards what SB3's logger records.

    It watches itself under ``name`` (``timesteps``, ``episodes``, ``fps``,
    ``ep_rew_mean``, ``ep_len_mean``) and pushes SB3's values with ``log()``
    during ``learn()``; see [Stable-Baselines3](integrations/sb3.md).

    Args:
        monitor: a `SyncMonitor`, or a `Monitor` (build the callback on its loop,
            run ``model.learn`` off it, e.g. with ``asyncio.to_thread``).
        name: the watch's name.
        prefix: put before the names SB3's values are pushed under.
        verbose: SB3's verbosity of the callback.
        **watch_options: more options of ``monitor.watch`` (``schedule``, ``poll_interval``...).

    Examples:
        >>> from monitor_async import SyncMonitor
        >>> from monitor_async.backends import MemorySink
        >>> monitor = SyncMonitor(MemorySink())
        >>> callback = MonitorCallback(monitor)
        >>> monitor.step()["sb3"]
        {'sb3/timesteps': 0.0, 'sb3/episodes': 0.0, 'sb3/fps': 0.0}
        >>> monitor.close()
    """

    def __init__(
        self, monitor: Any, *, name: str = "sb3", prefix: str = "", verbose: int = 0, **watch_options: Any
    ) -> None:
        number("MonitorCallback", "verbose", verbose, integer=True, low=0, above=False)
        super().__init__(verbose)
        self.monitor = monitor
        self.writer = MonitorWriter(monitor, prefix=prefix, name=f"{name}_logger")
        self.episodes = 0
        self.started_at: float | None = None
        self.timesteps_at_start = 0
        options: dict[str, Any] = {"name": name, "step": "timesteps", "rate_keys": ("timesteps", "episodes")}
        options.update(watch_options)
        self.watch_name: str = monitor.watch(self, **options)

    def stats(self) -> dict[str, float]:
        """The model's figures (polled on the monitor's thread while SB3 trains)."""
        model = getattr(self, "model", None)
        if model is None:
            return {"timesteps": 0.0, "episodes": float(self.episodes), "fps": 0.0}
        timesteps = int(model.num_timesteps)
        out = {"timesteps": float(timesteps), "episodes": float(self.episodes)}
        started = self.started_at
        elapsed = time.perf_counter() - started if started is not None else 0.0
        out["fps"] = (timesteps - self.timesteps_at_start) / elapsed if elapsed > 0 else 0.0
        buffer = getattr(model, "ep_info_buffer", None)
        infos = tuple(buffer) if buffer else ()  # a copy in one C call: SB3 appends on its own thread
        if infos:
            out["ep_rew_mean"] = sum(float(info["r"]) for info in infos) / len(infos)
            out["ep_len_mean"] = sum(float(info["l"]) for info in infos) / len(infos)
        return out

    def _on_training_start(self) -> None:
        self.started_at = time.perf_counter()
        self.timesteps_at_start = int(self.model.num_timesteps)
        formats = self.model.logger.output_formats
        if self.writer not in formats:
            formats.append(self.writer)

    def _on_step(self) -> bool:
        infos = self.locals.get("infos")
        if infos:
            self.episodes += sum(1 for info in infos if isinstance(info, Mapping) and "episode" in info)
        return True

    def _on_training_end(self) -> None:
        formats = self.model.logger.output_formats
        if self.writer in formats:
            formats.remove(self.writer)
