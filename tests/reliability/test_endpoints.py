"""Endpoints checked at construction: a URL a sink cannot speak to is a `ConfigError` at once.

A scheme the sink does not speak, no host, or a port out of 1..65535 is refused by the
constructor, naming the sink, the option and what is allowed, the value shown redacted;
nothing waits for the first delivery to fail. See
[Endpoints checked at construction](../../docs/guarantees.md#endpoints-checked-at-construction-test_endpointspy).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from monitor_async import ConfigError

BAD_HTTP = [
    "ftp://bob:hunter22@collector:4318/v1/metrics",  # a scheme it cannot speak
    "localhost:4318",  # no scheme at all: read as the scheme "localhost"
    "http:///v1/metrics",  # no host
    "http://collector:0/v1/metrics",
    "http://collector:70000/v1/metrics",
    "http://collector:port/v1/metrics",
]
ALLOWED = "must be an http(s) URL with a host and a port in 1..65535"


def refused(build: Callable[[], Any], owner: str, option: str) -> str:
    with pytest.raises(ConfigError) as caught:
        build()
    text = str(caught.value)
    assert text.startswith(f"{owner}: {option} must be "), text
    assert "hunter22" not in text and "bob" not in text, text
    return text


@pytest.mark.parametrize("url", BAD_HTTP)
def test_otlp_sink_refuses_an_endpoint_it_cannot_export_to(url: str) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from monitor_async.backends import OTLPSink

    text = refused(lambda: OTLPSink(url), "OTLPSink", "endpoint")
    assert ALLOWED in text
    if "@" in url:
        assert "got 'ftp://***@collector:4318/v1/metrics'" in text


def test_otlp_sink_refuses_an_endpoint_from_the_environment_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from monitor_async.backends import OTLPSink

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://bob:hunter22@collector:4318")
    text = refused(OTLPSink, "OTLPSink", "endpoint (from OTEL_EXPORTER_OTLP_ENDPOINT)")
    assert "'ftp://***@collector:4318/v1/metrics'" in text
    OTLPSink("https://collector.example:4318/v1/metrics")  # given: the variable is not read


@pytest.mark.parametrize("url", BAD_HTTP)
def test_webhook_refuses_a_url_it_cannot_post_to_and_never_shows_its_path(url: str) -> None:
    from monitor_async.backends import Webhook

    text = refused(lambda: Webhook(url), "Webhook", "url")
    assert ALLOWED in text and "v1/metrics" not in text  # a webhook's path is its secret (Slack, Discord)


@pytest.mark.parametrize("uri", [
    "ftp://bob:hunter22@tracker:5000",
    "http:///",
    "http://tracker:70000",
    "https://tracker:0",
    "postgresql://bob:hunter22@db:99999/mlflow",
    "nosuchstore://tracker",
])
def test_mlflow_sink_refuses_a_tracking_uri_no_store_takes(uri: str) -> None:
    pytest.importorskip("mlflow")
    from monitor_async.backends import MLflowSink

    text = refused(lambda: MLflowSink(uri), "MLflowSink", "tracking_uri")
    assert ALLOWED in text and "sqlite:" in text and "databricks:" in text


@pytest.mark.parametrize("uri", [
    "http://tracker:5000", "https://bob:hunter22@tracker.example", "sqlite:///tmp/mlflow.db",
    "file:///tmp/mlruns", "/tmp/mlruns", "databricks", "databricks://profile:prefix",
    "postgresql://bob:hunter22@db:5432/mlflow", "mysql+pymysql://bob:hunter22@db/mlflow",
])
def test_mlflow_sink_takes_every_store_it_took_before(uri: str) -> None:
    pytest.importorskip("mlflow")
    from monitor_async.backends import MLflowSink

    assert MLflowSink(uri).tracking_uri == uri  # the real URI, credentials and all, goes to MLflow


@pytest.mark.parametrize("host", ["http://0.0.0.0", "bob:hunter22@0.0.0.0", "0.0.0.0/metrics", "local host"])
def test_prometheus_sink_refuses_a_host_that_is_a_url(host: str) -> None:
    pytest.importorskip("prometheus_client")
    from monitor_async.backends import PrometheusSink

    text = refused(lambda: PrometheusSink(host=host, port=0), "PrometheusSink", "host")
    assert "a host name or IP address to bind" in text
