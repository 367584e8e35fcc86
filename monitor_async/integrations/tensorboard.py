"""A drop-in ``SummaryWriter``: change the import, keep the script, get a non-blocking writer and more sinks.

``from monitor_async.integrations.tensorboard import SummaryWriter`` takes the
place of ``torch.utils.tensorboard.SummaryWriter`` and
``tensorboardX.SummaryWriter``. A scalar is a push (``log()``): the tag
``charts/episodic_return`` is the push name ``charts`` and the key
``episodic_return``, written to a `TensorBoardSink` in ``log_dir`` under the
same tag and step as torch's writer, and to every sink of ``sinks=``. What
it promises: [Coming from a SummaryWriter script](summarywriter.md).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from time import time as _time
from types import TracebackType
from typing import Any

from .._core.alerts import Alert
from .._core.exceptions import ConfigError
from .._core.policy import describe, log
from .._core.record import Record
from .._runtime.sync import SyncMonitor
from ..backends import TensorBoardSink

__all__ = ["SummaryWriter"]

QUEUE_SIZE = 8192
"""The writer's own monitor's ``queue_size``: a burst of this many values fits each sink's queue at once
(a script logs in bursts, and an event file is written slower than values come)."""

_MAX_SPLITS = 100_000
"""Tags whose push name and key are kept; more distinct tags start the cache afresh."""


def _split(tag: str) -> tuple[str, str]:
    """The push name and key of ``tag``: ``"charts/sps"`` is ``("charts", "sps")``, ``"loss"`` is ``("loss", "")``."""
    head, _, tail = tag.partition("/")
    if head and tail:
        return head, tail
    return tag, ""  # no "/" (or one at an end): the key "" is the name itself


def _scalar(value: Any) -> float:
    """``value`` as torch's writer reads a scalar: a number, a numpy scalar or array, a tensor of one element.

    Raises what torch's writer raises for the others (``NotImplementedError``,
    ``AssertionError``, ``ValueError``).
    """
    import numpy as np

    if isinstance(value, np.ndarray):
        array = value
    elif np.isscalar(value):
        array = np.array([value])
    elif _is_tensor(value):
        tensor = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            tensor = tensor.float()
        array = tensor.numpy()
    else:
        raise NotImplementedError(f"Got {type(value)}, but numpy array or torch tensor are expected.")
    array = array.squeeze()
    if array.ndim != 0:
        raise AssertionError(
            f"Tensor should contain one element (0 dimensions). Was given size: {array.size} and {array.ndim} dimensions."
        )
    return float(array)


def _array_like(value: Any) -> bool:
    """A numpy array or scalar, as torch's writer takes for a histogram."""
    import numpy as np

    return isinstance(value, np.ndarray) or bool(np.isscalar(value))


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def _kept(value: Any) -> Any:
    """A private copy of an array or tensor argument, taken at the call (the caller may change it in place)."""
    if _is_tensor(value):
        return value.detach().clone()
    copy = getattr(value, "copy", None)
    if type(value).__module__ == "numpy" and callable(copy):
        return copy()
    return value


def _writer_class() -> Any:
    """The real writer of the other ``add_*`` methods: torch's in a script that imported torch, else tensorboardX's.

    (Importing torch on the worker thread would hold the GIL, and the monitor's loop, for a second.)
    """
    if "torch" not in sys.modules:
        import tensorboardX

        return tensorboardX.SummaryWriter
    try:
        from torch.utils import tensorboard
    except ImportError:
        import tensorboardX

        return tensorboardX.SummaryWriter
    return tensorboard.SummaryWriter


def _wandb_syncs_tensorboard() -> bool:
    """Whether ``wandb.init(sync_tensorboard=True)`` (or ``wandb.tensorboard.patch()``) patched the writers."""
    wandb = sys.modules.get("wandb")
    patched = getattr(wandb, "patched", None)
    return isinstance(patched, dict) and bool(patched.get("tensorboard"))


def _torch_writer(writer: Any) -> bool:
    return type(writer).__module__.startswith("torch")


