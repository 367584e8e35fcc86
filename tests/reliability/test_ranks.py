"""A malformed rank variable never raises; it is skipped and warned once, saying what the process takes.

Holds "Malformed rank variables": docs/guarantees.md#malformed-rank-variables-test_rankspy
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from monitor_async import Monitor
from monitor_async.backends import CSVSink
from monitor_async.distributed import world


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"RANK": "--1", "WORLD_SIZE": "2"}, "RANK='--1'"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "--0"}, "LOCAL_RANK='--0'"),
        ({"RANK": "²", "WORLD_SIZE": "2"}, "RANK='²'"),
        ({"RANK": "abc", "WORLD_SIZE": "4"}, "RANK='abc'"),
    ],
)
def test_a_malformed_rank_variable_is_skipped_and_warned_once(
    variables: dict[str, str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    with caplog.at_level(logging.WARNING, logger="monitor_async"):
        found = world()
        world()
        Monitor(CSVSink(tmp_path / "m.csv"))
    warnings = [r.getMessage() for r in caplog.records if named in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert "opens every sink" in warnings[0]
    assert f"rank {found.rank} of {found.world_size}" in warnings[0]
