"""Which ranks a sink serves, and where it writes on each: the ``ranks=`` option and ``{rank}`` in paths.

A sink built with ``ranks="main"`` is opened on rank 0 only (a monitor filters
its sinks with `for_rank`); a file sink's path and a tracker's folder are made
per rank here. See [distributed runs](distributed.md).

Examples:
    >>> from monitor_async.distributed import World
    >>> rank_path("runs/rank{rank}/m.csv", World(rank=2, world_size=4))
    'runs/rank2/m.csv'
"""

from __future__ import annotations

import os
import sys
from typing import Any, Literal, cast

from .checks import choice
from .world import World, world

__all__ = ["RANKS", "Ranks", "check_ranks", "for_rank", "keep_apart", "many_sources", "rank_path", "serves"]

Ranks = Literal["main", "all"]
RANKS: tuple[str, ...] = ("main", "all")


def check_ranks(ranks: object, owner: str) -> Ranks:
    """Returns a sink's ``ranks=`` option (``"main"`` or ``"all"``), or raises ``ConfigError`` naming ``owner``.

    Examples:
        >>> check_ranks("main", "TensorBoardSink")
        'main'
    """
    return cast(Ranks, choice(owner, "ranks", ranks, RANKS))


def serves(sink: object, w: World) -> bool:
    """Whether ``sink`` is used on this rank: ``False`` only for a ``ranks="main"`` sink away from rank 0.

    Examples:
        >>> class S: ranks = "main"
        >>> serves(S(), World(rank=1, world_size=2)), serves(S(), World())
        (False, True)
    """
    return w.main or getattr(sink, "ranks", "all") != "main"


def for_rank(sinks: Any, w: World) -> Any:
    """The sinks a monitor of world ``w`` keeps (``sinks`` itself when all are): main-rank sinks go away from rank 0.

    Examples:
        >>> class S: ranks = "main"
        >>> for_rank([S()], World(rank=1, world_size=2))
        []
    """
    if w.main or sinks is None:
        return sinks
    many = isinstance(sinks, (list, tuple))
    kept = [s for s in (sinks if many else [sinks]) if serves(s, w)]
    return kept if len(kept) != (len(sinks) if many else 1) else sinks


def rank_path(path: str | os.PathLike[str], w: World | None = None) -> str:
    """``path`` with every ``{rank}`` replaced by the rank of ``w`` (default: [world][monitor_async.distributed.world]).

    Examples:
        >>> rank_path("runs/rank{rank}/m.csv", World(rank=2, world_size=4))
        'runs/rank2/m.csv'
    """
    text = os.fspath(path)
    if "{rank}" not in text:
        return text
    return text.replace("{rank}", str((w or world()).rank))


def many_sources() -> bool:
    """Whether records written here come from several processes (a rank of a job, or a Ray actor), so a file sink says which.

    Never imports Ray.

    Examples:
        >>> many_sources() in (True, False)
        True
    """
    if world().world_size > 1:
        return True
    ray: Any = sys.modules.get("ray")
    try:
        return bool(ray is not None and ray.is_initialized() and ray.get_runtime_context().get_actor_id())
    except (AttributeError, RuntimeError):
        return False


def keep_apart(log_dir: str | os.PathLike[str], ranks: str, w: World | None = None) -> str:
    """A tracker's folder on this rank: ``{rank}`` replaced; with ``ranks="all"`` on a job, ``log_dir/rank<r>``.

    TensorBoard then shows each rank as a run of its own.

    Examples:
        >>> keep_apart("runs/tb", "all", World(rank=2, world_size=4))
        'runs/tb/rank2'
        >>> keep_apart("runs/tb", "main", World(rank=0, world_size=4))
        'runs/tb'
    """
    w = w or world()
    text = os.fspath(log_dir)
    if "{rank}" in text:
        return rank_path(text, w)
    if ranks == "all" and w.world_size > 1:
        return os.path.join(text, f"rank{w.rank}")
    return text
