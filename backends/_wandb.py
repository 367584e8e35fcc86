"""WandbSink: records logged to a Weights & Biases run, one x-axis per watch, on the sink's thread."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from monitor_async._core import AlertEvent, Ranks, Record, ThreadedAlertSink, check_ranks
from monitor_async._core.distribution import Summary
from monitor_async._core.resume import ResumePoint, number_on

log = logging.getLogger("monitor_async")

__all__ = ["WandbSink"]

LEVELS = {"warning": "WARN", "critical": "ERROR"}
"""``run.alert`` level of a firing event, by severity; a resolved one is ``INFO``."""
_TITLE = 63  # wandb: "title must be less than 64 characters long"
_MAX_BINS = 512  # wandb.Histogram.MAX_LENGTH


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


class WandbSink(ThreadedAlertSink):
    """Logs every record to a wandb run, each watch against its own step axis.

    A record's distributions are ``wandb.Histogram``s (``<watch>/<key>``) in the same history row
    as its scalars.

    What it promises: [Sinks: wandb](sinks.md#wandb-wandbsink).

    Args:
        run: the wandb run to log to; the sink never finishes it. ``None``
            (default): the active run at the first write, else one the sink
            creates with ``wandb.init(**init_kwargs)`` and finishes on ``close()``.
        name: the sink's label in ``Monitor.stats()`` and in messages (not
            the run's name); ``None`` (default) or ``""``: ``"wandb"``.
        ranks: ``"main"`` (default): only rank 0 logs; ``"all"``: every rank,
            each to a run of its own.
        **init_kwargs: keyword arguments of ``wandb.init`` (``project``,
            ``dir``, ``group``, ``mode``...), used only when the sink creates the run.

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
        saved = self.resumed or {}
        if self.run is not None:
            self._check_resumed(saved)
            self._define_resumed()
            return
        import wandb

        if wandb.run is not None:
            self.run = wandb.run
            self._check_resumed(saved)
        else:
            kwargs = dict(self.init_kwargs)
            run_id = saved.get("id") if self.resuming is not None else None
            if isinstance(run_id, str) and run_id and "id" not in kwargs:
                kwargs["id"] = run_id  # the run the resumed launch logged to, continued
                kwargs.setdefault("resume", "allow")
            self.run = wandb.init(**kwargs)
            self._owns_run = True
        self._define_resumed()

    def _define_resumed(self) -> None:
        """The axes of the names numbered on from the state (the write path defines only a new name's)."""
        for name in self._index:
            self.run.define_metric(f"{name}/step")
            self.run.define_metric(f"{name}/*", step_metric=f"{name}/step")

    def _check_resumed(self, saved: dict[str, Any]) -> None:
        """A run given (or active): it is logged to as it is; a resume to another run is said."""
        run_id = saved.get("id")
        if self.resuming is not None and isinstance(run_id, str) and run_id != getattr(self.run, "id", run_id):
            log.warning("sink %r: resuming, but it was given wandb run %s; the launch resumed logged to run %s",
                        self.label, getattr(self.run, "id", None), run_id)

    def resume_state(self) -> dict[str, Any] | None:
        """The wandb run's id (continued with ``resume="allow"``) and the numbering of step-less records."""
        run_id = getattr(self.run, "id", None)
        if not isinstance(run_id, str):
            return None
        return {"id": run_id, "index": dict(self._index)}

    async def resume(self, point: ResumePoint, state: Mapping[str, Any] | None) -> None:
        """Continues the wandb run the resumed launch logged to (see [resuming](resuming.md#wandbsink))."""
        await super().resume(point, state)
        number_on(self._index, state)

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
            if r.distributions:
                data.update(self._histograms(r.distributions))
            run.log(data)

    def _histograms(self, distributions: Mapping[str, Summary]) -> dict[str, Any]:
        """A ``wandb.Histogram`` per distribution that holds values, its buckets as they are (512 at most)."""
        import wandb

        out = {}
        for key, summary in distributions.items():
            if summary.count:
                edges, counts = summary.histogram()
                while len(counts) > _MAX_BINS:  # explicit bounds past wandb's limit: neighbours joined
                    edges, counts = edges[::2] + ([edges[-1]] if len(edges) % 2 == 0 else []), [
                        sum(counts[i:i + 2]) for i in range(0, len(counts), 2)
                    ]
                shape: Any = (counts, edges)  # wandb takes lists as well as numpy arrays
                out[key] = wandb.Histogram(np_histogram=shape)
        return out

    def alert_blocking(self, event: AlertEvent) -> None:
        """Sends ``event`` to the run as a wandb alert (see [Alerts](alerts.md#wandbsink))."""
        level = "INFO" if event.state == "resolved" else LEVELS[event.severity]
        self.run.alert(title=alert_title(event), text=event.message or event.rule, level=level)

    def flush_blocking(self) -> None:
        return None

    def close_blocking(self) -> None:
        if self._owns_run:
            self.run.finish()
