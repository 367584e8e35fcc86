"""PrometheusSink scraped by a real Prometheus server, read back through its HTTP query API.

One ``prometheus`` for the module (scrape interval 1 s), with two jobs: ``monitor``, the port each
test's sink serves on, and ``leaving``, a monitor that stops. What the docs promise:
[Sinks: Prometheus](docs/sinks.md#prometheus-prometheussink), with the scrape config and the queries.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

from monitor_async import Alert, Monitor, Record
from monitor_async.backends import PrometheusSink
from tests.support.network import free_port
from tests.support.prometheus_servers import PrometheusServer, eventually
from tests.support.targets import Settable


class Counting:
    """A counter that grows at ``per_second``, read off the clock at each ``stats()``."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self.began = time.time()

    def stats(self) -> dict[str, float]:
        return {"frames": self.per_second * (time.time() - self.began)}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    folder: Path = tmp_path_factory.mktemp("prometheus")
    with PrometheusServer(folder, {"monitor": free_port(), "leaving": free_port()}, interval=1.0) as server:
        yield server


def values(answer: list[tuple[dict[str, str], float]]) -> dict[str, float]:
    return {labels["watch"]: value for labels, value in answer}


async def test_every_gauge_reaches_prometheus_with_its_labels_and_latest_value(prometheus: PrometheusServer) -> None:
    collector, buffer = Settable({"frames": 100, "episodes": 2}), Settable({"size": 10})
    async with PrometheusSink(port=prometheus.targets["monitor"]) as sink:
        await sink.write([Record("gauges_learner", 7, time.time(), {"gauges_learner/loss": 0.5}, {"rank": 1})])
        monitor = Monitor(sink, poll_interval=0.1)
        monitor.watch(collector, name="gauges_collector")
        monitor.watch(buffer, name="gauges_buffer")
        async with monitor:
            wanted = {
                ("monitor_async_frames", "gauges_collector"): 100.0,
                ("monitor_async_episodes", "gauges_collector"): 2.0,
                ("monitor_async_size", "gauges_buffer"): 10.0,
                ("monitor_async_loss", "gauges_learner"): 0.5,
            }
            answer = await eventually(
                lambda: prometheus.query('{__name__=~"monitor_async_(frames|episodes|size|loss)", watch=~"gauges_.*"}'),
                lambda a: {(labels["__name__"], labels["watch"]): v for labels, v in a} == wanted,
                "every gauge in Prometheus with its value",
            )
            for labels, _ in answer:
                assert labels["job"] == "monitor" and labels["instance"] == f"127.0.0.1:{prometheus.targets['monitor']}"
                assert labels.get("rank") == ("1" if labels["watch"] == "gauges_learner" else None), labels
            stamps = prometheus.query('monitor_async_last_record_timestamp_seconds{watch=~"gauges_.*"}')
            assert set(values(stamps)) == {"gauges_collector", "gauges_buffer", "gauges_learner"}

            collector.value = {"frames": 250.0, "episodes": 2}
            await eventually(
                lambda: values(prometheus.query('monitor_async_frames{watch="gauges_collector"}')),
                lambda latest: latest == {"gauges_collector": 250.0}, "the latest value of frames in Prometheus",
            )


async def test_rate_of_a_counter_matches_the_targets_rate(prometheus: PrometheusServer) -> None:
    async with PrometheusSink(port=prometheus.targets["monitor"]) as sink:
        monitor = Monitor(sink, poll_interval=0.1)
        monitor.watch(Counting(per_second=500.0), name="rate_collector")
        async with monitor:
            await eventually(
                lambda: values(prometheus.query('count_over_time(monitor_async_frames{watch="rate_collector"}[5s])')),
                lambda counts: counts.get("rate_collector", 0) >= 5, "five scrapes of the counter",
            )
            (rate,) = values(prometheus.query('rate(monitor_async_frames{watch="rate_collector"}[5s])')).values()
    assert rate == pytest.approx(500.0, rel=0.2), "Prometheus' rate() is the target's rate"


async def test_a_firing_rule_is_an_ALERTS_series_until_it_resolves(prometheus: PrometheusServer) -> None:
    learner = Settable({"loss": 0.5})
    rule = Alert.above("alerts_learner/loss", 1.0, severity="critical")
    async with PrometheusSink(port=prometheus.targets["monitor"]) as sink:
        monitor = Monitor(sink, poll_interval=0.05, alerts=[rule])
        monitor.watch(learner, name="alerts_learner")
        async with monitor:
            await eventually(lambda: prometheus.query('monitor_async_loss{watch="alerts_learner"}'), bool,
                             "the learner's loss in Prometheus")
            assert prometheus.query('ALERTS{watch="alerts_learner"}') == []
            learner.value = {"loss": 5.0}
            ((labels, value),) = await eventually(
                lambda: prometheus.query('ALERTS{alertstate="firing", watch="alerts_learner"}'), bool,
                "the firing rule in ALERTS",
            )
            assert value == 1.0
            assert {k: labels[k] for k in ("alertname", "alertstate", "severity", "watch")} == {
                "alertname": rule.name, "alertstate": "firing", "severity": "critical", "watch": "alerts_learner",
            }
            learner.value = {"loss": 0.25}
            await eventually(lambda: prometheus.query('ALERTS{watch="alerts_learner"}'), lambda a: a == [],
                             "the resolved rule to leave ALERTS")


async def test_a_monitor_that_went_away_is_marked_stale(prometheus: PrometheusServer) -> None:
    port = prometheus.targets["leaving"]
    sink = PrometheusSink(port=port)
    monitor = Monitor(sink, poll_interval=0.1)
    monitor.watch(Settable({"frames": 3}), name="leaving_collector")
    monitor.watch(Settable({"frames": 4}), name="leaving_idle")
    async with monitor:
        await eventually(lambda: values(prometheus.query('monitor_async_frames{job="leaving"}')),
                         lambda seen: seen == {"leaving_collector": 3.0, "leaving_idle": 4.0}, "both watches' frames")
        monitor.unwatch("leaving_idle")  # its last values stay; its latest record grows old
        await eventually(
            lambda: values(prometheus.query('time() - monitor_async_last_record_timestamp_seconds{job="leaving"} > 3')),
            lambda old: set(old) == {"leaving_idle"}, "the unwatched target's latest record to grow old",
        )
    await sink.close()
    await eventually(lambda: prometheus.query('{job="leaving", __name__=~"monitor_async_.+"}'), lambda a: a == [],
                     "the stopped monitor's series to go stale")
    assert prometheus.query('up{job="leaving"}')[0][1] == 0.0
