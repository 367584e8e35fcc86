"""Reading a run back, streamed: the files of this project's sinks, TorchRL's ``CSVLogger`` and TensorBoard.

Finding a run's files is ``discover.py``, parsing each format ``parsers.py``,
following a growing file ``follow.py``; the formats, the order they are
looked for in and how a growing file is read are in
[the CLI guide](cli.md#what-a-run-is). Files are parsed in chunks, so memory
is bounded by a chunk and what a reader keeps per metric.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from .._core.record import Record
from .discover import RunUnreadableError, find_run_files
from .follow import Follower, RunFollower
from .parsers import Entry, Item, Launch
from .resumes import Resume, find_resumes

__all__ = [
    "LAUNCHES", "Entry", "Follower", "Item", "Launch", "Resume", "Run", "RunFollower", "RunUnreadableError",
    "find_run_files", "load_run",
]

LAUNCHES = ("run", "all")
"""How a reader takes resumed launches: ``run`` (one run: superseded records left out) or ``all`` (every record)."""

TIMED = ("jsonl", "csv", "tensorboard")
"""The formats whose records carry a wall time."""


class Run:
    """A run: where it is, its format and files, and its items, streamed (or given).

    Args:
        path: the folder or file given.
        kind: ``"jsonl"``, ``"csv"``, ``"torchrl"`` or ``"tensorboard"``.
        files: the files to read.
        records: the records, when they are given rather than read (for programs and tests).
        skipped: whole lines that were not records (grows as the files are read).
        launches: ``"run"`` (default): a resumed launch continues the launch it resumes, whose
            records after the checkpoint are left out; ``"all"``: every record, each launch apart.

    Examples:
        >>> run = Run(Path("r"), "jsonl", [], [Record("rb", 1, 0.0, {"rb/size": 3.0})])
        >>> [r.step for r in run.iter_records()]
        [1]
    """

    def __init__(
        self, path: Path, kind: str, files: list[Path], records: list[Record] | None = None, skipped: int = 0,
        keep: Callable[[str, str], bool] | None = None, launches: str = "run",
    ) -> None:
        self.path, self.kind, self.files, self._skipped = path, kind, files, skipped
        self._records = records
        self._read = records is not None
        self._keep = keep
        self.launches = launches
        self.resumes: list[Resume] = []
        """The resumed launches found by the last read, with the records each superseded (``launches="run"``)."""

    @property
    def skipped(self) -> int:
        """Whole lines that were not records, in the last read (a first read is made if none was)."""
        if not self._read:
            for _ in self.entries():
                pass
        return self._skipped

    @property
    def timed(self) -> bool:
        """Whether records carry a wall time (TorchRL's CSV files have only steps)."""
        return self.kind in TIMED

    def entries(self) -> Iterator[Entry]:
        """Every ``(launch, item)`` of the run, in time order across files (file order within one).

        With ``launches="run"``, a resumed launch keeps the number of the launch
        it resumes, and the records that launch logged after the checkpoint are
        left out (counted in ``resumes``). Reading again reads the files again
        from their start; ``skipped`` counts the last read.
        """
        keep = self._keep
        resumes: list[Resume] = []
        if self._records is not None:
            source: Iterator[Entry] = ((1, r) for r in self._records)
        else:
            followers = [Follower(f, self.kind) for f in self.files]
            self._skipped, self._read = 0, True
            if self.launches == "run":
                resumes = find_resumes(self.kind, self.files)
            marks = {(r.file, r.time) for r in resumes}

            def counted(follower: Follower) -> Iterator[Entry]:
                resumed = 0  # the resumed launches of this file so far: they continue a launch, not begin one
                try:
                    for launch, item in follower.entries():
                        if marks and isinstance(item, Launch) and (item.file, item.time) in marks:
                            resumed += 1
                        yield launch - resumed, item
                finally:
                    self._skipped += follower.skipped
                    follower.close()

            source = heapq.merge(*(counted(f) for f in followers), key=lambda entry: entry[1].time)
        self.resumes = resumes
        windows = [(r.began, r.by, r) for r in resumes]  # most records fall in one window at most
        for launch, item in source:
            if windows and isinstance(item, Record) and self._superseded(item, windows):
                continue
            if keep is not None and isinstance(item, Record):
                metrics = {k: v for k, v in item.metrics.items() if keep(item.name, k)}
                if not metrics:
                    continue
                if len(metrics) != len(item.metrics):
                    item = Record(item.name, item.step, item.time, metrics, item.source)
            yield launch, item

    @staticmethod
    def _superseded(record: Record, windows: list[tuple[float, float, Resume]]) -> bool:
        when = record.time
        for began, by, resume in windows:
            if began <= when < by and resume.covers(record):
                resume.superseded += 1
                return True
        return False

    def follow(self) -> RunFollower:
        """Follows the run as its files grow (and new files of its format appear in its folder).

        Returns:
            A `RunFollower`: each ``read()``
            gives the records added since the last.
        """
        return RunFollower(self.path, self.kind, list(self.files))

    def iter_records(self) -> Iterator[Record]:
        """The run's records, streamed (see ``entries``)."""
        return (item for _, item in self.entries() if isinstance(item, Record))

    @property
    def records(self) -> list[Record]:
        """Every record, in a list (reads the whole run into memory: prefer ``iter_records``)."""
        if self._records is None or self._keep is not None:
            return list(self.iter_records())
        return self._records

    def watches(self) -> dict[str, list[Record]]:
        """The records of each watch, watches in the order they first appear (in memory)."""
        out: dict[str, list[Record]] = {}
        for r in self.iter_records():
            out.setdefault(r.name, []).append(r)
        return out

    def select(self, keep: Callable[[str, str], bool]) -> Run:
        """A run whose records keep only the metrics ``keep(watch, key)`` accepts (empty records go).

        Args:
            keep: called with the watch name and the full metric key (``"<watch>/<metric>"``).

        Returns:
            A new ``Run``, read as lazily as this one.
        """
        before = self._keep
        both = keep if before is None else (lambda w, k: before(w, k) and keep(w, k))
        return Run(self.path, self.kind, self.files, self._records, self._skipped, both, self.launches)

    def with_launches(self, launches: str) -> Run:
        """This run read with ``launches`` (``"run"`` or ``"all"``, see the class), as lazily."""
        return Run(self.path, self.kind, self.files, self._records, self._skipped, self._keep, launches)


def load_run(path: str | os.PathLike[str]) -> Run:
    """The run at ``path``: finds its files now; its records are read when asked for (streamed).

    Args:
        path: a run's folder, or one of its files.

    Returns:
        The ``Run``.

    Raises:
        RunNotFoundError: no run at ``path`` (see ``find_run_files``).
        RunUnreadableError: ``path`` or one of its files cannot be read.

    Examples:
        >>> import tempfile, pathlib
        >>> run = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (run / "metrics.csv").write_text(
        ...     "time,name,step,metric,value\\n1.0,rb,3,rb/size,3.0\\n1.0,rb,3,rb/free,7.0\\n")
        >>> [(r.name, r.step, r.metrics) for r in load_run(run).records]
        [('rb', 3, {'rb/size': 3.0, 'rb/free': 7.0})]
    """
    kind, files = find_run_files(path)
    return Run(Path(path), kind, files)
