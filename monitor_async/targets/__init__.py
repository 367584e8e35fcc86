"""Built-in targets: objects with a ``stats()`` worth watching."""

from __future__ import annotations

__all__: list[str] = []
