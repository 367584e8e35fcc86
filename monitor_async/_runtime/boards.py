"""Boards: where the members of a reduction publish their latest snapshot and its reader finds them all.

- ``StoreBoard``: the job's own ``torch.distributed`` key-value store
  (the ``TCPStore`` of ``init_process_group``), through connections of our
  own. Writes go out on one daemon thread, the latest snapshot replacing an
  unsent one, so a store that hangs (its host frozen) blocks that thread
  only; the main rank reads on the monitor's worker threads, under the
  watch's timeout.
- ``RayBoard``: a named Ray actor of the job, for jobs run on Ray.
- ``LocalBoard``: a dict, for a group of targets in one process and for
  a job of one rank.

Never a collective and never a server of ours.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import json
import logging
import sys
import threading
import time
import weakref
from typing import Any

from .._core.backoff import Backoff
from .._core.exceptions import ConfigError
from .._core.policy import describe
from .._core.threads import WorkerPool
from .._core.world import World

__all__ = ["STORE_TIMEOUT", "Board", "LocalBoard", "RayBoard", "StoreBoard", "board_for"]

log = logging.getLogger("monitor_async")

STORE_TIMEOUT = 10.0
"""Seconds a store call of ours may take (our own connection's timeout, when the job's is longer)."""
_BACKOFF = Backoff(first=1.0, cap=30.0)
"""The waits between failed publishing rounds to a store: 1 s, doubling up to 30 s."""


class Board:
    """Where members publish their latest snapshot and the reducer reads them all."""

    blocking = False
    """Whether ``read`` does network I/O (the reducer then runs on a worker thread)."""

    def publish(self, member: int, seq: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def read(self) -> Any:
        """``{member: (seq, values)}``, or an awaitable of it."""
        raise NotImplementedError

    def close(self) -> None:
        return None

    def retire(self) -> list[threading.Thread]:
        """Lets the board's idle threads end now (a stopped monitor keeps none); those not inside a call."""
        return []


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
        self._calls = 0  # store calls in flight (the writer's and the reader's)
        self._quiet = threading.Condition(self._lock)
        _boards.add(self)

    def close(self, wait: float = STORE_TIMEOUT + 1.0) -> None:
        """Stops publishing and reading, and lets go of the store connections after the calls in flight.

        Run at interpreter exit: a daemon thread that comes back from a store
        call (a write, or the main rank's read) while the interpreter shuts
        down aborts the whole process ("terminate called without an active
        exception"), so exit waits for the calls in flight, ``wait`` seconds
        at most (a call gives up after the connection's timeout anyway), and
        no new call starts.
        """
        with self._lock:
            self._closed = True
            self._pending.clear()
            if self._quiet.wait_for(lambda: self._calls == 0, timeout=wait):
                self._writer = self._reader = None

    def retire(self) -> list[threading.Thread]:
        """Lets the publishing thread end once idle (a later snapshot starts it again)."""
        return self._pool.retire()

    def _begin_call(self) -> bool:
        """Under the lock: one more store call in flight, unless the board is closed."""
        if self._closed:
            return False
        self._calls += 1
        return True

    def _end_call(self) -> None:
        with self._lock:
            self._calls -= 1
            if not self._calls:
                self._quiet.notify_all()

    def _client(self) -> Any:
        """A connection of our own to the job's store (``clone()``), so the program's own use is untouched.

        Its timeout is at most ``STORE_TIMEOUT``: a call to a frozen store
        host gives up then rather than after the job's timeout (minutes).
        """
        clone = getattr(self._base, "clone", None)
        if not callable(clone):
            return self._base
        try:
            client = clone()
        except RuntimeError:
            return self._base
        with contextlib.suppress(AttributeError, RuntimeError, TypeError):
            if client.timeout > datetime.timedelta(seconds=STORE_TIMEOUT):
                client.set_timeout(datetime.timedelta(seconds=STORE_TIMEOUT))
        return client

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
        self._pool.submit(self._send)

    def _send(self) -> None:
        """The writing thread: the latest snapshot of each key, until none waits; after a failure, backoff."""
        failures = 0
        while True:
            with self._lock:
                pending, self._pending = self._pending, {}
                if not pending or not self._begin_call():  # in a store call from here: close() waits
                    self._sending = False
                    return
            try:
                if self._writer is None:
                    self._writer = self._client()
                for key, blob in pending.items():
                    self._writer.set(key, blob)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - a store gone or frozen: keep polling, say it once
                self._writer = None
                failures += 1
                if not self._warned:
                    self._warned = True
                    log.warning(
                        "reduce: cannot publish to the torch.distributed store (%s); retrying "
                        "with backoff, quietly", describe(exc),
                    )
            finally:
                self._end_call()
            if failures:
                time.sleep(_BACKOFF.ceiling(failures - 1))  # in Python, not in the store: safe at interpreter exit

    def read(self) -> dict[int, tuple[int, dict[str, float]]]:
        with self._lock:
            if not self._begin_call():
                raise RuntimeError("the reduction's store board is closed (the interpreter is exiting)")
        try:
            return self._read()
        finally:
            self._end_call()

    def _read(self) -> dict[int, tuple[int, dict[str, float]]]:
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
    """The Ray actor behind ``RayBoard``: the latest snapshot of every member."""

    def __init__(self) -> None:
        self.latest: dict[int, tuple[int, dict[str, float]]] = {}

    def put(self, member: int, seq: int, values: dict[str, float]) -> None:
        self.latest[member] = (seq, values)

    def read(self) -> dict[int, tuple[int, dict[str, float]]]:
        return self.latest


class RayBoard(Board):
    """A named, detached Ray actor (``monitor_async/<job id>/<watch>``), created by whichever rank comes first.

    Detached so that the rank which happened to create it can exit without
    taking it from the others; it ends with the cluster (or ``ray.kill``).

    Publishing is a fire-and-forget actor call; reading is one awaited call.
    """

    def __init__(self, watch: str) -> None:
        import ray

        cls = ray.remote(num_cpus=0)(_BoardActor)
        # detached, so that no rank's exit takes it away from the others; named per Ray job
        job = ray.get_runtime_context().get_job_id()
        self._actor: Any = cls.options(
            name=f"monitor_async/{job}/{watch}", get_if_exists=True, lifetime="detached"
        ).remote()

    def publish(self, member: int, seq: int, values: dict[str, float]) -> None:
        self._actor.put.remote(member, seq, values)

    def read(self) -> Any:
        return self._actor.read.remote()


def board_for(via: str, store: Any, watch: str, world: World) -> Board:
    """The board a watch's snapshots travel on (``Reduce(via=..., store=...)``)."""
    dist: Any = sys.modules.get("torch.distributed")
    if store is None and via in ("auto", "store") and dist is not None and dist.is_initialized():
        store = dist.distributed_c10d._get_default_store()
    if store is not None and via != "ray":
        return StoreBoard(store, watch, world)
    if via == "store":
        raise ConfigError(
            f"watch {watch!r}: reduce via='store' needs an initialised torch.distributed "
            "(init_process_group) or Reduce(store=...)"
        )
    ray: Any = sys.modules.get("ray")
    if via == "ray" or (world.world_size > 1 and ray is not None and ray.is_initialized()):
        return RayBoard(watch)
    if world.world_size > 1:
        raise ConfigError(
            f"watch {watch!r}: reduce across {world.world_size} ranks needs torch.distributed "
            "(init_process_group before Monitor.watch) or Ray; none is running in this process"
        )
    return LocalBoard()


