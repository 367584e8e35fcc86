"""The monitor's lifecycle: watches, channels, manual ``step()``, background start/stop."""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from ._callers import OFFLOADS, Offload, make_caller
from ._channel import channels_for
from ._errors import ON_ERROR, ErrorPolicy, OnError, log
from ._exceptions import ConfigError, WatchTypeError
from ._poll import SKIPPED, Counters, Poller, poll_forever
from ._record import Record
from ._reduce import Reduce, ReducedWatch, watch_reduced
from ._schedule import Every
from ._threads import WorkerPool
from ._watch import Watch
from .distributed import World, for_rank, source_of
from .distributed import world as detect_world

__all__ = ["Monitor"]


def _positive(name: str, value: float | None, *, integer: bool = False, zero: bool = False) -> None:
    """Raises ``ValueError`` naming the option unless ``value`` is a finite number > 0 (>= 0 with ``zero``).

    ``None`` passes (an option left to its default), except for an option that may be ``0``.
    """
    if value is None:
        ok = not zero
    elif isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        ok = False
    else:
        ok = (value >= 0 if zero else value > 0) and (integer or not math.isinf(value))
    if not ok:
        kind = "a positive integer" if integer else "a finite number of seconds >= 0" if zero else (
            "a strictly positive number of seconds"
        )
        raise ConfigError(f"Monitor: {name} must be {kind}, got {value!r}")


def _default_name(target: Any) -> str:
    """The lowercase class name; for a manager proxy or a Ray actor handle, the class behind it."""
    name = type(target).__name__
    if name.startswith("AutoProxy[") and name.endswith("]"):
        name = name[len("AutoProxy[") : -1]
    elif name == "ActorHandle":
        descriptor = getattr(target, "_ray_actor_creation_function_descriptor", None)
        name = (getattr(descriptor, "class_name", None) or name).rpartition(".")[2]
    return name.lower()


