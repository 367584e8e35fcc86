"""PrometheusSink: scraped over real HTTP from prometheus_client's own server, parsed with its parser."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor_async import AlertEvent, Monitor
from monitor_async.backends import PrometheusSink
from tests.support.distributions import RETURNS, dist_record
from tests.support.network import parse_metrics, scrape


class Fixed:
    """Answers the same ``values`` until a test changes them."""

    def __init__(self, **values: float) -> None:
        self.values = dict(values)

    def stats(self) -> dict[str, float]:
        return dict(self.values)


async def test_scrape_shows_latest_value_of_every_watch_as_labelled_gauges() -> None:
    collector = Fixed(frames=100, episodes=2)
    buffer = Fixed(size=10)
    async with PrometheusSink(port=0) as sink:
        assert sink.host == "127.0.0.1"
        assert isinstance(sink.port, int) and sink.port > 0
        monitor = Monitor(sink)
        monitor.watch(collector, name="collector")
        monitor.watch(buffer, name="rb")
        await monitor.step()
        first = await asyncio.to_thread(scrape, sink.url)
        assert first[("monitor_async_frames", "collector")] == 100.0
        assert first[("monitor_async_episodes", "collector")] == 2.0
        assert first[("monitor_async_size", "rb")] == 10.0
        assert ("monitor_async_size", "collector") not in first

        collector.values["frames"] = 250
        buffer.values["size"] = 40
        await monitor.step()
        second = await asyncio.to_thread(scrape, sink.url)
        assert second[("monitor_async_frames", "collector")] == 250.0
        assert second[("monitor_async_size", "rb")] == 40.0
        # rates derived by the monitor are exported like any other metric
        assert second[("monitor_async_frames_per_second", "collector")] > 0
        stamp = second[("monitor_async_last_record_timestamp_seconds", "rb")]
        assert stamp >= first[("monitor_async_last_record_timestamp_seconds", "rb")]


async def test_background_monitor_updates_what_a_scrape_sees() -> None:
    class Ticking:
        def __init__(self) -> None:
            self.n = 0

        def stats(self) -> dict[str, int]:
            self.n += 1
            return {"ticks": self.n}

    seen: list[float] = []
    async with PrometheusSink(port=0) as sink:
        monitor = Monitor(sink, poll_interval=0.05)
        monitor.watch(Ticking(), name="ticking")
        async with monitor:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while len(set(seen)) < 3 and loop.time() < deadline:
                value = (await asyncio.to_thread(scrape, sink.url)).get(("monitor_async_ticks", "ticking"))
                if value is not None:
                    seen.append(value)
                await asyncio.sleep(0.05)
    assert len(set(seen)) >= 3, f"scrapes never saw the value move: {seen}"
    assert seen == sorted(seen)


async def test_metric_names_are_sanitised_and_parse_metrics() -> None:
    target = Fixed(**{"loss.mean": 0.5, "gpu:0-util": 80, "9lives": 9})
    target.values["env/reward"] = 1.25  # flattened nested key
    async with PrometheusSink(port=0) as sink:
        monitor = Monitor(sink)
        monitor.watch(target, name="learner")
        await monitor.step()
        samples = await asyncio.to_thread(scrape, sink.url)
    assert samples[("monitor_async_loss_mean", "learner")] == 0.5
    assert samples[("monitor_async_gpu_0_util", "learner")] == 80.0
    assert samples[("monitor_async_9lives", "learner")] == 9.0
    assert samples[("monitor_async_env_reward", "learner")] == 1.25


async def test_series_are_capped_with_one_warning_and_existing_ones_keep_updating(
    caplog: pytest.LogCaptureFixture,
) -> None:
    target = Fixed(a=1, b=2, c=3)
    async with PrometheusSink(port=0, max_series=2, name="prom") as sink:
        monitor = Monitor(sink)
        monitor.watch(target, name="w")
        with caplog.at_level(logging.WARNING, logger="monitor_async"):
            await monitor.step()
            target.values.update(a=10, b=20, c=30, d=40)
            await monitor.step()
        samples = await asyncio.to_thread(scrape, sink.url)
    gauges = {k: v for k, v in samples.items() if not k[0].endswith("timestamp_seconds")}
    assert gauges == {("monitor_async_a", "w"): 10.0, ("monitor_async_b", "w"): 20.0}
    assert sink.series_dropped == 3  # c on the first write, c and d on the second
    warnings = [r for r in caplog.records if "max_series" in r.getMessage()]
    assert len(warnings) == 1
    assert "'prom'" in warnings[0].getMessage()


async def test_close_stops_the_server() -> None:
    sink = PrometheusSink(port=0)
    async with sink:
        url = sink.url
        await asyncio.to_thread(scrape, url)
    with pytest.raises(urllib.error.URLError):
        await asyncio.to_thread(scrape, url)
    await sink.close()  # idempotent


async def test_port_in_use_is_an_error_naming_the_sink() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sink = PrometheusSink(port=port, name="exporter")
        with pytest.raises(OSError, match=rf"'exporter'.*127\.0\.0\.1:{port}"):
            await sink.open()


def test_bad_configuration_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="port"):
        PrometheusSink(port=70000)
    with pytest.raises(ValueError, match="max_series"):
        PrometheusSink(max_series=0)
    with pytest.raises(ValueError, match="namespace"):
        PrometheusSink(namespace="my-app")


async def test_user_registry_receives_the_values_and_is_released_on_close() -> None:
    registry = CollectorRegistry()
    sink = PrometheusSink(port=None, registry=registry, namespace="trainer")
    monitor = Monitor(sink)
    monitor.watch(Fixed(frames=5), name="collector")
    await monitor.step()
    assert parse_metrics(generate_latest(registry).decode())[("trainer_frames", "collector")] == 5.0
    with pytest.raises(RuntimeError, match="not serving"):
        sink.url  # noqa: B018 - port=None opens no port
    await sink.close()
    assert parse_metrics(generate_latest(registry).decode()) == {}


async def test_asgi_app_serves_the_registry_from_an_async_server() -> None:
    uvicorn = pytest.importorskip("uvicorn")
    sink = PrometheusSink(port=None)
    monitor = Monitor(sink)
    monitor.watch(Fixed(requests=7), name="server")
    await monitor.step()
    server = uvicorn.Server(uvicorn.Config(sink.asgi_app(), lifespan="off", log_level="warning"))
    # a listening socket of our own: connections wait in its backlog until uvicorn serves them
    listener = socket.create_server(("127.0.0.1", 0))
    task = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        port = listener.getsockname()[1]
        samples = await asyncio.to_thread(scrape, f"http://127.0.0.1:{port}/")
        assert samples[("monitor_async_requests", "server")] == 7.0
    finally:
        server.should_exit = True
        await task
        listener.close()
    await sink.close()


def test_importing_backends_imports_no_optional_library() -> None:
    code = (
        "import sys, monitor_async, monitor_async.backends, monitor_async.targets\n"
        "loaded = [m for m in ('prometheus_client', 'ray', 'psutil') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "from monitor_async.backends import PrometheusSink\n"
        "assert 'prometheus_client' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ------------------------------------------------------------------------------------------ alerts


def event(state: str, severity: str, watch: str, **source: int) -> AlertEvent:
    return AlertEvent("stalled */frames", state, severity, watch, f"{watch}/frames", 100.0,  # type: ignore[arg-type]
                      1.0, 2.0, source, f"{watch}/frames has not increased for 62 s")


def get(url: str) -> tuple[int, str, str]:
    """A real GET: status, content type and body (an HTTP error status is an answer too)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def alerts(text: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) if f.name == "ALERTS" for s in f.samples]


