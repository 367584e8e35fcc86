"""Secrets in URLs and headers, the one place they are hidden from everything printed; endpoints checked.

A network sink gives `keep_secret` its URL and headers when it is built; from then on
`redact` shows the user-info of any URL, its query values, and every secret kept, as ``***``,
in messages, exception texts and (through `redact_logs`) the log records of the HTTP
libraries it drives. The real values still go to those libraries. What it promises:
[Secrets never printed](guarantees.md#secrets-never-printed-test_secretspy).
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from .checks import refuse

__all__ = ["HTTP_URL", "MASK", "check_headers", "check_http_url", "keep_secret", "redact", "redact_logs", "redact_url"]

MASK = "***"
_SHORTEST = 4  # shorter values would hide digits and words in every message; they are hidden in URLs only
_USERINFO = re.compile(r"(?<=://)[^/\s?#@'\"<>]*@")
_QUERY = re.compile(r"([?&][^=&?#\s'\"<>]+=)[^&#\s'\"<>]+")

_lock = threading.Lock()
_kept: set[str] = set()
_kept_paths: set[str] = set()  # a URL's path, hidden only where it stands whole after a host
_pattern: re.Pattern[str] | None = None
_filtered: set[str] = set()


def redact_url(url: str, *, path: bool = False) -> str:
    """``url`` with its user-info and each query value shown as ``***`` (its path too, with ``path=True``).

    Examples:
        >>> redact_url("http://alice:pw@host:5000/v1/metrics?token=abc&tenant=x")
        'http://***@host:5000/v1/metrics?token=***&tenant=***'
        >>> redact_url("https://hooks.slack.com/services/T0/B0/XYZ", path=True)
        'https://hooks.slack.com/***'
    """
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL at all: only what the patterns find
        return redact(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
    shown_path = f"/{MASK}" if path and parts.path.strip("/") else parts.path
    query = _QUERY.sub(rf"\1{MASK}", f"?{parts.query}")[1:] if parts.query else ""
    return redact(urlunsplit((parts.scheme, netloc, shown_path, query, parts.fragment)))


def _variants(value: str) -> set[str]:
    return {value, unquote(value), unquote(value.replace("+", " "))}


def _of_url(url: str, path: bool) -> set[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return set()
    found: set[str] = set()
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        found |= _variants(userinfo)
        if parts.password:
            found |= _variants(parts.password)
            user = unquote(parts.username or "")
            found.add(base64.b64encode(f"{user}:{unquote(parts.password)}".encode()).decode())
    for _, value in parse_qsl(parts.query, keep_blank_values=True):
        found |= _variants(value)
    return found


_PATH_AT = r"(?<!/){}(?![\w%~-])"  # "/hook" in "host:80/hook?x" or "host/hook.", not in "//hooks.example"


def _of_path(url: str) -> set[str]:
    try:
        path = urlsplit(url).path
    except ValueError:
        return set()
    return {path} if path.strip("/") and len(path) >= _SHORTEST else set()


def _of_header(value: str) -> set[str]:
    found = {value.strip()}
    credentials = value.strip().partition(" ")[2]
    if credentials:  # "Bearer <token>": the token alone may be printed too
        found.add(credentials.strip())
    return found


def keep_secret(
    url: str | None = None, *, headers: Mapping[str, str] | None = None, values: Iterable[str | None] = (),
    path: bool = False,
) -> None:
    """Adds the secrets of ``url`` (user-info, query values; its path too with ``path=True``), every header
    value and ``values`` to what `redact` hides, for the life of the process.

    Values of fewer than 4 characters are hidden only where they stand in a URL.
    """
    found: set[str] = set()
    paths: set[str] = set()
    if url:
        found |= _of_url(url, path)
        if path:
            paths = _of_path(url)
    for value in (headers or {}).values():
        if isinstance(value, str):
            found |= _of_header(value)
    found |= {value for value in values if isinstance(value, str)}
    found = {value for value in found if len(value) >= _SHORTEST and value != MASK}
    global _pattern
    with _lock:
        if found <= _kept and paths <= _kept_paths:
            return
        _kept.update(found)
        _kept_paths.update(paths)
        # longest first: a secret that contains another is hidden whole
        alternatives = [re.escape(v) for v in sorted(_kept, key=len, reverse=True)]
        alternatives += [_PATH_AT.format(re.escape(v)) for v in sorted(_kept_paths, key=len, reverse=True)]
        _pattern = re.compile("|".join(alternatives))


def redact(text: str) -> str:
    """``text`` with the user-info and query values of URLs in it, and every kept secret, shown as ``***``.

    Examples:
        >>> redact("POST http://bob:hunter2@collector:4318/v1/metrics?key=abc failed")
        'POST http://***@collector:4318/v1/metrics?key=*** failed'
    """
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    if "@" in text:
        text = _USERINFO.sub(f"{MASK}@", text)
    if "=" in text:
        text = _QUERY.sub(rf"\1{MASK}", text)
    return text


class _Redacting(logging.Filter):
    """Rewrites a record whose message (or traceback) shows a secret; never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is the handler's to report
            return True
        clean = redact(text)
        if clean != text:
            record.msg, record.args = clean, None
        if record.exc_info is not None and record.exc_info[0] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


