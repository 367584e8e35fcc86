"""The delivery policy of network sinks: which failures are worth another try, and when to try.

`classify` reads an exception (a connection refused, a timeout, a
reply with a status); `Backoff` (from ``monitor_async._core.backoff``) says how long
to wait before the next try. `ResilientSink` (``_resilient.py``)
applies both.
"""

from __future__ import annotations

import errno
import math
import re
import socket
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from monitor_async._core import DeliveryError
from monitor_async._core.backoff import Backoff
from monitor_async._core.secrets import redact

__all__ = ["Backoff", "Failure", "classify", "failed", "not_the_answer", "parse_retry_after", "text_of"]

_NOT_SENT = frozenset({"NewConnectionError", "ConnectTimeout", "ConnectTimeoutError", "NameResolutionError"})
_MAYBE_SENT = frozenset({
    "ReadTimeout", "ReadTimeoutError", "Timeout", "RemoteDisconnected", "ProtocolError",
    "ChunkedEncodingError", "IncompleteRead", "ConnectionError",
})
_UNREACHABLE = frozenset({
    errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN,
})


@dataclass(frozen=True)
class Failure:
    """What a failed delivery means, as `classify` reads an exception.

    Attributes:
        retry: try again later (no reply, a timeout, 408, 429, 5xx); else the batch is refused.
        sent: the request may have reached the server although its reply was lost.
        status: the reply's HTTP status, or ``None`` when there was no reply.
        retry_after: seconds the server asked to wait, or ``None``.
        message: one line naming what failed (the status and the server's own message).
    """

    retry: bool
    sent: bool
    status: int | None
    retry_after: float | None
    message: str


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date); ``None`` if absent or bad.

    Examples:
        >>> parse_retry_after("3"), parse_retry_after(None), parse_retry_after("soon")
        (3.0, None, None)
    """
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        return max(0.0, when.timestamp() - time.time())
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps (causes, contexts, ``reason``, exception arguments), breadth first."""
    todo: list[BaseException] = [exc]
    seen: set[int] = set()
    while todo and len(seen) < 32:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for inner in (current.__cause__, current.__context__, getattr(current, "reason", None), *current.args):
            if isinstance(inner, BaseException):
                todo.append(inner)


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _http_failure(exc: BaseException) -> Failure | None:
    """A reply with a status: ``urllib``'s ``HTTPError`` or an exception carrying a ``response`` (requests)."""
    headers: Any
    if isinstance(exc, urllib.error.HTTPError):
        status: Any = exc.code
        headers = exc.headers
        try:
            body = exc.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            body = ""
    else:
        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None)
        headers = getattr(response, "headers", None)
        body = str(getattr(response, "text", "") or "")
    if not isinstance(status, int):
        return None
    wait = parse_retry_after(headers.get("Retry-After") if headers is not None else None)
    message = f"HTTP {status}" + (f": {_one_line(redact(body))}" if body.strip() else "")
    return Failure(DeliveryError(message, status=status).retryable, False, status, wait, message)


def classify(exc: BaseException) -> Failure:
    """Reads a delivery exception: is it worth trying again, and may the server have the batch already?

    - `DeliveryError`: as it says (``retryable``, ``sent``, ``status``).
    - A reply with a status (``urllib.error.HTTPError``, an exception with a
      ``response``): retried on 408, 429 and 5xx, honouring ``Retry-After``.
    - No connection (refused, unreachable, a connect timeout, DNS): retried;
      the server cannot have the batch.
    - A connection lost after sending, or a read timeout: retried; the
      server may have the batch (``sent``), so the retry may duplicate it.
    - Anything else (a bug, a refusal, a bad value): not retried.

    Examples:
        >>> classify(ConnectionRefusedError(111, "Connection refused")).retry
        True
        >>> classify(ValueError("bad")).retry
        False
    """
    for inner in _chain(exc):
        if isinstance(inner, DeliveryError):
            return Failure(inner.retryable, inner.sent, inner.status, inner.retry_after, text_of(inner))
    for inner in _chain(exc):
        failure = _http_failure(inner)
        if failure is not None:
            return failure
    causes = list(_chain(exc))
    for inner in causes:
        if (
            isinstance(inner, (ConnectionRefusedError, socket.gaierror))
            or _names(inner) & _NOT_SENT
            or (type(inner) is OSError and inner.errno in _UNREACHABLE)
        ):
            return Failure(True, False, None, None, f"no connection: {_reason(causes)}")
    for inner in causes:
        if isinstance(inner, (TimeoutError, ConnectionError)) or _names(inner) & _MAYBE_SENT:
            return Failure(True, True, None, None, f"no reply: {_reason(causes)}")
    return Failure(False, False, None, None, _one_line(f"{type(exc).__name__}: {text_of(exc)}"))


def not_the_answer(what: str, status: int, body: bytes) -> DeliveryError:
    """The error for a reply whose body is not the server's answer (a proxy's HTML page): worth another try.

    Args:
        what: the request, naming the server (``"MLflow runs/log-batch at http://..."``).
        status: the reply's status (often 200: the proxy answered, not the server).
        body: the reply's body; its first bytes are quoted.

    Examples:
        >>> str(not_the_answer("MLflow runs/log-batch", 200, b"<html><body>Sign in</body></html>"))
        "MLflow runs/log-batch: HTTP 200 whose body is not the server's answer (a proxy's page?): '<html><body>Sign in</body></html>'"
    """
    text = _one_line(redact(body[:200].decode("utf-8", "replace")), 120) if body else ""
    return DeliveryError(
        redact(f"{what}: HTTP {status} whose body is not the server's answer (a proxy's page?): {text!r}"),
        status=status, retryable=True,
    )


def failed(what: str, exc: BaseException) -> DeliveryError:
    """The error for a request to ``what`` that got no reply: `classify`'s reading of ``exc``, its text redacted.

    Raise it ``from None``: the HTTP libraries' errors show the URL, credentials
    and all; what the sink decides with (``retryable``, ``sent``) is kept.

    Examples:
        >>> error = failed("OTLP endpoint http://***@collector:4318", ConnectionRefusedError(111, "Connection refused"))
        >>> str(error), error.retryable, error.__cause__
        ('OTLP endpoint http://***@collector:4318: no connection: [Errno 111] Connection refused', True, None)
    """
    failure = classify(exc)
    return DeliveryError(
        redact(f"{what}: {failure.message}"), status=failure.status, retry_after=failure.retry_after,
        retryable=failure.retry, sent=failure.sent,
    )


def text_of(exc: BaseException) -> str:
    """``str(exc)`` with secrets redacted, or a stand-in when even that raises: reporting must never fail."""
    try:
        return redact(str(exc))
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        return "(its message could not be read)"


_ERRNO = re.compile(r"\[Errno -?\d+\] [^\"'()\]\[]+")


def _reason(causes: list[BaseException]) -> str:
    """The gist of a connection failure: the system's words (``[Errno 111] Connection refused``) when given."""
    for inner in causes:
        if isinstance(inner, OSError) and inner.errno is not None and inner.strerror:
            return f"[Errno {inner.errno}] {inner.strerror}"
    for inner in causes:
        found = _ERRNO.search(text_of(inner))
        if found:
            return found.group(0).strip()
    for inner in causes:
        if isinstance(inner, TimeoutError) or "Timeout" in _names(inner):
            return "timed out"
    return _one_line(f"{type(causes[-1]).__name__}: {text_of(causes[-1])}", 160)
