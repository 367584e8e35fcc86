"""Names as UTF-8 can carry them: what the text sinks write for a key UTF-8 cannot encode.

A key may hold a lone surrogate: ``b"\\xff".decode("utf-8", "surrogateescape")``
(how Python decodes a byte that is not UTF-8 in a file name or an
environment variable) gives ``"\\udcff"``, which no UTF-8 file, protobuf or
HTTP page can hold. The sinks whose format cannot carry it write it escaped,
``\\udcff`` as six characters, and count it; every other value of the batch
is written as usual. NUL and every other code point are valid UTF-8 and
pass unchanged.
"""

from __future__ import annotations

__all__ = ["escape"]


def escape(text: str) -> str | None:
    """``text`` with each lone surrogate written as a backslash escape; ``None`` when UTF-8 encodes it as it is.

    Args:
        text: a metric key or a watch name.

    Returns:
        The escaped text, or ``None`` when nothing needed escaping (the common
        case, checked without building a new string).

    Examples:
        >>> escape(b"gpu\\xff".decode("utf-8", "surrogateescape"))
        'gpu\\\\udcff'
        >>> escape("caf\\u00e9/nul\\0ok") is None
        True
    """
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return None