_FILTER = _Redacting()


def redact_logs(*prefixes: str) -> None:
    """Puts the redacting filter on every logger named ``prefix`` or below it (the libraries a sink drives).

    A filter only sees the records of the logger it is on, so each existing
    logger under a prefix gets it; call it once the library is imported.
    """
    manager = logging.root.manager
    with _lock:
        names = [
            name for name in list(manager.loggerDict)
            if name not in _filtered and any(name == p or name.startswith(p + ".") for p in prefixes)
        ]
        names += [p for p in prefixes if p not in _filtered and p not in names]
        _filtered.update(names)
    for name in names:
        logging.getLogger(name).addFilter(_FILTER)


HTTP_URL = "an http(s) URL with a host and a port in 1..65535"
"""What `check_http_url` allows, in the words of its message."""


def check_http_url(owner: str, option: str, value: Any, *, also: str = "", path: bool = False) -> str:
    """``value`` if it is an ``http(s)`` URL with a host and a port in 1..65535 (when one is given).

    Else a [ConfigError][monitor_async.ConfigError] naming ``owner`` and ``option``, the value shown
    redacted (its path too, with ``path=True``); ``also`` adds to what the message allows.

    Examples:
        >>> try:
        ...     check_http_url("OTLPSink", "endpoint", "ftp://bob:pw@host/v1/metrics")
        ... except ValueError as exc:
        ...     print(exc)
        OTLPSink: endpoint must be an http(s) URL with a host and a port in 1..65535, got 'ftp://***@host/v1/metrics'
    """
    if isinstance(value, str) and urlsplit(value).scheme.lower() in ("http", "https") and _host_and_port(value):
        return value
    raise refuse(owner, option, HTTP_URL + also, redact_url(value, path=path) if isinstance(value, str) else value)


def _host_and_port(url: str) -> bool:
    """Whether ``url`` names a host, and a port in 1..65535 if any (``urlsplit`` raises on one out of range)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    return bool(parts.hostname) and (port is None or 1 <= port <= 65535)


def check_headers(owner: str, value: Any) -> dict[str, str] | None:
    """``value`` as a dict if it maps strings to strings on one line each (``None`` stays ``None``).

    Else a [ConfigError][monitor_async.ConfigError] naming ``owner``; the values are never shown.
    """
    if value is None:
        return None
    if isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) and not any(c in k + v for c in "\r\n\0")
        for k, v in value.items()
    ):
        return dict(value)
    shown = {k: MASK for k in value} if isinstance(value, Mapping) else type(value).__name__
    raise refuse(owner, "headers", "a mapping of strings to strings without line breaks", shown)
