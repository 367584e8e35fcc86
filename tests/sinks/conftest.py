"""Fixtures the sink tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.network import Receiver


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """A real HTTP receiver on 127.0.0.1, one per test module."""
    server = Receiver()
    yield server
    server.stop()
