"""The unit of data that flows from a poll task to the sinks."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .distribution import Summary

__all__ = ["EMPTY_SOURCE", "NO_DISTRIBUTIONS", "Record", "Source", "new_record"]


class Source(Mapping[str, Any]):
    """A small read-only mapping: where a record came from (``Record.source``).

    Empty in a single process, ``{"rank": 3}`` on a rank of a job; a
    [RaySink][monitor_async.backends.RaySink] adds ``host``, ``pid`` and ``node``.
    Immutable, hashable, picklable, equal to a dict of the same items.

    Args:
        items: the fields (str keys; values int, float, str or bool).

    Examples:
        >>> s = Source({"rank": 1})
        >>> s["rank"], dict(s), s == {"rank": 1}
        (1, {'rank': 1}, True)
        >>> s.merge({"host": "n1"})
        Source({'rank': 1, 'host': 'n1'})
    """

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, Any] | None = None) -> None:
        self._items: dict[str, Any] = dict(items or {})
        self._hash: int | None = None

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = self._hash = hash(tuple(self._items.items()))
        return h

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Source):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Source({self._items!r})"

    def __reduce__(self) -> tuple[type[Source], tuple[dict[str, Any]]]:
        return Source, (self._items,)

    def merge(self, more: Mapping[str, Any]) -> Source:
        """A new Source with ``more`` added (``more`` wins on a shared key)."""
        return Source({**self._items, **more})


EMPTY_SOURCE = Source()
"""The source of a record from a plain single process."""

NO_DISTRIBUTIONS: Mapping[str, Summary] = MappingProxyType({})
"""The distributions of a record that has none (most records)."""


@dataclass(frozen=True, slots=True)
class Record:
    """One logged snapshot of one watched target, immutable and shared by every sink it reaches.

    Attributes:
        name: the watch name the snapshot belongs to.
        step: the step taken from the snapshot (``watch(step=...)``), or ``None``
            for the sink to number the records.
        time: unix time (seconds) of the poll that produced it.
        metrics: flat ``{"<name>/<metric>": float}``, rates included.
        source: where it came from ([Source][monitor_async.distributed.Source]);
            a plain mapping given here is made read-only.
        distributions: ``{"<name>/<key>": Summary}`` for the values that were many numbers; their
            scalar summary (``<name>/<key>/p50``...) is in ``metrics`` too.

    Examples:
        >>> r = Record(name="rb", step=3, time=0.0, metrics={"rb/size": 3.0})
        >>> r.metrics["rb/size"], dict(r.source)
        (3.0, {})
        >>> Record("rb", 3, 0.0, {}, {"rank": 1}).source["rank"]
        1
    """

    name: str
    step: int | None
    time: float
    metrics: dict[str, float]
    source: Mapping[str, Any] = field(default=EMPTY_SOURCE)
    distributions: Mapping[str, Summary] = field(default_factory=lambda: NO_DISTRIBUTIONS)  # one shared empty mapping

    def __post_init__(self) -> None:
        if type(self.source) is not Source:
            object.__setattr__(self, "source", Source(self.source) if self.source else EMPTY_SOURCE)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # the shared empty distributions are a read-only proxy, which pickle refuses: a plain dict travels
        dists = self.distributions
        return _rebuilt, (self.name, self.step, self.time, self.metrics, self.source, dict(dists) if dists else None)

    def with_source(self, more: Mapping[str, Any]) -> Record:
        """This record with ``more`` added to its source (``more`` wins), sharing this one's metrics dict.

        Examples:
            >>> Record("rb", None, 0.0, {}, {"rank": 1}).with_source({"pid": 7}).source
            Source({'rank': 1, 'pid': 7})
        """
        source = self.source
        merged = source.merge(more) if isinstance(source, Source) else Source({**source, **more})
        return new_record(self.name, self.step, self.time, self.metrics, merged, self.distributions)


_new = object.__new__
_set_name, _set_step, _set_time, _set_metrics, _set_source, _set_distributions = (
    Record.__dict__[field].__set__ for field in ("name", "step", "time", "metrics", "source", "distributions")
)


def _rebuilt(
    name: str, step: int | None, time: float, metrics: dict[str, float], source: Source,
    distributions: dict[str, Summary] | None,
) -> Record:
    """A pickled `Record` again (see ``Record.__reduce__``)."""
    return new_record(name, step, time, metrics, source, distributions or NO_DISTRIBUTIONS)


def new_record(
    name: str, step: int | None, time: float, metrics: dict[str, float], source: Source = EMPTY_SOURCE,
    distributions: Mapping[str, Summary] = NO_DISTRIBUTIONS,
) -> Record:
    """``Record(name, step, time, metrics, source)`` for the poll path, filling the slots directly.

    A frozen dataclass's ``__init__`` goes through ``object.__setattr__`` per
    field; the result is an ordinary ``Record``. ``source`` must already be a
    [Source][monitor_async.distributed.Source].

    Examples:
        >>> new_record("rb", 3, 0.0, {"rb/size": 3.0}) == Record("rb", 3, 0.0, {"rb/size": 3.0})
        True
    """
    record: Record = _new(Record)
    _set_name(record, name)
    _set_step(record, step)
    _set_time(record, time)
    _set_metrics(record, metrics)
    _set_source(record, source)
    _set_distributions(record, distributions)
    return record
