"""The monitor's lifecycle: manual ``step()``, background start/stop, pushes and its own counters.

Registering watches is `Registry`'s; where records go, `Fanout`'s and the channels'.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from .._core.alerts import Alert, AlertEvent
from .._core.checks import fractions
from .._core.distribution import DEFAULT_QUANTILES
from .._core.policy import ErrorPolicy, OnError, log
from .._core.ranks import for_rank
from .._core.schedule import Every
from .._core.threads import WorkerPool
from .._core.world import World, source_of
from .._core.world import world as detect_world
from . import signals
from .alerts import Engine, LoopLag
from .callers import Offload
from .channel import channels_for, flush_all, write_all
from .counters import GRACE, Counters
from .fanout import AlertFeed, Fanout, to_channels
from .loops import loop_gone
from .options import WatchSpec, check_monitor
from .poll import Poller
from .push import Pushes
from .reduce import Reduce
from .registry import Registry
from .resuming import Resuming
from .timers import PollTasks
from .watch import Watch

__all__ = ["Monitor"]


class Monitor:
    """Polls watched targets on the running event loop and streams their metrics to sinks.

    Each target is polled by its own task and each sink has its own bounded
    queue; what holds when a target or a sink misbehaves is in
    [the guarantees](guarantees.md).

    Args:
        sinks: a sink (see [Sink][monitor_async.Sink]), a TorchRL or AgileRL
            logger (wrapped in [LoggerSink][monitor_async.LoggerSink]), a sequence
            of them, or ``None`` (no sink; ``step()`` still returns the values).
        poll_interval: seconds between two polls of a watch that sets none of
            its own (default 1.0; > 0).
        on_error: ``"warn"`` (default), ``"ignore"`` or ``"raise"``: what a
            failing target or sink does ([errors](errors.md#what-happens-when-something-fails)).
        queue_size: records each sink's queue holds (default 1024), and 16 times
            as many pushes waiting for the loop; past them the oldest are dropped and counted.
        max_batch: the most records one ``sink.write`` call gets (default 256).
        poll_timeout: seconds a poll may take, for a watch without its own
            ``timeout`` (default ``None``: the watch's poll interval).
        close_sinks: close the sinks at ``stop()`` (default ``False``: only flush them).
        stop_timeout: seconds ``stop()``, ``flush()`` and ``close()`` wait for a
            sink before giving it up with a warning (default 5.0).
        thread_limit: worker threads for thread-offloaded ``stats()`` calls (default 8).
        max_values: values kept per snapshot or push (default 10,000); the rest
            are counted in ``values_dropped``.
        batch_wait: seconds a background writer lets records gather before it
            writes (default 0.25; ``0`` writes at once).
        world: this process's place in a job ([World][monitor_async.distributed.World]);
            default: [detected][monitor_async.distributed.world].
        alerts: alert rules ([`Alert`][monitor_async.Alert], e.g. `Alert.defaults()`);
            see [alerts](alerts.md).
        notify: callables `fn(event)` (sync or `async def`) called with every
            [`AlertEvent`][monitor_async.AlertEvent], off the poll path.
        notify_timeout: seconds a notifier call may take (default 10.0).
        handle_signals: stop as ``stop()`` does when SIGTERM or SIGHUP ends the
            process, which then ends by that signal (default ``True``; see
            [ending by signal](guarantees.md#ending-by-signal-is-a-stop-test_signalspy)).
        quantiles: the quantiles of every distribution's summary (default
            ``(0.5, 0.9, 0.99)``: ``p50``, ``p90``, ``p99``); see [distributions](distributions.md).
        distributions: summarise values that are many numbers (lists, arrays,
            tensors) as distributions (default ``True``); ``False`` leaves them
            out, counted in ``values_dropped``, as TorchRL does.

    Raises:
        ConfigError: an option is out of range (the message names it).
        SinkTypeError: something given as a sink is neither a sink nor a logger.

    Examples:
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
        alerts: Sequence[Alert] | None = None,
        notify: Sequence[Callable[[AlertEvent], Any]] | Callable[[AlertEvent], Any] | None = None,
        notify_timeout: float = 10.0,
        handle_signals: bool = True,
        quantiles: Sequence[float] = DEFAULT_QUANTILES,
        distributions: bool = True,
    ) -> None:
        check_monitor(dict(
            on_error=on_error, poll_interval=poll_interval, stop_timeout=stop_timeout, notify_timeout=notify_timeout,
            poll_timeout=poll_timeout, batch_wait=batch_wait, queue_size=queue_size, max_batch=max_batch,
            thread_limit=thread_limit, max_values=max_values, world=world, alerts=alerts, handle_signals=handle_signals,
            quantiles=quantiles, distributions=distributions,
        ))
        # the quantiles of every distribution (None: values of many numbers are left out)
        summarised = fractions("Monitor", "quantiles", quantiles) if distributions else None
        self.poll_interval = float(poll_interval)
        self.poll_timeout = poll_timeout
        self.stop_timeout = float(stop_timeout)
        self.close_sinks = close_sinks
        self._handle_signals = handle_signals
        self._thread_limit = thread_limit
        self._pool: WorkerPool | None = None
        self._errors = ErrorPolicy(on_error)
        self._errors.on_fatal = self._halt_polling
        self.world = world if world is not None else detect_world()
        source = source_of(self.world)  # Record.source of this monitor's records
        sinks = for_rank(sinks, self.world)  # a ranks="main" sink is never opened away from rank 0
        self._channels = channels_for(sinks, queue_size, max_batch, self._errors, float(batch_wait))
        self._counters = Counters()
        notifiers = [] if notify is None else [notify] if callable(notify) else list(notify)
        self._alerts = Engine(alerts or (), notifiers, float(notify_timeout), to_channels(self._channels), source)
        self._feed = AlertFeed(self._alerts)  # how the parts that feed the rules hold them
        fanout = Fanout(self._channels, self._counters, self._feed)
        self._pushes = Pushes(
            queue_size, max_values, self._errors, fanout, source, alerts=self._feed, quantiles=summarised,
            pool=self._worker_pool,
        )
        self._poller = Poller(self._counters, fanout, self._errors, self._worker_pool, self._feed)
        self._tasks = PollTasks(self._poller)
        self._lag = LoopLag(self._alerts, self._tasks.beside)
        self._registry = Registry(
            poll_interval=self.poll_interval, poll_timeout=poll_timeout, max_values=max_values, world=self.world,
            source=source, alerts=self._alerts, pool=self._worker_pool, counters=self._counters,
            added=self._added, removed=self._removed, quantiles=summarised,
        )
        self._watches = self._registry.watches
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._stop_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._stopped = False
        self._finals_taken = False  # a stop() under way took the final snapshots already
        self._retired: list[threading.Thread] = []
        """Idle worker threads let go at the last stop() (they end promptly; ``SyncMonitor.close()`` joins them)."""
        self._resuming = Resuming()

    def __reduce__(self) -> Any:
        raise TypeError(
            "cannot pickle a Monitor: it owns tasks, threads and its sinks; create one in the child process "
            "(build a Monitor there, with sinks of its own)"
        )

    @property
    def retired_threads(self) -> list[threading.Thread]:
        """The idle worker threads let go at the last ``stop()``: they end promptly, so a caller may join them."""
        return list(self._retired)

    def stop_bound(self) -> float:
        """Seconds within which ``stop()`` returns whatever hangs (see its docstring), with some slack."""
        longest = max((w.timeout for w in self._watches.values()), default=0.0)
        return 2 * longest + (2 if self.close_sinks else 1) * self.stop_timeout + 4 * GRACE + 1.0

    def rearm(self) -> None:
        """Lets the next ``stop()`` do its work again without starting to poll (for a facade driving ``step()``)."""
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
        target: Any = None,
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
        quantiles: Sequence[float] | None = None,
    ) -> str:
        """Registers ``target`` and returns its watch name; works before and while running.

        How targets are polled, scheduled and turned into rates is in
        [the watching guide](watching.md).

        Args:
            target: an object with a ``stats()`` method (plain, ``async def`` or
                returning an awaitable), a Ray actor handle or a manager proxy;
                ``None`` when ``stats_fn`` is given.
            name: the watch name, unique, prefixing every key (``"<name>/<metric>"``).
                Default: the target's lowercase class name, numbered ``_1``, ``_2``...
            schedule: when a snapshot is logged: [Every.seconds][monitor_async.Every.seconds]
                or [Every.counter][monitor_async.Every.counter]. Default ``None``: every poll.
            step: the snapshot key used as the record's step (default: a counter
                schedule's key, else ``None``).
            stats_fn: called instead of ``target.stats``.
            stats_kwargs: keyword arguments of every ``stats()`` call.
            rate_keys: counters to derive ``<key>_per_second`` from (default:
                TorchRL's counters, see [rates](watching.md#rates)).
            log_on_start: log the first poll (default ``True``; ``False``: it only
                records baselines).
            log_on_close: take a final snapshot at ``stop()`` (default ``True``).
            poll_interval: seconds between polls (default: the monitor's).
            timeout: seconds a poll may take (default: ``poll_timeout``, else the
                poll interval).
            offload: where a sync ``stats()`` runs: ``"inline"``, ``"thread"`` or
                ``"auto"`` (default; see [what can be watched](watching.md#what-can-be-watched)).
            reduce: ``{"loss": "mean", ...}`` or a [Reduce][monitor_async.distributed.Reduce]:
                also log ``"<name>/all"`` reduced across ranks, or over a list of
                targets ([reductions](distributed.md#reductions)).
            quantiles: the quantiles of this watch's distributions (default: the
                monitor's); see [distributions](distributions.md).

        Returns:
            The watch name.

        Raises:
            ConfigError: a duplicate name (or one given to ``log()``), or an option
                out of range; nothing is registered.
            WatchTypeError: there is nothing to call (no ``stats()``, no ``stats_fn``).

        Examples:
            >>> import asyncio
            >>> from monitor_async import Every, Monitor
            >>> async def main():
            ...     monitor = Monitor()
            ...     name = monitor.watch(stats_fn=lambda: {"frames": 100}, name="collector",
            ...                          schedule=Every.counter("frames", 50))
            ...     return name, await monitor.step()
            >>> asyncio.run(main())
            ('collector', {'collector': {'collector/frames': 100.0}})
        """
        spec = WatchSpec(
            schedule=schedule, step=step, stats_fn=stats_fn, stats_kwargs=stats_kwargs, rate_keys=rate_keys,
            log_on_start=log_on_start, log_on_close=log_on_close, poll_interval=poll_interval, timeout=timeout,
            offload=offload, quantiles=quantiles,
        )
        try:
            return self._registry.watch(target, name, spec, reduce)
        finally:
            self._retired.extend(self._registry.released())

    def _added(self, watch: Watch) -> None:
        """A watch was registered: polled from now on when the monitor runs."""
        if self._loop is not None:
            self._tasks.spawn(watch, self._loop)

    def unwatch(self, name: str) -> None:
        """Stops polling the named target, leaving the target alone; a reduced watch goes whole.

        A ``stats()`` call still running on a worker thread is abandoned (counted
        in ``calls_abandoned``) and its thread slot freed.
        """
        try:
            self._registry.remove(name)
        finally:
            self._retired.extend(self._registry.released())

    def _removed(self, name: str) -> None:
        """A watch was removed: its polling ends."""
        self._tasks.end(name)

    def watches(self) -> dict[str, str]:
        """``{watch name: how its stats() is called}`` (``inline``, ``thread``, ``remote``)."""
        return {name: watch.caller.mode for name, watch in self._watches.items()}

    # ------------------------------------------------------------------- alerts
    def alert(self, rule: Alert) -> None:
        """Adds an alert rule, before or while running; it is checked against the watches it concerns.

        Args:
            rule: an [`Alert`][monitor_async.Alert] (e.g. `Alert.stalled("collector/frames", after=60)`).

        Raises:
            ConfigError: the rule cannot hold for a watch it concerns (the
                message names the rule, the watch and the parameter).

        Examples:
            >>> from monitor_async import Alert, Monitor
            >>> monitor = Monitor()
            >>> monitor.alert(Alert.quiet("collector", after=30))
            >>> monitor.firing()
            []
        """
        self._feed.add(rule)
        if self._loop is not None:
            self._alerts.start(self._loop)

    def firing(self) -> list[AlertEvent]:
        """The events of the alerts firing now (one per rule, watch, key and source)."""
        return self._alerts.firing()

    @property
    def own_loop(self) -> bool:
        """Whether the loop the monitor runs on is its own (`SyncMonitor`), for the blocked-loop warning."""
        return self._lag.own_loop

    @own_loop.setter
    def own_loop(self, value: bool) -> None:
        self._lag.own_loop = bool(value)

    def log(self, name: str, metrics: Mapping[str, Any], *, step: int | None = None,
            time: float | None = None) -> None:
        """Pushes values from your own loop as a record named ``name``, written to every sink.

        Safe from any thread, never blocks, never raises on what it is given; what
        it promises is in [the pushing guide](pushing.md#what-it-guarantees).

        Args:
            name: the record's name and the prefix of its keys; not the name of a watch.
            metrics: a mapping of numbers, nested mappings flattened with ``/``;
                copied whole at the call.
            step: the record's step (an int), or ``None`` for the sinks to number
                the records of ``name``.
            time: the record's unix time (TensorBoard's ``walltime``); ``None``: now.

        Raises:
            ConfigError: ``name`` is the name of a watch.

        Examples:
            >>> import asyncio
            >>> from monitor_async import Monitor
            >>> from monitor_async.backends import MemorySink
            >>> async def main():
            ...     sink = MemorySink()
            ...     monitor = Monitor(sink)
            ...     monitor.log("learner", {"loss": 0.25, "lr": 3e-4}, step=10)
            ...     await monitor.flush()
            ...     return [(r.name, r.step, r.metrics) for r in sink.records]
            >>> asyncio.run(main())
            [('learner', 10, {'learner/loss': 0.25, 'learner/lr': 0.0003})]
        """
        try:
            known = name in self._registry.pushed
        except TypeError:  # an unhashable name: a dropped push, reported on the loop
            known = True
        if not known:
            self._registry.claim_push_name(name)
        self._pushes.push(name, metrics, step, time)

    def pusher(self, name: str, owned: bool = False) -> Callable[[str, Any, Any, Any], None]:
        """``push(name, metrics, step, time)``: ``log()`` without its check of ``name`` (``owned``: nor its copy)."""
        if name not in self._registry.pushed:
            self._registry.claim_push_name(name)
        return self._pushes.push_owned if owned else self._pushes.push

    # --------------------------------------------------------------- manual mode
    async def step(self) -> dict[str, dict[str, float]]:
        """Polls every target once, writes what is due to every sink, and returns it.

        Returns ``{watch name: {"<name>/<metric>": value}}`` of the targets that
        logged, once every sink has written them. With ``on_error="raise"`` the
        first failure is raised after the others were polled and written.
        """
        await self._begin()
        self._pushes.drain()
        if self._loop is None:
            self._alerts.resume()  # in manual mode, time runs between steps
        logged = await self._poller.poll_each(list(self._watches.values()))
        await write_all(self._channels)  # every sink at once: a hung one holds back none of the others
        self._alerts.check_all()
        self._raise_pending()
        return logged

    async def flush(self) -> None:
        """Writes every queued record, then flushes every sink; returns within about ``stop_timeout``.

        A sink that does not write its queue in time is not flushed; its records stay queued, with a warning.
        """
        await self._begin()
        await self._pushes.settle()
        await flush_all(self._channels, self.stop_timeout)
        self._raise_pending()

    # ------------------------------------------------------------ background mode
    async def start(self) -> Monitor:
        """Starts background polling on the running loop: each target now, then every interval.

        More than 256 targets of one interval start in groups of 256, ``interval / 64`` apart.
        """
        if self._loop is not None and loop_gone(self._loop):
            self._forget_loop()  # the last loop ended without stop(): start afresh on this one
        if self._loop is not None:
            if not self._finals_taken:
                return self
            await self.stop()  # a stop() cancelled half way: finish it, then start afresh
        self._raise_pending()
        await self._begin()
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._stopped = False
        self._finals_taken = False
        for channel in self._channels:
            channel.start()
        for watch in self._watches.values():
            self._tasks.spawn(watch, self._loop)
        self._pushes.attach(self._loop)
        self._lag.start(self._loop)
        self._alerts.start(self._loop)
        if self._handle_signals:
            signals.enlist(self, self._loop)
        return self

    def _forget_loop(self) -> None:
        """Lets go of a loop that closed under a running monitor: its tasks died with it."""
        log.info("monitor-async: the loop this monitor ran on ended without stop(); starting afresh")
        self._tasks.forget(self._watches)
        self._pushes.attach(None)
        for channel in self._channels:
            channel.forget_loop()
        self._loop = None
        self._finals_taken = False

    async def stop(self, *, log_final: bool | None = None) -> None:
        """Stops polling, logs final snapshots, drains every queue and flushes every sink.

        Returns in bounded time whatever hangs ([bounded stop](guarantees.md#bounded-stop-test_bounded_stoppy));
        a second call is a no-op unless the first was cancelled half way. With
        ``on_error="raise"`` the first error is raised here unless it was already.

        Args:
            log_final: take a final snapshot of every watch (``True``), of none
                (``False``), or of those whose ``log_on_close`` holds (``None``, default).
        """
        if self._loop is not None and loop_gone(self._loop):
            self._forget_loop()
        await self._begin()
        async with self._stop_lock_here():
            if self._stopped:
                if self._pushes.waiting:  # pushed after the last stop(): written all the same
                    self._pushes.drain()
                    await self._drain_and_flush()
                self._raise_pending()
                return
            if not self._finals_taken:
                self._lag.stop()  # a loop blocked until now is still seen
                self._counters.polls_missed += self._tasks.missed(self._watches, self._loop)
                self._alerts.stop()  # no event after stop(); the time stopped does not count
                await self._tasks.cancel(self._watches, self.stop_timeout)
                self._pushes.attach(None)
                await self._pushes.settle()  # everything pushed before stop() is written
                if self._errors.error is None:
                    await self._poller.finals(self._watches.values(), log_final)
                for watch in self._watches.values():
                    watch.slots.stop()
                self._finals_taken = True
            await self._drain_and_flush()
            await asyncio.gather(*(channel.halt(GRACE) for channel in self._channels))
            if self.close_sinks:
                await asyncio.gather(*(channel.call("close", self.stop_timeout) for channel in self._channels))
            self._retire_threads()
            self._stopped = True
            self._finals_taken = False
            if self._stop_event is not None:
                self._stop_event.set()
            self._loop = None
            signals.discharge(self)
        self._raise_pending()

    def _stop_lock_here(self) -> asyncio.Lock:
        """The lock that serialises stop() calls, made for the running loop (a restart may use another)."""
        loop = asyncio.get_running_loop()
        if self._stop_lock is None or self._stop_lock[0] is not loop:
            self._stop_lock = (loop, asyncio.Lock())
        return self._stop_lock[1]

    async def run(self) -> None:
        """Starts, then waits until [stop][monitor_async.Monitor.stop] is called or the task is cancelled; cleans up like stop()."""
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
        self._tasks.halt()
        if self._stop_event is not None:
            self._stop_event.set()

    async def _drain_and_flush(self) -> None:
        """Drains and flushes every sink at once, so a hung sink never eats another's stop_timeout."""
        await asyncio.gather(*(channel.finish(self.stop_timeout) for channel in self._channels))

    def _retire_threads(self) -> None:
        """Lets the idle worker threads (thread-offloaded stats(), blocking sinks, reductions' publishing) end now.

        Not after their 10 s idle timeout.
        """
        retired = self._pool.retire() if self._pool is not None else []
        for channel in self._channels:
            retired.extend(channel.retire_threads())
        retired.extend(self._registry.retire_boards())
        self._retired = retired

    def _raise_pending(self) -> None:
        error = self._errors.take()
        if error is not None:
            raise error

    # ----------------------------------------------------------------- resuming
    def state_dict(self) -> dict[str, Any]:
        """What a restarted process needs to continue this run: a small plain dict to save in a checkpoint.

        It holds the launch it is taken in, each watch's last step and time,
        what each sink needs to reattach and the alert episodes firing now;
        ``json`` and ``pickle`` take it. See [Resuming a run](resuming.md).
        """
        return self._resuming.state(self._watches, self._channels, self._pushes, self._alerts)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues the run ``state`` (from `state_dict`, in the process that was stopped) was taken in.

        Call it before ``start()`` or the first ``step()``. Loading again before
        then replaces the state loaded first. See [Resuming a run](resuming.md).

        Raises:
            ConfigError: polling began already, or ``state`` is not a state this
                version reads (the message says what is wrong).
        """
        self._resuming.load(state)

    async def _begin(self) -> None:
        await self._resuming.begin(self._watches, self._channels, self._alerts)

    # ----------------------------------------------------------------- self-stats
    def stats(self) -> dict[str, float]:
        """The monitor's own counters, flat, so a monitor can watch itself.

        The keys are listed in [the counters](errors.md#the-monitors-own-counters).
        """
        out = self._counters.report(len(self._watches), self._pushes.dropped, self._lag.lag_max)
        self._alerts.report(out)
        for channel in self._channels:
            channel.report(out)
        return out