async def check_alerts_and_health(sink: PrometheusSink, metrics_url: str, health_url: str) -> None:
    """ALERTS and /healthz over real HTTP as events fire and resolve."""
    status, kind, body = await asyncio.to_thread(get, health_url)
    assert (status, kind, json.loads(body)) == (200, "application/json", {"status": "ok", "firing": []})

    await sink.alert(event("firing", "warning", "collector"))
    _, _, text = await asyncio.to_thread(get, metrics_url)
    assert alerts(text) == [({"alertname": "stalled */frames", "alertstate": "firing", "severity": "warning",
                              "watch": "collector"}, 1.0)]
    status, _, body = await asyncio.to_thread(get, health_url)
    assert status == 200 and [e["watch"] for e in json.loads(body)["firing"]] == ["collector"], "a warning is healthy"

    await sink.alert(event("firing", "critical", "learner", rank=1))
    _, _, text = await asyncio.to_thread(get, metrics_url)
    assert sorted((labels["watch"], labels["severity"], labels["rank"]) for labels, _ in alerts(text)) == [
        ("collector", "warning", ""), ("learner", "critical", "1")]
    status, kind, body = await asyncio.to_thread(get, health_url)
    assert (status, kind) == (503, "application/json")
    answer = json.loads(body)
    assert answer["status"] == "critical"
    assert [AlertEvent.from_dict(e) for e in answer["firing"]] == sink.firing()
    assert answer["firing"][1]["message"] == "learner/frames has not increased for 62 s"

    await sink.alert(event("resolved", "critical", "learner", rank=1))
    status, _, _ = await asyncio.to_thread(get, health_url)
    assert status == 200
    await sink.alert(event("resolved", "warning", "collector"))
    _, _, text = await asyncio.to_thread(get, metrics_url)
    assert alerts(text) == [], "Prometheus drops a resolved alert's series"
    assert parse_metrics(text)[("monitor_async_frames", "collector")] == 5.0, "the metrics are still served"


