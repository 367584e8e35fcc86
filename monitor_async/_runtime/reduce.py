"""Reductions: ``watch(..., reduce={"loss": "mean"})`` across the ranks of a job, or over a group of targets.

Each member publishes the reduced keys of its records on a board (the
job's ``torch.distributed`` store, Ray, or a dict in this process; never a
collective); the ``"<name>/all"`` watch reads and reduces it. Staleness is
judged on the reader's clock, so host clocks need not agree.
See [reductions](distributed.md#reductions).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from time import monotonic
from typing import Any

from .._core.checks import choice, number, refuse
from .._core.distribution import DEFAULT_QUANTILES, Summary, merge
from .._core.exceptions import ConfigError
from .._core.formats import distribution_json, parse_distribution
from .._core.record import Record
from .boards import Board, LocalBoard, board_for

__all__ = [
    "REDUCTIONS", "LocalBoard", "Reduce", "Reduction", "board_for", "from_board", "publisher", "reduce_values", "to_board",
]

REDUCTIONS: tuple[str, ...] = ("sum", "mean", "min", "max", "p50", "p90", "p99", "merge")
"""``merge`` takes a distribution key (``Record.distributions``) and merges the members' summaries exactly."""

_SUMMARY = "~summary"
"""The key marking a `Summary` on a board (they travel as JSON through a store)."""


def to_board(summary: Summary) -> dict[str, Any]:
    """A `Summary` as a JSON-able dict for a board: the JSONL sink's form (`distribution_json`), marked."""
    return {_SUMMARY: distribution_json(summary)}


def from_board(value: object) -> Summary | None:
    """The `Summary` a member published (`to_board`), or ``None`` when ``value`` is not one."""
    if isinstance(value, Summary):
        return value
    if not isinstance(value, dict) or _SUMMARY not in value:
        return None
    return parse_distribution(value[_SUMMARY])


def reduce_values(values: Sequence[float], how: str) -> float:
    """One reduction of ``values`` (not empty): ``sum``, ``mean``, ``min``, ``max``, or ``p50``/``p90``/``p99``.

    Percentiles interpolate linearly between the closest ranks (numpy's default).

    Examples:
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
    """What ``Monitor.watch(reduce=...)`` reduces, and how snapshots travel; a plain mapping means ``Reduce(mapping)``.

    Args:
        keys: ``{snapshot key: reduction}``: ``sum``, ``mean``, ``min``, ``max``,
            ``p50``, ``p90``, ``p99``, or a list of them (each its own metric,
            ``"<name>/all/<key>/<reduction>"``); ``merge`` for a
            [distribution](distributions.md) key: the members' histograms merged
            exactly into one distribution, with its own quantiles.
        stale: seconds after which an unchanged rank or member is left out and
            counted (default: three poll intervals).
        via: ``"auto"`` (default: the ``torch.distributed`` store, else Ray,
            else this process), ``"store"`` or ``"ray"``.
        store: a ``torch.distributed.Store`` instead of the default group's.

    Raises:
        ConfigError: an unknown reduction, an empty mapping, a bad ``stale`` or ``via``, ``merge`` in a list.

    Examples:
        >>> Reduce({"loss": "mean", "step_time": ["max", "p90"]}).metrics()
        [('loss', 'mean', 'loss'), ('step_time', 'max', 'step_time/max'), ('step_time', 'p90', 'step_time/p90')]
    """

    keys: Mapping[str, str | Sequence[str]]
    stale: float | None = None
    via: str = "auto"
    store: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.keys, Mapping) or not self.keys:
            raise refuse("reduce", "keys", "a non-empty mapping of key -> reduction", self.keys)
        for key, hows in self.keys.items():
            for how in [hows] if isinstance(hows, str) else list(hows):
                if how == "merge" and not isinstance(hows, str):
                    raise ConfigError(
                        f"reduce: 'merge' of key {key!r} must stand alone (the merged distribution has its own "
                        "count, mean, min, max and quantiles)"
                    )
                if how not in REDUCTIONS:
                    raise ConfigError(
                        f"reduce: unknown reduction {how!r} for key {key!r}; choose among {', '.join(REDUCTIONS)}"
                    )
        number("reduce", "stale", self.stale, unit="seconds", none=True)
        choice("reduce", "via", self.via, ("auto", "store", "ray"))

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


# -------------------------------------------------------------------- the two ends
def publisher(board: Board, member: int, spec: Reduce) -> Callable[[Record], None]:
    """What a member's watch calls with each record it logs: its reduced keys go to the board."""
    keys = list(spec.keys)
    seq = 0

    merged = [key for key in keys if spec.keys[key] == "merge"]
    plain = [key for key in keys if key not in merged]

    def publish(record: Record) -> None:
        nonlocal seq
        seq += 1
        metrics = record.metrics
        prefix = record.name + "/"
        values: dict[str, Any] = {key: metrics[prefix + key] for key in plain if prefix + key in metrics}
        if merged:
            dists = record.distributions
            for key in merged:
                summary = dists.get(prefix + key)
                if summary is not None:
                    values[key] = to_board(summary)
        board.publish(member, seq, values)

    return publish


class Reduction:
    """The target of a ``"<name>/all"`` watch: reads the board, leaves out stale members, reduces.

    ``stats()`` returns the reduced metrics, ``<count>`` (snapshots that went
    in) and ``stale`` (members left out, including one that never published).

    Args:
        board: where the members publish.
        spec: what is reduced.
        stale: seconds after which an unchanged (or missing) member is left out.
        count: the name of the count key, ``"ranks"`` or ``"targets"``.
        members: how many members there are (members ``0 .. members - 1``).
        observer: sees every board read (the alert rules, which track each rank), or ``None``.
        quantiles: the quantiles of a merged distribution.
    """

    def __init__(
        self, board: Board, spec: Reduce, stale: float, count: str, members: int,
        observer: Callable[[Mapping[int, tuple[int, Mapping[str, float]]]], None] | None = None,
        quantiles: tuple[float, ...] = DEFAULT_QUANTILES,
    ) -> None:
        self.quantiles = quantiles
        self.board = board
        self.metrics = spec.metrics()
        self.stale = stale
        self.count = count
        self.members = members
        self.seen: dict[int, tuple[int, float]] = {}
        self.started: float | None = None  # the first read: missing members are stale from stale seconds on
        self.observer = observer

    def stats(self) -> Any:
        got = self.board.read()
        if isinstance(got, dict):
            return self.reduce(got)
        return self._later(got)

    async def _later(self, pending: Any) -> dict[str, Any]:
        return self.reduce(await pending)

    def reduce(self, latest: Mapping[int, tuple[int, Mapping[str, Any]]]) -> dict[str, Any]:
        """The reduced snapshot: floats, and a merged `Summary` per ``merge`` key (read as a distribution)."""
        if self.observer is not None:
            self.observer(latest)
        now = monotonic()
        fresh: list[Mapping[str, Any]] = []
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
        out: dict[str, Any] = {}
        for key, how, name in self.metrics:
            if how == "merge":
                summaries = [s for v in fresh if key in v and (s := from_board(v[key])) is not None]
                if summaries:
                    out[name] = merge(summaries, self.quantiles)
                continue
            found = [v[key] for v in fresh if key in v and type(v[key]) is not dict]
            if found:
                out[name] = reduce_values(found, how)
        if self.started is None:
            self.started = now
        if now - self.started > self.stale:
            stale += sum(1 for member in range(self.members) if member not in latest)
        out[self.count] = float(len(fresh))
        out["stale"] = float(stale)
        return out
