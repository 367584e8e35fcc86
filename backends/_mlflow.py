"""MLflowSink: records logged as the metrics of an MLflow run, through tracking-server outages."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast
from urllib.parse import urlparse

from monitor_async._core import AlertEvent, ConfigError, DeliveryError, Ranks, Record, check_ranks
from monitor_async._core.checks import number, refuse
from monitor_async._core.resume import ResumePoint, number_on
from monitor_async._core.secrets import HTTP_URL, check_http_url, keep_secret, redact, redact_logs, redact_url

from ._delivery import (
    DEFAULT_SPOOL_BYTES,
    Backoff,
    ResilientSink,
    failed,
    not_the_answer,
    parse_retry_after,
    text_of,
)

try:
    import mlflow
    from mlflow.entities import Metric
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("MLflowSink needs MLflow's client: pip install mlflow-skinny (or the extra: monitor-async[mlflow])") from exc

__all__ = ["MAX_METRICS_PER_BATCH", "MLflowSink", "mlflow_key"]

log = logging.getLogger("monitor_async")

MAX_METRICS_PER_BATCH = 1000
"""MLflow's limit on the metrics of one ``log_batch`` call."""
_KEY_LENGTH = 250  # MLflow's limit on a metric key
_NOT_IN_KEY = re.compile(r"[^\w./\- ]")


def mlflow_key(key: str) -> str:
    """``key`` made a valid MLflow metric key (the same key always gives the same result).

    MLflow takes letters, digits, ``_ - . /`` and spaces, at most 250
    characters, and no key that a path would rewrite. So: any other
    character (``:``, ``@``, ``[``...) becomes ``_``; empty path segments
    go (``a//b`` is ``a/b``, no leading or trailing ``/``); a ``.`` or ``..``
    segment becomes ``_`` or ``__``; a key still longer than 250 keeps its
    first 241 characters plus ``-`` and 8 hex digits of a hash of the whole
    key, so two long keys stay apart.

    Examples:
        >>> mlflow_key("collector/frames_per_second")
        'collector/frames_per_second'
        >>> mlflow_key("gpu:0/mem[used]"), mlflow_key("/a//../b/")
        ('gpu_0/mem_used_', 'a/__/b')
    """
    clean = _NOT_IN_KEY.sub("_", key)
    parts = ["_" * len(part) if part in (".", "..") else part for part in clean.split("/") if part]
    clean = "/".join(parts) or "_"
    if len(clean) > _KEY_LENGTH:
        clean = f"{clean[: _KEY_LENGTH - 9]}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"
    return clean


