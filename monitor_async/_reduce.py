"""Reductions: ``watch(..., reduce={"loss": "mean"})`` across the ranks of a job, or over a group of targets.

Every rank's watch *publishes* the reduced keys of each record it logs on a
board; the main rank has one more watch, ``"<name>/all"``, whose ``stats()``
reads the board and reduces what it finds. The board is a side channel of an
engine the job already runs, never a collective and never a server of ours:

- :class:`StoreBoard`: the job's own ``torch.distributed`` key-value store
  (the ``TCPStore`` of ``init_process_group``), through a connection of our
  own. Writes go out on one daemon thread, the latest snapshot replacing an
  unsent one, so a store that hangs (its host frozen) blocks that thread
  only; the main rank reads on the monitor's worker threads, under the
  watch's timeout.
- :class:`RayBoard`: a named Ray actor of the job, for jobs run on Ray.
- :class:`LocalBoard`: a dict, for a group of targets in one process and for
  a job of one rank.

Staleness is judged on the reader's clock: a member whose snapshot has not
changed for ``stale`` seconds (default three poll intervals) is left out and
counted, so clocks that differ between hosts do not matter.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from time import monotonic
from typing import Any

from ._exceptions import ConfigError
from ._record import Record
from ._threads import WorkerPool
from ._watch import Watch
from .distributed import World

__all__ = [
    "REDUCTIONS",
    "LocalBoard",
    "RayBoard",
    "Reduce",
    "ReducedWatch",
    "Reduction",
    "StoreBoard",
    "reduce_values",
    "watch_reduced",
]

log = logging.getLogger("monitor_async")

REDUCTIONS: tuple[str, ...] = ("sum", "mean", "min", "max", "p50", "p90", "p99")


def reduce_values(values: Sequence[float], how: str) -> float:
    """One reduction of ``values`` (not empty): ``sum``, ``mean``, ``min``, ``max``, or ``p50``/``p90``/``p99``.

    Percentiles interpolate linearly between the closest ranks (numpy's default).

    Args:
        values: one value per rank or member.
        how: the reduction's name.

    Returns:
        The reduced value.

    Example:
        >>> reduce_values([1.0, 2.0, 3.0, 10.0], "mean"), reduce_values([1.0, 2.0, 3.0, 10.0], "p50")
        (4.0, 2.5)
    """
    if how == "sum":
        return math.fsum(values)
    if how == "mean":
        return math.fsum(values) / len(values)
    if how == "min":
        return min(values)
    if how == "max":
        return max(values)
    ordered = sorted(values)
    at = float(how[1:]) / 100 * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


@dataclass(frozen=True)
class Reduce:
    """What ``Monitor.watch(reduce=...)`` reduces, and how snapshots travel.

    A plain mapping passed as ``reduce=`` means ``Reduce(that_mapping)``.

    Args:
        keys: ``{snapshot key: reduction}``, a reduction being one of
            ``sum``, ``mean``, ``min``, ``max``, ``p50``, ``p90``, ``p99``, or
            a list of them (then each gets its own metric,
            ``"<name>/all/<key>/<reduction>"``).
        stale: seconds after which a rank (or member) whose snapshot has not
            changed is left out and counted; default three poll intervals.
        via: the board across ranks: ``"auto"`` (the job's ``torch.distributed``
            store when it is initialised, else Ray when this process is
            connected to Ray, else this process only), ``"store"``, ``"ray"``.
        store: a ``torch.distributed.Store`` to use instead of the default
            process group's.

    Raises:
        ConfigError: for an unknown reduction, an empty mapping, a bad ``stale`` or ``via``.

    Example:
        >>> Reduce({"loss": "mean", "step_time": ["max", "p90"]}).metrics()
        [('loss', 'mean', 'loss'), ('step_time', 'max', 'step_time/max'), ('step_time', 'p90', 'step_time/p90')]
    """

    keys: Mapping[str, str | Sequence[str]]
    stale: float | None = None
    via: str = "auto"
    store: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.keys, Mapping) or not self.keys:
            raise ConfigError(f"reduce: expected a non-empty mapping of key -> reduction, got {self.keys!r}")
        for key, hows in self.keys.items():
            for how in [hows] if isinstance(hows, str) else list(hows):
                if how not in REDUCTIONS:
                    raise ConfigError(
                        f"reduce: unknown reduction {how!r} for key {key!r}; choose among {', '.join(REDUCTIONS)}"
                    )
        if self.stale is not None and not (isinstance(self.stale, (int, float)) and self.stale > 0):
            raise ConfigError(f"reduce: stale must be a strictly positive number of seconds, got {self.stale!r}")
        if self.via not in ("auto", "store", "ray"):
            raise ConfigError(f"reduce: via must be 'auto', 'store' or 'ray', got {self.via!r}")

    @classmethod
    def of(cls, value: Reduce | Mapping[str, str | Sequence[str]], watch: str | None) -> Reduce:
        """``value`` as a Reduce; errors name the watch."""
        if isinstance(value, Reduce):
            return value
        try:
            return cls(value)
        except ConfigError as exc:
            raise ConfigError(f"watch {watch!r}: {exc}" if watch else str(exc)) from None

    def metrics(self) -> list[tuple[str, str, str]]:
        """``(snapshot key, reduction, output key)`` for every reduced metric."""
        out = []
        for key, hows in self.keys.items():
            if isinstance(hows, str):
                out.append((key, hows, key))
            else:
                out.extend((key, how, f"{key}/{how}") for how in hows)
        return out


# ---------------------------------------------------------------------- boards
class Board:
    """Where members publish their latest snapshot and the reducer reads them all."""

    blocking = False
    """Whether :meth:`read` does network I/O (the reducer then runs on a worker thread)."""

    def publish(self, member: int, seq: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def read(self) -> Any:
        """``{member: (seq, values)}``, or an awaitable of it."""
        raise NotImplementedError

    def close(self) -> None:
        return None


class LocalBoard(Board):
    """In this process: a group of targets, or a job of one rank."""

    def __init__(self) -> None:
        self.latest: dict[int, tuple[int, dict[str, float]]] = {}

    def publish(self, member: int, seq: int, values: dict[str, float]) -> None:
        self.latest[member] = (seq, values)

    def read(self) -> dict[int, tuple[int, dict[str, float]]]:
        return dict(self.latest)


class StoreBoard(Board):
    """The job's ``torch.distributed`` store: key ``monitor_async/<watch>/<rank>`` per rank.

    Writes run on one daemon thread of their own; a write still in flight
    when the next snapshot comes makes that one wait, replaced by any newer
    one, so the loop never waits and at most one write per rank is queued.
    """

    blocking = True

    def __init__(self, store: Any, watch: str, world: World) -> None:
        self._base = store
        self._prefix = f"monitor_async/{watch}/"
        self._size = world.world_size
        self._rank = world.rank if world.main else -1  # the reader's own snapshot stays in memory
        self._own: tuple[int, dict[str, float]] | None = None
        self._lock = threading.Lock()
        self._pending: dict[str, bytes] = {}
        self._sending = False
        self._writer: Any = None
        self._reader: Any = None
        self._known: list[str] = []
        self._pool = WorkerPool(1, f"monitor-async-publish-{watch}")
        self._warned = False
        self._closed = False
        self._idle = threading.Event()
        self._idle.set()
        _boards.add(self)

    def close(self, wait: float = 1.0) -> None:
        """Stops publishing and lets go of the store connections, after a write in flight (``wait`` s at most).

        Run at interpreter exit: a store connection destroyed while a daemon
        thread still writes through it aborts the process.
        """
        with self._lock:
            self._closed = True
            self._pending.clear()
        if self._idle.wait(wait):
            self._writer = self._reader = None

    def _client(self) -> Any:
        """A connection of our own to the job's store (``clone()``), so the program's own use is untouched."""
        clone = getattr(self._base, "clone", None)
        if callable(clone):
            try:
                return clone()
            except RuntimeError:
                pass
        return self._base

    def publish(self, member: int, seq: int, values: dict[str, float]) -> None:
        if member == self._rank:
            self._own = (seq, values)
            return
        blob = json.dumps({"s": seq, "v": values}, separators=(",", ":")).encode()
        with self._lock:
            if self._closed:
                return
            self._pending[f"{self._prefix}{member}"] = blob
            if self._sending:
                return
            self._sending = True
            self._idle.clear()
        self._pool.submit(self._send)

    def _send(self) -> None:
        while True:
            with self._lock:
                pending, self._pending = self._pending, {}
                if not pending:
                    self._sending = False
                    self._idle.set()
                    return
            try:
                if self._writer is None:
                    self._writer = self._client()
                for key, blob in pending.items():
                    self._writer.set(key, blob)
            except Exception as exc:  # noqa: BLE001 - a store gone (its host died): keep polling, say it once
                if not self._warned:
                    self._warned = True
                    log.warning("reduce: cannot publish to the torch.distributed store (%r); retrying quietly", exc)

    def read(self) -> dict[int, tuple[int, dict[str, float]]]:
        if self._reader is None:
            self._reader = self._client()
        store = self._reader
        prefix = self._prefix
        out: dict[int, tuple[int, dict[str, float]]] = {}
        if self._own is not None:
            out[self._rank] = self._own
        if len(self._known) < self._size - 1:
            known = set(self._known)
            self._known = [
                f"{prefix}{r}" for r in range(self._size)
                if r != self._rank and (f"{prefix}{r}" in known or store.check([f"{prefix}{r}"]))
            ]
        if not self._known:
            return out
        blobs = store.multi_get(self._known)
        for key, blob in zip(self._known, blobs, strict=True):
            data = json.loads(bytes(blob))
            out[int(key[len(prefix):])] = (int(data["s"]), data["v"])
        return out


_boards: weakref.WeakSet[StoreBoard] = weakref.WeakSet()


@atexit.register
def _close_boards() -> None:
    for board in list(_boards):
        board.close()


class _BoardActor:
    """The Ray actor behind :class:`RayBoard`: the latest snapshot of every member."""

    def __init__(self) -> None:
        self.latest: dict[int, tuple[int, dict[str, float]]] = {}

    def put(self, member: int, seq: int, values: dict[str, float]) -> None:
        self.latest[member] = (seq, values)

    def read(self) -> dict[int, tuple[int, dict[str, float]]]:
        return self.latest


class RayBoard(Board):
    """A named Ray actor of the job (``monitor_async/<watch>``), created by whichever rank comes first.

    Publishing is a fire-and-forget actor call; reading is one awaited call.
    """

    def __init__(self, watch: str) -> None:
        import ray

        cls = ray.remote(num_cpus=0)(_BoardActor)
        self._actor: Any = cls.options(
            name=f"monitor_async/{watch}", get_if_exists=True, lifetime="detached"
        ).remote()

    def publish(self, member: int, seq: int, values: dict[str, float]) -> None:
        self._actor.put.remote(member, seq, values)

    def read(self) -> Any:
        return self._actor.read.remote()


def board_for(spec: Reduce, watch: str, world: World) -> Board:
    """The board a watch's snapshots travel on (see :class:`Reduce` ``via``)."""
    import sys

    dist: Any = sys.modules.get("torch.distributed")
    store = spec.store
    if store is None and spec.via in ("auto", "store") and dist is not None and dist.is_initialized():
        store = dist.distributed_c10d._get_default_store()
    if store is not None and spec.via != "ray":
        return StoreBoard(store, watch, world)
    if spec.via == "store":
        raise ConfigError(
            f"watch {watch!r}: reduce via='store' needs an initialised torch.distributed "
            "(init_process_group) or Reduce(store=...)"
        )
    ray: Any = sys.modules.get("ray")
    if spec.via == "ray" or (world.world_size > 1 and ray is not None and ray.is_initialized()):
        return RayBoard(watch)
    if world.world_size > 1:
        raise ConfigError(
            f"watch {watch!r}: reduce across {world.world_size} ranks needs torch.distributed "
            "(init_process_group before Monitor.watch) or Ray; none is running in this process"
        )
    return LocalBoard()


# -------------------------------------------------------------------- the two ends
def publisher(board: Board, member: int, spec: Reduce) -> Callable[[Record], None]:
    """What a member's watch calls with each record it logs: its reduced keys go to the board."""
    keys = list(spec.keys)
    seq = 0

    def publish(record: Record) -> None:
        nonlocal seq
        seq += 1
        metrics = record.metrics
        prefix = record.name + "/"
        values = {key: metrics[prefix + key] for key in keys if prefix + key in metrics}
        board.publish(member, seq, values)

    return publish


class Reduction:
    """The target of a ``"<name>/all"`` watch: reads the board, leaves out stale members, reduces.

    ``stats()`` returns each reduced metric (for the keys at least one fresh
    member reported), ``<count>`` (``ranks`` or ``targets``: how many
    snapshots went in) and ``stale`` (how many were left out).
    """

    def __init__(self, board: Board, spec: Reduce, stale: float, count: str) -> None:
        self.board = board
        self.metrics = spec.metrics()
        self.stale = stale
        self.count = count
        self.seen: dict[int, tuple[int, float]] = {}

    def stats(self) -> Any:
        got = self.board.read()
        if isinstance(got, dict):
            return self.reduce(got)
        return self._later(got)

    async def _later(self, pending: Any) -> dict[str, float]:
        return self.reduce(await pending)

    def reduce(self, latest: Mapping[int, tuple[int, Mapping[str, float]]]) -> dict[str, float]:
        now = monotonic()
        fresh: list[Mapping[str, float]] = []
        stale = 0
        seen = self.seen
        for member, (seq, values) in latest.items():
            before = seen.get(member)
            if before is None or before[0] != seq:
                seen[member] = (seq, now)
            elif now - before[1] > self.stale:
                stale += 1
                continue
            fresh.append(values)
        out: dict[str, float] = {}
        for key, how, name in self.metrics:
            found = [v[key] for v in fresh if key in v]
            if found:
                out[name] = reduce_values(found, how)
        out[self.count] = float(len(fresh))
        out["stale"] = float(stale)
        return out


# ------------------------------------------------------------------ wiring
class ReducedWatch(Watch):
    """A watch that also publishes each record it logs (a member of a reduction)."""

    __slots__ = ("publish",)

    publish: Callable[[Record], None]

    def snapshot(self, raw: object, *, force: bool = False) -> tuple[Record | None, int]:
        record, dropped = Watch.snapshot(self, raw, force=force)
        if record is not None:
            self.publish(record)
        return record, dropped


def watch_reduced(
    monitor: Any, target: Any, reduce: Reduce | Mapping[str, Any], name: str | None, options: dict[str, Any]
) -> str:
    """``monitor.watch(target, reduce=...)``: the member watches, and on the main rank the ``"/all"`` one.

    A list or tuple ``target`` is a group in this process: members are
    watched as ``"<name>/0"``, ``"<name>/1"``... and reduced into
    ``"<name>/all"`` (count key ``targets``). A single target is reduced
    across the job's ranks (count key ``ranks``); only the main rank adds
    ``"<name>/all"``. Returns the watch name (``unwatch`` it to remove all).
    """
    from ._monitor import _default_name

    spec = Reduce.of(reduce, name)
    interval = float(options.get("poll_interval") or monitor.poll_interval)
    stale = float(spec.stale or 3 * interval)
    world: World = monitor.world
    group = isinstance(target, (list, tuple))
    if group:
        if not target:
            raise ConfigError(f"watch {name!r}: a group to reduce needs at least one target")
        base = name or _default_name(target[0])
    else:
        base = name or _default_name(target)
    if base in monitor._linked or f"{base}/all" in monitor._watches:
        raise ConfigError(f"A watch named {base!r} is already registered")
    board: Board
    added: list[str] = []
    try:
        if group:
            board = LocalBoard()
            for i, member in enumerate(target):
                added.append(monitor.watch(member, name=f"{base}/{i}", _publish=publisher(board, i, spec), **options))
            count = "targets"
        else:
            board = board_for(spec, base, world)
            added.append(monitor.watch(target, name=base, _publish=publisher(board, world.rank, spec), **options))
            count = "ranks"
        if group or world.main:
            # the member's step key, when it is reduced by one reduction (samples: sum), steps "/all" too
            step = options.get("step")
            outputs = {key: out for key, _, out in spec.metrics() if isinstance(spec.keys[key], str)}
            added.append(monitor.watch(
                Reduction(board, spec, stale, count),
                name=f"{base}/all",
                step=outputs.get(step) if step is not None else None,
                poll_interval=interval,
                offload="thread" if board.blocking else "inline",
                log_on_start=options.get("log_on_start", True),
                log_on_close=options.get("log_on_close", True),
            ))
    except BaseException:
        for added_name in added:
            monitor.unwatch(added_name)
        raise
    monitor._linked[base] = added
    return base
