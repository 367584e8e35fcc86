"""Turning a ``stats()`` result into flat ``{key: float}`` values: the per-value hot path.

One pass flattens nested mappings with ``/``, coerces scalars to ``float``,
summarises values that are many numbers ([distributions](distributions.md)),
leaves out what is not a finite number and namespaces each key (cached).
One bad key or value costs only itself
([the guarantee](guarantees.md#one-bad-key-or-value-costs-only-itself-test_bad_keyspy));
a cycle or nesting deeper than ``MAX_DEPTH`` fails the poll with
[StatsCycleError][monitor_async.StatsCycleError].
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

from .distribution import DEFAULT_QUANTILES, Distribution, Summary, summarize
from .exceptions import StatsCycleError, StatsTypeError
from .policy import describe, log

__all__ = [
    "MAX_DEPTH", "Flattened", "KeyCache", "OnDevice", "as_mapping", "flatten", "flatten_copy", "is_many",
    "nonfinite_values", "read", "read_plain", "read_value", "summary_of",
]

MAX_DEPTH = 64
"""Mappings nested deeper than this fail the poll (most likely a cycle through mappings made on each read)."""


class _TooDeep(Exception):
    """Internal: nesting went past ``MAX_DEPTH``; ``flatten`` tells a cycle from a deep tree."""


class OnDevice(Exception):
    """A tensor on a device (a GPU) was met on the event loop: its copy to the host must wait on a worker thread.

    The poller and the pushes then read that snapshot or push again on a worker thread of the monitor.
    """


class _Collided(Exception):
    """Internal: a nested mapping wrote a name twice; ``flatten`` starts again on the checking path."""


class KeyCache:
    """``names[key]`` is ``prefix + key`` (with ``bare``, the key ``""`` is the prefix's name itself); ``of`` computes it once.

    A plain dict, for the interpreter's fast subscript on the hot path; it
    starts afresh past ``bound`` keys. ``added`` counts keys ever added;
    ``careful`` is set at the first collision, after which every name is
    checked before it is written.
    """

    __slots__ = ("added", "bare", "bound", "careful", "names", "prefix", "quantiles", "warned_many")

    def __init__(
        self, prefix: str, bound: int, quantiles: tuple[float, ...] | None = DEFAULT_QUANTILES, bare: bool = False
    ) -> None:
        self.prefix = prefix
        self.bare = bare  # a push's keys: "" is the push's name itself (a SummaryWriter tag without a "/")
        self.bound = bound
        self.names: dict[Any, str] = {}
        self.added = 0
        self.careful = False
        # the default's own tuple when equal: summarize() then skips checking them again
        self.quantiles = DEFAULT_QUANTILES if quantiles == DEFAULT_QUANTILES else quantiles
        """The quantiles of a distribution's summary; ``None``: values that are many numbers are left out (TorchRL's way)."""
        self.warned_many = False

    def of(self, key: Any) -> str | None:
        """The namespaced name of ``key`` (a non-str key is first made a str); ``None`` when ``str(key)`` raises."""
        names = self.names
        name = names.get(key)
        if name is None:
            if type(key) is str:
                text = key
            else:
                try:
                    text = str(key)
                except Exception:  # noqa: BLE001 - a key that cannot be named is left out, counted
                    return None
            if len(names) >= self.bound:
                names.clear()
            # in a push, the key "" stands for the name itself: log("loss", {"": 0.5}) is "loss", a TensorBoard tag
            name = names[key] = self.prefix + text if text or not self.bare else self.prefix[:-1] or self.prefix
            self.added += 1
        return name

    def collided(self, name: str) -> None:
        """A second value for ``name`` was left out: the first time, warn and check names from now on."""
        if self.careful:
            return
        self.careful = True
        log.warning(
            "stats() of watch %r gave more than one value for %r (keys that are equal once nested "
            "mappings are joined with '/' and keys made str, such as 'a/b' and {'a': {'b': ...}}, or 1 "
            "and '1'); the first is kept, the others are left out and counted in "
            "monitor.stats()['values_dropped'] (reported once per watch)",
            self.prefix[:-1], name,
        )

    def bad_many(self, name: str, exc: BaseException) -> None:
        """A value of many numbers could not be summarised: warned the first time, per watch."""
        if self.warned_many:
            return
        self.warned_many = True
        log.warning(
            "stats() or log() of %r gave a value of many numbers for %r that is not a flat sequence of numbers "
            "(%s); that key is left out and counted in monitor.stats()['values_dropped'] (reported once per name)",
            self.prefix[:-1], name, describe(exc),
        )


class Flattened:
    """A ``stats()`` result already flattened off the loop (on a worker thread).

    ``read`` hands its ``metrics``, ``dropped`` and ``distributions`` back as they are.
    """

    __slots__ = ("distributions", "dropped", "metrics", "raw")

    def __init__(
        self, metrics: dict[str, float], dropped: int, raw: object = None, distributions: dict[str, Summary] | None = None,
    ) -> None:
        self.metrics = metrics
        self.dropped = dropped
        self.raw = raw
        """The result as ``stats()`` gave it, kept only when values were left out (see `nonfinite_values`)."""
        self.distributions = distributions
        """The summaries of its values of many numbers, if any."""


def as_mapping(raw: object, watch: str) -> tuple[dict[Any, Any], int]:
    """A private copy of ``raw`` (a target mutating it cannot break the read), and how many reads failed.

    A ``dict`` is copied whole; another mapping key by key, a failing read
    left out and counted unless none succeeds (then the poll fails). Raises
    [StatsTypeError][monitor_async.StatsTypeError] naming the watch when ``raw``
    is not a mapping or cannot be iterated.
    """
    if not isinstance(raw, Mapping):
        raise StatsTypeError(
            f"stats() of watch {watch!r} returned {type(raw).__name__}, expected a mapping of scalars"
        )
    errors: list[Exception] = []
    try:
        copy, failed = _copy(raw, errors)
    except TypeError as exc:
        raise StatsTypeError(
            f"stats() of watch {watch!r} returned a {type(raw).__name__} that could not be read: {describe(exc)}"
        ) from exc
    if errors and not copy:  # nothing could be read: a failure of the poll, not an empty record
        raise StatsTypeError(
            f"stats() of watch {watch!r} returned a {type(raw).__name__} none of whose {failed} values could be "
            f"read: {describe(errors[0])}"
        ) from errors[0]
    return copy, failed


def _copy(raw: Mapping[Any, Any], errors: list[Exception] | None = None) -> tuple[dict[Any, Any], int]:
    """A dict of ``raw`` and how many reads failed; ``errors`` (when given) gets the first read's error."""
    if isinstance(raw, dict):
        return dict(raw), 0
    out: dict[Any, Any] = {}
    failed = 0
    for key in raw:
        try:
            out[key] = raw[key]
        except Exception as exc:  # noqa: BLE001 - one unreadable value costs only itself
            failed += 1
            if errors is not None and not errors:
                errors.append(exc)
    return out, failed


