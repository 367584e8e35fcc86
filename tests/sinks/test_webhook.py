"""Webhook against a real HTTP receiver on 127.0.0.1: bodies Slack, Discord and a plain JSON reader take,

Holds "Network spools say what happened": docs/guarantees.md#network-spools-say-what-happened-testssinkstest_deliverypy-test_webhookpy
grouping, an outage (the events arrive once the receiver is back), and use as a notifier."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor_async import AlertEvent, ConfigError
from monitor_async.backends import Backoff, Webhook
from tests.support.checks import wait_until, wait_until_sync
from tests.support.network import Receiver

FAST = Backoff(first=0.05, cap=0.2)


@pytest.fixture
def hook(receiver: Receiver) -> Iterator[Receiver]:
    receiver.ensure_started()
    receiver.requests.clear()
    receiver.reply = lambda n, request: (200, {"Content-Type": "text/plain"}, b"ok")
    yield receiver
    receiver.ensure_started()


def event(watch: str = "collector", rule: str = "stalled */frames", state: str = "firing", **source: int) -> AlertEvent:
    return AlertEvent(
        rule, state, "warning", watch, f"{watch}/frames", 120000.0, 1_700_000_000.0, 1_700_000_062.0,  # type: ignore[arg-type]
        source, f"{watch}/frames has not increased for 62 s (last value 120000 at 12:03:04)",
    )


def bodies(receiver: Receiver) -> list[dict[str, object]]:
    return [json.loads(r.body) for r in receiver.answered(200)]


@pytest.mark.parametrize("fmt", ["slack", "discord", "json"])
async def test_each_format_posts_the_body_its_service_reads(hook: Receiver, fmt: str) -> None:
    sent = event()
    async with Webhook(f"{hook.url}/hook", format=fmt, headers={"X-Token": "t0k"}) as webhook:  # type: ignore[arg-type]
        await webhook.alert(sent)
        await webhook.flush()
    (request,) = hook.answered(200)
    assert request.path == "/hook" and request.headers["content-type"] == "application/json"
    assert request.headers["x-token"] == "t0k"
    body = json.loads(request.body)
    if fmt == "slack":
        assert set(body) == {"text"} and sent.message in body["text"] and "stalled */frames" in body["text"]
        assert "firing" in body["text"].lower()
    elif fmt == "discord":
        assert set(body) == {"content"} and sent.message in body["content"] and len(body["content"]) <= 2000
    else:
        assert [AlertEvent.from_dict(e) for e in body["events"]] == [sent]


async def test_100_targets_stalling_together_are_one_post_listing_them(hook: Receiver) -> None:
    async with Webhook(hook.url) as webhook:
        began = time.monotonic()
        for i in range(100):
            await webhook.alert(event(f"w{i}"))
        await webhook.alert(event("learner", rule="quiet learner"))
        await wait_until(lambda: len(hook.answered(200)) >= 2)  # the window closes by itself
        assert time.monotonic() - began >= 0.9, "events of one rule within one second are grouped"
        await webhook.flush()
    texts = [str(b["text"]) for b in bodies(hook)]
    assert len(texts) == 2, "one post per rule, not one per target"
    stalled = next(t for t in texts if "stalled" in t)
    assert "100 " in stalled and all(f"w{i}" in stalled for i in (0, 1, 50, 99))
    assert webhook.counters()["delivered"] == 101


async def test_ranks_are_listed_when_the_events_come_from_ranks(hook: Receiver) -> None:
    async with Webhook(hook.url, format="json") as webhook:
        for rank in range(4):
            await webhook.alert(event("learner", rank=rank))
        await webhook.flush()
    (body,) = bodies(hook)
    assert [e["source"] for e in body["events"]] == [{"rank": r} for r in range(4)]  # type: ignore[index, union-attr]
    async with Webhook(hook.url) as webhook:
        for rank in range(4):
            await webhook.alert(event("learner", rank=rank))
        await webhook.flush()
    text = str(bodies(hook)[-1]["text"])
    assert all(f"rank {r}" in text for r in range(4)), text


async def test_a_webhook_that_is_down_gets_the_events_when_it_is_back(hook: Receiver, tmp_path: Path) -> None:
    hook.stop()
    webhook = Webhook(hook.url, format="json", backoff=FAST, spool_dir=tmp_path / "spool")
    async with webhook:
        await webhook.alert(event("a", rule="stalled a/frames"))
        await webhook.alert(event("b", rule="quiet b"))
        await webhook.flush()  # a try fails: the events wait in the spool
        assert webhook.counters()["pending"] == 2 and webhook.counters()["retries"] >= 1
        hook.start()
        await wait_until(lambda: webhook.counters()["pending"] == 0, timeout=20)
    got = {e["rule"] for b in bodies(hook) for e in b["events"]}  # type: ignore[attr-defined]
    assert got == {"stalled a/frames", "quiet b"}

    hook.requests.clear()
    hook.stop()  # down at close: a later webhook on the same spool_dir sends what was left
    async with Webhook(hook.url, format="json", backoff=FAST, spool_dir=tmp_path / "spool") as webhook:
        await webhook.alert(event("c", rule="nonfinite c/loss"))
        await webhook.flush()
    hook.start()
    async with Webhook(hook.url, format="json", spool_dir=tmp_path / "spool") as later:
        await later.flush()
    assert [e["rule"] for b in bodies(hook) for e in b["events"]] == ["nonfinite c/loss"]  # type: ignore[attr-defined]


async def test_called_as_a_notifier_from_the_loop_or_a_thread_it_queues_and_posts(hook: Receiver) -> None:
    async with Webhook(hook.url, format="json") as webhook:
        assert webhook(event("on-loop")) is None  # a plain function call: queues, returns at once
        await asyncio.to_thread(webhook, event("on-thread"))
        await webhook.flush()
    watches = sorted(e["watch"] for b in bodies(hook) for e in b["events"])  # type: ignore[attr-defined]
    assert watches == ["on-loop", "on-thread"]


def test_called_as_a_notifier_where_no_loop_runs_it_still_posts(hook: Receiver) -> None:
    webhook = Webhook(hook.url, format="json")
    done = threading.Event()

    def notify() -> None:
        webhook(event("no-loop"))
        done.set()

    threading.Thread(target=notify).start()
    assert done.wait(5)
    wait_until_sync(lambda: len(hook.answered(200)) == 1)
    assert bodies(hook)[0]["events"][0]["watch"] == "no-loop"  # type: ignore[index]
    webhook.close_sync()


def test_bad_options_are_refused_naming_the_option() -> None:
    with pytest.raises(ConfigError, match="Webhook: format must be "):
        Webhook("http://127.0.0.1:9", format="teams")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="Webhook: url must be an http"):
        Webhook("127.0.0.1:9")
    with pytest.raises(ConfigError, match="Webhook: headers"):
        Webhook("http://127.0.0.1:9", headers={"X": 1})  # type: ignore[dict-item]




async def test_a_webhook_that_refuses_is_logged_with_its_answer_and_counted(
    hook: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    hook.reply = lambda n, request: (404, {"Content-Type": "text/plain"}, b"no_service")
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        async with Webhook(hook.url, name="slack") as webhook:
            await webhook.alert(event("a"))
            await webhook.alert(event("b"))
            await webhook.flush()
    assert webhook.counters()["rejected"] == 2
    refused = [r.getMessage() for r in caplog.records if "404" in r.getMessage()]
    assert refused and "no_service" in refused[0] and "'slack'" in refused[0]
