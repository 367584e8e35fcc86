"""Secrets never printed: a URL's user-info, its query values and header values stay out of sight.

Every network sink is driven through a refused connection, a reply that never comes, a 4xx, a
5xx and a 200 whose body is not the server's (the error pages echo the request's path and its
``Authorization`` header, as proxies do), with canary secrets in its URL and headers. No
canary may appear in a log record (every logger, at DEBUG), an exception (text, repr,
traceback), ``stats()``, a file under the run and spool folders (names and contents), or
stdout and stderr. See [Secrets never printed](../../docs/guarantees.md#secrets-never-printed-test_secretspy).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor_async import AlertEvent, Monitor, Record
from monitor_async.backends import Backoff, JSONLSink
from tests.support.checks import wait_until
from tests.support.network import DROP, Receiver, Reply, Request
from tests.support.targets import Ticker

CANARY = "CANARY"
USER, PASSWORD = "CANARY-USER-alice", "CANARY-PW-s3cr3t"
QUERY, HEADER, TOKEN, ENV = "CANARY-Q-tok", "CANARY-H-key", "CANARY-T-bearer", "CANARY-E-env"
FAST = Backoff(first=0.02, cap=0.1)
TIMEOUT = 0.3
FAULTS = ("refused", "timeout", "4xx", "5xx", "garbled")


class Everything(logging.Handler):
    """Every log record of every logger, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []
        self.lock2 = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        with self.lock2:
            self.lines.append(text)


class Seen:
    """Everything the user could read: logs, exceptions, figures, files, the terminal."""

    def __init__(self, handler: Everything) -> None:
        self.handler = handler
        self.texts: list[str] = []

    def exception(self, exc: BaseException) -> None:
        self.texts += [str(exc), repr(exc), "".join(traceback.format_exception(exc))]

    def add(self, value: Any) -> None:
        self.texts.append(repr(value))

    def files(self, folder: Path) -> None:
        for path in folder.rglob("*"):
            self.texts.append(str(path))
            if path.is_file():
                self.texts.append(path.read_bytes().decode("utf-8", "replace"))

    def leaks(self) -> list[str]:
        with self.handler.lock2:
            texts = [*self.handler.lines, *self.texts]
        return [text for text in texts if CANARY in text]


