"""How names are made: rate names of counters, unique labels for watches and sinks."""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping

__all__ = ["DEFAULT_RATE_NAMES", "RATE", "rate_names", "sink_label", "split_rates", "unique"]

RATE = "_per_second"
"""The suffix of every rate name."""

DEFAULT_RATE_NAMES: dict[str, str] = {
    "frames": "frames_per_second",
    "batches": "batches_per_second",
    "write_count": "writes_per_second",
    "worker_frames": "worker_frames_per_second",
    "sample_calls": "samples_per_second",
    "samples_returned": "samples_returned_per_second",
}
"""TorchRL's counters and the names of their rates."""

_COUNTER_OF = {rate[: -len(RATE)]: key for key, rate in DEFAULT_RATE_NAMES.items()}


def rate_names(keys: Iterable[str] | None = None) -> dict[str, str]:
    """``{counter: its rate's name}``: TorchRL's names for its counters, ``<key>_per_second`` for others.

    Examples:
        >>> rate_names(["write_count", "episodes"])
        {'write_count': 'writes_per_second', 'episodes': 'episodes_per_second'}
    """
    if keys is None:
        return dict(DEFAULT_RATE_NAMES)
    return {key: DEFAULT_RATE_NAMES.get(key, key + RATE) for key in keys}


def split_rates(metrics: Mapping[str, float]) -> tuple[list[tuple[str, float, float | None]], list[tuple[str, float]]]:
    """``metrics`` (short names) as ``(key, value, its rate or None)``, and the ``(stem, rate)`` pairs with no counter.

    A rate ``<stem>_per_second`` belongs to ``<stem>``, or to the counter a
    default rate name comes from (``writes`` -> ``write_count``).

    Examples:
        >>> split_rates({"frames": 10.0, "frames_per_second": 5.0, "x_per_second": 1.0})
        ([('frames', 10.0, 5.0)], [('x', 1.0)])
    """
    rates = {k[: -len(RATE)]: v for k, v in metrics.items() if k.endswith(RATE)}
    plain = {k: v for k, v in metrics.items() if not k.endswith(RATE)}
    paired: dict[str, float] = {}
    lone: list[tuple[str, float]] = []
    for stem, rate in rates.items():
        counter = stem if stem in plain else _COUNTER_OF.get(stem, "")
        if counter in plain and counter not in paired:
            paired[counter] = rate
        else:
            lone.append((stem, rate))
    return [(k, v, paired.get(k)) for k, v in plain.items()], lone


def sink_label(kind: str, name: object = None) -> str:
    """A sink's label (``sink/<label>/...``): ``name`` when a non-empty string, else ``kind`` lowercased without ``sink``.

    Examples:
        >>> sink_label("CSVSink"), sink_label("TensorBoardSink"), sink_label("CSVLogger")
        ('csv', 'tensorboard', 'csvlogger')
        >>> sink_label("CSVSink", "train")
        'train'
    """
    if isinstance(name, str) and name:
        return name
    label = kind.lower()
    short = label.removesuffix("sink").rstrip("_")
    return short or label


def unique(base: str, taken: Container[str]) -> str:
    """``base``, or ``base_1``, ``base_2``... whichever is not ``taken`` first.

    Examples:
        >>> unique("csv", {"csv", "csv_1"})
        'csv_2'
    """
    label, n = base, 0
    while label in taken:
        n += 1
        label = f"{base}_{n}"
    return label
