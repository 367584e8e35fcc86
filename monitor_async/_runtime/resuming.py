"""A monitor's side of resuming: the state it saves, the state it was given, and applying it as polling begins.

What the state holds and how it is read is `_core.resume`'s; what resuming
does for each sink and reader is in [Resuming a run](resuming.md).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from .._core.exceptions import ConfigError
from .._core.formats import launch_info
from .._core.policy import log
from .._core.resume import ResumePoint, build_state, read_state
from .alerts import Engine
from .channel import Channel
from .push import Pushes
from .watch import Watch

__all__ = ["Resuming"]


class Resuming:
    """This launch's identity, the state `load` was given, and whether polling began (then no state loads)."""

    __slots__ = ("began", "launch", "point")

    def __init__(self) -> None:
        info = launch_info()
        self.launch = {"id": uuid.uuid4().hex[:16], "time": info["time"], "pid": info["pid"], "host": info["host"]}
        self.began = False  # start(), step(), flush() or stop() ran: a state can no longer be loaded
        self.point: ResumePoint | None = None  # the state loaded, applied as polling begins

    def state(
        self, watches: Mapping[str, Watch], channels: Sequence[Channel], pushes: Pushes, alerts: Engine
    ) -> dict[str, Any]:
        """``Monitor.state_dict()``: each watch's and pushed name's last step and time, the sinks' and rules' state."""
        now = time.time()
        offset = now - time.monotonic()  # a watch's last log time is monotonic
        points = {
            name: (w.last_step if w.has_logged else None, None if w.last_log_time is None else w.last_log_time + offset)
            for name, w in watches.items()
        }
        sinks: dict[str, dict[str, Any]] = {}
        for channel in channels:
            saver = getattr(channel.sink, "resume_state", None)
            saved = saver() if callable(saver) else None
            if saved:
                sinks[channel.label] = saved
        pushed = {name: point for name, point in pushes.points.items() if name not in watches}
        return build_state(self.launch, now, points, sinks, alerts.episodes(), pushed)

    def load(self, state: Mapping[str, Any]) -> None:
        """``Monitor.load_state_dict()``: ``state`` read now (a ``ConfigError`` says what is wrong), applied at `begin`."""
        if self.began:
            raise ConfigError(
                "load_state_dict: this monitor began polling already (start(), step(), flush() or stop() ran); "
                "load the state right after building the monitor, before it polls"
            )
        self.point = dataclasses.replace(read_state(state), by={"id": self.launch["id"], "time": self.launch["time"]})

    async def begin(self, watches: Mapping[str, Watch], channels: Sequence[Channel], alerts: Engine) -> None:
        """Polling begins: a state loaded is applied (the sinks told, the missing names warned of) once."""
        if self.began:
            return
        self.began = True
        point = self.point
        if point is None:
            return
        _warn_missing(point, watches, {channel.label for channel in channels})
        for name, at in point.watches.items():
            watch = watches.get(name)
            if watch is not None:
                watch.resumed_step = at.step
        alerts.carry(point.alerts)
        for channel in channels:
            resume = getattr(channel.sink, "resume", None)
            if callable(resume):
                await resume(point, point.sinks.get(channel.label))


def _warn_missing(point: ResumePoint, watches: Mapping[str, Watch], labels: set[str]) -> None:
    missing_watches = sorted(set(point.watches) - set(watches))
    missing_sinks = sorted(set(point.sinks) - labels)
    if not (missing_watches or missing_sinks):
        return
    parts = []
    if missing_watches:
        parts.append(f"watches {missing_watches[:10]}" + (" and more" if len(missing_watches) > 10 else ""))
    if missing_sinks:
        parts.append(f"sinks {missing_sinks}")
    log.warning(
        "load_state_dict: the state names %s that this monitor does not have; the rest resumes, "
        "and the records those had logged after the checkpoint stay superseded",
        " and ".join(parts),
    )
