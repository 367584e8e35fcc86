"""WandbSink: records logged to a Weights & Biases run, one x-axis per watch, on the sink's thread."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

from monitor_async._core import AlertEvent, Ranks, Record, ThreadedSink, check_ranks

__all__ = ["WandbSink"]

LEVELS = {"warning": "WARN", "critical": "ERROR"}
"""``run.alert`` level of a firing event, by severity; a resolved one is ``INFO``."""
_TITLE = 63  # wandb: "title must be less than 64 characters long"


def alert_title(event: AlertEvent) -> str:
    """The wandb alert title of ``event``: its state, rule and (when the rule does not say) its watch and source.

    wandb throttles alerts of one title (``wait_duration``, a minute), so
    the state is in the title (a resolve is never throttled by its firing)
    and so is the watch of a pattern rule (each watch's episode gets its own).

    Examples:
        >>> alert_title(AlertEvent("stalled */frames", "firing", "warning", "collector", "collector/frames",
        ...                        None, 0.0, 1.0, {"rank": 1}))
        'firing: stalled */frames · collector rank=1'
        >>> alert_title(AlertEvent("quiet learner", "resolved", "critical", "learner", None, None, 0.0, 1.0))
        'resolved: quiet learner'
    """
    named = {part.split("/", 1)[0] for part in event.rule.split()}  # "stalled collector/frames" names collector
    where = [] if event.watch in named else [event.watch]
    where += [f"{k}={v}" for k, v in event.source.items()]
    title = f"{event.state}: {event.rule}" + (f" · {' '.join(where)}" if where else "")
    return title if len(title) <= _TITLE else title[: _TITLE - 1] + "…"


class WandbSink(ThreadedSink):
    """Logs every record to a wandb run, each watch against its own step axis.

    Guarantees:
        - The run: ``run`` when given; else the active run (``wandb.run``)
          when there is one; else ``wandb.init(**init_kwargs)`` at the first
          write. ``close()`` finishes only a run this sink created.
        - Each record is one ``run.log`` call holding its metrics
          (``"<name>/<metric>"``) plus ``"<name>/step"``: the record's step, or
          when it has none its index within its watch (0, 1, 2, ...). The
          first record of a watch defines ``"<name>/step"`` as the x-axis of
          ``"<name>/*"`` (``define_metric``), so watches with unrelated step
          counters share a run. ``step=`` is never passed to ``log`` (wandb
          drops out-of-order global steps).
        - Every wandb call (``init``, ``define_metric``, ``log``, ``finish``)
          runs on this sink's own worker thread, one at a time, in record
          order, never on the event loop. Constructing the sink does no I/O
          and does not import wandb. Works offline (``WANDB_MODE=offline``).
        - Alerts (``alert(event)``, called by a monitor with rules): one
          ``run.alert(title, text, level)`` per event, on the same worker
          thread, in order with the records; ``level`` is ``WARN`` for a
          firing ``warning``, ``ERROR`` for a firing ``critical``, ``INFO``
          for a resolved event. The title holds the state, the rule and the
          watch (``firing: stalled collector/frames``; under 64 characters),
          the text the event's message. wandb sends one alert per title per
          minute at most; offline, alerts land in the run's transaction log.
        - Ranks: by default (``ranks="main"``) only the main rank of a
          distributed job opens a run and logs; with ``ranks="all"`` every
          rank logs to a run of its own (pass ``group=`` to see them together).

    Args:
        run: the wandb run to log to (what ``wandb.init`` returned); the sink
            never finishes it. ``None`` (default): at the first write, the
            active run (``wandb.run``) if there is one, else a run the sink
            creates with ``wandb.init(**init_kwargs)`` and finishes on
            ``close()``. Giving both ``run`` and ``init_kwargs`` raises
            ``ValueError``; ``None`` without wandb installed raises
            ``ImportError``.
        name: the sink's label in ``Monitor.stats()``
            (``sink/<label>/written``...) and in messages, not the wandb run's
            name (to name the run, pass a ``run`` made by
            ``wandb.init(name=...)``). ``None`` (default) or ``""``: the
            class name lowercased without ``Sink``, ``"wandb"``; a monitor makes a
            repeated label unique with ``_1``, ``_2``...
        ranks: ``"main"`` (default): only the main rank (rank 0) of a
            distributed job logs, so a job is one run rather than one per
            rank; on other ranks the monitor leaves the sink out and no run
            is opened. ``"all"``: every rank logs, each to a run of its own.
            Anything else raises ``ConfigError``.
        **init_kwargs: keyword arguments of ``wandb.init`` (``project``,
            ``dir``, ``group``, ``config``, ``mode``...), used only when the
            sink creates the run: an active run found at the first write is
            used as it is, and these are ignored.

    Raises:
        ValueError: both ``run`` and ``init_kwargs`` were given.
        ImportError: no ``run`` and wandb is not installed.
        ConfigError: ``ranks`` is neither ``"main"`` nor ``"all"``.

    Examples:
        >>> import asyncio, os, tempfile
        >>> from monitor_async import Monitor
        >>> os.environ["WANDB_MODE"] = "offline"
        >>> class Buffer:
        ...     def stats(self):
        ...         return {"size": 3}
        >>> async def main():
        ...     async with WandbSink(project="demo", dir=tempfile.mkdtemp()) as sink:
        ...         monitor = Monitor(sink)
        ...         monitor.watch(Buffer(), name="rb")
        ...         await monitor.step()
        ...         return dict(sink.run.summary)["rb/size"]
        >>> asyncio.run(main())
        3
    """

    def __init__(self, run: Any = None, *, name: str | None = None, ranks: Ranks = "main", **init_kwargs: Any) -> None:
        self.ranks = check_ranks(ranks, "WandbSink")
        if run is not None and init_kwargs:
            raise ValueError(
                f"WandbSink: got a run and wandb.init arguments {sorted(init_kwargs)}; pass one or the other"
            )
        if run is None and importlib.util.find_spec("wandb") is None:
            raise ImportError("WandbSink needs wandb: pip install wandb (or the extra: monitor-async[wandb])")
        self.run = run
        self.init_kwargs = init_kwargs
        self.name = name
        self._owns_run = False
        self._index: dict[str, int] = {}

    def open_blocking(self) -> None:
        if self.run is not None:
            return
        import wandb

        if wandb.run is not None:
            self.run = wandb.run
        else:
            self.run = wandb.init(**self.init_kwargs)
            self._owns_run = True

    def write_blocking(self, records: Sequence[Record]) -> None:
        run = self.run
        index = self._index
        for r in records:
            name = r.name
            axis = f"{name}/step"
            n = index.get(name)
            if n is None:
                run.define_metric(axis)
                run.define_metric(f"{name}/*", step_metric=axis)
                n = 0
            index[name] = n + 1
            data: dict[str, Any] = dict(r.metrics)
            data[axis] = n if r.step is None else r.step
            run.log(data)

    async def alert(self, event: AlertEvent) -> None:
        """Sends ``event`` to the run as a wandb alert (see the guarantees); opens the run first if needed.

        Args:
            event: the event, firing or resolved.

        Raises:
            SinkClosedError: the sink is closed.
        """
        await self.open()  # idempotent; raises SinkClosedError once closed
        await self.call(self.alert_blocking, event)

    def alert_blocking(self, event: AlertEvent) -> None:
        """[alert][monitor_async.backends.WandbSink.alert] on the sink's worker thread."""
        level = "INFO" if event.state == "resolved" else LEVELS[event.severity]
        self.run.alert(title=alert_title(event), text=event.message or event.rule, level=level)

    def flush_blocking(self) -> None:
        return None

    def close_blocking(self) -> None:
        if self._owns_run:
            self.run.finish()
