"""PrometheusSink: the latest value of every metric, exposed as gauges at ``/metrics``.

Metric model: one gauge family per metric name, the watch name as the
``watch`` label. A record ``Record(name="collector", metrics={"collector/frames": 1000.0})``
becomes ``monitor_async_frames{watch="collector"} 1000.0``; nested keys are
joined with ``_`` (``collector/env/reward`` -> ``monitor_async_env_reward``).
Watches that report the same metric share a family, which is what PromQL
aggregations (``sum by (watch)``) expect. Per watch, the unix time of its
latest record is ``monitor_async_last_record_timestamp_seconds{watch=...}``
so that a stalled watch can be alerted on.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from monitor_async import BaseSink, Record
from monitor_async.distributed import Ranks, check_ranks

try:
    from prometheus_client import CollectorRegistry, make_asgi_app, start_http_server
    from prometheus_client.core import GaugeMetricFamily
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "PrometheusSink needs prometheus_client: pip install 'monitor-async[prometheus]'"
    ) from exc

__all__ = ["PrometheusSink"]

log = logging.getLogger("monitor_async")

_NAME_OK = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_INVALID = re.compile(r"[^a-zA-Z0-9_]+")
_TIMESTAMP = "last_record_timestamp_seconds"


def sanitise(name: str) -> str:
    """A Prometheus-legal metric name part: runs of anything but ``[a-zA-Z0-9_]`` become ``_``.

    Colons are replaced too (Prometheus reserves them for recording rules).

    Example:
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
    return names, [[watch, *(str(source.get(k, "")) for k in extra)] for watch, source in keys]