def flatten_copy(
    raw: dict[Any, Any], out: dict[str, float], limit: int, keys: KeyCache, dists: dict[str, Summary] | None = None,
) -> int:
    """``flatten`` of a private copy of ``raw``, a dict the target may keep writing to from another thread.

    A copy taken while another thread writes can come out torn on CPython
    ("dictionary keys changed during iteration"); the read then starts again.
    """
    try:
        return flatten(raw.copy(), out, limit, keys, raw, dists)
    except RuntimeError:
        out.clear()
        if dists:
            dists.clear()
        return flatten(raw.copy(), out, limit, keys, raw, dists)


def read(
    raw: object, limit: int, keys: KeyCache, dists: dict[str, Summary] | None = None,
) -> tuple[dict[str, float], int]:
    """The namespaced finite values of any ``stats()`` result (``Flattened``, dict or mapping), and how many were left out.

    The summaries of values that are many numbers go into ``dists`` (their scalars into the values);
    without ``dists`` such values are left out and counted.
    """
    if type(raw) is Flattened:
        if raw.distributions and dists is not None:
            dists.update(raw.distributions)
        return raw.metrics, raw.dropped
    if type(raw) is dict:
        fast = None if keys.careful else read_plain(raw, keys, limit)
        if fast is not None:
            return fast, 0
        out: dict[str, float] = {}
        return out, flatten_copy(raw, out, limit, keys, dists)
    out = {}
    copy, failed = as_mapping(raw, keys.prefix[:-1])
    return out, flatten(copy, out, limit, keys, raw, dists) + failed