class Monitor:
    """Polls watched targets on the running event loop and streams their metrics to sinks.

    Guarantees:
        - Every watched target is polled by its own task: a slow, failing or
          hung target never delays another.
        - Each sink has its own bounded queue; when a sink falls behind the
          *oldest* queued records are dropped and counted
          (``stats()["sink/<label>/dropped"]``). Polling never waits for a sink.
        - Records of one watch reach every sink in poll order.
        - In background mode a record reaches its sink within ``batch_wait``
          seconds (default 0.25) of its poll, sooner once half of
          ``queue_size`` records wait (they then go out in batches of
          ``max_batch``, all in one ``write_batches`` call when the sink has
          it, else one ``write`` after another); ``step()``, ``flush()`` and
          ``stop()`` write everything queued at once. ``batch_wait=0`` writes
          as soon as anything is queued.
        - ``stop()`` returns within a bounded time: a hung target's final
          snapshot is skipped, and a sink that does not drain within
          ``stop_timeout`` seconds is abandoned (its queued records counted as
          dropped), both with a warning.
        - The monitor never closes targets, and closes sinks only when built
          with ``close_sinks=True``.
        - In a distributed job (``world=`` or :func:`monitor_async.distributed.world`),
          a sink built with ``ranks="main"`` is left out on every rank but
          rank 0 (never opened there), each record's ``source`` holds the
          rank, and the monitor never calls a collective or waits for another
          rank (see ``watch(reduce=...)``).

    Example:
        >>> import asyncio
        >>> from monitor_async import Monitor
        >>> from monitor_async.backends import MemorySink
        >>> class Buffer:
        ...     def stats(self):
        ...         return {"size": 3, "write_count": 10}
        >>> async def main():
        ...     monitor = Monitor(MemorySink())
        ...     monitor.watch(Buffer(), name="rb")
        ...     return await monitor.step()
        >>> asyncio.run(main())
        {'rb': {'rb/size': 3.0, 'rb/write_count': 10.0}}
    """

    def __init__(
        self,
        sinks: Any = None,
        *,
        poll_interval: float = 1.0,
        on_error: OnError = "warn",
        queue_size: int = 1024,
        max_batch: int = 256,
        poll_timeout: float | None = None,
        close_sinks: bool = False,
        stop_timeout: float = 5.0,
        thread_limit: int = 8,
        max_values: int = 10_000,
        batch_wait: float = 0.25,
        world: World | None = None,
    ) -> None:
        if on_error not in ON_ERROR:
            raise ConfigError(f"Monitor: on_error must be 'warn', 'raise' or 'ignore', got {on_error!r}")
        _positive("poll_interval", poll_interval)
        _positive("poll_timeout", poll_timeout)
        _positive("stop_timeout", stop_timeout)
        _positive("queue_size", queue_size, integer=True)
        _positive("max_batch", max_batch, integer=True)
        _positive("thread_limit", thread_limit, integer=True)
        _positive("max_values", max_values, integer=True)
        _positive("batch_wait", batch_wait, zero=True)
        self.poll_interval = float(poll_interval)
        self.poll_timeout = poll_timeout
        self.stop_timeout = float(stop_timeout)
        self.close_sinks = close_sinks
        self._max_values = max_values
        self._thread_limit = thread_limit
        self._pool: WorkerPool | None = None
        self._errors = ErrorPolicy(on_error)
        self._errors.on_fatal = self._halt_polling
        if world is not None and not isinstance(world, World):
            raise ConfigError(f"Monitor: world must be a monitor_async.distributed.World, got {world!r}")
        self.world = world if world is not None else detect_world()
        self._source = source_of(self.world)  # Record.source of this monitor's records
        self._linked: dict[str, list[str]] = {}  # a reduced watch's name: the watches it stands for
        sinks = for_rank(sinks, self.world)  # a ranks="main" sink is never opened away from rank 0
        self._channels = channels_for(sinks, queue_size, max_batch, self._errors, float(batch_wait))
        self._counters = Counters()
        self._poller = Poller(self._counters, self._channels, self._errors, self._worker_pool)
        self._watches: dict[str, Watch] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._stop_lock: asyncio.Lock | None = None
        self._stopped = False

    @property
    def sinks(self) -> list[Any]:
        """The sinks, in the order given (legacy loggers appear wrapped)."""
        return [channel.sink for channel in self._channels]

    @property
    def running(self) -> bool:
        """Whether background polling is on."""
        return self._loop is not None

    def _worker_pool(self) -> WorkerPool:
        if self._pool is None:
            self._pool = WorkerPool(self._thread_limit, "monitor-async-stats")
        return self._pool

    # ----------------------------------------------------------------- watches
    def watch(
        self,
        target: Any,
        *,
        name: str | None = None,
        schedule: Every | None = None,
        step: str | None = None,
        stats_fn: Callable[..., Any] | None = None,
        stats_kwargs: Mapping[str, Any] | None = None,
        rate_keys: Sequence[str] | None = None,
        log_on_start: bool = True,
        log_on_close: bool = True,
        poll_interval: float | None = None,
        timeout: float | None = None,
        offload: Offload = "auto",
        reduce: Reduce | Mapping[str, str | Sequence[str]] | None = None,
        _publish: Callable[[Record], None] | None = None,
    ) -> str:
        """Registers ``target`` and returns its watch name. Works before and while running.

        ``stats_fn`` replaces ``target.stats``; ``stats_kwargs`` are passed to
        it. ``step`` names the snapshot key used as the logging step (a counter
        schedule defaults it to its key). ``offload`` says where a sync
        ``stats()`` runs: ``"inline"`` on the loop, ``"thread"`` on a worker
        thread, ``"auto"`` inline unless the target is a blocking proxy or
        turns out slow. Raises ``ValueError`` for a duplicate name or a bad
        option and ``TypeError`` when there is nothing to call.

        ``reduce={"loss": "mean", ...}`` (or a :class:`~monitor_async.distributed.Reduce`)
        on every rank makes the main rank also log ``"<name>/all"``: each key
        reduced across the ranks (``sum``, ``mean``, ``min``, ``max``,
        ``p50``, ``p90``, ``p99``), ``ranks`` (snapshots that went in) and
        ``stale`` (ranks left out). With a list of targets the reduction is
        over the group, in this process: members are ``"<name>/0"``... and
        the count is ``targets``. See :mod:`monitor_async.distributed`.
        """
        if reduce is not None:
            return watch_reduced(self, target, reduce, name, dict(
                schedule=schedule, step=step, stats_fn=stats_fn, stats_kwargs=stats_kwargs,
                rate_keys=rate_keys, log_on_start=log_on_start, log_on_close=log_on_close,
                poll_interval=poll_interval, timeout=timeout, offload=offload,
            ))
        if offload not in OFFLOADS:
            raise ConfigError(f"watch: offload must be 'auto', 'inline' or 'thread', got {offload!r}")
        _positive("poll_interval", poll_interval)
        _positive("timeout", timeout)
        if schedule is not None and not isinstance(schedule, Every):
            # TorchRL's Every (or any object with kind/interval/key) is accepted and validated.
            schedule = Every(kind=schedule.kind, interval=schedule.interval, key=getattr(schedule, "key", None))
        if stats_fn is None:
            stats_fn = getattr(target, "stats", None)
            if not callable(stats_fn):
                raise WatchTypeError(
                    f"Cannot watch {type(target).__name__}: it has no callable stats() method "
                    "and no stats_fn was given"
                )
        elif not callable(stats_fn):
            raise WatchTypeError(f"watch: stats_fn must be callable, got {type(stats_fn).__name__}")
        if name is None:
            base = _default_name(target)
            name, n = base, 0
            while name in self._watches:
                n += 1
                name = f"{base}_{n}"
        elif not isinstance(name, str) or not name:
            raise ConfigError(f"watch: name must be a non-empty string, got {name!r}")
        elif name in self._watches or name in self._linked:
            raise ConfigError(f"A watch named {name!r} is already registered")
        if step is None and schedule is not None and schedule.kind == "counter":
            step = schedule.key
        interval = float(poll_interval or self.poll_interval)
        watch = (Watch if _publish is None else ReducedWatch)(
            target=target,
            name=name,
            caller=make_caller(target, stats_fn, dict(stats_kwargs or {}), offload, self._worker_pool),
            schedule=schedule,
            step_key=step,
            rate_keys=None if rate_keys is None else tuple(rate_keys),
            log_on_start=log_on_start,
            log_on_close=log_on_close,
            interval=interval,
            timeout=float(timeout or self.poll_timeout or interval),
            max_values=self._max_values,
            source=self._source,
        )
        if _publish is not None:
            watch.publish = _publish  # type: ignore[attr-defined]
        self._watches[name] = watch
        if self._loop is not None:
            self._spawn(watch)
        return name

    def unwatch(self, name: str) -> None:
        """Stops polling the named target (the target itself is left alone); a reduced watch goes whole."""
        linked = self._linked.pop(name, [])
        for other in linked:
            if other != name:
                self.unwatch(other)
        if linked and name not in self._watches:  # a group: only its members and "<name>/all" are watches
            return
        if name not in self._watches:
            raise KeyError(f"No watch named {name!r}")
        del self._watches[name]
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()

    def watches(self) -> dict[str, str]:
        """``{watch name: how its stats() is called}`` (``inline``, ``thread``, ``remote``)."""
        return {name: watch.caller.mode for name, watch in self._watches.items()}

    def _spawn(self, watch: Watch) -> None:
        assert self._loop is not None
        self._tasks[watch.name] = self._loop.create_task(
            poll_forever(self._poller, watch), name=f"monitor-async poll {watch.name}"
        )

    # --------------------------------------------------------------- manual mode
    async def step(self) -> dict[str, dict[str, float]]:
        """Polls every target once, writes what is due to every sink, returns it.

        Returns ``{watch name: {"<name>/<metric>": value}}`` for the targets
        that logged. Sinks have written the records when it returns. With
        ``on_error="raise"`` the first failure is raised after the others were
        polled and written.
        """
        poller = self._poller
        logged: dict[str, dict[str, float]] = {}
        pending: list[tuple[Watch, Any]] = []
        for watch in list(self._watches.values()):
            raw = poller.begin(watch)
            if raw is SKIPPED:
                continue
            if type(raw) is not dict and inspect.isawaitable(raw):
                pending.append((watch, raw))
                continue
            record = poller.finish(watch, raw)
            if record is not None:
                logged[watch.name] = record.metrics
        if pending:
            records = await asyncio.gather(*(poller.complete(w, raw) for w, raw in pending))
            for record in records:
                if record is not None:
                    logged[record.name] = record.metrics
        for channel in self._channels:
            await channel.settle()
        self._raise_pending()
        return logged

    async def flush(self) -> None:
        """Waits until every queued record is written, then flushes every sink."""
        for channel in self._channels:
            await channel.settle()
        for channel in self._channels:
            await channel.call("flush")
        self._raise_pending()

    # ------------------------------------------------------------ background mode
    async def start(self) -> Monitor:
        """Starts background polling on the running loop; each target is polled now, then every interval.

        More than 256 targets with one interval are polled in groups of 256:
        the first now, each next one ``interval / 64`` later, so that a crowd's
        polls are spread over the interval instead of making one burst.
        """
        if self._loop is not None:
            return self
        self._raise_pending()
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._stopped = False
        for channel in self._channels:
            channel.start()
        for watch in self._watches.values():
            self._spawn(watch)
        return self

    async def stop(self, *, log_final: bool | None = None) -> None:
        """Stops polling, logs final snapshots, drains every queue and flushes every sink.

        A final snapshot is taken of each watch whose ``log_on_close`` holds
        (``log_final`` overrides). Returns within about ``stop_timeout`` plus
        the longest watch timeout even when a target or a sink hangs (with
        ``close_sinks=True``, closing the sinks gets another ``stop_timeout``;
        a sink that does not close in time is left with a warning). A second
        call is a no-op. With ``on_error="raise"`` the first error is raised
        here unless it was raised already.
        """
        if self._stop_lock is None:
            self._stop_lock = asyncio.Lock()
        async with self._stop_lock:
            if self._stopped:
                self._raise_pending()
                return
            self._stopped = True
            await self._cancel_polls()
            if self._errors.error is None:
                await self._final_snapshots(log_final)
            await self._drain_and_flush()
            for channel in self._channels:
                await channel.halt()
            if self.close_sinks:
                await asyncio.gather(
                    *(channel.call("close", self.stop_timeout) for channel in self._channels)
                )
            if self._stop_event is not None:
                self._stop_event.set()
            self._loop = None
        self._raise_pending()

    async def run(self) -> None:
        """Starts, then waits until :meth:`stop` is called or the task is cancelled; cleans up like stop()."""
        await self.start()
        assert self._stop_event is not None
        try:
            await self._stop_event.wait()
        finally:
            await self.stop()

    async def __aenter__(self) -> Monitor:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _halt_polling(self) -> None:
        """on_error="raise" in background mode: stop polling now, let run()/stop() re-raise.

        Every poll task is cancelled, the one that just failed included (it
        ends at its next await); a caller's own task (a ``step()``) is not one.
        """
        for task in self._tasks.values():
            task.cancel()
        if self._stop_event is not None:
            self._stop_event.set()

    async def _cancel_polls(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self.stop_timeout)

    async def _final_snapshots(self, log_final: bool | None) -> None:
        watches = [
            w for w in self._watches.values() if (w.log_on_close if log_final is None else log_final)
        ]
        if not watches:
            return
        poller = self._poller
        for watch, record in zip(watches, await asyncio.gather(*(poller.poll(w, force=True) for w in watches)), strict=True):
            if record is None and watch.failing:
                log.warning("final snapshot of watch %r skipped: its stats() failed or hung", watch.name)

    async def _drain_and_flush(self) -> None:
        """Drains and flushes every sink at once, so a hung sink never eats another's stop_timeout."""
        await asyncio.gather(*(channel.finish(self.stop_timeout) for channel in self._channels))

    def _raise_pending(self) -> None:
        error = self._errors.take()
        if error is not None:
            raise error

    # ----------------------------------------------------------------- self-stats
    def stats(self) -> dict[str, float]:
        """The monitor's own counters, flat, so a monitor can watch itself.

        Keys: ``polls``, ``polls_failed``, ``polls_timed_out``, ``polls_missed``,
        ``records``, ``values_dropped``, ``watches``, ``targets_dead`` (dead
        targets polled with backoff now), ``targets_died`` (deaths so far) and, per sink label,
        ``sink/<label>/queued`` (records waiting now), ``written``, ``dropped``,
        ``errors`` and ``write_seconds``.
        """
        c = self._counters
        out = {
            "polls": float(c.polls),
            "polls_failed": float(c.polls_failed),
            "polls_timed_out": float(c.polls_timed_out),
            "polls_missed": float(c.polls_missed),
            "records": float(c.records),
            "values_dropped": float(c.values_dropped),
            "watches": float(len(self._watches)),
            "targets_dead": float(c.targets_dead),
            "targets_died": float(c.targets_died),
        }
        for channel in self._channels:
            channel.report(out)
        return out