@pytest.fixture
def seen(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> Iterator[Seen]:
    handler = Everything()
    loggers = [logging.getLogger(), *(
        logger for logger in logging.root.manager.loggerDict.values() if isinstance(logger, logging.Logger)
    )]
    levels = {logger: logger.level for logger in loggers}
    hosts = [logger for logger in loggers if logger is logging.getLogger() or not logger.propagate]
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
    for logger in hosts:
        logger.addHandler(handler)
    out = Seen(handler)
    try:
        yield out
    finally:
        for logger in hosts:
            logger.removeHandler(handler)
        for logger, level in levels.items():
            logger.setLevel(level)
    out.files(tmp_path)
    captured = capfd.readouterr()
    out.texts += [captured.out, captured.err]
    leaks = out.leaks()
    assert not leaks, f"{len(leaks)} texts show a secret, the first: {leaks[0][:2000]}"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Faulty(Receiver):
    """The receiver answering with the fault a test names; ``timeout`` never answers (until the module ends)."""

    def __init__(self) -> None:
        super().__init__()
        self.fault = "5xx"
        self.ok: Reply = (200, {}, b"{}")
        self.release = threading.Event()
        self.reply = self.answer

    def answer(self, n: int, request: Request) -> Reply:
        echo = f"{request.path} {request.headers.get('authorization', '')} {request.headers.get('x-api-key', '')}"
        if self.fault == "timeout":
            self.release.wait(60)
            return DROP
        if self.fault == "4xx":
            return 400, {"Content-Type": "text/plain"}, f"bad request {echo}".encode()
        if self.fault == "5xx":
            return 503, {"Content-Type": "text/plain"}, f"upstream down {echo}".encode()
        if self.fault == "garbled":
            return 200, {"Content-Type": "text/html"}, f"<html>Sign in to go on to {echo}</html>".encode()
        return self.ok


@pytest.fixture(scope="module")
def server() -> Iterator[Faulty]:
    receiver = Faulty()
    yield receiver
    receiver.release.set()
    receiver.stop()


def where(server: Faulty, fault: str) -> str:
    """``host:port`` of the receiver playing ``fault``, or of a closed port."""
    server.fault = fault
    port = closed_port() if fault == "refused" else server.port
    return f"127.0.0.1:{port}"


async def exercise(sink: Any, seen: Seen, tmp_path: Path) -> None:
    """Two steps of a monitor writing to ``sink`` and a JSONL file, until the sink retried or refused; then closes."""
    monitor = Monitor([sink, JSONLSink(tmp_path / "run.jsonl")], on_error="raise")
    monitor.watch(Ticker(), name="learner", step="n")
    try:
        for _ in range(2):
            await monitor.step()
        await wait_until(lambda: sink.counters()["retries"] >= 2 or sink.counters()["rejected"] >= 1)
        seen.add(monitor.stats())
    except Exception as exc:  # noqa: BLE001 - what the user would read
        seen.exception(exc)
    try:
        await monitor.stop()
    except Exception as exc:  # noqa: BLE001
        seen.exception(exc)
    try:
        await sink.close()
    except Exception as exc:  # noqa: BLE001
        seen.exception(exc)
    seen.add(monitor.stats())
    seen.add(sink.counters())
    seen.add(sink)


# ------------------------------------------------------------------------------ OTLP
@pytest.mark.parametrize("fault", FAULTS)
async def test_otlp_sink_never_shows_its_secrets(
    fault: str, server: Faulty, seen: Seen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from monitor_async.backends import OTLPSink

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-env-key={ENV}")
    endpoint = f"http://{USER}:{PASSWORD}@{where(server, fault)}/v1/metrics?token={QUERY}&tenant=ours"
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Api-Key": HEADER}
    sink = OTLPSink(endpoint, headers=headers, timeout=TIMEOUT, backoff=FAST, spool_dir=tmp_path / "spool")
    await exercise(sink, seen, tmp_path)
    env_only = OTLPSink(endpoint, timeout=TIMEOUT, backoff=FAST, spool_dir=tmp_path / "spool-env")
    await exercise(env_only, seen, tmp_path)


# ---------------------------------------------------------------------------- MLflow
@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("mlflow.server")
    from tests.support.mlflow_server import MlflowServer

    with MlflowServer(tmp_path_factory.mktemp("mlflow")) as running:
        yield running


@pytest.mark.parametrize("fault", FAULTS)
async def test_mlflow_sink_never_shows_its_secrets(
    fault: str, server: Faulty, seen: Seen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    from monitor_async.backends import MLflowSink

    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)
    uri = f"http://{USER}:{PASSWORD}@{where(server, fault)}"
    sink = MLflowSink(uri, run_id="0123456789abcdef0123456789abcdef", timeout=TIMEOUT, backoff=FAST,
                      spool_dir=tmp_path / "spool")
    await exercise(sink, seen, tmp_path)


async def test_mlflow_sink_against_a_real_server_never_shows_its_secrets(
    mlflow_server: Any, seen: Seen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    from monitor_async.backends import MLflowSink

    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)
    uri = mlflow_server.url.replace("http://", f"http://{USER}:{PASSWORD}@")
    sink = MLflowSink(uri, experiment="secrets", timeout=5.0, backoff=FAST, spool_dir=tmp_path / "spool")
    await exercise(sink, seen, tmp_path)  # delivered: the credentials reach the server, only the print hides them
    assert MlflowClient(mlflow_server.url).get_metric_history(sink.run_id, "learner/n")
    unknown = MLflowSink(uri, run_id="0123456789abcdef0123456789abcdef", timeout=5.0, backoff=FAST,
                         spool_dir=tmp_path / "spool-404")
    await exercise(unknown, seen, tmp_path)  # a 404 from MLflow itself
    assert unknown.counters()["rejected"] >= 1


# --------------------------------------------------------------------------- Webhook
@pytest.mark.parametrize("fault", FAULTS)
async def test_webhook_never_shows_its_secrets(fault: str, server: Faulty, seen: Seen, tmp_path: Path) -> None:
    from monitor_async.backends import Webhook

    url = f"http://{USER}:{PASSWORD}@{where(server, fault)}/services/T0/B0/{CANARY}-path?token={QUERY}"
    webhook = Webhook(url, headers={"Authorization": f"Bearer {TOKEN}"}, group_window=0.0, timeout=TIMEOUT,
                      backoff=FAST, spool_dir=tmp_path / "spool")
    event = AlertEvent("stalled", "firing", "critical", "learner", "learner/n", 1.0, time.time() - 60, time.time(),
                       {}, "learner/n has not increased for 60 s")
    try:
        async with webhook:
            await webhook.alert(event)
            webhook(event)
            await wait_until(lambda: webhook.counters()["retries"] >= 2 or webhook.counters()["rejected"] >= 1)
            await webhook.flush()
    except Exception as exc:  # noqa: BLE001
        seen.exception(exc)
    seen.add(webhook.counters())
    seen.add(webhook)


# ------------------------------------------------------------------------------- Ray
@pytest.mark.parametrize("fault", ["4xx", "refused"])
async def test_ray_sink_hosting_a_network_sink_never_shows_its_secrets(
    fault: str, ray_local: Any, server: Faulty, seen: Seen, tmp_path: Path
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from monitor_async.backends import OTLPSink, RaySink

    endpoint = f"http://{USER}:{PASSWORD}@{where(server, fault)}/v1/metrics?token={QUERY}"
    sink = RaySink(OTLPSink, endpoint, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=TIMEOUT,
                   backoff=FAST, delivery={"spool_dir": tmp_path / "spool", "backoff": FAST})
    monitor = Monitor([sink, JSONLSink(tmp_path / "run.jsonl")], on_error="raise")
    monitor.watch(Ticker(), name="learner", step="n")
    try:
        for _ in range(2):
            await monitor.step()
        await asyncio.sleep(0.5)
        seen.add(monitor.stats())
    except Exception as exc:  # noqa: BLE001
        seen.exception(exc)
    try:
        await monitor.stop()
        await sink.close()
    except Exception as exc:  # noqa: BLE001
        seen.exception(exc)
    seen.add(monitor.stats())


async def test_ray_sink_whose_hosted_sink_refuses_its_url_never_shows_it(
    ray_local: Any, seen: Seen, tmp_path: Path
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from monitor_async.backends import OTLPSink, RaySink

    broken = RaySink(OTLPSink, f"ftp://{USER}:{PASSWORD}@127.0.0.1/v1/metrics?token={QUERY}",
                     delivery={"spool_dir": tmp_path / "spool"})
    with pytest.raises(RuntimeError, match="endpoint must be an http") as caught:
        await broken.write([Record("learner", 1, time.time(), {"learner/n": 1.0})])
    seen.exception(caught.value)
    with pytest.raises(RuntimeError) as closing:
        await broken.close()
    seen.exception(closing.value)


# ------------------------------------------------------------------------ Prometheus
async def test_prometheus_sink_never_shows_credentials_in_its_host(seen: Seen) -> None:
    from monitor_async.backends import PrometheusSink

    try:
        sink = PrometheusSink(host=f"{USER}:{PASSWORD}@127.0.0.1", port=0)
        async with sink:
            seen.add(sink.url)
    except Exception as exc:  # noqa: BLE001 - refused at construction (or at opening, but said safely)
        seen.exception(exc)


def test_configuration_errors_show_the_url_redacted(seen: Seen) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    pytest.importorskip("mlflow")
    from monitor_async.backends import MLflowSink, OTLPSink, Webhook

    bad = f"ftp://{USER}:{PASSWORD}@host:99999/v1/metrics?token={QUERY}"
    for build in (
        lambda: OTLPSink(bad), lambda: Webhook(bad), lambda: MLflowSink(bad),
        lambda: Webhook("http://127.0.0.1:9", headers={"Authorization": 7}),  # type: ignore[dict-item]
        lambda: Webhook("http://127.0.0.1:9", headers={"Authorization": f"Bearer {TOKEN}\n"}),
        lambda: OTLPSink("http://127.0.0.1:9", headers={"X-Api-Key": f"{HEADER}\r\nX: y"}),
    ):
        try:
            build()
        except Exception as exc:  # noqa: BLE001
            seen.exception(exc)
        else:
            seen.texts.append(f"no error for a bad option ({CANARY} stands for the missed refusal)")


def test_a_kept_path_is_hidden_where_it_stands_whole_and_nowhere_else() -> None:
    """A Slack-style webhook path is a secret, yet "/hook" kept must not eat "//hooks.example.com"."""
    from monitor_async._core.secrets import keep_secret, redact, redact_url

    keep_secret("http://127.0.0.1:9/hook", path=True)
    assert redact("POST http://127.0.0.1:9/hook failed") == "POST http://127.0.0.1:9*** failed"
    assert redact("POST http://127.0.0.1:9/hook?retry=1.") == "POST http://127.0.0.1:9***?retry=***"
    assert redact("see https://hooks.example.com/hooky") == "see https://hooks.example.com/hooky"
    assert redact_url("https://hooks.slack.com/services/T0/B0/XYZ", path=True) == "https://hooks.slack.com/***"