def read_plain(raw: dict[Any, Any], keys: KeyCache, limit: int) -> dict[str, float] | None:
    """`read` of the common snapshot in one loop: a dict of known keys, each a finite float, int or bool.

    The fast path: the builtin kinds of `read_value`, inline. Returns ``None``,
    having changed nothing, when the rest of `read` is needed.
    """
    try:
        copy = raw.copy()  # private: a target mutating its dict cannot break the read
        if len(copy) > limit:
            return None
        names = keys.names
        metrics: dict[str, float] = {}
        for key, value in copy.items():
            kind = type(value)
            if kind is float:
                if value - value != 0.0:  # inf or nan: left out, by the rest of read()
                    return None
            elif kind is int or kind is bool:
                value = value + 0.0
            else:
                return None
            metrics[names[key]] = value
    except Exception:  # noqa: BLE001 - a new key, an int too large for a float...: the rest of read() sees it
        return None
    if len(metrics) != len(copy):  # two keys gave one name (1 and "1"): the rest of read() keeps the first
        return None
    return metrics


def read_value(value: object) -> float | None:
    """What one leaf of a ``stats()`` result or a push stands for: a float (NaN and infinities kept), or ``None``.

    The one reader of a value: a float, int or bool; a numpy, torch or other
    scalar with ``item()``; anything ``float()`` takes (a ``Decimal``).
    Text, and whatever raises on conversion, is not a number. Callers leave
    out what is not finite (`flatten`) or report it (`nonfinite_values`).

    Examples:
        >>> read_value(True), read_value(2), read_value("2"), read_value(float("inf"))
        (1.0, 2.0, None, inf)
    """
    kind = type(value)
    if kind is float:
        return value  # type: ignore[return-value]
    if kind is int or kind is bool:
        try:
            return value + 0.0  # type: ignore[operator]
        except OverflowError:  # an int too large for a float
            return None
    if isinstance(value, (str, bytes, bytearray)):
        return None
    try:
        item = getattr(value, "item", None)
        if callable(item):
            value = item()
            if isinstance(value, (str, bytes, bytearray)):
                return None
        return float(value)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a value whose conversion raises anything is not a number
        return None


def nonfinite_values(raw: object, prefix: str) -> dict[str, float]:
    """The NaN and infinite values of a ``stats()`` result or push, under their full keys (``prefix`` + key).

    The slow path, taken only when values were left out and an alert rule asks.

    Examples:
        >>> nonfinite_values({"loss": float("nan"), "opt": {"lr": float("inf")}, "ok": 1.0}, "learner/")
        {'learner/loss': nan, 'learner/opt/lr': inf}
    """
    if type(raw) is Flattened:
        raw = raw.raw
    found: dict[str, float] = {}
    stack: list[tuple[str, object, int]] = [(prefix, raw, 0)]
    while stack:
        at, node, depth = stack.pop()
        if not isinstance(node, Mapping) or depth > MAX_DEPTH:
            continue
        try:
            items = list(node.items())
        except Exception:  # noqa: BLE001 - an unreadable mapping has nothing to report
            continue
        for key, value in items:
            name = f"{at}{key}" if depth or key != "" else at[:-1] or at  # the key "" is the name itself
            if isinstance(value, Mapping):
                stack.append((name + "/", value, depth + 1))
                continue
            number = read_value(value)
            if number is not None and number - number != 0.0:
                found[name] = number
    return found


def flatten(
    raw: Mapping[Any, Any], out: dict[str, float], limit: int, keys: KeyCache, origin: object = None,
    dists: dict[str, Summary] | None = None,
) -> int:
    """Puts the finite numeric values of ``raw`` into the empty ``out`` under namespaced keys; returns how many were left out.

    At most ``limit`` values, first in snapshot order. ``raw`` is never
    changed; ``origin`` is the mapping it was copied from, so holding it is a
    cycle. A value of many numbers (`is_many`) is summarised into ``dists``
    (``"<watch>/<key>"``) and its scalars (``"<watch>/<key>/p50"``...) put in
    ``out``, when ``dists`` is given and ``keys.quantiles`` is set; else it is
    left out. Raises [StatsCycleError][monitor_async.StatsCycleError] for a
    cycle or nesting deeper than ``MAX_DEPTH``.
    """
    if dists is not None and keys.quantiles is None:
        dists = None
    try:
        if keys.careful or len(raw) > limit:
            return _flatten(raw, out, limit, keys, "", 0, True, dists) + _cut(out, limit)
        try:
            dropped = _flatten(raw, out, limit, keys, "", 0, False, dists)
        except _Collided:
            # a name was written twice (1 and "1", or "a/b" after {"a": {"b": ...}}): the later value
            # replaced the first; again, on the path that checks each name and keeps the first
            out.clear()
            if dists:
                dists.clear()
            dropped = _flatten(raw, out, limit, keys, "", 0, True, dists)
        return dropped + _cut(out, limit)
    except _TooDeep:
        raise _too_deep(raw, origin, keys) from None