class _Events(TensorBoardSink):
    """The writer's TensorBoardSink: leaves out what torch's writer puts in runs of their own (``add_scalars``).

    ``aside`` holds those keys; a record left with no value (a non-finite one
    was left out) writes no event, as no call of torch's writer writes an empty one.
    """

    def __init__(self, log_dir: str, *, flush_secs: float, filename_suffix: str, purge_step: int | None) -> None:
        super().__init__(log_dir, flush_secs=flush_secs, filename_suffix=filename_suffix, name="summarywriter")
        self.aside: set[str] = set()
        self.purge_step = purge_step

    def open_blocking(self) -> None:
        super().open_blocking()
        if self.purge_step is not None:  # as torch's writer: TensorBoard drops the earlier events from this step on
            from tensorboardX.proto.event_pb2 import SessionLog

            self._events.write_event(
                self._event(wall_time=time.time(), step=self.purge_step, session_log=SessionLog(status=SessionLog.START))
            )
            self._events.flush()

    def write_blocking(self, records: Sequence[Record]) -> None:
        aside = self.aside
        kept = []
        for r in records:
            if aside and not aside.isdisjoint(r.metrics):
                r = dataclasses.replace(r, metrics={k: v for k, v in r.metrics.items() if k not in aside})
            if r.distributions:  # add_histogram: the histogram, not its summary's scalars (the other sinks' view)
                heads = tuple(key + "/" for key in r.distributions)
                r = dataclasses.replace(r, metrics={k: v for k, v in r.metrics.items() if not k.startswith(heads)})
            if r.metrics or r.distributions:
                kept.append(r)
        if kept:
            super().write_blocking(kept)