class _LatestValues:
    """The collector the registry calls on every scrape (on the HTTP server's thread)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.lock = threading.Lock()
        self.families: dict[str, dict[_Series, float]] = {}
        self.help: dict[str, str] = {}
        self.times: dict[_Series, float] = {}

    def describe(self) -> list[Any]:
        # Registering must not call collect(); the names change over time anyway.
        return []

    def collect(self) -> Iterator[Any]:
        with self.lock:
            families = [(name, self.help[name], dict(series)) for name, series in self.families.items()]
            times = dict(self.times)
        for name, doc, series in [*families, (f"{self.namespace}_{_TIMESTAMP}", "", times)]:
            if not series:
                continue
            labels, rows = _labels(list(series))
            family = GaugeMetricFamily(name, doc or "Unix time of the latest record of each watch.", labels=labels)
            for row, value in zip(rows, series.values(), strict=True):
                family.add_metric(row, value)
            yield family


class PrometheusSink(BaseSink):
    """Keeps the latest value of every metric as a gauge and serves it at ``/metrics``.

    Guarantees:
        - Metric model: one gauge family per metric, labelled by watch
          (``monitor_async_frames{watch="collector"}``); see the module
          docstring. Names are sanitised to ``[a-zA-Z0-9_]``, so ``a/b`` and
          ``a.b`` of one watch land on the same series (the later write wins).
        - Provenance: the fields of a record's source become labels beside
          ``watch`` (``rank="1"``; a sender's ``host``, ``pid``, ``node``
          through ``RaySink``), so ranks and nodes stay separate series.
        - Only the latest value is kept; a scrape sees the last record written
          for each watch. ``write`` just updates a dict under a lock, on the
          monitor's loop; scrapes read it on prometheus_client's server thread.
        - Cardinality is bounded: at most ``max_series`` (metric, watch) pairs
          are exported. Further new pairs are dropped, counted in
          ``series_dropped`` and reported by one warning; existing ones keep
          updating.
        - The values live in the sink's own ``CollectorRegistry`` (or in the
          ``registry`` you pass, e.g. prometheus_client's default ``REGISTRY``
          to serve them next to the process metrics).
        - Serving: with an integer ``port``, entering the sink (``async with``
          or the first write) starts prometheus_client's own HTTP server on
          ``host:port`` in a daemon thread; ``port=0`` picks a free port, and
          ``.host``/``.port``/``.url`` tell where it listens once entered. It
          binds to loopback unless you pass another ``host``: exposing
          metrics beyond this machine is your choice to make.
          ``port=None`` opens no port; mount :meth:`asgi_app` in your own
          async server instead. ``close()`` stops the server.

    Example:
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

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = 9464,
        registry: Any = None,
        *,
        namespace: str = "monitor_async",
        max_series: int = 10_000,
        name: str | None = None,
        ranks: Ranks = "all",
    ) -> None:
        self.name = name
        self.ranks = check_ranks(ranks, "PrometheusSink")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535):
            raise ValueError(f"PrometheusSink {self.label!r}: port must be 0..65535 or None, got {port!r}")
        if not isinstance(host, str) or not host:
            raise ValueError(f"PrometheusSink {self.label!r}: host must be a non-empty string, got {host!r}")
        if not isinstance(namespace, str) or not _NAME_OK.fullmatch(namespace):
            raise ValueError(
                f"PrometheusSink {self.label!r}: namespace must match [a-zA-Z_][a-zA-Z0-9_]*, got {namespace!r}"
            )
        if isinstance(max_series, bool) or not isinstance(max_series, int) or max_series < 1:
            raise ValueError(f"PrometheusSink {self.label!r}: max_series must be a positive integer, got {max_series!r}")
        self._host = host
        self._port = port
        self.max_series = max_series
        self.series_dropped = 0
        self._series = 0
        self._owns_registry = registry is None
        self.registry: Any = CollectorRegistry() if registry is None else registry
        self._collector = _LatestValues(namespace)
        self.registry.register(self._collector)
        self._names: dict[str, str] = {}
        self._reserved = f"{namespace}_{_TIMESTAMP}"
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

    def asgi_app(self) -> Callable[..., Any]:
        """prometheus_client's ASGI app for this sink's registry, to mount at ``/metrics``.

        Works before the sink is entered; with ``port=None`` it is the only
        way the metrics are served. Example with Starlette:
        ``Starlette(routes=[Mount("/metrics", app=sink.asgi_app())])``.
        """
        app: Callable[..., Any] = make_asgi_app(self.registry)
        return app

    # ------------------------------------------------------------------ writes
    def _family(self, key: str) -> str:
        family = self._names.get(key)
        if family is None:
            family = f"{self._collector.namespace}_{sanitise(key)}"
            if family == self._reserved:
                family += "_value"
            if len(self._names) >= 4 * self.max_series:
                self._names.clear()
            self._names[key] = family
        return family

    async def _write(self, records: Sequence[Record]) -> None:
        collector = self._collector
        with collector.lock:
            for record in records:
                prefix = record.name + "/"
                cut = len(prefix)
                at = (record.name, record.source)  # the source's fields (rank, host...) become labels
                for key, value in record.metrics.items():
                    metric = key[cut:] if key.startswith(prefix) else key
                    family = self._family(metric)
                    series = collector.families.get(family)
                    if series is None or at not in series:
                        if not self._admit(family, record.name):
                            continue
                        if series is None:
                            series = collector.families[family] = {}
                            collector.help[family] = f"Latest value of stats() key {metric!r}."
                    series[at] = value
                collector.times[at] = record.time

    def _admit(self, family: str, watch: str) -> bool:
        if self._series < self.max_series:
            self._series += 1
            return True
        self.series_dropped += 1
        if self.series_dropped == 1:
            log.warning(
                "PrometheusSink %r: max_series=%d reached; new series such as %s{watch=%r} are not "
                "exported (raise max_series or report fewer distinct metrics)",
                self.label, self.max_series, family, watch,
            )
        return False

    # --------------------------------------------------------------- lifecycle
    async def _open(self) -> None:
        if self._port is None:
            return
        try:
            server, thread = await asyncio.to_thread(
                start_http_server, self._port, addr=self._host, registry=self.registry
            )
        except OSError as exc:
            raise OSError(
                exc.errno, f"PrometheusSink {self.label!r}: cannot serve /metrics on {self._host}:{self._port}: {exc}"
            ) from exc
        self._server, self._thread = server, thread
        address = server.server_address
        self._host, self._port = str(address[0]), int(address[1])

    async def _close(self) -> None:
        server, thread = self._server, self._thread
        if server is not None:
            await asyncio.to_thread(server.shutdown)
            server.server_close()
            if thread is not None:
                await asyncio.to_thread(thread.join, 5.0)
        if not self._owns_registry:
            self.registry.unregister(self._collector)
