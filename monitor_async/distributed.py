"""Distributed runs: this process's place in its job, provenance, reductions across ranks.

Public API::

    from monitor_async.distributed import world, World, Reduce, Source, rank_path

[world][monitor_async.distributed.world] reads an initialised ``torch.distributed`` or the launcher's
environment (torchrun, SLURM, Open MPI); nothing here ever waits for another
rank. See [distributed runs](distributed.md). This module only re-exports.

Examples:
    >>> from monitor_async.distributed import World, world
    >>> world(environ={"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}).rank
    3
    >>> World(rank=0, world_size=1).main
    True
"""

from ._core.formats import source_text
from ._core.ranks import RANKS, Ranks, check_ranks, for_rank, keep_apart, many_sources, rank_path, serves
from ._core.record import EMPTY_SOURCE, Source
from ._core.world import World, source_of, world
from ._runtime.reduce import Reduce

__all__ = [
    "EMPTY_SOURCE",
    "RANKS",
    "Ranks",
    "Reduce",
    "Source",
    "World",
    "check_ranks",
    "for_rank",
    "keep_apart",
    "many_sources",
    "rank_path",
    "serves",
    "source_of",
    "source_text",
    "world",
]
