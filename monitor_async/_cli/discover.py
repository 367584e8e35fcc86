"""Discovering a run: which format a folder or file holds, and which of its files to read.

The formats and the order they are looked for in are in
[the CLI guide](cli.md#what-a-run-is).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from .._core.exceptions import RunNotFoundError
from .._core.formats import CSV_COLUMNS
from .parsers import CSV_HEADERS, torchrl_line

__all__ = ["LOOKED_FOR", "RunUnreadableError", "find_run_files", "unreadable"]

LOOKED_FOR = (
    "no .jsonl file of JSONLSink, no .csv file of CSVSink, no TorchRL CSVLogger folder (scalars/*.csv) "
    "and no TensorBoard event file (events.out.tfevents.*)"
)


class RunUnreadableError(OSError):
    """A run's folder or file exists but cannot be read (permissions, a folder where a file was expected)."""


def unreadable(path: Path, exc: OSError) -> RunUnreadableError:
    return RunUnreadableError(exc.errno, f"cannot read {path}: {exc.strerror or exc}")


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(4096)
    except OSError as exc:
        raise unreadable(path, exc) from exc


def _is_events(path: Path) -> bool:
    return path.name.startswith("events.out.tfevents.")


def _kind(path: Path) -> tuple[str, bool] | None:
    """``(format, holds_records)`` when ``path`` is a file one of the formats wrote, else None."""
    if _is_events(path):
        return ("tensorboard", True) if path.is_file() else None
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv") or not path.is_file():
        return None
    head = _head(path)
    first = head.split(b"\n", 1)[0]
    if suffix == ".jsonl":
        if not head.strip():
            return "jsonl", False
        return ("jsonl", True) if head.lstrip().startswith(b"{") else None
    if not head:
        return "csv", False
    fields = first.rstrip(b"\r").decode("utf-8", "replace").split(",")
    if fields in CSV_HEADERS:
        return "csv", len(head) > len(first) + 1
    if torchrl_line(first.decode("utf-8", "replace")) is not None:
        return "torchrl", True
    return None


def _listdir(root: Path) -> list[Path]:
    try:
        return sorted(root.iterdir())
    except OSError as exc:
        raise unreadable(root, exc) from exc


def _walk(root: Path, keep: Callable[[Path], bool]) -> list[Path]:
    out: list[Path] = []
    for child in _listdir(root):
        if child.is_dir():
            out += _walk(child, keep)
        elif keep(child):
            out.append(child)
    return out


def _holds_run(folder: Path) -> bool:
    """Whether ``folder`` itself holds a run (its own files, not its subfolders')."""
    try:
        children = list(folder.iterdir())
    except OSError:
        return False
    if (folder / "scalars").is_dir():
        return True
    for child in children:
        try:
            if _is_events(child) or _kind(child) is not None:
                return True
        except OSError:
            continue
    return False


def find_run_files(path: str | os.PathLike[str]) -> tuple[str, list[Path]]:
    """The format and the files of the run at ``path`` (a run's folder, or one of its files).

    Args:
        path: a folder holding files of one of the formats, or one such file.

    Returns:
        ``(kind, files)``: ``kind`` is ``"jsonl"``, ``"csv"``, ``"torchrl"`` or
        ``"tensorboard"``; files sorted by name.

    Raises:
        RunNotFoundError: ``path`` does not exist or holds no such file; the
            message names the formats looked for and the runs below it.
        RunUnreadableError: ``path`` or a file in it cannot be read.

    Examples:
        >>> import tempfile, pathlib
        >>> run = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (run / "metrics.csv").write_text("time,name,step,metric,value\\n")
        >>> kind, files = find_run_files(run)
        >>> kind, [f.name for f in files]
        ('csv', ['metrics.csv'])
    """
    root = Path(path)
    if not root.exists():
        raise RunNotFoundError(f"no run at {root}: it does not exist")
    if not root.is_dir():
        if not root.is_file():
            raise RunUnreadableError(f"cannot read {root}: not a regular file or folder")
        kind = _kind(root)
        if kind is None:
            raise RunNotFoundError(
                f"{root} is not a file a sink wrote: expected a .jsonl file of JSONLSink, a .csv file of CSVSink "
                f"starting with {','.join(CSV_COLUMNS)}, a TorchRL CSVLogger scalar file or a TensorBoard event file"
            )
        return kind[0], [root]
    return _in_folder(root)


def _in_folder(root: Path) -> tuple[str, list[Path]]:
    """The format and files of the run in the folder ``root``, in the order the guide gives."""
    found: dict[tuple[str, bool], list[Path]] = {}
    for child in _listdir(root):
        kind = _kind(child)
        if kind is not None and kind[0] != "tensorboard":
            found.setdefault(kind, []).append(child)
    for kind_ in (("jsonl", True), ("csv", True)):
        if kind_ in found:
            return kind_[0], found[kind_]
    scalars = root / "scalars" if (root / "scalars").is_dir() else (root if root.name == "scalars" else None)
    if scalars is not None:
        files = _walk(scalars, lambda p: p.suffix == ".csv")
        if files:
            return "torchrl", files
    events = [f for f in _listdir(root) if _is_events(f) and f.is_file()]
    if events:
        return "tensorboard", events
    below = sorted((d for d in _listdir(root) if d.is_dir() and _holds_run(d)), key=lambda d: d.stat().st_mtime)
    if all(re.fullmatch(r"rank\d+", d.name) for d in below):  # one run's ranks (TensorBoardSink's rank<r>)
        events = _walk(root, _is_events)
        if events:
            return "tensorboard", events
    for kind_ in (("jsonl", False), ("csv", False)):
        if kind_ in found:
            return kind_[0], found[kind_]
    hint = ""
    if below:
        names = ", ".join(str(d) for d in below[-3:])
        hint = f"; the folders below it that hold runs include {names} (the newest last): pass one of them"
    raise RunNotFoundError(f"no run in {root}: it holds {LOOKED_FOR}{hint}")
