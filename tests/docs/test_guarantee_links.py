"""Each reliability test module links the section of docs/guarantees.md it holds, and every such link resolves.

The anchors are the ones the docs build makes from the page's headings (Python-Markdown's ``toc``), so a
renamed heading fails here instead of leaving a dead link in a test module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

markdown = pytest.importorskip("markdown")

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"docs/guarantees\.md#([\w-]+)")


def anchors() -> set[str]:
    html = markdown.markdown((ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8"), extensions=["toc", "attr_list"])
    return set(re.findall(r'<h\d id="([^"]+)"', html))


def test_every_reliability_module_links_its_guarantee() -> None:
    missing = [
        path.name for path in sorted((ROOT / "tests" / "reliability").glob("test_*.py"))
        if not LINK.search(ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "")
    ]
    assert not missing, f"no docs/guarantees.md#... link in the docstring of {missing}"


def test_every_guarantee_link_in_the_tests_resolves() -> None:
    known = anchors()
    dead = [
        f"{path.relative_to(ROOT)}: #{anchor}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for anchor in LINK.findall(path.read_text(encoding="utf-8"))
        if anchor not in known
    ]
    assert not dead, "links to no heading of docs/guarantees.md:\n" + "\n".join(dead)
