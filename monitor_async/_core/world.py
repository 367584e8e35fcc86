"""Where this process stands in a distributed job: job detection, and the provenance it stamps.

[world][monitor_async.distributed.world] reads an initialised
``torch.distributed`` or the launcher's environment, never another process;
[source_of][monitor_async.distributed.source_of] is what it stamps on
[Record.source][monitor_async.Record]. What sinks do with ranks is in
``ranks.py``. See [distributed runs](distributed.md).

Examples:
    >>> from monitor_async.distributed import World, world
    >>> world(environ={"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}).rank
    3
    >>> World(rank=0, world_size=1).main
    True
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .checks import number
from .record import EMPTY_SOURCE, Source

log = logging.getLogger("monitor_async")

__all__ = ["World", "source_of", "world"]

_LAUNCHERS: tuple[tuple[str, str, str, str], ...] = (
    ("env", "RANK", "WORLD_SIZE", "LOCAL_RANK"),  # torchrun, accelerate launch, deepspeed
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
)


@dataclass(frozen=True)
class World:
    """This process's place in its job.

    Attributes:
        rank: the global rank, ``0 <= rank < world_size``; rank 0 is the main rank.
        world_size: how many processes the job has.
        local_rank: the rank among the processes of this host.
        host: this host's name.
        found: where the figures came from: ``"torch.distributed"``, ``"env"``,
            ``"slurm"``, ``"mpi"``, ``"single"`` or ``"given"`` (built by hand).

    Raises:
        ConfigError: ``world_size < 1``, ``rank`` not in ``[0, world_size)`` or ``local_rank < 0``.

    Examples:
        >>> w = World(rank=1, world_size=4)
        >>> w.main, w.local_rank, w.found
        (False, 1, 'given')
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int | None = None
    host: str = field(default_factory=socket.gethostname)
    found: str = "given"

    def __post_init__(self) -> None:
        number("World", "world_size", self.world_size, integer=True)
        number("World", "rank", self.rank, integer=True, low=0, above=False, high=self.world_size - 1)
        number("World", "local_rank", self.local_rank, integer=True, low=0, above=False, none=True)
        if self.local_rank is None:
            object.__setattr__(self, "local_rank", self.rank)

    @property
    def main(self) -> bool:
        """Whether this is the main rank (rank 0), the one that logs shared-run trackers."""
        return self.rank == 0


_INTEGER = re.compile(r"[+-]?[0-9]+")
_warned: set[frozenset[tuple[str, str]]] = set()  # malformed variables already warned about, once per process


def _int(environ: Mapping[str, str], key: str, malformed: list[tuple[str, str]] | None = None) -> int | None:
    """The integer in ``environ[key]`` (ASCII digits only), or ``None``; a malformed value goes to ``malformed``."""
    value = environ.get(key)
    if value is None:
        return None
    if _INTEGER.fullmatch(value.strip()) is None:
        if malformed is not None:
            malformed.append((key, value))
        return None
    return int(value.strip())


def _warn_malformed(malformed: list[tuple[str, str]], found: World) -> None:
    """One warning per set of malformed variables: what they held and what this process is taken as."""
    key = frozenset(malformed)
    if not malformed or key in _warned:
        return
    _warned.add(key)
    held = ", ".join(f"{name}={value!r}" for name, value in malformed)
    sinks = (
        "it opens every sink, ranks='main' ones included" if found.main
        else "it opens only the sinks built with ranks='all'"
    )
    log.warning(
        "monitor-async: %s: not an integer, skipped; this process is taken as rank %d of %d (%s): %s",
        held, found.rank, found.world_size, found.found, sinks,
    )


def _from_torch(environ: Mapping[str, str], malformed: list[tuple[str, str]]) -> World | None:
    """The initialised default process group, when the program imported torch.distributed (never imports it)."""
    dist: Any = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        rank, size = int(dist.get_rank()), int(dist.get_world_size())
    except (RuntimeError, ValueError, AttributeError):
        return None
    local = _int(environ, "LOCAL_RANK", malformed)
    return World(rank, size, local if local is not None else rank, socket.gethostname(), "torch.distributed")


def world(*, environ: Mapping[str, str] | None = None) -> World:
    """This process's rank, world size, local rank and host; never raises.

    The detection order and how malformed variables are handled are in
    [where am I](distributed.md#where-am-i).

    Args:
        environ: the environment to read (default ``os.environ``).

    Returns:
        A [World][monitor_async.distributed.World].

    Examples:
        >>> w = world(environ={"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0"})
        >>> (w.rank, w.world_size, w.local_rank, w.found)
        (2, 4, 0, 'slurm')
        >>> world(environ={}).world_size
        1
    """
    env = os.environ if environ is None else environ
    malformed: list[tuple[str, str]] = []
    found = _from_torch(env, malformed) or _from_launchers(env, malformed)
    _warn_malformed(malformed, found)
    return found


def _from_launchers(env: Mapping[str, str], malformed: list[tuple[str, str]]) -> World:
    host = socket.gethostname()
    for name, rank_key, size_key, local_key in _LAUNCHERS:
        rank, size = _int(env, rank_key, malformed), _int(env, size_key, malformed)
        if rank is None or size is None or size < 1 or not 0 <= rank < size:
            continue
        local = _int(env, local_key, malformed)
        return World(rank, size, rank if local is None else local, host, name)
    return World(0, 1, 0, host, "single")


def source_of(w: World) -> Source:
    """What this world stamps on its records: ``{"rank": r}`` when the job has several ranks, else nothing."""
    return Source({"rank": w.rank}) if w.world_size > 1 else EMPTY_SOURCE
