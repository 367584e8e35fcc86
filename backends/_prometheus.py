"""PrometheusSink: the latest value of every metric, exposed as gauges at ``/metrics``.

The metric model, alerts and ``/healthz``: [Sinks: Prometheus](sinks.md#prometheus-prometheussink).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from monitor_async._core import AlertEvent, BaseSink, Ranks, Record, check_ranks
from monitor_async._core.checks import number, refuse
from monitor_async._core.distribution import Summary, coarsen, merge
from monitor_async._core.secrets import redact_url

from ._alerts import episode
from ._text import escape

try:
    from prometheus_client import CollectorRegistry, make_asgi_app, make_wsgi_app
    from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
    from prometheus_client.utils import floatToGoString
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "PrometheusSink needs prometheus_client: pip install prometheus-client (or the extra: monitor-async[prometheus])"
    ) from exc

__all__ = ["PrometheusSink"]

log = logging.getLogger("monitor_async")

_NAME_OK = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_INVALID = re.compile(r"[^a-zA-Z0-9_]+")
_TIMESTAMP = "last_record_timestamp_seconds"
_ENTRY = 64
"""Bytes a cache entry costs besides its strings, for the budget."""
_CLASH: Any = object()
"""The route of a key whose series another key of the same watch holds: its values are counted, not written."""
_OVER: Any = object()
"""The route of a key whose series ``max_series`` kept out: its values are counted, not written."""
_CARRIED: Any = object()
"""The route of a distribution's ``<key>/count`` scalar: the histogram family's ``_count`` carries it."""


def sanitise(name: str) -> str:
    """A Prometheus-legal metric name part: runs of anything but ``[a-zA-Z0-9_]`` become ``_``.

    Colons are replaced too (Prometheus reserves them for recording rules).

    Examples:
        >>> sanitise("env/reward.mean")
        'env_reward_mean'
    """
    return _INVALID.sub("_", name).strip("_") or "value"


_Series = tuple[str, Any]  # (watch, Record.source): one labelled series of a family


def _labels(series: Iterator[_Series] | list[_Series]) -> tuple[list[str], list[list[str]]]:
    """Label names (``watch``, then every source key seen, e.g. ``rank``) and each series' label values."""
    keys = list(series)
    extra: dict[str, None] = {}
    for _, source in keys:
        extra.update(dict.fromkeys(source))
    names = ["watch", *extra]
    return names, [[watch, *(_text(source.get(k, "")) for k in extra)] for watch, source in keys]


def _text(value: Any) -> str:
    """A label value as a scrape can encode it (see ``escape``)."""
    text = str(value)
    return escape(text) or text



def _check_host(host: str) -> None:
    """A host name or address to bind: a URL's scheme, user-info or path is refused, shown redacted."""
    if any(c in host for c in "/@?#") or any(c.isspace() for c in host):
        raise refuse("PrometheusSink", "host", "a host name or IP address to bind (no scheme, user-info or path)",
                      redact_url(f"//{host}")[2:])


def health(firing: Iterable[AlertEvent]) -> tuple[int, bytes]:
    """The ``/healthz`` answer for the alerts firing now: ``(status, JSON body)``.

    503 when one of them is ``critical``, else 200; the body lists them all
    (``{"status": "ok" | "critical", "firing": [event.to_dict(), ...]}``).

    Examples:
        >>> health([])
        (200, b'{"status": "ok", "firing": []}')
    """
    events = list(firing)
    critical = any(e.severity == "critical" for e in events)
    body = {"status": "critical" if critical else "ok", "firing": [e.to_dict() for e in events]}
    return (503 if critical else 200), json.dumps(body).encode()