def _flatten(
    raw: Mapping[Any, Any], out: dict[str, float], limit: int, keys: KeyCache, prefix: str, depth: int, check: bool,
    dists: dict[str, Summary] | None = None,
) -> int:
    """Walks ``raw`` into ``out`` (nested mappings under ``prefix``), each leaf read by `read_value`.

    With ``check`` a name already in ``out`` keeps its value; without, a name written twice raises ``_Collided``.
    """
    dropped = 0
    start = len(out)
    room = limit - start
    size = len(raw)
    items: Iterable[tuple[Any, Any]] = raw.items()
    past = 0
    if size > room:
        size = room = max(room, 0)
        items = islice(items, room)
        past = _count(islice(raw.values(), room, None), 0)
    grown = 0  # what nested mappings added to ``out``, less the one item each stood for, plus their drops
    names = keys.names
    for key, value in items:
        if type(key) is not str:
            try:
                key = str(key)
            except Exception:  # noqa: BLE001 - a key that cannot be named is left out, counted
                dropped += 1
                continue
        kind = type(value)
        if kind is int:  # as common as a float in a snapshot (counters): read inline, as read_plain does
            try:
                value = value + 0.0
            except OverflowError:
                dropped += 1
                continue
        elif kind is not float:
            number = None if kind is dict else read_value(value)  # an array of many numbers: None
            if number is None:
                if isinstance(value, Mapping):
                    before = len(out)
                    nested = _nested(value, out, limit, keys, prefix + key + "/", depth, check, dists)
                    dropped += nested
                    grown += len(out) - before - 1 + nested
                elif dists is not None and is_many(value):
                    written = _many(value, prefix + key, out, keys, dists, check)
                    if written < 0:
                        dropped += 1
                    else:
                        grown += written - 1
                else:
                    dropped += 1
                continue
            value = number
        if value - value != 0.0:  # inf or nan
            dropped += 1
            continue
        if prefix:
            key = prefix + key
        name = names.get(key) or keys.of(key)
        if name is None or (check and name in out):  # (a str key always has a name)
            dropped += 1
            if name is not None:
                keys.collided(name)
            continue
        out[name] = value
    if not check and len(out) != start + size - dropped + grown:
        raise _Collided
    return dropped + past


def _nested(
    value: Mapping[Any, Any], out: dict[str, float], limit: int, keys: KeyCache, prefix: str, depth: int,
    check: bool = False, dists: dict[str, Summary] | None = None,
) -> int:
    """Flattens the nested mapping ``value`` under ``prefix``; returns how many of its values were left out."""
    if depth >= MAX_DEPTH:
        raise _TooDeep
    # a private copy: the target may be writing to its nested dicts too
    if type(value) is dict:
        return _flatten(value.copy(), out, limit, keys, prefix, depth + 1, check, dists)
    try:
        nested, failed = _copy(value)
    except Exception:  # noqa: BLE001 - a nested mapping that cannot be read is left out, counted as one
        return 1
    return failed + _flatten(nested, out, limit, keys, prefix, depth + 1, check, dists)


_SEQUENCES = (list, tuple)


def is_many(value: object) -> bool:
    """Whether ``value`` is a value of many numbers: a list, a tuple, a `Distribution`, a numpy array or
    torch tensor of other than one element (one element is a scalar, as `read_value` reads it).

    Examples:
        >>> is_many([1.0, 2.0]), is_many((1,)), is_many("12"), is_many(3.0)
        (True, True, False, False)
    """
    kind = type(value)
    if kind is list or kind is tuple or kind is Distribution or kind is Summary:
        return True
    module = kind.__module__
    if module == "numpy":
        return getattr(value, "ndim", 0) > 0 and getattr(value, "size", 1) != 1
    if module == "torch" or module.startswith("torch."):
        numel = getattr(value, "numel", None)
        try:
            return callable(numel) and numel() != 1
        except Exception:  # noqa: BLE001 - not a tensor after all
            return False
    return isinstance(value, (*_SEQUENCES, Distribution, Summary))


def summary_of(value: Any, quantiles: tuple[float, ...]) -> Summary:
    """The `Summary` of one value of many numbers (see `is_many`), a `Distribution`'s own options first.

    A `Summary` is taken as it is (a merged one). A CPU tensor is read as a numpy view of its memory
    (a copy only for a dtype numpy lacks, such as bfloat16); a tensor on another device is copied to
    the host here, so this runs where that copy may wait (see [tensors](distributions.md#tensors)).
    Raises ``TypeError`` or ``ValueError`` for ragged nesting or values that are not numbers.
    """
    if type(value) is Summary:
        return value
    return summarize(value, quantiles)


