"""The source distribution ships whole: what its own test suite, docs and examples need.

A user who downloads the sdist (or a distributor who tests it) runs ``pytest`` in the
unpacked folder: the tests' helpers and fixtures, the docs the docs tests run, the
examples and benchmarks the tests start as subprocesses, and the LICENSE must be there.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("build")

ROOT = Path(__file__).resolve().parents[2]


def _shipped(directory: str) -> set[str]:
    """Every file under ``directory`` of the source tree, as a path relative to the root."""
    return {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / directory).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in {".pyc", ".pyo"}
    }


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist, and the wheel built from it, as ``python -m build`` makes them."""
    # from a copy without build leftovers: an old *.egg-info's file list would be shipped again
    tree = tmp_path_factory.mktemp("tree") / "monitor-async"
    junk = shutil.ignore_patterns(".git", "*.egg-info", "build", "dist", "site", "runs", "__pycache__", "*.py[co]",
                                  ".venv", ".hypothesis", ".mypy_cache", ".ruff_cache", ".pytest_cache", "wandb")
    shutil.copytree(ROOT, tree, symlinks=True, ignore=junk)
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(tree)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def sdist_files(dist: Path) -> set[str]:
    (archive,) = dist.glob("monitor_async-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    # every member sits under the one top folder, monitor_async-<version>/
    return {name.split("/", 1)[1] for name in names}


def test_the_wheel_carries_every_module_and_the_license(dist: Path) -> None:
    (wheel,) = dist.glob("monitor_async-*.whl")
    with zipfile.ZipFile(wheel) as zipped:
        names = set(zipped.namelist())
    modules = {m for m in _shipped("monitor_async") if m.endswith(".py") and not m.startswith("monitor_async/backends/")}
    modules |= {"monitor_async/" + m for m in _shipped("backends") if m.endswith(".py")}
    assert modules <= names, f"left out of the wheel (a package missing in pyproject.toml?): {sorted(modules - names)}"
    assert "monitor_async/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_sdist_carries_the_tests_helpers_and_fixtures(sdist_files: set[str]) -> None:
    for helper in ("conftest.py", "tests/conftest.py", "tests/support/__init__.py", "tests/support/targets.py",
                   "tests/support/network.py", "tests/support/rank_worker.py", "tests/support/mlflow_server.py"):
        assert helper in sdist_files
    assert _shipped("tests") <= sdist_files, sorted(_shipped("tests") - sdist_files)


def test_sdist_carries_docs_examples_benchmarks_and_license(sdist_files: set[str]) -> None:
    for name in ("LICENSE", "README.md", "mkdocs.yml", "pyproject.toml"):
        assert name in sdist_files
    for directory in ("docs", "examples", "benchmarks", "backends", "monitor_async/_core"):
        assert _shipped(directory) <= sdist_files, sorted(_shipped(directory) - sdist_files)


def test_sdist_imports_the_sinks_as_monitor_async_backends(sdist_files: set[str]) -> None:
    # in the unpacked sdist, ``monitor_async.backends`` imports from the folder itself, as in a clone
    for module in ("__init__.py", "_csv.py", "_delivery/__init__.py"):
        assert f"monitor_async/backends/{module}" in sdist_files
        assert f"backends/{module}" in sdist_files


def test_docs_install_from_the_repository_until_an_index_serves_the_package() -> None:
    # ``pip install monitor-async`` (or ``"monitor-async[extra]"``) asks an index that has no such package
    from_index = re.compile(r"""pip install\s+["']?monitor-async(\[[\w,]+\])?["']?(?![\w\[\-"'])(?!\s*@)""")
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in pages
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if from_index.search(line)
    ]
    assert not found, "install from a clone or the git URL instead:\n" + "\n".join(found)


def test_a_module_needing_a_missing_extra_is_skipped_and_any_other_import_error_fails(tmp_path: Path) -> None:
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "0"\n[project.optional-dependencies]\nfancy = ["fancy-exporter-xyz>=1"]\n'
    )
    (tmp_path / "test_fancy.py").write_text("import fancy_exporter_xyz\n\ndef test_x():\n    pass\n")
    (tmp_path / "test_typo.py").write_text("import not_an_extra_xyz\n\ndef test_y():\n    pass\n")
    (tmp_path / "test_plain.py").write_text("def test_z():\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-rsE", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2, done.stdout
    assert "needs fancy_exporter_xyz" in done.stdout
    errors = re.findall(r"^ERROR (\S+)", done.stdout, re.M)
    assert [Path(e).name for e in errors] == ["test_typo.py"], done.stdout
    assert "test_plain.py::test_z" in done.stdout
