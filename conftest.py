"""Collection without every extra: a module that needs a missing optional package is skipped.

The suite runs whole with ``pip install -e ".[dev]"``. With only the core and the test
tools installed (from the sdist, say), a test module or a docstring-example module
that imports a missing integration (``tensorboard``, ``prometheus_client``, ``mlflow``...)
is reported as skipped, naming the package, instead of failing collection. A missing
module that is not one of the optional integrations still fails collection.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import Any

import pytest

# import names of the packages behind the extras in pyproject.toml, and the test tools of [dev]
OPTIONAL = frozenset({
    "google", "matplotlib", "mkdocs", "mlflow", "numpy", "opentelemetry", "pandas", "prometheus_client",
    "psutil", "pynvml", "ray", "requests", "rich", "starlette", "tensorboard", "torch", "torchrl",
    "tqdm", "uvicorn", "wandb",
})

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
