"""OTLPSink: records exported as OpenTelemetry gauge and histogram data points, through the SDK's OTLP/HTTP exporter."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

from monitor_async._core import ConfigError, DeliveryError, Ranks, Record, check_ranks
from monitor_async._core.checks import number
from monitor_async._core.distribution import Summary
from monitor_async._core.secrets import (
    check_headers,
    check_http_url,
    keep_secret,
    redact,
    redact_logs,
    redact_url,
)
from monitor_async._version import __version__

from ._delivery import (
    DEFAULT_SPOOL_BYTES,
    Backoff,
    ResilientSink,
    failed,
    not_the_answer,
    parse_retry_after,
)

try:
    import requests
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Buckets,
        ExponentialHistogram,
        ExponentialHistogramDataPoint,
        Gauge,
        Histogram,
        HistogramDataPoint,
        Metric,
        MetricExportResult,
        MetricsData,
        NumberDataPoint,
        ResourceMetrics,
        ScopeMetrics,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "OTLPSink needs the OpenTelemetry SDK and its OTLP/HTTP exporter: pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http (or the extra: monitor-async[otlp])"
    ) from exc

__all__ = ["OTLPSink"]

log = logging.getLogger("monitor_async")

DEFAULT_ENDPOINT = "http://localhost:4318/v1/metrics"
_EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http.metric_exporter"
_exporting = threading.local()


_SERIES = 100_000
"""Distribution series whose previous point time is kept (more start afresh)."""


def _point(summary: Summary, attributes: dict[str, Any], start: int, stamp: int) -> Any:
    """The OTLP data point of ``summary``: exponential histogram, or explicit-bounds histogram."""
    if summary.bounds is not None:
        return HistogramDataPoint(
            attributes=attributes, start_time_unix_nano=start, time_unix_nano=stamp, count=summary.count,
            sum=summary.sum, bucket_counts=list(summary.counts), explicit_bounds=list(summary.bounds),
            min=summary.min, max=summary.max,
        )
    return ExponentialHistogramDataPoint(
        attributes=attributes, start_time_unix_nano=start, time_unix_nano=stamp, count=summary.count,
        sum=summary.sum, scale=summary.scale, zero_count=summary.zero_count,
        positive=Buckets(summary.positive[0], list(summary.positive[1])),
        negative=Buckets(summary.negative[0], list(summary.negative[1])),
        flags=0, min=summary.min, max=summary.max,
    )


class _QuietWhileExporting(logging.Filter):
    """Drops the exporter's own failure lines for our exports: the sink reports each failure itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_exporting, "on", False)


_quiet = _QuietWhileExporting()
logging.getLogger(_EXPORTER_LOGGER).addFilter(_quiet)


class _Attempt(Exception):
    """Raised by the session so that the exporter makes one try only (see `_Session`)."""


class _Session(requests.Session):
    """The exporter's HTTP session: one try per export, and what the server answered.

    The exporter retries 429, 502, 503, 504 and lost connections itself,
    sleeping inline for up to its timeout, and only reports success or
    failure. Raising an exception it does not know from the session makes
    it give up at once; `outcome` keeps what the sink decides with:
    the status, the server's message and ``Retry-After``, or the
    connection error.
    """

    def __init__(self, shown: str) -> None:
        super().__init__()
        self.shown = shown
        """The endpoint as messages show it (redacted)."""
        self.outcome: BaseException | None = None
        self.rejected: tuple[int, str] | None = None

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> requests.Response:
        self.outcome = self.rejected = None
        try:
            response = super().request(method, url, *args, **kwargs)
        except requests.RequestException as exc:
            self.outcome = failed(f"OTLP endpoint {self.shown}", exc)
            raise _Attempt(str(self.outcome)) from None
        status = response.status_code
        if not 200 <= status < 300:
            self.outcome = DeliveryError(
                redact(f"OTLP export to {self.shown}: HTTP {status} {response.reason or ''}".rstrip() + _detail(response)),
                status=status,
                retry_after=parse_retry_after(response.headers.get("Retry-After")),
            )
            raise _Attempt(str(self.outcome))
        if response.content:
            kind = response.headers.get("Content-Type", "")
            try:
                if "html" in kind:
                    raise ValueError(kind)
                partial = ExportMetricsServiceResponse.FromString(response.content).partial_success
            except Exception:  # noqa: BLE001 - not the protobuf reply: a JSON one is fine, anything else is not
                if "json" in kind and _is_json(response.content):
                    return response
                self.outcome = not_the_answer(f"OTLP export to {self.shown}", status, response.content)
                raise _Attempt(str(self.outcome)) from None
            if partial.rejected_data_points:
                self.rejected = (int(partial.rejected_data_points), partial.error_message)
        return response


