"""HTTP on 127.0.0.1: a real receiver that records what it gets and answers as a test tells it, a free port,
a Prometheus scrape, and `PostSink`, the smallest network sink a user could write on the public ``ResilientSink``.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from monitor_async import Record
from monitor_async.backends import ResilientSink

Samples = dict[tuple[str, str | None], float]
"""Scraped values by ``(sample name, its watch label)``."""

DROP = "drop"
"""A reply that never comes: the server reads the request, keeps it, and closes the connection."""

Reply = tuple[int, dict[str, str], bytes] | str
"""``(status, headers, body)``, or :data:`DROP`."""


@dataclass
class Request:
    """One request the receiver got: when, where to, with which headers and body."""

    at: float
    path: str
    headers: dict[str, str]
    """Lower-case names."""
    body: bytes
    status: int | None = None
    """The status it was answered with; ``None`` for a dropped reply."""


class Receiver:
    """An HTTP server on 127.0.0.1 in a thread; ``stop()`` makes its port refuse connections, ``start()`` reopens it.

    ``reply(n, request)`` decides the answer to the n-th request (0-based,
    counted across restarts); by default every request gets ``200 {}``.
    Every request is recorded in :attr:`requests` before it is answered,
    also the ones answered with an error or dropped.
    """

    def __init__(self, content_type: str = "application/json") -> None:
        self.requests: list[Request] = []
        self.reply: Callable[[int, Request], Reply] = lambda n, request: (200, {}, b"{}")
        self.content_type = content_type
        self.lock = threading.Lock()
        self.port = 0
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                request = Request(time.monotonic(), self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length))
                with receiver.lock:
                    n = len(receiver.requests)
                    receiver.requests.append(request)
                answer = receiver.reply(n, request)
                if answer == DROP:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, headers, body = answer
                request.status = status
                self.send_response(status)
                self.send_header("Content-Type", headers.pop("Content-Type", receiver.content_type))
                self.send_header("Content-Length", str(len(body)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        http.server.ThreadingHTTPServer.allow_reuse_address = True
        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def ensure_started(self) -> None:
        """Starts the server again when a test stopped it (to play a tracker that is down)."""
        if self._server is None:
            self.start()

    def stop(self) -> None:
        """Closes the listening socket: new connections are refused until :meth:`start`."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def answered(self, *statuses: int) -> list[Request]:
        """The requests answered with one of ``statuses`` (default: 200), in arrival order."""
        wanted = statuses or (200,)
        with self.lock:
            return [r for r in self.requests if r.status in wanted]


class PostSink(ResilientSink):
    """POSTs each batch as JSON (``{"destination", "records"}``) with urllib; what a user would write."""

    def __init__(self, url: str, *, timeout: float = 5.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.url = url
        self.timeout = timeout

    def send_blocking(self, records: Sequence[Record], destination: str | None) -> None:
        body = json.dumps({
            "destination": destination,
            "records": [{"name": r.name, "step": r.step, "time": r.time, "metrics": r.metrics} for r in records],
        }).encode()
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            response.read()


def steps(receiver: Receiver, name: str, *statuses: int) -> list[int]:
    """The steps of watch ``name``, in arrival order, in the requests answered with ``statuses`` (default 200)."""
    return [
        r["step"] for request in receiver.answered(*statuses)
        for r in json.loads(request.body)["records"] if r["name"] == name
    ]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse_metrics(text: str) -> Samples:
    """Prometheus' text format, read with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, sample.labels.get("watch")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(url: str) -> Samples:
    """GETs ``url`` as Prometheus does (following a redirect) and parses the answer; blocks the caller."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return parse_metrics(response.read().decode())