async def test_alerts_are_ALERTS_gauges_and_healthz_answers_503_while_a_critical_one_fires() -> None:
    async with PrometheusSink(port=0) as sink:
        monitor = Monitor(sink)
        monitor.watch(Fixed(frames=5), name="collector")
        await monitor.step()
        assert sink.health_url == sink.url.replace("/metrics", "/healthz")
        await check_alerts_and_health(sink, sink.url, sink.health_url)


async def test_asgi_app_serves_healthz_beside_the_metrics_under_uvicorn() -> None:
    uvicorn = pytest.importorskip("uvicorn")
    sink = PrometheusSink(port=None)
    monitor = Monitor(sink)
    monitor.watch(Fixed(frames=5), name="collector")
    await monitor.step()
    server = uvicorn.Server(uvicorn.Config(sink.asgi_app(), log_level="warning"))  # lifespan on: it answers
    listener = socket.create_server(("127.0.0.1", 0))
    task = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        await check_alerts_and_health(sink, base + "/metrics", base + "/healthz")
    finally:
        server.should_exit = True
        await task
        listener.close()
    await sink.close()


async def test_an_alert_before_any_record_starts_the_server() -> None:
    sink = PrometheusSink(port=0)
    await sink.alert(event("firing", "critical", "collector"))
    status, _, _ = await asyncio.to_thread(get, sink.health_url)
    assert status == 503
    await sink.close()


async def test_a_monitor_rule_that_fires_and_resolves_shows_in_ALERTS_and_healthz() -> None:
    from monitor_async import Alert

    target = Fixed(frames=5)
    async with PrometheusSink(port=0) as sink:
        monitor = Monitor(sink, poll_interval=0.05,
                          alerts=[Alert.stalled("collector/frames", after=0.3, severity="critical")])
        monitor.watch(target, name="collector")
        async with monitor:
            deadline = asyncio.get_running_loop().time() + 30
            while (await asyncio.to_thread(get, sink.health_url))[0] != 503:
                assert asyncio.get_running_loop().time() < deadline, "the stall never reached /healthz"
                await asyncio.sleep(0.05)
            _, _, text = await asyncio.to_thread(get, sink.url)
            assert alerts(text) == [({"alertname": "stalled collector/frames", "alertstate": "firing",
                                      "severity": "critical", "watch": "collector"}, 1.0)]
            target.values["frames"] = 6.0  # it moves again: the alert resolves
            while (await asyncio.to_thread(get, sink.health_url))[0] != 200:
                assert asyncio.get_running_loop().time() < deadline, "the resolve never reached /healthz"
                await asyncio.sleep(0.05)
            _, _, text = await asyncio.to_thread(get, sink.url)
            assert alerts(text) == []