def _endpoint_from_environment() -> str:
    """``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/metrics``, else the default."""
    for variable, suffix in (("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", ""), ("OTEL_EXPORTER_OTLP_ENDPOINT", "/v1/metrics")):
        value = os.environ.get(variable)
        if value:
            url = f"{value.rstrip('/')}{suffix}" if suffix else value
            return check_http_url("OTLPSink", f"endpoint (from {variable})", url)
    return DEFAULT_ENDPOINT


def _hide_secrets(endpoint: str, headers: Mapping[str, str] | None) -> None:
    """Keeps the endpoint's and the headers' secrets (the exporter's from the environment when none are given)."""
    if headers is None:
        headers = {}
        for variable in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS"):
            for item in os.environ.get(variable, "").split(","):
                key, _, value = item.partition("=")
                if value.strip():
                    headers[key.strip()] = unquote(value.strip())
    keep_secret(endpoint, headers=headers)
    redact_logs("urllib3", "requests", "opentelemetry", "monitor_async")


def _is_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def _detail(response: requests.Response) -> str:
    """The server's message: a ``google.rpc.Status`` (OTLP's error body) or plain text."""
    body = response.content or b""
    if "protobuf" in response.headers.get("Content-Type", ""):
        try:
            from google.rpc import status_pb2

            return f": {status_pb2.Status.FromString(body).message}"
        except Exception:  # noqa: BLE001 - not a Status after all
            pass
    text = " ".join(body.decode("utf-8", "replace").split())[:300]
    return f": {text}" if text else ""


