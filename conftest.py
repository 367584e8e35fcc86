"""Collection without every extra: a module that needs a missing optional package is skipped.

The suite runs whole with ``pip install -e ".[dev]"``. With only the core and the test
tools installed (from the sdist, say), a test module or a docstring-example module
that imports a missing integration (``tensorboard``, ``prometheus_client``, ``mlflow``...)
is reported as skipped, naming the package, instead of failing collection. A missing
module that is not one of the optional integrations still fails collection.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest


def _optional() -> frozenset[str]:
    """Import names of the packages behind pyproject.toml's extras (``[dev]`` included)."""
    with (Path(__file__).parent / "pyproject.toml").open("rb") as file:
        extras = tomllib.load(file)["project"]["optional-dependencies"]
    names = set()
    for requirement in (r for group in extras.values() for r in group):
        distribution = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()
        if distribution != "monitor-async":  # [dev] names the other extras through the project itself
            names |= {distribution.replace("-", "_"), distribution.split("-")[0]}
    # what those packages pull in or are imported as, under other names; AgileRL has a venv of its own in CI
    return frozenset(names | {"agilerl", "google", "peft", "pynvml", "requests", "tensordict", "torch"})


OPTIONAL = _optional()

_MISSING = re.compile(r"No module named '([\w.]+)'")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    report = yield
    if report.failed:
        missing = {name.split(".")[0] for name in _MISSING.findall(str(report.longrepr))}
        if missing and missing <= OPTIONAL:
            report.outcome = "skipped"
            report.longrepr = (str(collector.path), 0, f"Skipped: needs {', '.join(sorted(missing))}")
    return report