async def test_a_distribution_is_a_histogram_family_beside_its_quantile_gauges() -> None:
    latencies = [0.003 * (i + 1) for i in range(50)]
    async with PrometheusSink(port=0) as sink:
        await sink.write([dist_record("server", {"latency": latencies}, step=1)])
        await sink.write([dist_record("server", {"latency": [0.0, 0.2, 0.3]}, step=2)])
        await sink.write([dist_record("learner", {"returns": RETURNS})])
        await sink.write([dist_record("rb", {"priority": [0.05, 0.2, 0.2, 3.0]}, bounds=[0.1, 0.5, 1.0])])
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(sink.url, timeout=10).read().decode())
    families = {f.name: f for f in text_string_to_metric_families(text)}
    latency = families["monitor_async_latency"]
    assert latency.type == "histogram"
    samples = {(s.name, s.labels.get("le")): s.value for s in latency.samples if s.labels["watch"] == "server"}
    # cumulative since the sink started: both polls' 53 values
    assert samples["monitor_async_latency_count", None] == 53.0 == samples["monitor_async_latency_bucket", "+Inf"]
    assert samples["monitor_async_latency_sum", None] == pytest.approx(sum(latencies) + 0.5)
    everything = [*latencies, 0.0, 0.2, 0.3]
    buckets = [(float(le), v) for (name, le), v in samples.items() if name.endswith("_bucket")]
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert 5 < len(buckets) <= 20 + 2  # at most histogram_buckets per sign, the zeros' and +Inf
    for le, cumulative in buckets:  # each le counts the values <= it
        assert sum(v <= le for v in everything) == cumulative, le
    # negative values: OpenMetrics (and prometheus_client) leave out _sum and _count; +Inf is the count
    returns = {(s.name, s.labels.get("le")): s.value for s in families["monitor_async_returns"].samples}
    assert returns["monitor_async_returns_bucket", "+Inf"] == 10.0
    assert ("monitor_async_returns_count", None) not in returns
    for (_, le), cumulative in returns.items():
        assert sum(v <= float(le) for v in RETURNS) == cumulative or float(le) in RETURNS, le  # -8 is an edge
    # explicit bounds are the le values as given
    priority = {(s.name, s.labels.get("le")): s.value for s in families["monitor_async_priority"].samples}
    assert [priority["monitor_async_priority_bucket", le] for le in ("0.1", "0.5", "1.0", "+Inf")] == [1.0, 3.0, 3.0, 4.0]
    assert priority["monitor_async_priority_count", None] == 4.0
    # the latest poll's summary as gauges; the histogram's _count stands for <key>/count
    gauges = parse_metrics(text)
    assert gauges[("monitor_async_latency_p50", "server")] == 0.2  # of [0, 0.2, 0.3]
    assert gauges[("monitor_async_latency_max", "server")] == 0.3
    assert families["monitor_async_latency_p99"].type == "gauge"
    assert not any(name.endswith("_count") for name in families)
    assert sink.counters() == {"series_dropped": 0.0, "keys_collided": 0.0, "keys_escaped": 0.0}


async def test_histogram_buckets_bounds_the_le_series_of_a_distribution() -> None:
    values = [1.001**i for i in range(5000)]  # 1 to about 148: 160 exponential buckets at full scale
    counts = {}
    for limit in (160, 20, 4):
        async with PrometheusSink(port=0, histogram_buckets=limit) as sink:
            await sink.write([dist_record("server", {"latency": values})])
            text = await asyncio.to_thread(lambda: urllib.request.urlopen(sink.url, timeout=10).read().decode())
        [family] = [f for f in text_string_to_metric_families(text) if f.name == "monitor_async_latency"]
        buckets = [(s.labels["le"], s.value) for s in family.samples if s.name.endswith("_bucket")]
        counts[limit] = len(buckets) - 1  # +Inf aside
        assert buckets[-1] == ("+Inf", 5000.0)
        for le, cumulative in buckets[:-1]:
            assert sum(v <= float(le) for v in values) == cumulative, (limit, le)
    assert counts[160] > 100 and 10 < counts[20] <= 20 and counts[4] <= 4
    with pytest.raises(ValueError, match="histogram_buckets must be an integer > 0"):
        PrometheusSink(histogram_buckets=0)