class _Rest:
    """MLflow's REST API through MLflow's own HTTP helper (credentials, TLS, header plugins).

    One try per call: MLflow's client would retry inline for minutes on its
    own (7 retries with a growing backoff); here the sink does the retrying,
    from its spool.
    """

    def __init__(self, uri: str, timeout: float) -> None:
        from mlflow.utils.credentials import get_default_host_creds
        from mlflow.utils.rest_utils import http_request

        credentials: Any = get_default_host_creds  # MLflow's helpers are not typed
        self._creds = credentials(uri)
        keep_secret(values=(self._creds.password, self._creds.token))  # from MLFLOW_TRACKING_PASSWORD / _TOKEN
        self._http: Any = http_request
        self._timeout = timeout
        self._shown = redact_url(uri)

    def call(self, method: str, endpoint: str, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            response = self._http(
                self._creds, f"/api/2.0/mlflow/{endpoint}", method,
                max_retries=0, backoff_factor=0, backoff_jitter=0, timeout=self._timeout,
                raise_on_status=False, **({"params": body} if method == "GET" else {"json": body}),
            )
        except MlflowException as exc:  # no reply: say so briefly, keep what classify() read
            raise failed(f"MLflow server at {self._shown}", exc) from None
        if response.status_code == 200:
            try:
                data = response.json()
            except ValueError:
                data = None
            if not isinstance(data, dict):  # a proxy or a login page answered, not MLflow
                raise not_the_answer(f"MLflow {endpoint} at {self._shown}", 200, response.content)
            return data
        try:
            error = response.json()
            detail = f"{error.get('error_code', '')}: {error.get('message', '')}".strip(": ")
        except ValueError:
            detail = " ".join(response.text.split())[:300]
        raise DeliveryError(
            redact(f"MLflow {endpoint}: HTTP {response.status_code} {detail}".rstrip()),
            status=response.status_code,
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
        )

    def experiment_id(self, name: str) -> str:
        try:
            found = self.call("GET", "experiments/get-by-name", {"experiment_name": name})
            return str(found["experiment"]["experiment_id"])
        except DeliveryError as exc:
            if exc.status != 404:
                raise
        try:
            return str(self.call("POST", "experiments/create", {"name": name})["experiment_id"])
        except DeliveryError as exc:  # created meanwhile by another process
            if exc.status not in (400, 409):
                raise
            return str(self.call("GET", "experiments/get-by-name", {"experiment_name": name})["experiment"]["experiment_id"])

    def create_run(self, experiment_id: str, run_name: str | None, tags: Mapping[str, str], start: int) -> str:
        body: dict[str, Any] = {
            "experiment_id": experiment_id, "start_time": start,
            "tags": [{"key": k, "value": v} for k, v in tags.items()],
        }
        if run_name is not None:
            body["run_name"] = run_name
        return str(self.call("POST", "runs/create", body)["run"]["info"]["run_id"])

    def log_batch(self, run_id: str, metrics: list[tuple[str, float, int, int]]) -> None:
        self.call("POST", "runs/log-batch", {
            "run_id": run_id,
            "metrics": [{"key": k, "value": v, "timestamp": t, "step": s} for k, v, t, s in metrics],
        })

    def end_run(self, run_id: str, end: int) -> None:
        self.call("POST", "runs/update", {"run_id": run_id, "status": "FINISHED", "end_time": end})

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.call("POST", "runs/set-tag", {"run_id": run_id, "key": key, "value": value})


class _Client:
    """Any other tracking URI (a local ``sqlite:`` or ``file:`` store, Databricks): MLflow's client."""

    def __init__(self, uri: str) -> None:
        self._client = MlflowClient(tracking_uri=uri)

    def _do(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MlflowException as exc:
            status = cast(Any, exc).get_http_status_code()
            raise DeliveryError(redact(f"MLflow {what}: {exc.error_code}: {exc.message}"), status=status) from None

    def experiment_id(self, name: str) -> str:
        found = self._do("get_experiment_by_name", self._client.get_experiment_by_name, name)
        if found is not None:
            return str(found.experiment_id)
        return str(self._do("create_experiment", self._client.create_experiment, name))

    def create_run(self, experiment_id: str, run_name: str | None, tags: Mapping[str, str], start: int) -> str:
        run = self._do(
            "create_run", self._client.create_run, experiment_id, start_time=start, tags=dict(tags), run_name=run_name
        )
        return str(run.info.run_id)

    def log_batch(self, run_id: str, metrics: list[tuple[str, float, int, int]]) -> None:
        self._do(
            "log_batch", self._client.log_batch, run_id,
            metrics=[Metric(k, v, t, s) for k, v, t, s in metrics], synchronous=True,
        )

    def end_run(self, run_id: str, end: int) -> None:
        self._do("set_terminated", self._client.set_terminated, run_id, "FINISHED", end)

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self._do("set_tag", self._client.set_tag, run_id, key, value, synchronous=True)


class MLflowSink(ResilientSink):
    """Logs every record's metrics to an MLflow run; tracking-server outages lose nothing.

    Built on [ResilientSink][monitor_async.backends.ResilientSink]: batches wait
    in a disk spool while the server is away. What it promises:
    [Remote trackers: MLflow](remote-trackers.md#mlflow-mlflowsink).

    Args:
        tracking_uri: a tracking server (``http(s)://``) or any store MLflow's
            client takes (``sqlite:``, ``file:``, ``databricks``); ``None``
            (default): ``mlflow.get_tracking_uri()``. Its user-info and query values
            are [never printed](guarantees.md#secrets-never-printed-test_secretspy).
        experiment: the experiment of a run the sink creates, created if
            missing; ``None`` (default): MLflow's from the environment, else Default.
        run_id: an existing run to log to, never ended by the sink; ``None``
            (default): the active run, else one created at the first delivery.
        run_name: the name of a run the sink creates; ``None`` (default):
            one MLflow picks.
        tags: tags of a run the sink creates; ``None`` (default): none.
        spool_dir: the spool's folder, replayed by a later sink on it;
            ``None`` (default): a temporary one.
        spool_bytes: the spool's bound in bytes (default 64 MiB).
        backoff: the waits between tries (default ``Backoff()``).
        timeout: seconds one request to a tracking server may take (default
            10.0); a finite number > 0.
        name: the sink's label in ``Monitor.stats()`` and in messages;
            ``None`` (default) or ``""``: ``"mlflow"``.
        ranks: ``"main"`` (default): only rank 0 logs; ``"all"``: every rank.

    Raises:
        ConfigError: a bad option (a ``tracking_uri`` no store takes...), or ``run_id``
            together with options of a new run.

    Examples:
        >>> import asyncio, tempfile
        >>> from monitor_async import Monitor
        >>> from mlflow.tracking import MlflowClient
        >>> uri = f"sqlite:///{tempfile.mkdtemp()}/mlflow.db"
        >>> class Buffer:
        ...     def __init__(self):
        ...         self.size = 0
        ...     def stats(self):
        ...         self.size += 10
        ...         return {"size": self.size}
        >>> async def main():
        ...     async with MLflowSink(uri, experiment="demo", run_name="buffer") as sink:
        ...         monitor = Monitor(sink)
        ...         monitor.watch(Buffer(), name="rb")
        ...         for _ in range(3):
        ...             await monitor.step()
        ...         await monitor.flush()
        ...         return sink.run_id
        >>> run_id = asyncio.run(main())
        >>> for metric in MlflowClient(uri).get_metric_history(run_id, "rb/size"):
        ...     print(metric.step, metric.value)
        0 10.0
        1 20.0
        2 30.0
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        *,
        experiment: str | None = None,
        run_id: str | None = None,
        run_name: str | None = None,
        tags: Mapping[str, Any] | None = None,
        spool_dir: str | os.PathLike[str] | None = None,
        spool_bytes: int = DEFAULT_SPOOL_BYTES,
        backoff: Backoff | None = None,
        timeout: float = 10.0,
        name: str | None = None,
        ranks: Ranks = "main",
    ) -> None:
        super().__init__(spool_dir=spool_dir, spool_bytes=spool_bytes, backoff=backoff, name=name)
        self.ranks = check_ranks(ranks, "MLflowSink")
        for option, value in (("tracking_uri", tracking_uri), ("experiment", experiment),
                              ("run_id", run_id), ("run_name", run_name)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(f"MLflowSink: {option} must be a non-empty string or None, got {value!r}")
        if tags is not None and not isinstance(tags, Mapping):
            raise ConfigError(f"MLflowSink: tags must be a mapping, got {type(tags).__name__}")
        number("MLflowSink", "timeout", timeout, unit="seconds")
        if run_id is not None and (experiment or run_name or tags):
            raise ConfigError(
                "MLflowSink: run_id names an existing run; experiment, run_name and tags only apply "
                "to a run the sink creates"
            )
        current = mlflow.get_tracking_uri()
        self.tracking_uri = tracking_uri or current
        _check_tracking_uri(self.tracking_uri, given=tracking_uri is not None)
        keep_secret(self.tracking_uri)
        redact_logs("urllib3", "requests", "mlflow", "monitor_async")
        if run_id is None and self.tracking_uri == current:
            active = mlflow.active_run()
            run_id = active.info.run_id if active is not None else None
        self._run_id = run_id
        self._owns_run = False
        self._experiment = experiment
        self._run_name = run_name
        self._tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self._timeout = float(timeout)
        self._store: _Rest | _Client | None = None
        self._index: dict[str, int] = {}
        self._keys: dict[str, str] = {}

    @property
    def run_id(self) -> str | None:
        """The run logged to: given, active, or created at the first delivery (``None`` until then)."""
        return self._run_id

    def destination(self) -> str | None:
        return self._run_id

    def prepare(self, records: Sequence[Record]) -> list[list[Record]]:
        """Numbers step-less records per watch, then cuts the batch into parts of at most 1000 metrics."""
        parts: list[list[Record]] = []
        part: list[Record] = []
        room = MAX_METRICS_PER_BATCH
        index = self._index
        for record in records:
            n = index.get(record.name, 0)
            index[record.name] = n + 1
            if record.step is None:
                record = dataclasses.replace(record, step=n)
            items = list(record.metrics.items())
            if len(items) <= room:
                part.append(record)
                room -= len(items)
            else:  # a record larger than what is left: its metrics fill this part and the next ones
                while items:
                    chunk, items = items[:room], items[room:]
                    part.append(dataclasses.replace(record, metrics=dict(chunk)))
                    room -= len(chunk)
                    if room == 0 and items:
                        parts.append(part)
                        part, room = [], MAX_METRICS_PER_BATCH
            if room == 0:
                parts.append(part)
                part, room = [], MAX_METRICS_PER_BATCH
        if part:
            parts.append(part)
        return parts

    def resume_state(self) -> dict[str, Any] | None:
        """The run logged to (``run_id``, once it exists) and the numbering of step-less records."""
        if self._run_id is None:
            return None
        return {"run_id": self._run_id, "owned": self._owns_run, "index": dict(self._index)}

    async def resume(self, point: ResumePoint, state: Mapping[str, Any] | None) -> None:
        """Logs to the run the resumed launch logged to, instead of creating one (see [resuming](resuming.md))."""
        await super().resume(point, state)
        saved = state or {}
        run_id = saved.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            return
        if self._run_id is None:
            self._run_id = run_id
            self._owns_run = bool(saved.get("owned"))  # the sink that created it ends it, as it would have
        elif self._run_id != run_id:
            log.warning("sink %r: resuming, but it was given run %s; the launch resumed logged to run %s, "
                        "which it leaves as it is", self.label, self._run_id, run_id)
        number_on(self._index, saved)

    def open_blocking(self) -> None:
        if urlparse(self.tracking_uri).scheme in ("http", "https"):
            self._store = _Rest(self.tracking_uri, self._timeout)
        else:
            self._store = _Client(self.tracking_uri)

    async def alert(self, event: AlertEvent) -> None:
        """Sets the run tag ``alert.<rule>`` to ``event.state``; spooled and retried like the metrics."""
        tags = {mlflow_key(f"alert.{event.rule}"): event.state}
        stand_in = Record(event.watch, None, event.time, {}, event.source)
        await self.deliver([[stand_in]], json.dumps({"run": self._run_id, "tags": tags}))

    def send_blocking(self, records: Sequence[Record], destination: str | None) -> None:
        store = self._store
        assert store is not None
        if destination is not None and destination.startswith("{"):  # tags (alert); a run id is hex
            spec = json.loads(destination)
            run = spec.get("run") or self._ensure_run(store)
            for key, value in spec["tags"].items():
                store.set_tag(run, key, str(value))
            return
        run_id = destination or self._ensure_run(store)
        keys = self._keys
        metrics: list[tuple[str, float, int, int]] = []
        for record in records:
            stamp = int(record.time * 1000)
            step = record.step if record.step is not None else 0
            for key, value in record.metrics.items():
                clean = keys.get(key)
                if clean is None:
                    clean = keys[key] = mlflow_key(key)
                metrics.append((clean, value, stamp, step))
        if metrics:
            store.log_batch(run_id, metrics)

    def _ensure_run(self, store: _Rest | _Client) -> str:
        if self._run_id is None:
            experiment = self._experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME")
            if experiment:
                experiment_id = store.experiment_id(experiment)
            else:
                experiment_id = os.environ.get("MLFLOW_EXPERIMENT_ID") or "0"
            self._run_id = store.create_run(experiment_id, self._run_name, self._tags, _now_ms())
            self._owns_run = True
        return self._run_id

    def close_blocking(self) -> None:
        if self._owns_run and self._run_id is not None and self._store is not None:
            try:
                self._store.end_run(self._run_id, _now_ms())
            except Exception as exc:  # noqa: BLE001 - the server may be away: the run stays RUNNING
                log.warning("sink %r: could not mark MLflow run %s finished: %s", self.label, self._run_id, text_of(exc))


def _stores() -> frozenset[str]:
    """The URI schemes MLflow's client has a tracking store for, plugins included."""
    try:
        from mlflow.tracking._tracking_service.utils import _tracking_store_registry

        return frozenset(str(scheme) for scheme in _tracking_store_registry._registry)
    except (ImportError, AttributeError):  # MLflow moved it: the stores it has long had
        return frozenset(("", "file", "http", "https", "databricks", "databricks-uc", "uc",
                          "sqlite", "postgresql", "mysql", "mssql"))


def _check_tracking_uri(uri: str, given: bool) -> None:
    """An ``http(s)`` URL with a host and a valid port, or a store MLflow's client takes; else ConfigError."""
    option = "tracking_uri" if given else "tracking_uri (from mlflow.get_tracking_uri())"
    scheme = urlparse(uri).scheme.lower()
    stores = sorted(s for s in _stores() - {"", "http", "https"})
    also = f", or a store MLflow's client takes (a path, or {', '.join(s + ':' for s in stores)})"
    if scheme in ("http", "https"):
        check_http_url("MLflowSink", option, uri, also=also)
        return
    base = scheme.partition("+")[0]  # mysql+pymysql: an engine and its driver
    if (base in _stores() or len(scheme) == 1) and (base not in _DATABASES or _valid_port(uri)):  # c: a drive
        return
    raise refuse("MLflowSink", option, HTTP_URL + also, redact_url(uri))


_DATABASES = frozenset(("postgresql", "mysql", "mssql"))


def _valid_port(uri: str) -> bool:
    try:
        port = urlparse(uri).port  # raises when out of 0..65535
    except ValueError:
        return False
    return port != 0


def _now_ms() -> int:
    return int(time.time() * 1000)