class OTLPSink(ResilientSink):
    """Exports every record as OpenTelemetry gauge data points over OTLP/HTTP; outages lose nothing.

    A distribution is a delta exponential-histogram data point (a histogram one with explicit bounds).

    Built on [ResilientSink][monitor_async.backends.ResilientSink]: batches wait
    in a disk spool while the collector is away. What it promises:
    [Remote trackers: OpenTelemetry](remote-trackers.md#opentelemetry-otlpsink).

    Args:
        endpoint: the full OTLP/HTTP metrics URL (``http(s)``, with a host); ``None``
            (default): from ``OTEL_EXPORTER_OTLP_*``, else ``http://localhost:4318/v1/metrics``.
            Its user-info and query values are [never printed](guarantees.md#secrets-never-printed-test_secretspy).
        headers: extra HTTP headers (an API key...), their values never printed; ``None``
            (default): the ``OTEL_EXPORTER_OTLP_*HEADERS`` variables.
        service_name: the resource's ``service.name``; ``None`` (default):
            ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, else ``"monitor-async"``.
        resource_attributes: more resource attributes
            (``{"deployment.environment": "dev"}``); ``None`` (default): none.
        timeout: seconds one export may take (default 10.0); a finite number > 0.
        spool_dir: the spool's folder; ``None`` (default): a temporary one.
        spool_bytes: the spool's bound in bytes (default 64 MiB).
        backoff: the waits between tries (default ``Backoff()``).
        name: the sink's label in ``Monitor.stats()`` and in messages;
            ``None`` (default) or ``""``: ``"otlp"``.
        ranks: ``"all"`` (default): every rank exports; ``"main"``: only rank 0.

    Raises:
        ConfigError: a bad option (an endpoint that is not an ``http(s)`` URL with a host...).

    Examples:
        >>> sink = OTLPSink("http://127.0.0.1:4318/v1/metrics", service_name="trainer")
        >>> sink.endpoint, sink.resource.attributes["service.name"]
        ('http://127.0.0.1:4318/v1/metrics', 'trainer')
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        service_name: str | None = None,
        resource_attributes: Mapping[str, Any] | None = None,
        timeout: float = 10.0,
        spool_dir: str | os.PathLike[str] | None = None,
        spool_bytes: int = DEFAULT_SPOOL_BYTES,
        backoff: Backoff | None = None,
        name: str | None = None,
        ranks: Ranks = "all",
    ) -> None:
        super().__init__(spool_dir=spool_dir, spool_bytes=spool_bytes, backoff=backoff, name=name)
        self.ranks = check_ranks(ranks, "OTLPSink")
        self._headers = check_headers("OTLPSink", headers)
        if endpoint is not None:
            check_http_url("OTLPSink", "endpoint", endpoint)
        if service_name is not None and (not isinstance(service_name, str) or not service_name):
            raise ConfigError(f"OTLPSink: service_name must be a non-empty string, got {service_name!r}")
        if resource_attributes is not None and not isinstance(resource_attributes, Mapping):
            raise ConfigError(f"OTLPSink: resource_attributes must be a mapping, got {resource_attributes!r}")
        number("OTLPSink", "timeout", timeout, unit="seconds")
        self.endpoint = endpoint or _endpoint_from_environment()
        _hide_secrets(self.endpoint, self._headers)
        self._shown = redact_url(self.endpoint)
        attributes: dict[str, Any] = dict(resource_attributes or {})
        if service_name is not None:
            attributes["service.name"] = service_name
        resource = Resource.create(attributes)
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "monitor-async"}))
        self.resource = resource
        """The OpenTelemetry resource every export carries."""
        self._timeout = float(timeout)
        self._scope = InstrumentationScope("monitor_async", __version__)
        self._exporter: OTLPMetricExporter | None = None
        self._session: _Session | None = None
        self._partial = False
        self.points_rejected = 0
        self._starts: dict[tuple[str, tuple[Any, ...]], int] = {}

    def counters(self) -> dict[str, float]:
        return {**super().counters(), "points_rejected": float(self.points_rejected)}

    def open_blocking(self) -> None:
        self._session = _Session(self._shown)
        self._exporter = OTLPMetricExporter(
            endpoint=self.endpoint, headers=self._headers, timeout=self._timeout, session=self._session
        )

    def metrics_data(self, records: Sequence[Record]) -> MetricsData:
        """The SDK's ``MetricsData`` for a batch: one gauge per metric name, a data point per record.

        A distribution is a delta exponential-histogram data point (a histogram one with explicit
        bounds), covering the time since the previous one of its watch, key and source.
        """
        points: dict[str, list[NumberDataPoint]] = {}
        histograms: dict[tuple[str, bool], list[Any]] = {}
        for record in records:
            prefix = record.name + "/"
            attributes: dict[str, Any] = {"watch": record.name}
            source = getattr(record, "source", None)
            if isinstance(source, Mapping):
                attributes.update(
                    (str(k), v) for k, v in source.items() if isinstance(v, (str, bool, int, float))
                )
            stamp = int(record.time * 1e9)
            for key, value in record.metrics.items():
                metric = key[len(prefix):] if key.startswith(prefix) else key
                points.setdefault(metric, []).append(
                    NumberDataPoint(attributes=attributes, start_time_unix_nano=0, time_unix_nano=stamp, value=value)
                )
            for key, summary in record.distributions.items():
                metric = key[len(prefix):] if key.startswith(prefix) else key
                start = self._since(key, record.source, stamp)
                if summary.count:
                    explicit = summary.bounds is not None
                    histograms.setdefault((metric, explicit), []).append(_point(summary, attributes, start, stamp))
        metrics = [Metric(name=n, description="", unit="", data=Gauge(data_points=p)) for n, p in points.items()]
        for (name, explicit), data in histograms.items():
            kind = Histogram if explicit else ExponentialHistogram
            metrics.append(Metric(name=name, description="", unit="", data=kind(data, AggregationTemporality.DELTA)))
        scope = ScopeMetrics(scope=self._scope, metrics=metrics, schema_url="")
        return MetricsData(resource_metrics=[ResourceMetrics(resource=self.resource, scope_metrics=[scope], schema_url="")])

    def _since(self, key: str, source: Mapping[str, Any], stamp: int) -> int:
        """The start of the interval a distribution's point covers: its series' previous point (else its own time)."""
        series = (key, tuple(source.items()))
        starts = self._starts
        start = starts.get(series, stamp)
        if len(starts) >= _SERIES:  # keys that keep changing: start afresh rather than grow
            starts.clear()
        starts[series] = stamp
        return min(start, stamp)

    def send_blocking(self, records: Sequence[Record], destination: str | None) -> None:
        exporter, session = self._exporter, self._session
        assert exporter is not None and session is not None
        _exporting.on = True
        try:
            result = exporter.export(self.metrics_data(records))
        except _Attempt:  # exporter versions that let the session's exception through
            result = MetricExportResult.FAILURE
        finally:
            _exporting.on = False
        if result is not MetricExportResult.SUCCESS:
            raise session.outcome or DeliveryError(
                f"OTLP export to {self._shown}: the exporter refused the batch (too large or not encodable)",
                retryable=False,
            )
        if session.rejected is not None:
            count, message = session.rejected
            self.points_rejected += count
            if not self._partial:
                self._partial = True
                log.warning(
                    "sink %r: the collector rejected %d data points (%s); further ones are counted in "
                    "monitor.stats()['sink/%s/points_rejected']", self.label, count, redact(message), self.label,
                )
        else:
            self._partial = False

    def close_blocking(self) -> None:
        if self._exporter is not None:
            self._exporter.shutdown()