def _off_host(value: Any) -> bool:
    """Whether ``value`` is a torch tensor on a device other than the CPU."""
    kind = type(value)
    module = kind.__module__
    if not (module == "torch" or module.startswith("torch.")):
        return False
    device = getattr(value, "device", None)
    return device is not None and getattr(device, "type", "cpu") != "cpu"


def _on_host(value: Any) -> Any:
    """``value``, a tensor on a device copied to the host first: never on the event loop (`OnDevice` there)."""
    inner = value.values if type(value) is Distribution else value
    if not _off_host(inner):
        return value
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # a worker thread: the copy may wait for the device here
        host = inner.detach().cpu()
        if type(value) is Distribution:
            return Distribution(host, quantiles=value.quantiles, bounds=value.bounds)
        return host
    raise OnDevice


def _many(
    value: Any, key: str, out: dict[str, float], keys: KeyCache, dists: dict[str, Summary], check: bool,
) -> int:
    """Summarises ``value`` under ``key``: the summary into ``dists``, its scalars into ``out``.

    Returns how many scalars were written, or -1 when the value is not a flat sequence of numbers
    (warned once, counted by the caller) or its name is taken.
    """
    name = keys.names.get(key) or keys.of(key)
    if name is None:
        return -1
    if check and name in dists:
        keys.collided(name)
        return -1
    try:
        value = _on_host(value)
        summary = summary_of(value, keys.quantiles or DEFAULT_QUANTILES)
    except (TypeError, ValueError, OverflowError) as exc:
        keys.bad_many(name, exc)
        return -1
    dists[name] = summary
    written = 0
    for field, number in summary.scalars().items():
        if number - number != 0.0:  # the mean, min and max of an empty one: no value
            continue
        scalar = f"{name}/{field}"
        if check and scalar in out:
            keys.collided(scalar)
            continue
        out[scalar] = number
        written += 1
    return written


def _too_deep(raw: Mapping[Any, Any], origin: object, keys: KeyCache) -> StatsCycleError:
    """The error for nesting past ``MAX_DEPTH``: a cycle (naming the key that closes it), else a deep tree."""
    watch = keys.prefix[:-1]
    try:
        key = _cycle(raw, (id(origin), id(raw)), "")
    except _TooDeep:
        key = None
    if key is not None:
        return StatsCycleError(
            f"stats() of watch {watch!r} returned a mapping that contains itself: a cycle at key "
            f"{keys.prefix + key!r}; return a tree of mappings"
        )
    return StatsCycleError(
        f"stats() of watch {watch!r} nests mappings more than {MAX_DEPTH} levels deep: a cycle through "
        "mappings made anew on each read, or a tree too deep to flatten"
    )


def _cycle(mapping: Mapping[Any, Any], path: tuple[int, ...], prefix: str) -> str | None:
    """The key (under ``prefix``) of the first mapping, depth first, that is one of its own ancestors (``path``)."""
    if len(path) > MAX_DEPTH + 2:
        raise _TooDeep
    try:
        items = list(mapping.items())
    except Exception:  # noqa: BLE001 - unreadable: flattening left it out
        return None
    for key, value in items:
        if isinstance(value, Mapping):
            try:
                name = f"{prefix}{key}"
            except Exception:  # noqa: BLE001 - a key that cannot be named was left out
                continue
            if id(value) in path:
                return name
            found = _cycle(value, (*path, id(value)), name + "/")
            if found is not None:
                return found
    return None


def _cut(out: dict[str, float], limit: int) -> int:
    """Plain values after a nested mapping went past the cap: the newest ones go; returns how many."""
    excess = len(out) - limit
    if excess <= 0:
        return 0
    for key in list(islice(reversed(out), excess)):
        del out[key]
    return excess


def _count(values: Iterable[Any], depth: int) -> int:
    """How many values ``values`` holds, counting the leaves of nested mappings (a mapping past the depth cap, or one that cannot be read, as one)."""
    n = 0
    for value in values:
        if isinstance(value, Mapping) and depth < MAX_DEPTH:
            try:
                n += _count(list(value.values()), depth + 1)
            except Exception:  # noqa: BLE001
                n += 1
        else:
            n += 1
    return n
