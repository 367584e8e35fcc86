"""Webhook: alert events posted to Slack, Discord, Alertmanager or any JSON endpoint, grouped, through outages."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import re
import threading
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

from monitor_async._core import AlertEvent, Ranks, Record, check_ranks
from monitor_async._core.checks import choice, number
from monitor_async._core.secrets import check_headers, check_http_url, keep_secret, redact_logs

from ._alerts import episode
from ._delivery import DEFAULT_SPOOL_BYTES, Backoff, ResilientSink, text_of

__all__ = ["FORMATS", "Webhook"]

log = logging.getLogger("monitor_async")

Format = Literal["slack", "discord", "json", "alertmanager"]
FORMATS: tuple[str, ...] = ("slack", "discord", "json", "alertmanager")
_DISCORD_LIMIT = 2000  # Discord refuses a message longer than this
_LISTED = 200  # targets named in one message; the rest are counted
_ALERTMANAGER_PATH = "/api/v2/alerts"
_NOT_LABEL = re.compile(r"[^a-zA-Z0-9_]")


def _target(event: AlertEvent) -> str:
    """The watch, and the rank or other source when the event has one: ``learner (rank 3)``."""
    if not event.source:
        return event.watch
    where = ", ".join(f"{k} {v}" for k, v in event.source.items())
    return f"{event.watch} ({where})"


def message(events: Sequence[AlertEvent]) -> str:
    """The text of one post: the rule, its state and severity, and the targets it concerns.

    Examples:
        >>> e = AlertEvent("quiet learner", "firing", "critical", "learner", None, None, 0.0, 31.0, {},
        ...                "learner has not answered for 31 s")
        >>> message([e])
        'FIRING (critical) quiet learner: learner has not answered for 31 s'
    """
    first = events[0]
    head = f"{first.state.upper()} ({first.severity}) {first.rule}"
    if len(events) == 1:
        return f"{head}: {first.message}" if first.message else f"{head}: {_target(first)}"
    names = [_target(e) for e in events[:_LISTED]]
    more = f" and {len(events) - _LISTED} more" if len(events) > _LISTED else ""
    text = f"{head} for {len(events)} targets: {', '.join(names)}{more}"
    return f"{text}\nfirst: {first.message}" if first.message else text


def _rfc3339(unix: float) -> str:
    """Unix time as Alertmanager reads a time: RFC 3339 in UTC, to the millisecond."""
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _label_name(key: Any) -> str:
    """A source field's name as an Alertmanager label name (``[a-zA-Z_][a-zA-Z0-9_]*``)."""
    name = _NOT_LABEL.sub("_", str(key)) or "_"
    return f"_{name}" if name[0].isdigit() else name


def alertmanager_alert(event: AlertEvent) -> dict[str, Any]:
    """One alert of Alertmanager's ``POST /api/v2/alerts`` body for ``event``.

    Labels: ``alertname`` (the rule), ``severity``, ``watch``, ``metric`` (when
    the event has one) and the source's fields (``rank``...). Annotations: the
    message as ``summary``, and ``value``. ``startsAt`` is when the condition
    began (``event.since``); a resolved event has ``endsAt``, its time.

    Examples:
        >>> e = AlertEvent("stalled */frames", "firing", "warning", "collector", "collector/frames",
        ...                120000.0, 0.0, 62.0, {"rank": 3}, "collector/frames has not increased for 62 s")
        >>> alertmanager_alert(e)["labels"]
        {'alertname': 'stalled */frames', 'severity': 'warning', 'watch': 'collector', 'metric': 'collector/frames', 'rank': '3'}
    """
    labels = {"alertname": event.rule, "severity": event.severity, "watch": event.watch}
    if event.metric:
        labels["metric"] = event.metric
    for key, value in event.source.items():
        labels.setdefault(_label_name(key), str(value))  # a source field never hides the event's own labels
    annotations = {"summary": event.message or message([event])}
    if event.value is not None:
        annotations["value"] = str(event.value)
    alert: dict[str, Any] = {"labels": labels, "annotations": annotations, "startsAt": _rfc3339(event.since)}
    if event.state == "resolved":
        alert["endsAt"] = _rfc3339(event.time)
    return alert