class _LatestValues:
    """The collector the registry calls on every scrape (on the HTTP server's thread)."""

    def __init__(self, namespace: str, buckets: int) -> None:
        self.namespace = namespace
        self.buckets = buckets
        self.lock = threading.Lock()
        self.families: dict[str, dict[_Series, float]] = {}
        self.histograms: dict[str, dict[_Series, Summary]] = {}
        """Per histogram family and series, every value it was given since the sink started (merged)."""
        self.help: dict[str, str] = {}
        self.times: dict[_Series, float] = {}
        self.alerts: dict[tuple[Any, ...], AlertEvent] = {}

    def firing(self) -> list[AlertEvent]:
        """The alerts firing now, oldest first."""
        with self.lock:
            return list(self.alerts.values())

    def describe(self) -> list[Any]:
        # Registering must not call collect(); the names change over time anyway.
        return []

    def collect(self) -> Iterator[Any]:
        with self.lock:
            families = [(name, self.help[name], dict(series)) for name, series in self.families.items()]
            histograms = [(name, self.help[name], dict(series)) for name, series in self.histograms.items()]
            times = dict(self.times)
            alerts = list(self.alerts.values())
        for name, doc, kept in histograms:
            labels, rows = _labels(list(kept))
            histogram = HistogramMetricFamily(name, doc, labels=labels)
            for row, summary in zip(rows, kept.values(), strict=True):
                histogram.add_metric(row, _cumulative(coarsen(summary, self.buckets)), summary.sum)
            yield histogram
        for name, doc, series in [*families, (f"{self.namespace}_{_TIMESTAMP}", "", times)]:
            if not series:
                continue
            labels, rows = _labels(list(series))
            family = GaugeMetricFamily(name, doc or "Unix time of the latest record of each watch.", labels=labels)
            for row, value in zip(rows, series.values(), strict=True):
                family.add_metric(row, value)
            yield family
        if alerts:
            yield self._alerts_family(alerts)

    @staticmethod
    def _alerts_family(alerts: list[AlertEvent]) -> Any:
        """``ALERTS{alertname, alertstate, severity, watch, <source...>} 1`` per firing alert (Prometheus' own names)."""
        extra: dict[str, None] = {}
        for e in alerts:
            extra.update(dict.fromkeys(str(k) for k in e.source))
        names = ["alertname", "alertstate", "severity", "watch", *extra]
        family = GaugeMetricFamily("ALERTS", "Alerts of the monitor's rules that fire now.", labels=names)
        seen: set[tuple[str, ...]] = set()
        for e in alerts:
            source = {str(k): v for k, v in e.source.items()}
            row = [_text(e.rule), e.state, e.severity, _text(e.watch), *(_text(source.get(k, "")) for k in extra)]
            if tuple(row) not in seen:  # one rule over several keys of one watch: one series, as in Prometheus
                seen.add(tuple(row))
                family.add_metric(row, 1.0)
        return family


def _cumulative(summary: Summary) -> list[tuple[str, float]]:
    """``[(le, values <= le), ..., ("+Inf", count)]``: explicit bounds as given, else each exponential bucket's upper edge."""
    if summary.bounds is not None:
        uppers, counts = list(summary.bounds), list(summary.counts[:-1])
    else:
        edges, counts = summary.histogram()
        uppers = edges[1:]
    out = []
    total = 0
    for upper, count in zip(uppers, counts, strict=True):
        total += count
        out.append((floatToGoString(upper), float(total)))  # type: ignore[no-untyped-call]
    out.append(("+Inf", float(summary.count)))
    return out