class SummaryWriter:
    """``torch.utils.tensorboard.SummaryWriter`` whose calls return at once, with more sinks and alerts.

    Every value is pushed with ``log()`` ([the pushing guarantees](pushing.md#what-it-guarantees));
    ``close()`` writes everything added. See [Coming from a SummaryWriter script](summarywriter.md).

    Args:
        log_dir: the run's folder; ``None``: ``runs/<date>_<host><comment>``, as torch's writer.
        comment: appended to the default ``log_dir`` (ignored when ``log_dir`` is given).
        purge_step: as torch's writer: TensorBoard hides the events of an earlier
            run of ``log_dir`` from this step on.
        max_queue: taken for compatibility; the push buffer bounds what waits.
        flush_secs: seconds between two flushes of the event file.
        filename_suffix: appended to the event files' names.
        sinks: more sinks that get every value (a `CSVSink`, an `MLflowSink`...).
        alerts: alert rules, such as ``Alert.defaults()``.
        monitor: a running `SyncMonitor` or `Monitor` to push into instead of one
            of the writer's own; its sinks are the ones written (``sinks=`` is refused).
        tensorboard: write the event files in ``log_dir`` (default ``True``).
        logdir: tensorboardX's name of ``log_dir``.

    Raises:
        ConfigError: ``sinks=`` or ``alerts=`` given with ``monitor=``.

    Examples:
        >>> import tempfile
        >>> with SummaryWriter(tempfile.mkdtemp()) as writer:
        ...     for step in range(3):
        ...         writer.add_scalar("charts/episodic_return", 10.0 * step, step)
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] | None = None,
        comment: str = "",
        purge_step: int | None = None,
        max_queue: int = 10,
        flush_secs: float = 120,
        filename_suffix: str = "",
        *,
        sinks: Any = None,
        alerts: Iterable[Alert] | None = None,
        monitor: Any = None,
        tensorboard: bool = True,
        logdir: str | os.PathLike[str] | None = None,
    ) -> None:
        if log_dir is None:
            log_dir = logdir  # tensorboardX's name of it
        if log_dir is None:
            current_time = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", current_time + "_" + socket.gethostname() + comment)
        self.log_dir = os.fspath(log_dir)
        # imported here, on the caller's thread, as torch's writer is: two threads importing tensorboardX's
        # protobuf modules at once can see one half made, and an import holds the monitor's loop meanwhile
        import tensorboardX  # noqa: F401

        self._writer_class = _writer_class()
        self.purge_step = purge_step
        self.max_queue = max_queue
        self.flush_secs = flush_secs
        self.filename_suffix = filename_suffix
        self._events: _Events | None = None
        self._own: SyncMonitor | None = None
        if monitor is not None:
            if sinks is not None or alerts is not None:
                raise ConfigError(
                    "SummaryWriter: sinks= and alerts= are for the writer's own monitor; with monitor= give them "
                    "to that monitor"
                )
            self._sync: Any = monitor if isinstance(monitor, SyncMonitor) else None
            core = monitor.monitor if isinstance(monitor, SyncMonitor) else monitor
        else:
            more = [] if sinks is None else list(sinks) if isinstance(sinks, (list, tuple)) else [sinks]
            if tensorboard:
                self._events = _Events(
                    self.log_dir, flush_secs=flush_secs, filename_suffix=filename_suffix, purge_step=purge_step
                )
                more.insert(0, self._events)
            self._own = self._sync = SyncMonitor(
                more, alerts=list(alerts) if alerts is not None else None, queue_size=QUEUE_SIZE
            )
            self._own.start()
            core = self._own.monitor
        self._core = core
        self._names: dict[str, tuple[str, str, Callable[..., None], Callable[..., None]]] = {}
        self._steps: dict[str, int] = {}
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._real: Any = None  # the tensorboardX writer of the other add_* methods, made on the worker thread
        self._pending: list[concurrent.futures.Future[Any]] = []
        self.failed = 0
        """Calls handed to the worker thread that failed there (each warned)."""
        self._closed = False
        if purge_step is not None and self._events is None:  # no event file of ours: the real writer's says it
            self._submit("purge_step", lambda writer: None)
        elif self._events is not None and _wandb_syncs_tensorboard():
            # wandb.init(sync_tensorboard=True) learns a log_dir from the writers' EventFileWriter it patched;
            # the real writer makes one, and wandb then reads every event file in log_dir, ours too
            self._submit("SummaryWriter", lambda writer: None)

    # ---------------------------------------------------------------- scalars
    def add_scalar(
        self,
        tag: str,
        scalar_value: Any,
        global_step: Any = None,
        walltime: Any = None,
        new_style: bool = False,
        double_precision: bool = False,
        display_name: str = "",
        summary_description: str = "",
    ) -> None:
        """Pushes one scalar under ``tag`` at ``global_step`` (or the next step of ``tag``); returns at once.

        ``new_style``, ``double_precision`` (torch's) and ``display_name``,
        ``summary_description`` (tensorboardX's) are taken; the value is written
        as a plain scalar.
        """
        names = self._names.get(tag)
        if names is None:
            names = self._name(tag)
        if type(scalar_value) is not float:
            scalar_value = scalar_value + 0.0 if type(scalar_value) is int else _scalar(scalar_value)
        if global_step is None or type(global_step) is not int or (walltime is not None and type(walltime) is not float):
            global_step, walltime = self._stamp(tag, global_step, walltime)
        if scalar_value - scalar_value != 0.0:  # NaN or inf: kept in the event file, and told to the alerts
            walltime = self._nonfinite(tag, scalar_value, global_step, walltime)
        names[3](names[0], {names[1]: scalar_value}, global_step, walltime)  # a float in a dict of its own: not copied

    def add_scalars(
        self, main_tag: str, tag_scalar_dict: Mapping[str, Any], global_step: Any = None, walltime: Any = None
    ) -> None:
        """As torch's writer: each ``tag`` in a run of its own, ``log_dir/<main_tag>_<tag>``, charted as ``main_tag``.

        The sinks of ``sinks=`` get them as the keys ``<main_tag>/<tag>``.
        """
        if global_step is not None and type(global_step) is not int:
            global_step = int(global_step)
        walltime = _time() if walltime is None else float(walltime)
        values = {tag: _scalar(value) if type(value) is not float else value for tag, value in tag_scalar_dict.items()}
        self._submit("add_scalars", lambda writer: writer.add_scalars(main_tag, values, global_step, walltime))
        self._aside(main_tag, values, global_step, walltime)

    def add_hparams(
        self,
        hparam_dict: Mapping[str, Any],
        metric_dict: Mapping[str, Any],
        hparam_domain_discrete: Mapping[str, Sequence[Any]] | None = None,
        run_name: str | None = None,
        global_step: int | None = None,
        **kwargs: Any,
    ) -> None:
        """As torch's writer (a run of its own, ``run_name`` or the time); the sinks get ``metric_dict``'s values."""
        name = kwargs.pop("name", run_name)  # tensorboardX's name for run_name
        hparams, metrics = dict(hparam_dict), {k: _kept(v) for k, v in metric_dict.items()}
        when = _time()
        if name is None:
            name = str(when)

        def add(writer: Any) -> None:
            if _torch_writer(writer):
                writer.add_hparams(hparams, metrics, hparam_domain_discrete, name, global_step)
            else:
                writer.add_hparams(hparams, metrics, name=name, global_step=global_step)

        self._submit("add_hparams", add)
        for tag, value in metrics.items():
            head, key = _split(tag)
            self._aside(head, {key: _scalar(value)}, global_step, when)

    def add_text(self, tag: str, text_string: str, global_step: Any = None, walltime: Any = None) -> None:
        """As torch's writer (the tag ``<tag>/text_summary``), written on the worker thread."""
        self._submit("add_text", lambda writer: writer.add_text(tag, text_string, global_step, walltime))

    def add_histogram(
        self,
        tag: str,
        values: Any,
        global_step: Any = None,
        bins: Any = "tensorflow",
        walltime: Any = None,
        max_bins: Any = None,
    ) -> None:
        """A histogram under ``tag`` at ``global_step``, pushed with ``log()`` as a [distribution](distributions.md).

        The event file gets the histogram (its buckets are the distribution's, not
        ``bins``), the other sinks its summary (``<tag>/mean``, ``/p50``...).
        """
        names = self._names.get(tag)
        if names is None:
            names = self._name(tag)
        if _is_tensor(values):
            values = values.detach().cpu().clone()  # numpy arrays are copied by the push itself
        elif not _array_like(values):
            raise NotImplementedError(f"Got {type(values)}, but numpy array or torch tensor are expected.")
        if global_step is None or type(global_step) is not int or (walltime is not None and type(walltime) is not float):
            global_step, walltime = self._stamp(tag, global_step, walltime)
        names[2](names[0], {names[1]: values}, global_step, walltime)

    def __getattr__(self, attr: str) -> Any:
        """Every other ``add_*`` method of TensorBoard's writer, run on the worker thread with copies of its arrays."""
        if not attr.startswith("add_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")
        if not callable(getattr(self._writer_class, attr, None)):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")

        def call(*args: Any, **kwargs: Any) -> None:
            args = tuple(_kept(a) for a in args)
            kwargs = {k: _kept(v) for k, v in kwargs.items()}
            if "walltime" in _walltimes(self._writer_class, attr) and kwargs.get("walltime") is None:
                kwargs["walltime"] = _time()
            self._submit(attr, lambda writer: getattr(writer, attr)(*args, **kwargs))

        call.__name__ = attr
        return call

    # ---------------------------------------------------------------- run
    def get_logdir(self) -> str:
        """The run's folder."""
        return self.log_dir

    def flush(self) -> None:
        """Writes everything added so far and flushes the event files."""
        self._settle(flush=True)
        if self._sync is not None:
            self._sync.flush()

    def close(self) -> None:
        """Writes everything added, closes the event files and the writer's own monitor. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._names.clear()  # a later add_scalar goes through _name(), which refuses it
        self._settle(flush=False)
        if self._pool is not None:
            self._pool.submit(self._close_real).result()
            self._pool.shutdown(wait=True)
        if self._own is not None:
            self._own.close()
        elif self._sync is not None:
            self._sync.flush()

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def monitor(self) -> Any:
        """The monitor the values are pushed into (its ``stats()`` counts them)."""
        return self._sync

    # ---------------------------------------------------------------- inside
    def _name(self, tag: Any) -> tuple[str, str, Callable[..., None], Callable[..., None]]:
        """The push name, key, push and push of a dict made for it of a tag not seen yet; refuses what
        TensorBoard's protobuf refuses."""
        if not isinstance(tag, str):
            raise TypeError(f"SummaryWriter: a tag must be a str, got {type(tag).__name__}")
        if not tag:
            raise ValueError("SummaryWriter: the tag is empty; TensorBoard charts a value by its tag")
        if self._closed:
            raise ValueError("SummaryWriter: the writer is closed")
        head, key = _split(tag)
        push = self._core.pusher(head)
        if len(self._names) >= _MAX_SPLITS:
            self._names.clear()
        names = self._names[tag] = (head, key, push, self._core.pusher(head, owned=True))
        return names

    def _stamp(self, tag: str, global_step: Any, walltime: Any) -> tuple[int, float | None]:
        """``global_step`` as an int (``None``: the tag's next step) and ``walltime`` as a float, as torch's writer takes them."""
        if global_step is None:
            global_step = self._next_step(tag)
        elif type(global_step) is not int:
            global_step = int(global_step)
        if walltime is not None and type(walltime) is not float:
            walltime = float(walltime)
        return global_step, walltime

    def _next_step(self, tag: str) -> int:
        """The step of a value given without one: the count of the tag's earlier ones."""
        with self._lock:
            step = self._steps.get(tag, 0)
            self._steps[tag] = step + 1
        return step

    def _nonfinite(self, tag: str, value: float, step: int, walltime: float | None) -> float:
        """NaN or inf: the push leaves it out (and the alerts see it); the event file keeps it, as torch's writer."""
        walltime = _time() if walltime is None else walltime
        if self._events is None:
            return walltime

        def write(writer: Any) -> None:
            if _torch_writer(writer):
                from tensorboard.compat.proto.summary_pb2 import Summary  # type: ignore[import-untyped]
            else:
                from tensorboardX.proto.summary_pb2 import Summary
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])  # the tag as given, as torch's
            writer._get_file_writer().add_summary(summary, step, walltime)

        self._submit("add_scalar", write)
        return walltime

    def _aside(self, head: str, values: Mapping[str, float], step: int | None, walltime: float) -> None:
        """Pushes values whose event files the worker thread writes, for the other sinks only."""
        if self._events is not None:
            self._events.aside.update(f"{head}/{key}" if key else head for key in values)
        self._core.pusher(head)(head, dict(values), step, walltime)

    def _submit(self, what: str, fn: Callable[[Any], Any]) -> None:
        """Runs ``fn(real writer)`` on the worker thread, in call order; a failure is warned and counted."""
        if self._closed:
            raise ValueError(f"SummaryWriter.{what}(): the writer is closed")
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="monitor-async-summarywriter")
            future = self._pool.submit(self._run, what, fn)
            self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(future)

    def _run(self, what: str, fn: Callable[[Any], Any]) -> None:
        try:
            if self._real is None:
                self._real = self._writer_class(
                    self.log_dir, purge_step=self.purge_step if self._events is None else None, max_queue=self.max_queue,
                    flush_secs=self.flush_secs, filename_suffix=self.filename_suffix,
                )
            fn(self._real)
        except Exception as exc:  # noqa: BLE001 - a call the script made long ago: warned, counted
            self.failed += 1
            log.warning("SummaryWriter.%s() failed on the writer's thread: %s", what, describe(exc))

    def _settle(self, *, flush: bool) -> None:
        """Waits for the calls handed to the worker thread (and flushes its writer)."""
        with self._lock:
            pending, self._pending = self._pending, []
            pool = self._pool
        concurrent.futures.wait(pending)
        if flush and pool is not None and self._real is not None:
            pool.submit(self._real.flush).result()

    def _close_real(self) -> None:
        if self._real is not None:
            self._real.close()


def _walltimes(writer_class: Any, attr: str) -> tuple[str, ...]:
    """``("walltime",)`` when the real writer's ``attr`` takes one (stamped at the call, not on the worker thread)."""
    import inspect

    try:
        return tuple(p for p in inspect.signature(getattr(writer_class, attr)).parameters if p == "walltime")
    except (TypeError, ValueError):
        return ()
