"""OTLPSink against a real OTLP/HTTP receiver on 127.0.0.1 that decodes with opentelemetry-proto.

The receiver is the test's own HTTP server: it decodes every request as an
``ExportMetricsServiceRequest`` (opentelemetry-proto), and answers 503 for
a while, then 200, when a test asks, or 400 with a ``google.rpc.Status``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from google.rpc import status_pb2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsPartialSuccess,
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

from monitor_async import DeliveryError, Monitor
from monitor_async.backends import Backoff, OTLPSink
from tests.support.checks import wait_until
from tests.support.distributions import RETURNS, dist_record
from tests.support.network import Receiver, Request
from tests.support.targets import Ticker

OK = (200, {}, ExportMetricsServiceResponse().SerializeToString())
FAST = Backoff(first=0.05, cap=0.2)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver(content_type="application/x-protobuf")
    yield server
    server.stop()


@pytest.fixture
def collector(receiver: Receiver) -> Receiver:
    receiver.requests.clear()
    receiver.reply = lambda n, request: OK
    return receiver


def endpoint(receiver: Receiver) -> str:
    return f"{receiver.url}/v1/metrics"


def decode(request: Request) -> ExportMetricsServiceRequest:
    return ExportMetricsServiceRequest.FromString(request.body)


def attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in items:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind)
    return out


def points(requests: list[Request]) -> list[tuple[str, str, int, float]]:
    """``(metric, watch, time_unix_nano, value)`` of every data point, in arrival order."""
    out = []
    for request in requests:
        for rm in decode(request).resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    assert metric.WhichOneof("data") == "gauge", metric.name
                    for p in metric.gauge.data_points:
                        out.append((metric.name, attributes(p.attributes)["watch"], p.time_unix_nano, p.as_double))
    return out


async def test_records_arrive_as_gauge_data_points_named_by_metric_with_the_watch_and_the_service(
    collector: Receiver,
) -> None:
    sink = OTLPSink(endpoint(collector), service_name="trainer", resource_attributes={"deployment.environment": "ci"})
    monitor = Monitor(sink)
    monitor.watch(Ticker(size=7), name="collector", step="n", rate_keys=())
    monitor.watch(Ticker(size=9), name="buffer", step="n", rate_keys=())
    for _ in range(3):
        await monitor.step()
    await sink.close()

    requests = collector.answered(200)
    assert requests and all(r.path == "/v1/metrics" for r in requests)
    assert all(r.headers["content-type"] == "application/x-protobuf" for r in requests)
    first = decode(requests[0]).resource_metrics[0]
    resource = attributes(first.resource.attributes)
    assert resource["service.name"] == "trainer" and resource["deployment.environment"] == "ci"
    assert resource["telemetry.sdk.name"] == "opentelemetry"
    assert first.scope_metrics[0].scope.name == "monitor_async"
    got = points(requests)
    for watch, size in (("collector", 7.0), ("buffer", 9.0)):
        assert [v for m, w, _, v in got if m == "n" and w == watch] == [1.0, 2.0, 3.0]
        assert {v for m, w, _, v in got if m == "size" and w == watch} == {size}
    assert {m for m, *_ in got} == {"n", "size"}  # the "<watch>/" prefix is an attribute, not in the name
    now = time.time_ns()
    assert all(now - 60e9 < t <= now for *_, t, _ in got)  # the poll time, in nanoseconds


async def test_503_for_a_while_then_200_every_point_arrives_once_in_order(collector: Receiver) -> None:
    until = time.monotonic() + 1.5
    collector.reply = lambda n, request: (503, {}, b"") if time.monotonic() < until else OK
    sink = OTLPSink(endpoint(collector), backoff=FAST, name="otlp")
    monitor = Monitor(sink, poll_interval=0.02, batch_wait=0.05)
    monitor.watch(Ticker(), name="w", step="n", rate_keys=())
    async with monitor:
        await wait_until(lambda: time.monotonic() > until and sink.counters()["replayed"] > 0, timeout=20)
        await asyncio.sleep(0.2)
    await sink.close()
    assert any(r.status == 503 for r in collector.requests)
    values = [v for m, w, _, v in points(collector.answered(200)) if m == "n"]
    assert values == [float(i) for i in range(1, len(values) + 1)], "every step once, replayed in order"
    stats = monitor.stats()
    assert stats["sink/otlp/retries"] >= 1 and stats["sink/otlp/spooled"] > 0
    assert stats["sink/otlp/replayed"] == stats["sink/otlp/spooled"]
    assert stats["sink/otlp/dropped"] == 0 and stats["sink/otlp/pending"] == 0


async def test_a_4xx_is_not_retried_and_the_error_carries_the_collectors_message(collector: Receiver) -> None:
    status = status_pb2.Status(code=3, message="metric name is not valid").SerializeToString()
    collector.reply = lambda n, request: (400, {"Content-Type": "application/x-protobuf"}, status)
    sink = OTLPSink(endpoint(collector), backoff=FAST)
    monitor = Monitor(sink, on_error="raise")
    monitor.watch(Ticker(), name="w")
    with pytest.raises(DeliveryError, match=r"HTTP 400.*metric name is not valid") as caught:
        await monitor.step()
    assert caught.value.status == 400
    await asyncio.sleep(0.3)
    assert len(collector.requests) == 1 and sink.counters()["rejected"] == 1
    await sink.close()


async def test_a_partial_success_is_counted_and_logged(
    collector: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    partial = ExportMetricsServiceResponse(
        partial_success=ExportMetricsPartialSuccess(rejected_data_points=2, error_message="2 points too old")
    ).SerializeToString()
    collector.reply = lambda n, request: (200, {}, partial)
    sink = OTLPSink(endpoint(collector), name="otlp")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with sink:
            monitor = Monitor(sink)
            monitor.watch(Ticker(), name="w")
            await monitor.step()
            await monitor.step()
    assert sink.counters()["points_rejected"] == 4
    assert caplog.text.count("2 points too old") == 1  # once per streak


def test_the_endpoint_defaults_to_the_standard_one_and_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"):
        monkeypatch.delenv(name, raising=False)
    sink = OTLPSink()
    assert sink.endpoint == "http://localhost:4318/v1/metrics"
    assert sink.resource.attributes["service.name"] == "monitor-async"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "learner")
    sink = OTLPSink()
    assert sink.endpoint == "http://collector:4318/v1/metrics"
    assert sink.resource.attributes["service.name"] == "learner"
    with pytest.raises(ValueError, match=r"OTLPSink: endpoint must be an http\(s\) URL"):
        OTLPSink("localhost:4318")


async def test_a_200_whose_body_is_not_the_collectors_answer_is_retried_naming_the_body(
    collector: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    page = b"<html><body><h1>Welcome to nginx!</h1></body></html>"
    collector.reply = lambda n, request: (200, {"Content-Type": "text/html"}, page)
    sink = OTLPSink(endpoint(collector), backoff=FAST, name="otlp")
    try:
        with caplog.at_level(logging.WARNING, logger="monitor_async"):
            async with Monitor(sink) as monitor:
                monitor.watch(Ticker(), name="w", step="n")
                await monitor.step()
                await wait_until(lambda: sink.counters()["retries"] >= 2)
        figures = sink.counters()
        assert figures["delivered"] == 0 and figures["rejected"] == 0 and figures["pending"] >= 1
        warned = [r.getMessage() for r in caplog.records if "spool" in r.getMessage()]
        assert warned and "<html><body><h1>Welcome" in warned[0] and "HTTP 200" in warned[0], warned

        pending, tried = int(figures["pending"]), len(collector.requests)
        collector.reply = lambda n, request: OK
        await sink.flush()
        assert sink.counters()["delivered"] == pending and sink.counters()["pending"] == 0
        values = [v for m, *_, v in points(collector.requests[tried:]) if m == "n"]
        assert values == [float(i) for i in range(1, pending + 1)], "every record, once the collector answers"
    finally:
        await sink.close()


def histogram_points(requests: list[Request]) -> list[tuple[str, str, Any]]:
    """``(metric, watch, data point)`` of every histogram data point, in arrival order."""
    out = []
    for request in requests:
        for rm in decode(request).resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    kind = metric.WhichOneof("data")
                    if kind in ("exponential_histogram", "histogram"):
                        data = getattr(metric, kind)
                        assert data.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
                        out += [(metric.name, attributes(p.attributes)["watch"], p) for p in data.data_points]
    return out


async def test_a_distribution_is_an_exponential_histogram_data_point(collector: Receiver) -> None:
    first = dist_record("learner", {"returns": RETURNS}, step=1, time=1700000000.0)
    second = dist_record("learner", {"returns": [2.0, 3.0]}, step=2, time=1700000010.0)
    empty = dist_record("learner", {"returns": []}, step=3, time=1700000020.0)
    explicit = dist_record("server", {"latency": [0.05, 0.2, 0.2, 3.0]}, time=1700000030.0, bounds=[0.1, 0.5, 1.0])
    async with OTLPSink(endpoint(collector)) as sink:
        await sink.write([first, second, empty, explicit])
        await sink.flush()
    got = histogram_points(collector.answered(200))
    assert [(m, w) for m, w, _ in got] == [("returns", "learner"), ("returns", "learner"), ("latency", "server")]
    (_, _, a), (_, _, b), (_, _, c) = got
    summary = first.distributions["learner/returns"]
    assert (a.count, a.sum, a.min, a.max, a.zero_count) == (10, sum(RETURNS), -12.5, 40.0, 2)
    assert a.scale == summary.scale
    assert (a.positive.offset, list(a.positive.bucket_counts)) == (summary.positive[0], list(summary.positive[1]))
    assert (a.negative.offset, list(a.negative.bucket_counts)) == (summary.negative[0], list(summary.negative[1]))
    for v in RETURNS:  # the OpenTelemetry mapping: magnitude v is in bucket ceil(log2|v| * 2**scale) - 1
        if v:
            side = a.positive if v > 0 else a.negative
            assert side.bucket_counts[math.ceil(math.log2(abs(v)) * 2**a.scale) - 1 - side.offset] > 0, v
    # delta points: the second covers the time since the first; the empty poll adds no point
    assert (a.start_time_unix_nano, a.time_unix_nano) == (1700000000 * 10**9, 1700000000 * 10**9)
    assert (b.start_time_unix_nano, b.time_unix_nano) == (1700000000 * 10**9, 1700000010 * 10**9)
    assert (b.count, b.min, b.max) == (2, 2.0, 3.0)
    assert list(c.explicit_bounds) == [0.1, 0.5, 1.0] and list(c.bucket_counts) == [1, 2, 0, 1]
    assert (c.count, c.min, c.max) == (4, 0.05, 3.0) and c.sum == pytest.approx(3.45)
    gauges = {
        (metric.name, p.as_double)
        for request in collector.answered(200) for rm in decode(request).resource_metrics
        for sm in rm.scope_metrics for metric in sm.metrics if metric.WhichOneof("data") == "gauge"
        for p in metric.gauge.data_points
    }
    assert ("returns/p50", 0.75) in gauges and ("returns/count", 0.0) in gauges  # the summary, beside


async def test_a_distribution_waits_in_the_spool_whole(collector: Receiver, tmp_path: Path) -> None:
    record = dist_record("learner", {"returns": RETURNS}, step=1, time=1700000000.0)
    collector.reply = lambda n, request: (503, {}, b"")
    async with OTLPSink(endpoint(collector), backoff=FAST, spool_dir=tmp_path / "spool") as sink:
        await sink.write([record])
        await wait_until(lambda: sink.counters()["retries"] >= 1, timeout=20)
    collector.reply = lambda n, request: OK
    async with OTLPSink(endpoint(collector), spool_dir=tmp_path / "spool") as later:  # read back from its file
        await later.flush()
    [(_, _, point)] = histogram_points(collector.answered(200))
    summary = record.distributions["learner/returns"]
    assert (point.count, point.min, point.max, point.scale) == (10, -12.5, 40.0, summary.scale)
    assert list(point.positive.bucket_counts) == list(summary.positive[1])
