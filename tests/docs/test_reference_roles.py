"""The API reference reads as Markdown: no raw reStructuredText roles on the built site.

mkdocstrings renders docstrings as Markdown, so ``:class:`~monitor_async.Sink``` shows up
verbatim on the reference page. Docstrings cross-reference with ``[Sink][monitor_async.Sink]``
(resolved by the docs build, which ``--strict`` fails on when a target is unknown) or plain
backticks.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings")

ROOT = Path(__file__).resolve().parents[2]
ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc):")


def test_the_built_reference_shows_no_restructuredtext_roles(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pages = sorted(site.rglob("*.html"))
    reference = [p for p in pages if p.parent.name == "reference"]
    assert reference, "the docs build made no reference page"
    found = [
        f"{page.relative_to(site)}: ...{text[max(0, m.start() - 60):m.end() + 40]}..."
        for page in reference
        for text in [page.read_text(encoding="utf-8")]
        for m in ROLE.finditer(text)
    ]
    assert not found, f"{len(found)} raw roles on the reference page:\n" + "\n".join(found[:20])