class _Server(ThreadingMixIn, WSGIServer):
    """The built-in server: a thread per request, never keeping the process alive."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


class PrometheusSink(BaseSink):
    """Keeps the latest value of every metric as a gauge and serves it at ``/metrics``.

    A distribution is a histogram family (``_bucket{le=...}``, ``_count``, ``_sum``) of every value it
    was given since the sink started, beside the gauges of its latest summary (``<key>_p50``...).

    One gauge family per metric, labelled by watch, in its own registry; alerts
    are ``ALERTS`` series and ``/healthz`` answers 503 while a critical one fires.
    What it promises: [Sinks: Prometheus](sinks.md#prometheus-prometheussink).

    Args:
        host: the address the built-in server binds to (default
            ``"127.0.0.1"``: only this machine can scrape); a host name or IP address.
        port: the built-in server's TCP port (default 9464), 0..65535: ``0``
            picks a free one (read ``.port`` or ``.url``); ``None``: no server,
            serve [asgi_app][monitor_async.backends.PrometheusSink.asgi_app] yourself.
        registry: the prometheus_client ``CollectorRegistry`` for the gauges;
            ``None`` (default): one of the sink's own.
        namespace: the prefix of every metric family name (default
            ``"monitor_async"``); must match ``[a-zA-Z_][a-zA-Z0-9_]*``.
        max_series: the most (metric, watch, source) series exported (default
            10,000); an integer >= 1.
        histogram_buckets: the most ``le`` buckets per sign of a distribution's histogram
            (default 20; its exponential buckets are joined until they fit); an integer >= 1.
        name: the sink's label in ``Monitor.stats()`` and in messages;
            ``None`` (default) or ``""``: ``"prometheus"``.
        ranks: ``"all"`` (default): every rank serves its own gauges;
            ``"main"``: only rank 0.

    Raises:
        ValueError: a bad ``host``, ``port``, ``namespace`` or ``max_series``.
        ConfigError: ``ranks`` is neither ``"main"`` nor ``"all"``.
        OSError: when the sink opens, ``host:port`` is in use.

    Examples:
        >>> import asyncio, urllib.request
        >>> from monitor_async import Monitor
        >>> class Collector:
        ...     def stats(self):
        ...         return {"frames": 1000}
        >>> async def main():
        ...     async with PrometheusSink(port=0) as sink:
        ...         monitor = Monitor(sink)
        ...         monitor.watch(Collector(), name="collector")
        ...         await monitor.step()
        ...         page = await asyncio.to_thread(urllib.request.urlopen, sink.url)
        ...         return page.read().decode()
        >>> 'monitor_async_frames{watch="collector"} 1000.0' in asyncio.run(main())
        True
    """

    cache_bytes = 4 << 20
    """About how many bytes the cached routes from keys to series may hold (more starts them afresh)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = 9464,
        registry: Any = None,
        *,
        namespace: str = "monitor_async",
        max_series: int = 10_000,
        histogram_buckets: int = 20,
        name: str | None = None,
        ranks: Ranks = "all",
    ) -> None:
        self.name = name
        self.ranks = check_ranks(ranks, "PrometheusSink")
        owner = f"PrometheusSink {self.label!r}"
        number(owner, "port", port, integer=True, low=0, above=False, high=65535, none=True)
        if not isinstance(host, str) or not host:
            raise ValueError(f"PrometheusSink {self.label!r}: host must be a non-empty string, got {host!r}")
        _check_host(host)
        if not isinstance(namespace, str) or not _NAME_OK.fullmatch(namespace):
            raise ValueError(
                f"PrometheusSink {self.label!r}: namespace must match [a-zA-Z_][a-zA-Z0-9_]*, got {namespace!r}"
            )
        number(owner, "max_series", max_series, integer=True)
        number(owner, "histogram_buckets", histogram_buckets, integer=True)
        self._host = host
        self._port = port
        self.max_series = max_series
        self.series_dropped = 0
        self._series = 0
        self._owns_registry = registry is None
        self.registry: Any = CollectorRegistry() if registry is None else registry
        self._collector = _LatestValues(namespace, histogram_buckets)
        self.registry.register(self._collector)
        self.keys_collided = 0
        self.keys_escaped = 0
        self._reserved = f"{namespace}_{_TIMESTAMP}"
        self._labels: dict[str, str] = {}  # watch name -> its label value
        self._routes: dict[_Series, dict[str, Any]] = {}  # (label, source) -> key -> series, _CLASH or _OVER
        self._routed = 0  # bytes the routes hold, about
        self._claims: dict[tuple[str, _Series], str] = {}  # (family, (label, source)) -> the key owning the series
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------- where it is
    @property
    def host(self) -> str:
        """The address the server is bound to (the requested host before entering)."""
        return self._host

    @property
    def port(self) -> int | None:
        """The bound port once entered (``port=0`` resolved); ``None`` when no port is opened."""
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port/metrics`` of the running server."""
        if self._server is None:
            raise RuntimeError(
                f"PrometheusSink {self.label!r} is not serving: enter it (async with) or write to it first"
                + (", or give it a port" if self._port is None else "")
            )
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}/metrics"

    @property
    def health_url(self) -> str:
        """``http://host:port/healthz`` of the running server: 200, or 503 while a ``critical`` alert fires."""
        return self.url[: -len("/metrics")] + "/healthz"

    def firing(self) -> list[AlertEvent]:
        """The alerts firing now (exported in ``ALERTS``), oldest first."""
        return self._collector.firing()

    def asgi_app(self) -> Callable[..., Any]:
        """An ASGI app serving ``/healthz`` and, on every other path, the metrics.

        It is prometheus_client's ASGI app for this sink's registry, with the
        health route in front. Works before the sink is entered; with
        ``port=None`` it is the only way the metrics are served. Example with
        Starlette: ``Starlette(routes=[Mount("/metrics", app=sink.asgi_app())])``
        serves the metrics at ``/metrics`` and the health at ``/metrics/healthz``;
        served alone (``uvicorn.run(sink.asgi_app())``), at ``/healthz``.
        """
        metrics: Callable[..., Any] = make_asgi_app(self.registry)
        firing = self._collector.firing

        async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
            if scope["type"] == "lifespan":  # nothing to start or stop: say so
                while True:
                    message = await receive()
                    if message["type"] == "lifespan.startup":
                        await send({"type": "lifespan.startup.complete"})
                    elif message["type"] == "lifespan.shutdown":
                        await send({"type": "lifespan.shutdown.complete"})
                        return
            path, root = scope.get("path", ""), scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root):]
            if path.rstrip("/") != "/healthz":
                await metrics(scope, receive, send)
                return
            status, body = health(firing())
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        return app

    def _wsgi_app(self) -> Callable[..., Any]:
        """The built-in server's app: ``/healthz``, then prometheus_client's metrics app."""
        metrics = make_wsgi_app(self.registry)
        firing = self._collector.firing

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("PATH_INFO", "").rstrip("/") != "/healthz":
                result: Iterable[bytes] = metrics(environ, start_response)
                return result
            status, body = health(firing())
            start_response("200 OK" if status == 200 else "503 Service Unavailable",
                           [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]

        return app

    # ------------------------------------------------------------------ alerts
    async def alert(self, event: AlertEvent) -> None:
        """Exports a firing ``event`` in ``ALERTS`` (and ``/healthz``) until its resolved event comes.

        Args:
            event: the event, firing or resolved.

        Raises:
            SinkClosedError: the sink is closed.
        """
        await self.open()  # idempotent (the server starts); raises SinkClosedError once closed
        key = episode(event)
        collector = self._collector
        with collector.lock:
            if event.state == "firing":
                collector.alerts[key] = event
            else:
                collector.alerts.pop(key, None)

    # ------------------------------------------------------------------ writes
    def counters(self) -> dict[str, float]:
        """``series_dropped``, ``keys_collided`` and ``keys_escaped`` (see [Sinks: Prometheus](sinks.md#prometheus-prometheussink))."""
        return {
            "series_dropped": float(self.series_dropped),
            "keys_collided": float(self.keys_collided),
            "keys_escaped": float(self.keys_escaped),
        }

    async def _write(self, records: Sequence[Record]) -> None:
        collector = self._collector
        labels = self._labels
        all_routes = self._routes
        with collector.lock:
            for record in records:
                name = record.name
                label = labels.get(name)
                if label is None:
                    label = self._label(name)
                if label != name:
                    self.keys_escaped += 1
                at = (label, record.source)  # the source's fields (rank, host...) become labels
                routes = all_routes.get(at)
                if routes is None:
                    routes = self._routes_of(at)
                if record.distributions:
                    self._histograms(record, at, routes)
                for key, value in record.metrics.items():
                    route = routes.get(key)
                    if route is None:
                        route = self._route(name, at, key, routes)
                    if type(route) is dict:
                        route[at] = value
                    elif route is _CLASH:
                        self.keys_collided += 1
                    elif route is not _CARRIED:
                        self.series_dropped += 1
                collector.times[at] = record.time

    def _histograms(self, record: Record, at: _Series, routes: dict[str, Any]) -> None:
        """Adds each distribution of ``record`` to its histogram family's series (lock held)."""
        for key, summary in record.distributions.items():
            route = routes.get(key)
            if route is None:
                route = self._route(record.name, at, key, routes, histogram=True)
                routes.setdefault(f"{key}/count", _CARRIED)
            if type(route) is dict:
                kept = route.get(at)
                try:
                    route[at] = summary if kept is None else merge([kept, summary], quantiles=())
                except ValueError:  # other explicit bounds than before: the series starts again (a counter reset)
                    route[at] = summary
            elif route is _CLASH:
                self.keys_collided += 1
            else:
                self.series_dropped += 1

    def _label(self, name: str) -> str:
        """The ``watch`` label of a watch name: escaped when UTF-8 cannot encode it (a scrape must encode it)."""
        if len(self._labels) >= 4 * self.max_series:
            self._labels.clear()
        label = self._labels[name] = escape(name) or name
        return label

    def _routes_of(self, at: _Series) -> dict[str, Any]:
        """The (new) routes of the records of one watch and source."""
        routes: dict[str, Any] = {}
        self._routes[at] = routes
        self._routed += 2 * _ENTRY
        return routes

    def _route(self, name: str, at: _Series, key: str, routes: dict[str, Any], histogram: bool = False) -> Any:
        """Where the values of ``key`` of watch ``name`` go: a family's series (``{at: value}``), ``_CLASH`` or ``_OVER``.

        A ``histogram`` (a distribution's key) also claims its family's ``_count``, ``_sum`` and
        ``_bucket`` names, so that no gauge takes them.

        The first key of a watch (and source) to give a family name owns that
        series for good; another key of the same watch that sanitises to the
        same name is a clash (its values are counted in ``keys_collided``).
        """
        if self._routed > self.cache_bytes:  # keys that keep changing: the routes start afresh
            self._routes.clear()
            routes.clear()
            self._routes[at] = routes
            self._routed = 2 * _ENTRY
        label = at[0]
        collector = self._collector
        prefix = name + "/"
        metric = key[len(prefix):] if key.startswith(prefix) else key
        family = f"{collector.namespace}_{sanitise(metric)}"
        if family == self._reserved:
            family += "_value"
        owner = self._claims.get((family, at))
        other = collector.families if histogram else collector.histograms
        route: Any
        if family in other:  # a gauge family cannot be a histogram one too
            route = _CLASH
            if not self.keys_collided:
                log.warning(
                    "PrometheusSink %r: key %r of watch %r becomes the metric name %s, which is already a %s "
                    "family; its values are left out and counted in monitor.stats()['sink/%s/keys_collided'] "
                    "(reported once per sink)",
                    self.label, key, label, family, "gauge" if histogram else "histogram", self.label,
                )
        elif owner is None:
            route = self._claim(family, at, key, metric, histogram)
        elif owner == key:
            route = (collector.histograms if histogram else collector.families)[family]
        else:
            route = _CLASH
            if not self.keys_collided:
                log.warning(
                    "PrometheusSink %r: keys %r and %r of watch %r both become the metric name %s; the "
                    "first one's series is kept, values of the others are left out and counted in "
                    "monitor.stats()['sink/%s/keys_collided'] (reported once per sink)",
                    self.label, owner, key, label, family, self.label,
                )
        routes[key] = route
        self._routed += sys.getsizeof(key) + _ENTRY
        return route

    def _claim(self, family: str, at: _Series, key: str, metric: str, histogram: bool) -> Any:
        """A new series of ``family`` for ``key`` of one watch and source: its route, or ``_OVER`` past ``max_series``."""
        collector = self._collector
        if self._series >= self.max_series:
            if not self.series_dropped:
                log.warning(
                    "PrometheusSink %r: max_series=%d reached; new series such as %s{watch=%r} are not "
                    "exported (raise max_series or report fewer distinct metrics)",
                    self.label, self.max_series, family, at[0],
                )
            return _OVER
        self._series += 1
        self._claims[(family, at)] = key
        kind: dict[str, Any] = collector.histograms if histogram else collector.families
        route = kind.get(family)
        if route is None:
            route = kind[family] = {}
            collector.help[family] = (
                f"Values of stats() key {metric!r} since the sink started." if histogram
                else f"Latest value of stats() key {metric!r}."
            )
        if histogram:
            for part in ("_count", "_sum", "_bucket"):
                self._claims.setdefault((family + part, at), key)
        return route

    # --------------------------------------------------------------- lifecycle
    async def _open(self) -> None:
        if self._port is None:
            return
        try:
            server = await asyncio.to_thread(self._serve, self._host, self._port)
        except OSError as exc:
            raise OSError(
                exc.errno, f"PrometheusSink {self.label!r}: cannot serve /metrics on {self._host}:{self._port}: {exc}"
            ) from exc
        thread = threading.Thread(target=server.serve_forever, name=f"monitor-async-{self.label}", daemon=True)
        thread.start()
        self._server, self._thread = server, thread
        address = server.server_address
        self._host, self._port = str(address[0]), int(address[1])

    def _serve(self, host: str, port: int) -> WSGIServer:
        """A bound (not yet serving) server for ``host:port``, IPv4 or IPv6 as ``host`` resolves."""
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]

        class Server(_Server):
            address_family = family

        return make_server(str(address[0]), port, self._wsgi_app(), Server, handler_class=_QuietHandler)

    async def _close(self) -> None:
        server, thread = self._server, self._thread
        if server is not None:
            await asyncio.to_thread(server.shutdown)
            server.server_close()
            if thread is not None:
                await asyncio.to_thread(thread.join, 5.0)
        if not self._owns_registry:
            self.registry.unregister(self._collector)
