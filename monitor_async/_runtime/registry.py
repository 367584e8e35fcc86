"""Registration: a monitor's watches by name, its reduced groups and their boards, and the names given to ``log()``.

``Monitor.watch`` hands its options, as given, to `Registry.watch` (a
`WatchSpec`); the defaults are those of ``watch()``'s signature and of the monitor's.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .._core.distribution import DEFAULT_QUANTILES
from .._core.exceptions import ConfigError, WatchTypeError
from .._core.names import unique
from .._core.record import Record, Source
from .._core.schedule import Every
from .._core.threads import WorkerPool
from .._core.world import World
from .alerts import Engine
from .boards import Board
from .callers import make_caller
from .counters import Counters
from .options import WatchSpec
from .reduce import LocalBoard, Reduce, Reduction, board_for, publisher
from .watch import Watch

__all__ = ["Registry", "default_name", "function_name"]

_PUSH_NAMES = 65_536
"""Names given to ``log()`` that are remembered (and refused as watch names)."""


def default_name(target: Any) -> str:
    """The lowercase class name; for a manager proxy or a Ray actor handle, the class behind it."""
    name = type(target).__name__
    if name.startswith("AutoProxy[") and name.endswith("]"):
        name = name[len("AutoProxy[") : -1]
    elif name == "ActorHandle":
        descriptor = getattr(target, "_ray_actor_creation_function_descriptor", None)
        name = (getattr(descriptor, "class_name", None) or name).rpartition(".")[2]
    return name.lower()


def function_name(fn: Callable[..., Any]) -> str:
    """The default watch name of a bare ``stats_fn``: its lowercase name (``"stats"`` for a lambda)."""
    name = getattr(fn, "__name__", "")
    return name.lower() if name.isidentifier() else "stats"


class Registry:
    """The watches of one monitor, by name, and what goes with them.

    Args:
        poll_interval: the monitor's, for a watch without its own.
        poll_timeout: the monitor's, for a watch without its own ``timeout`` (``None``: the interval).
        max_values: values kept per snapshot.
        world: this process's place in its job (reductions across ranks).
        source: the ``Record.source`` of every record.
        alerts: the alert engine, told of every watch added and removed.
        pool: the worker threads of thread-offloaded ``stats()`` calls.
        counters: the monitor's counters (``calls_abandoned``).
        added: called with each watch registered (the monitor polls it, if running).
        removed: called with the name of each watch removed (its polling ends).
        quantiles: the monitor's quantiles of distributions (``None``: values of many numbers are left out).
    """

    def __init__(
        self, *, poll_interval: float, poll_timeout: float | None, max_values: int, world: World, source: Source,
        alerts: Engine, pool: Callable[[], WorkerPool], counters: Counters, added: Callable[[Watch], None],
        removed: Callable[[str], None], quantiles: tuple[float, ...] | None = DEFAULT_QUANTILES,
    ) -> None:
        self.quantiles = quantiles
        self.poll_interval = poll_interval
        self.poll_timeout = poll_timeout
        self.max_values = max_values
        self.world = world
        self.source = source
        self.alerts = alerts
        self.pool = pool
        self.counters = counters
        self.added = added
        self.removed = removed
        self.watches: dict[str, Watch] = {}
        self.linked: dict[str, list[str]] = {}  # a reduced watch's name: the watches it stands for
        self.pushed: set[str] = set()  # names given to log(): never watch names
        self.boards: dict[str, Board] = {}
        """Where ``reduce=`` watches publish across ranks, by watch name: their threads are retired at stop(),
        and a board goes with its watch at ``unwatch()``."""
        self._released: list[threading.Thread] = []  # the threads of boards let go, for the monitor to keep

    # ------------------------------------------------------------------ adding
    def watch(self, target: Any, name: str | None, spec: WatchSpec, reduce: Reduce | Mapping[str, Any] | None) -> str:
        """Registers ``target`` (a reduced group or member, with ``reduce``); returns the watch name."""
        if reduce is not None:
            return self._add_reduced(target, reduce, name, spec)
        return self._add(target, name, spec, None)

    def _add(self, target: Any, name: str | None, spec: WatchSpec, publish: Callable[[Record], None] | None) -> str:
        """Registers one watch (``publish``: a reduction member's record hook)."""
        schedule = spec.schedule
        if schedule is not None and not isinstance(schedule, Every):
            # TorchRL's Every (or any object with kind/interval/key) is accepted and validated.
            schedule = Every(kind=schedule.kind, interval=schedule.interval, key=getattr(schedule, "key", None))
        stats_fn = spec.stats_fn
        if stats_fn is None:
            stats_fn = getattr(target, "stats", None)
            if not callable(stats_fn):
                raise WatchTypeError(
                    "watch() needs a target with a stats() method, or stats_fn=" if target is None else
                    f"Cannot watch {type(target).__name__}: it has no callable stats() method "
                    "and no stats_fn was given"
                )
        elif not callable(stats_fn):
            raise WatchTypeError(f"watch: stats_fn must be callable, got {type(stats_fn).__name__}")
        name = self._name(name, target, stats_fn)
        step = spec.step
        if step is None and schedule is not None and schedule.kind == "counter":
            step = schedule.key
        interval = float(spec.poll_interval or self.poll_interval)
        self.alerts.check_watch(name, interval)
        watch = Watch(
            target=target,
            name=name,
            caller=make_caller(target, stats_fn, dict(spec.stats_kwargs or {}), spec.offload, self.pool),
            schedule=schedule,
            step_key=step,
            rate_keys=None if spec.rate_keys is None else tuple(spec.rate_keys),
            log_on_start=spec.log_on_start,
            log_on_close=spec.log_on_close,
            interval=interval,
            timeout=float(spec.timeout or self.poll_timeout or interval),
            max_values=self.max_values,
            source=self.source,
            on_record=publish,
            quantiles=None if self.quantiles is None else tuple(spec.quantiles or self.quantiles),
        )
        self.alerts.add_watch(name, interval, target, watch)
        self.watches[name] = watch
        self.added(watch)
        return name

    def _name(self, name: str | None, target: Any, stats_fn: Callable[..., Any]) -> str:
        """The watch's name: the one given, checked, or a default numbered ``_1``, ``_2``..."""
        if name is None:
            return unique(default_name(target) if target is not None else function_name(stats_fn), self.watches)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"watch: name must be a non-empty string, got {name!r}")
        if name in self.watches or name in self.linked:
            raise ConfigError(f"A watch named {name!r} is already registered")
        if name in self.pushed:
            raise ConfigError(f"watch: {name!r} is a name given to log(); pick another name for the watch")
        return name

    def _add_reduced(self, target: Any, reduce: Reduce | Mapping[str, Any], name: str | None, spec: WatchSpec) -> str:
        """``watch(target, reduce=...)``: the member watches, and (group, or main rank) ``"<name>/all"``.

        A list or tuple is a group in this process (members ``"<name>/0"``...,
        count key ``targets``); a single target is reduced across ranks (count key ``ranks``).
        """
        how = Reduce.of(reduce, name)
        interval = float(spec.poll_interval or self.poll_interval)
        world = self.world
        group = isinstance(target, (list, tuple))
        if group and not target:
            raise ConfigError(f"watch {name!r}: a group to reduce needs at least one target")
        base = name or default_name(target[0] if group else target)
        if base in self.linked or f"{base}/all" in self.watches:
            raise ConfigError(f"A watch named {base!r} is already registered")
        added: list[str] = []
        try:
            if group:
                board: Board = LocalBoard()
                members = len(target)
                for i, member in enumerate(target):
                    added.append(self._add(member, f"{base}/{i}", spec, publisher(board, i, how)))
            else:
                board = board_for(how.via, how.store, base, world)
                members = world.world_size
                self.boards[base] = board  # its threads are retired when the monitor stops
                added.append(self._add(target, base, spec, publisher(board, world.rank, how)))
                if not world.main:  # the main rank evaluates this watch's rules, for every rank
                    self.alerts.ignore(base)
            if group or world.main:
                added.append(self._add_reduction(base, board, how, spec, interval, members, group))
        except BaseException:
            for added_name in added:
                self.remove(added_name)
            self.drop_board(base)
            raise
        self.linked[base] = added
        return base

    def _add_reduction(
        self, base: str, board: Board, how: Reduce, spec: WatchSpec, interval: float, members: int, group: bool
    ) -> str:
        """The ``"<base>/all"`` watch, reading ``board``; the alert rules see every rank's values there."""
        observer = None if group else functools.partial(self.alerts.board, base, self.world.rank)
        reduction = Reduction(
            board, how, float(how.stale or 3 * interval), "targets" if group else "ranks", members, observer=observer,
            quantiles=tuple(spec.quantiles or self.quantiles or DEFAULT_QUANTILES),
        )
        # the member's step key, when it is reduced by one reduction (samples: sum), steps "/all" too
        outputs = {key: out for key, _, out in how.metrics() if isinstance(how.keys[key], str)}
        step = None if spec.step is None else outputs.get(spec.step)
        options = dataclasses.replace(
            spec, schedule=None, step=step, stats_fn=None, stats_kwargs=None, rate_keys=None, poll_interval=interval,
            timeout=None, offload="thread" if board.blocking else "inline",
        )
        return self._add(reduction, f"{base}/all", options, None)

    # ---------------------------------------------------------------- removing
    def remove(self, name: str) -> None:
        """Forgets the named watch (a reduced watch whole), each through ``removed``.

        Raises ``KeyError`` when there is no such watch. A ``stats()`` call still
        running on a worker thread is abandoned (``calls_abandoned``).
        """
        linked = self.linked.pop(name, [])
        for other in linked:
            if other != name:
                self.remove(other)
        self.drop_board(name)
        if linked and name not in self.watches:  # a group: only its members and "<name>/all" are watches
            return
        if name not in self.watches:
            raise KeyError(f"No watch named {name!r}")
        watch = self.watches.pop(name)
        if watch.caller.abandon():
            self.counters.calls_abandoned += 1
        self.alerts.remove_watch(name)
        self.removed(name)

    def drop_board(self, name: str) -> None:
        """Lets go of the board of reduced watch ``name``, if any (its threads: see `released`)."""
        board = self.boards.pop(name, None)
        if board is not None:
            self._released.extend(board.retire())

    def released(self) -> list[threading.Thread]:
        """The retired threads of the boards let go since the last call."""
        released, self._released = self._released, []
        return released

    def retire_boards(self) -> list[threading.Thread]:
        """Lets the boards' idle threads end now (at ``stop()``)."""
        return [thread for board in self.boards.values() for thread in board.retire()]

    # ------------------------------------------------------------ pushed names
    def claim_push_name(self, name: Any) -> None:
        """Remembers ``name``, given to ``log()``; ``ConfigError`` when it is a watch's."""
        try:
            if name in self.watches or name in self.linked:
                raise ConfigError(
                    f"log({name!r}, ...): {name!r} is the name of a watch; push under a name of its own "
                    "(two sources would share one chart namespace and x-axis)"
                )
            if isinstance(name, str) and len(self.pushed) < _PUSH_NAMES:
                self.pushed.add(name)
        except TypeError:  # an unhashable name: an error of that push, reported on the loop
            pass