class Webhook(ResilientSink):
    """Posts alert events to a webhook (Slack, Discord, Alertmanager, or any endpoint that takes JSON); outages lose nothing.

    Events come through ``await webhook.alert(event)`` or ``webhook(event)``
    (queues and returns at once, so it works as a notifier); records are
    ignored. What it promises: [Sinks: Webhook](sinks.md#alerts-to-people-webhook).

    Args:
        url: the webhook's ``http(s)://`` URL (Slack's incoming webhook,
            Discord's channel webhook, Alertmanager's address, or your own endpoint); only its
            scheme and host are ever printed ([never printed](guarantees.md#secrets-never-printed-test_secretspy)).
            For ``"alertmanager"``, a URL without a path gets ``/api/v2/alerts``.
        format: the body of each post: ``"slack"`` (default), ``"discord"``, ``"json"`` or
            ``"alertmanager"`` ([Alertmanager](alerts.md#alertmanager)).
        headers: extra HTTP headers (a token...), their values never printed; ``None`` (default): none.
        group_window: seconds the events of one rule are gathered before
            they are posted (default 1.0); must be a finite number >= 0.
        timeout: seconds one post may take (default 10.0); must be > 0.
        resend_interval: ``"alertmanager"`` only: seconds between re-sends of the
            alerts still firing (default 60.0), below Alertmanager's ``resolve_timeout``
            (5 min by default) so that it keeps them firing; must be > 0.
        spool_dir: the spool's folder; ``None`` (default): a temporary one.
        spool_bytes: the spool's bound in bytes (default 64 MiB).
        backoff: the waits between tries (default ``Backoff()``).
        name: the sink's label in ``Monitor.stats()`` and in messages;
            ``None`` (default): ``"webhook"``.
        ranks: ``"all"`` (default): every rank of a distributed job posts
            its own events; ``"main"``: only rank 0.

    Raises:
        ConfigError: a bad option.

    Examples:
        >>> hook = Webhook("https://hooks.slack.com/services/T000/B000/XXXX", format="slack")
        >>> hook.format, hook.group_window
        ('slack', 1.0)
    """

    def __init__(
        self,
        url: str,
        *,
        format: Format = "slack",
        headers: Mapping[str, str] | None = None,
        group_window: float = 1.0,
        timeout: float = 10.0,
        resend_interval: float = 60.0,
        spool_dir: str | os.PathLike[str] | None = None,
        spool_bytes: int = DEFAULT_SPOOL_BYTES,
        backoff: Backoff | None = None,
        name: str | None = None,
        ranks: Ranks = "all",
    ) -> None:
        check_http_url("Webhook", "url", url, path=True)  # Slack's and Discord's secret is the path
        headers = check_headers("Webhook", headers)
        keep_secret(url, headers=headers, path=True)
        redact_logs("monitor_async")
        choice("Webhook", "format", format, FORMATS)
        number("Webhook", "group_window", group_window, low=0, above=False, unit="seconds")
        number("Webhook", "timeout", timeout, unit="seconds")
        self.resend_interval = float(number("Webhook", "resend_interval", resend_interval, unit="seconds"))
        super().__init__(spool_dir=spool_dir, spool_bytes=spool_bytes, backoff=backoff, name=name)
        self.ranks = check_ranks(ranks, "Webhook")
        if format == "alertmanager" and urlsplit(url).path in ("", "/"):
            url = url.rstrip("/") + _ALERTMANAGER_PATH
        self.url = url
        self.format: Format = format
        self.group_window = float(group_window)
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        self._timeout = float(timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._own_thread: threading.Thread | None = None
        self._groups: dict[tuple[str, str], list[AlertEvent]] = {}
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._posting: set[asyncio.Task[None]] = set()
        self._firing: dict[tuple[Any, ...], AlertEvent] = {}  # episode -> its firing event, for the re-sends
        self._resend: asyncio.TimerHandle | None = None

    # ----------------------------------------------------------------- events
    async def alert(self, event: AlertEvent) -> None:
        """Takes one event: it is posted with the others of its rule at the end of the group window."""
        self._bind()
        self._add(event)

    def __call__(self, event: AlertEvent) -> None:
        """``webhook(event)``: queues ``event`` from any thread and returns at once (a notifier function)."""
        loop = self._bind()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._add(event)
        else:
            loop.call_soon_threadsafe(self._add, event)

    def body(self, events: Sequence[AlertEvent]) -> dict[str, Any] | list[dict[str, Any]]:
        """The JSON body of one post for ``events`` (one rule and state; Alertmanager's list takes any), in this webhook's format."""
        if self.format == "alertmanager":
            return [alertmanager_alert(e) for e in events]
        if self.format == "json":
            return {"events": [e.to_dict() for e in events]}
        text = message(events)
        if self.format == "discord":
            if len(text) > _DISCORD_LIMIT:
                text = text[: _DISCORD_LIMIT - 3] + "..."
            return {"content": text}
        return {"text": text}

    def _bind(self) -> asyncio.AbstractEventLoop:
        """The loop the webhook's groups and spool live on: the caller's, else a private one on a thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            return loop
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called from plain sync code: run a loop of our own
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=f"monitor-async-{self.label}-loop", daemon=True)
            thread.start()
            self._own_thread = thread
        self._loop = loop
        return loop

    def _add(self, event: AlertEvent) -> None:
        if self.format == "alertmanager":
            self._track(event)
        key = (event.rule, event.state)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = []
            self._timers[key] = asyncio.get_running_loop().call_later(self.group_window, self._due, key)
        group.append(event)

    def _due(self, key: tuple[str, str]) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        events = self._groups.pop(key, None)
        if events:
            self._start_post(events)

    def _start_post(self, events: list[AlertEvent]) -> None:
        task = asyncio.get_running_loop().create_task(self._post(events), name=f"monitor-async {self.label} post")
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)

    # ------------------------------------------------- Alertmanager's re-sends
    def _track(self, event: AlertEvent) -> None:
        """Keeps the alerts firing now, and the timer that re-sends them while there are any."""
        if event.state == "firing":
            self._firing[episode(event)] = event
            if self._resend is None and not self._closed:
                self._resend = asyncio.get_running_loop().call_later(self.resend_interval, self._resend_firing)
        else:
            self._firing.pop(episode(event), None)

    def _resend_firing(self) -> None:
        """Posts every alert still firing again, so that Alertmanager does not resolve it by timeout.

        Skipped while an earlier post still waits in the spool (Alertmanager is
        away): that post carries them, and a pile of copies would not help.
        """
        self._resend = None
        if not self._firing or self._closed:
            return
        if not self.counters()["pending"]:
            self._start_post(list(self._firing.values()))
        self._resend = asyncio.get_running_loop().call_later(self.resend_interval, self._resend_firing)

    async def _post(self, events: list[AlertEvent]) -> None:
        # one record per event: the spool counts events; the message itself travels as the destination
        stand_ins = [Record(e.watch, None, e.time, {}, e.source) for e in events]
        try:
            await self.deliver([stand_ins], json.dumps(self.body(events)))
        except Exception as exc:  # noqa: BLE001 - nobody awaits this task: say it here
            log.warning(
                "sink %r: %d events of rule %r were not posted: %s (refusals are counted in "
                "monitor.stats()['sink/%s/rejected'])", self.label, len(events), events[0].rule, text_of(exc), self.label,
            )

    async def _drain(self) -> None:
        """Posts every group still in its window now, and waits for them to reach the spool."""
        for key in list(self._groups):
            self._due(key)
        if self._posting:
            await asyncio.gather(*self._posting, return_exceptions=True)

    # ------------------------------------------------------------- lifecycle
    async def _write(self, records: Sequence[Record]) -> None:
        return None

    async def _write_batches(self, batches: Sequence[Sequence[Record]]) -> None:
        return None

    async def _open(self) -> None:
        self._bind()
        await super()._open()

    async def flush(self) -> None:
        """Posts the groups waiting for their window, then returns once they are delivered or a try failed."""
        await self._drain()
        await super().flush()

    async def close(self) -> None:
        """Posts what waits, closes, and says in the log what stays in the spool. Idempotent."""
        if self._resend is not None:
            self._resend.cancel()
            self._resend = None
        if not self._closed:
            await self._drain()
        await super().close()

    def close_sync(self, timeout: float = 10.0) -> None:
        """Closes a webhook used only as a notifier from sync code (it runs on a loop of its own).

        Call it from a thread other than the webhook's loop; ``timeout`` bounds the wait.
        """
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(self.close(), loop)
        with contextlib.suppress(concurrent.futures.TimeoutError):
            future.result(timeout)
        if self._own_thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            self._own_thread.join(timeout)
            self._own_thread = None
            if not loop.is_running():
                loop.close()

    def send_blocking(self, records: Sequence[Record], destination: str | None) -> None:
        data = (destination or "{}").encode()
        request = urllib.request.Request(self.url, data=data, headers=self._headers, method="POST")
        with urllib.request.urlopen(request, timeout=self._timeout) as response:
            response.read()
