"""``Webhook(url, format="alertmanager")`` against a real Alertmanager: a monitor's rules become its alerts.

One ``prometheus-alertmanager`` for the module, grouping by ``alertname``, with a ``resolve_timeout``
of 3 s so that a test sees it time out an alert nobody re-sends. What the docs promise:
[Alerts: Alertmanager](docs/alerts.md#alertmanager).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from monitor_async import Alert, AlertEvent, ConfigError, Monitor
from monitor_async.backends import Backoff, Webhook
from tests.support.checks import wait_until
from tests.support.network import Receiver, free_port
from tests.support.prometheus_servers import AlertmanagerServer, eventually
from tests.support.targets import Settable

RESOLVE_TIMEOUT = 3.0
FAST = Backoff(first=0.05, cap=0.2)


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlertmanagerServer]:
    folder: Path = tmp_path_factory.mktemp("alertmanager")
    with AlertmanagerServer(folder, group_by=["alertname"], resolve_timeout=f"{RESOLVE_TIMEOUT:g}s") as server:
        yield server


def hook(alertmanager: AlertmanagerServer, **options: Any) -> Webhook:
    options = {"group_window": 0.1, "resend_interval": 0.5, **options}
    return Webhook(alertmanager.url, format="alertmanager", **options)


def of(alerts: list[dict[str, Any]], **labels: str) -> list[dict[str, Any]]:
    """The alerts whose labels include ``labels``."""
    return [a for a in alerts if labels.items() <= a["labels"].items()]


def unix(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def test_a_firing_rule_is_an_alert_with_its_labels_and_resolves_with_the_rule(
    alertmanager: AlertmanagerServer,
) -> None:
    learner = Settable({"loss": 0.5})
    rule = Alert.above("am_learner/loss", 1.0, severity="critical")
    monitor = Monitor(hook(alertmanager), poll_interval=0.05, alerts=[rule])
    monitor.watch(learner, name="am_learner")
    async with monitor:
        learner.value = {"loss": 5.0}
        began = time.time()
        (alert,) = await eventually(alertmanager.alerts, lambda a: of(a, watch="am_learner"), "the firing alert")
        assert alert["labels"] == {
            "alertname": "am_learner/loss above 1", "severity": "critical", "watch": "am_learner",
            "metric": "am_learner/loss",
        }
        assert alert["annotations"]["value"] == "5.0"
        assert "am_learner/loss" in alert["annotations"]["summary"]
        assert alert["status"]["state"] == "active"
        assert began - 5 < unix(alert["startsAt"]) <= time.time()

        learner.value = {"loss": 0.25}
        await eventually(alertmanager.alerts, lambda a: not of(a, watch="am_learner"), "the alert to resolve")


async def test_sibling_alerts_of_one_rule_are_one_group(alertmanager: AlertmanagerServer) -> None:
    targets = {name: Settable({"loss": 5.0}) for name in ("am_actor_0", "am_actor_1")}
    monitor = Monitor(hook(alertmanager), poll_interval=0.05, alerts=[Alert.above("am_actor_*/loss", 1.0, name="loss too high")])
    for name, target in targets.items():
        monitor.watch(target, name=name)
    monitor.watch(Settable({"loss": 0.5}), name="am_actor_2")  # below the threshold: not in the group
    async with monitor:
        groups = await eventually(
            alertmanager.groups, lambda gs: len(of([a for g in gs for a in g["alerts"]], alertname="loss too high")) == 2,
            "both siblings in Alertmanager's groups",
        )
        (group,) = [g for g in groups if g["labels"] == {"alertname": "loss too high"}]
        assert sorted(a["labels"]["watch"] for a in group["alerts"]) == ["am_actor_0", "am_actor_1"]
        for target in targets.values():
            target.value = {"loss": 0.0}
        await eventually(alertmanager.alerts, lambda a: not of(a, alertname="loss too high"), "the group to resolve")


async def test_an_alert_still_firing_is_resent_so_alertmanager_keeps_it(alertmanager: AlertmanagerServer) -> None:
    now = time.time()
    once = AlertEvent("am posted once", "firing", "warning", "am_once", None, None, now, now, {}, "posted once")
    learner = Settable({"loss": 5.0})
    async with hook(alertmanager, resend_interval=3600.0) as not_resending:
        monitor = Monitor(hook(alertmanager), poll_interval=0.05, alerts=[Alert.above("am_kept/loss", 1.0)])
        monitor.watch(learner, name="am_kept")
        async with monitor:
            await not_resending.alert(once)
            await eventually(alertmanager.alerts, lambda a: of(a, watch="am_once") and of(a, watch="am_kept"),
                             "both alerts firing")
            began = time.monotonic()
            await eventually(alertmanager.alerts, lambda a: not of(a, watch="am_once"),
                             "the alert nobody re-sends to time out")
            await wait_until(lambda: time.monotonic() - began > RESOLVE_TIMEOUT + 0.5, timeout=30)
            kept = of(await asyncio.to_thread(alertmanager.alerts), watch="am_kept")
            assert [a["status"]["state"] for a in kept] == ["active"], "a re-sent alert outlives resolve_timeout"
            learner.value = {"loss": 0.0}
            await eventually(alertmanager.alerts, lambda a: not of(a, watch="am_kept"), "the re-sent alert to resolve")


async def test_an_alert_fired_while_alertmanager_is_down_reaches_it_once_it_is_up(tmp_path: Path) -> None:
    port = free_port()
    event = AlertEvent("am outage", "firing", "critical", "am_down", None, None, time.time(), time.time(), {"rank": 2},
                       "fired while Alertmanager was down")
    async with Webhook(f"http://127.0.0.1:{port}", format="alertmanager", backoff=FAST, group_window=0.0,
                       spool_dir=tmp_path / "spool") as webhook:
        await webhook.alert(event)
        await wait_until(lambda: webhook.counters()["retries"] >= 1, timeout=30, what="a failed post")
        assert webhook.counters()["pending"] == 1, "the post waits in the spool"
        with AlertmanagerServer(tmp_path / "alertmanager", port=port) as late:
            (alert,) = await eventually(late.alerts, bool, "the spooled alert")
            assert alert["labels"] == {"alertname": "am outage", "severity": "critical", "watch": "am_down", "rank": "2"}
            await webhook.flush()
    assert webhook.counters()["delivered"] == 1


async def test_resends_do_not_pile_up_during_an_outage_and_stop_once_the_alert_resolves(receiver: Receiver) -> None:
    receiver.ensure_started()
    receiver.requests.clear()
    every = 0.1
    firing = AlertEvent("am resent", "firing", "warning", "am_resent", None, None, time.time(), time.time(), {}, "")
    resolved = dataclasses.replace(firing, state="resolved", time=time.time() + 1)
    async with Webhook(receiver.url, format="alertmanager", group_window=0.0, resend_interval=every, backoff=FAST) as hook:
        await hook.alert(firing)
        await wait_until(lambda: len(receiver.answered()) >= 3, what="re-sends while the alert fires")
        assert {r.path for r in receiver.requests} == {"/api/v2/alerts"}
        receiver.stop()
        await wait_until(lambda: hook.counters()["retries"] >= 10, timeout=30, what="an outage of many re-send intervals")
        before = len(receiver.answered())
        receiver.start()
        await wait_until(lambda: hook.counters()["pending"] == 0 and len(receiver.answered()) > before, timeout=30)
        assert len(receiver.answered()) - before <= 2, "one post waited out the outage, not one per interval"

        await hook.alert(resolved)
        await wait_until(lambda: "endsAt" in json.loads(receiver.answered()[-1].body)[0], what="the resolved alert")
        count = len(receiver.requests)
        await asyncio.sleep(5 * every)  # nothing to wait for: the re-sends that must not come
        assert len(receiver.requests) == count, "no re-send once the alert resolved"


def test_a_bare_address_posts_to_the_alerts_api_and_bad_options_are_refused() -> None:
    assert Webhook("http://127.0.0.1:9093", format="alertmanager").url == "http://127.0.0.1:9093/api/v2/alerts"
    assert Webhook("http://am:9093/prefix/api/v2/alerts", format="alertmanager").url.endswith("/prefix/api/v2/alerts")
    with pytest.raises(ConfigError, match="Webhook: resend_interval must be a finite number of seconds > 0, got 0"):
        Webhook("http://127.0.0.1:9093", format="alertmanager", resend_interval=0)
