"""The benchmark suite's entry point: ``python -m benchmarks [--quick] [--only NAME,...] [--write]``.

Every scenario runs in a fresh interpreter (``python -m benchmarks --child
NAME``), so one scenario's threads, imports (torch), heap and garbage never
weigh on the next one's figures. Each prints ours, the peer's figure (when
the peer is importable) and the ratio. ``--write`` puts the run's table and
notes in ``benchmarks/RESULTS.md`` (written by ``benchmarks/report.py``; a full run
also adds one line to its history). ``--quick`` runs every scenario with small sizes in
about a minute, for CI: no figure is asserted anywhere. ``--against DIR``
runs the scenarios for another checkout of the repository and this one by
turns, and prints old against new with the noise between turns.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import importlib
import importlib.metadata
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._common import Row, has_torchrl
from .report import fmt, line, write_results

__all__ = ["SCENARIOS", "main"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
MARK = "BENCH-ROWS "
PACKAGE = "BENCH-PACKAGE "


@dataclass(frozen=True)
class Scenario:
    """One scenario: the module and function that measure it, with full and quick sizes."""

    module: str
    function: str
    full: dict[str, Any]
    quick: dict[str, Any]
    default: bool = True
    """Run by ``python -m benchmarks`` without ``--only``; ``False`` for a long one (minutes), named with ``--only``."""

    def load(self) -> Callable[..., list[Row]]:
        module = importlib.import_module(f"benchmarks.{self.module}")
        fn: Callable[..., list[Row]] = getattr(module, self.function)
        return fn


SCENARIOS: dict[str, Scenario] = {
    "core": Scenario("bench_core", "run", {}, {"steps": 200, "repeat": 2}),
    "files": Scenario("bench_sinks", "run", {}, {"steps": 60, "torchrl_steps": 15, "repeat": 1}),
    "slow_sink": Scenario("bench_cadence", "run_slow_sink", {}, {"seconds": 1.0}),
    "hung_target": Scenario("bench_cadence", "run_hung_target", {}, {"seconds": 1.0}),
    "slow_io": Scenario("bench_cadence", "run_slow_io", {}, {"targets": 50, "seconds": 1.5}),
    "trainer": Scenario("bench_trainer", "run", {}, {"seconds": 1.0, "repeat": 1}),
    "scale": Scenario("bench_scale", "run", {}, {"targets": 2000, "warmup": 1.0, "seconds": 2.0, "rounds": 1}),
    "memory": Scenario("bench_memory", "run", {}, {"warmup": 0.5, "seconds": 1.5}),
    "ray_targets": Scenario(
        "bench_distributed", "run_ray_targets", {}, {"actors": 4, "warmup": 1.0, "seconds": 2.0}
    ),
    "ray_sink": Scenario(
        "bench_distributed", "run_ray_sink", {}, {"processes": 2, "targets": 20, "seconds": 2.0, "capacity_targets": 40}
    ),
    "reduce": Scenario("bench_distributed", "run_reduce", {}, {"ranks": 2, "warmup": 1.0, "seconds": 2.0}),
    "remote": Scenario("bench_remote", "run", {}, {"seconds": 8.0, "outage": 3.0, "targets": 5}),
    "push": Scenario("bench_push", "run", {}, {"bursts": 6, "size": 200, "peer_bursts": 3, "peer_size": 30}),
    "push_rate": Scenario(
        "bench_push", "run_rate", {}, {"rates": (10_000, 100_000), "seconds": 0.3, "goal_seconds": 0.5}
    ),
    "resume_state": Scenario("bench_resume", "run_state", {}, {"watches": 1000, "calls": 10}),
    "resume_readers": Scenario("bench_resume", "run_readers", {}, {"records": 50_000, "repeat": 1}),
    "distributions": Scenario(
        "bench_distributions", "run", {},
        {"rounds": 3, "calls": 50, "pushes": 1000, "warmup": 0.5, "seconds": 1.5},
    ),
    "alerts": Scenario(
        "bench_alerts", "run", {},
        {"trials": 20, "intervals": 200, "targets": 2000, "warmup": 1.0, "seconds": 2.0, "rounds": 1},
    ),
    "summarywriter": Scenario(
        "bench_writer", "run", {}, {"bursts": 6, "size": 200, "peer_bursts": 3, "peer_size": 30}
    ),
    "cleanrl": Scenario("bench_writer", "run_cleanrl", {}, {"total_timesteps": 2048, "rounds": 1}, default=False),
}


# --------------------------------------------------------------------- machine
def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for text in f:
                if text.startswith("model name"):
                    return text.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _commit(root: Path = ROOT) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> dict[str, str]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "CPUs": f"{os.cpu_count()} (nproc {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'})"
        f", {_cpu_model()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "load average at start": ", ".join(f"{x:.2f}" for x in load),
        "monitor-async": f"{_version('monitor-async')} at commit {_commit()}",
        "baseline": f"torchrl {_version('torchrl')}, torch {_version('torch')}"
        + ("" if has_torchrl() else " (not importable: no TorchRL figures)"),
        "libraries": f"anyio {_version('anyio')}, aiofiles {_version('aiofiles')}, tensorboardX {_version('tensorboardX')}",
    }


# ------------------------------------------------------------------------ runs
def run_child(name: str, quick: bool, baseline: bool, settings: dict[str, Any]) -> int:
    """In the child interpreter: runs one scenario and prints its rows as one JSON line."""
    import monitor_async

    print(PACKAGE + os.path.dirname(os.path.abspath(monitor_async.__file__)), flush=True)
    scenario = SCENARIOS[name]
    kwargs = {**(scenario.quick if quick else scenario.full), **settings}
    rows = scenario.load()(baseline=baseline, **kwargs)
    print(MARK + json.dumps([row.as_json() for row in rows]), flush=True)
    return 0


@dataclass(frozen=True)
class Tree:
    """Where a scenario's child runs: its working directory and the ``PYTHONPATH`` in front."""

    cwd: Path
    path: tuple[str, ...]


def run_scenario(
    name: str, quick: bool, baseline: bool, timeout: float, settings: dict[str, Any] | None = None,
    tree: Tree | None = None,
) -> tuple[list[Row], str, str]:
    """Runs one scenario in a fresh interpreter; returns its rows, the package it measured and, if it failed, why."""
    tree = tree or Tree(ROOT, (str(ROOT),))
    command = [sys.executable, "-m", "benchmarks", "--child", name]
    if quick:
        command.append("--quick")
    if not baseline:
        command.append("--no-torchrl")
    for key, value in (settings or {}).items():
        command += ["--set", f"{key}={value!r}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [*tree.path, os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(command, cwd=tree.cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], "", f"timed out after {timeout:g} s"
    package = next((t[len(PACKAGE):] for t in done.stdout.splitlines() if t.startswith(PACKAGE)), "")
    for text in reversed(done.stdout.splitlines()):
        if text.startswith(MARK):
            return [Row.from_json(data) for data in json.loads(text[len(MARK):])], package, ""
    tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
    return [], package, f"exit status {done.returncode}\n{tail}"


# ---------------------------------------------------------------- old and new
def _old_tree(old: Path, stage: Path) -> Tree:
    """This suite's code against the package of the checkout ``old``.

    ``benchmarks`` and the ``tests.support`` modules it uses come from links in ``stage``, ahead of ``old``.
    """
    here = Path(__file__).resolve().parent
    for link, target in ((stage / "benchmarks", here), (stage / "tests" / "support", here.parent / "tests" / "support")):
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target, target_is_directory=True)
    return Tree(stage, (str(stage), str(old)))


def _spread(values: Sequence[float]) -> float | None:
    """The spread of a tree's turns, (max - min) / median; ``None`` with fewer than two."""
    if len(values) < 2:
        return None
    middle = statistics.median(values)
    return (max(values) - min(values)) / abs(middle) if middle else None


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _against_figures(row: Row) -> list[tuple[tuple[str, str], str, float]]:
    """A row's figures in the old-against-new table: ours, and the ratio its goal reads (to TorchRL, to its floor)."""
    out = [((row.scenario, row.measure), row.unit, row.ours)]
    if row.goal is not None and row.goal[0] == "ratio" and row.ratio is not None:
        out.append(((row.scenario, f"{row.measure}: ours / TorchRL (goal >= {row.goal[1]:g})"), "x", row.ratio))
    if row.goal is not None and row.goal[0] == "floor" and row.over_floor is not None:
        out.append(((row.scenario, f"{row.measure}: ours / its floor (goal <= {row.goal[1]:g}x)"), "x", row.over_floor))
    return out


def against(
    old: Path, names: Sequence[str], quick: bool, baseline: bool, timeout: float, turns: int,
    settings: dict[str, dict[str, Any]], json_path: Path | None = None,
) -> tuple[str, bool]:
    """Runs every scenario for the checkout ``old`` and for this tree by turns; returns the table and whether all ran.

    Each turn runs each tree once, the order turning from one turn to the
    next, so both meet the same machine. The old tree runs this suite's
    scenario code on its package; a scenario that cannot import there (it
    needs code this suite has and the old one lacks) runs the old tree's own
    suite instead, marked in the table.
    """
    new_tree = Tree(ROOT, (str(ROOT),))
    figures: dict[tuple[str, str], dict[str, list[float]]] = {}
    units: dict[tuple[str, str], str] = {}
    how: dict[str, str] = {}
    ok = True
    with tempfile.TemporaryDirectory(prefix="monitor-async-against-") as stage:
        old_tree = _old_tree(old, Path(stage))
        own_suite = Tree(old, (str(old),))
        for name in names:
            for turn in range(turns):
                order = [("old", old_tree), ("new", new_tree)]
                for label, tree in order if turn % 2 == 0 else order[::-1]:
                    if label == "old" and how.get(name) == "old suite":
                        tree = own_suite
                    begun = time.perf_counter()
                    rows, package, error = run_scenario(name, quick, baseline, timeout, settings.get(name), tree)
                    if error and label == "old" and tree is old_tree and "Error: No module named" in error:
                        how[name], tree = "old suite", own_suite
                        rows, package, error = run_scenario(name, quick, baseline, timeout, None, tree)
                    expected = Path(old if label == "old" else ROOT).resolve()
                    if package and not Path(package).resolve().is_relative_to(expected):
                        error = error or f"measured {package}, not a package of {expected}"
                        rows = []
                    print(f"[{name}] turn {turn + 1} {label} ({time.perf_counter() - begun:.1f} s)"
                          + (f" FAILED: {error}" if error else ""), flush=True)
                    ok = ok and not error
                    for row in rows:
                        for key, unit, value in _against_figures(row):
                            units[key] = unit
                            figures.setdefault(key, {"old": [], "new": []})[label].append(value)
    out = [
        f"Old: {old} ({_commit(old)}); new: {ROOT} ({_commit(ROOT)}); {turns} turns each, alternating.",
        "Figures are medians of the turns; noise is the spread (max - min) / median between the turns of one tree.",
        "",
        "| scenario | measure | old | new | new/old | noise old | noise new |",
        "|---|---|---|---|---|---|---|",
    ]
    for (scenario, measure), got in figures.items():
        unit = units[(scenario, measure)]
        a = statistics.median(got["old"]) if got["old"] else None
        b = statistics.median(got["new"]) if got["new"] else None
        ratio = f"{b / a:.3f}" if a and b is not None else "n/a"
        out.append(
            f"| {scenario} | {measure} | {fmt(a, unit)} | {fmt(b, unit)} | {ratio} "
            f"| {_pct(_spread(got['old']))} | {_pct(_spread(got['new']))} |"
        )
    if json_path is not None:
        json_path.write_text(json.dumps([
            {"scenario": scenario, "measure": measure, "unit": units[(scenario, measure)], **got}
            for (scenario, measure), got in figures.items()
        ], indent=1), encoding="utf-8")
    marked = [name for name, kind in how.items() if kind == "old suite"]
    if marked:
        out.append(f"\nRun with the old tree's own suite (this suite's code needs what it lacks): {', '.join(marked)}.")
    return "\n".join(out), ok


# ------------------------------------------------------------------------ main
def _settings(items: Sequence[str], names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``--set [SCENARIO.]KEY=VALUE`` as each scenario's keyword arguments (no scenario: every selected one)."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected [SCENARIO.]KEY=VALUE")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        scenario, dot, key = key.rpartition(".")
        if dot and scenario not in SCENARIOS:
            raise ValueError(f"--set {item!r}: unknown scenario {scenario!r}")
        for name in [scenario] if dot else names:
            out.setdefault(name, {})[key] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="monitor-async benchmarks, side by side with TorchRL's LoggerMonitor.",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, about a minute in all (CI smoke run)")
    parser.add_argument("--only", default="", help=f"comma-separated scenarios among: {', '.join(SCENARIOS)}")
    parser.add_argument("--no-torchrl", action="store_true", help="skip the TorchRL baseline")
    parser.add_argument(
        "--set", action="append", default=[], metavar="[SCENARIO.]KEY=VALUE",
        help="a keyword argument of the scenario function, over its sizes (repeatable)",
    )
    parser.add_argument("--write", action="store_true", help="write the run to benchmarks/RESULTS.md")
    parser.add_argument("--output", type=Path, default=None, help="write the run (or --against's table) here")
    parser.add_argument("--json", type=Path, default=None, help="write every row, as JSON, here")
    parser.add_argument(
        "--against", type=Path, default=None, metavar="DIR",
        help="another checkout of the repository: run both by turns and print old against new",
    )
    parser.add_argument("--turns", type=int, default=2, help="turns of each tree with --against (at least 2)")
    parser.add_argument(
        "--check", nargs="?", const="all", default=None, metavar="NAME,...",
        help="run the suite's checks of its own floors and helpers instead of measuring",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one scenario may take")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    baseline = not args.no_torchrl
    if args.check is not None:
        return _run_checks(parser, args.check)
    names = [args.child] if args.child else [n.strip() for n in args.only.split(",") if n.strip()] or [
        name for name, scenario in SCENARIOS.items() if scenario.default
    ]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose among {', '.join(SCENARIOS)}")
    try:
        settings = _settings(args.set, names)
    except ValueError as exc:
        parser.error(str(exc))
    if args.child:
        return run_child(args.child, args.quick, baseline, settings.get(args.child, {}))
    command = shlex.join(["python", "-m", "benchmarks", *(argv if argv is not None else sys.argv[1:])])
    if args.against is not None:
        if args.turns < 2:
            parser.error("--turns: at least 2, to measure the noise")
        if not (args.against / "monitor_async").is_dir():
            parser.error(f"--against {args.against}: not a checkout of monitor-async (no monitor_async/ in it)")
        text, ok = against(
            args.against.resolve(), names, args.quick, baseline, args.timeout, args.turns, settings, args.json
        )
        print(f"\n{command}\n\n{text}", flush=True)
        if args.output is not None:
            args.output.write_text(f"# Old against new\n\n- Command: `{command}`\n\n{text}\n", encoding="utf-8")
            print(f"wrote {args.output}", flush=True)
        return 0 if ok else 1
    output = args.output if args.output is not None else (RESULTS if args.write else None)
    started_at = dt.datetime.now(dt.UTC).astimezone()
    started = time.perf_counter()
    info = machine()
    print(f"monitor-async benchmarks ({'quick' if args.quick else 'full'}), {command}", flush=True)
    for key, value in info.items():
        print(f"{key}: {value}", flush=True)
    rows: list[Row] = []
    keys: list[str] = []  # each row's scenario, as --only names it
    failed = False
    for name in names:
        begun = time.perf_counter()
        got, _, error = run_scenario(name, args.quick, baseline, args.timeout, settings.get(name))
        header = f"[{name}] {got[0].scenario if got else ''} ({time.perf_counter() - begun:.1f} s)"
        lines = [header, *(line(row) for row in got)]
        if error:
            failed = True
            lines.append(f"  FAILED: {error}")
        for text in lines:
            print(text, flush=True)
        rows += got
        keys += [name] * len(got)
    seconds = time.perf_counter() - started
    met = [row.met for row in rows if row.met is not None]
    print(f"{sum(met)} of {len(met)} goals met; {seconds:.0f} s in all", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps([
            {**row.as_json(), "key": key, "ratio": row.ratio, "over_floor": row.over_floor, "met": row.met}
            for key, row in zip(keys, rows, strict=True)
        ], indent=1), encoding="utf-8")
    if output is not None:
        full = not (args.quick or args.only or args.set or failed)
        info = {**info, "commit": _commit(ROOT)}
        long = bool(names) and not any(SCENARIOS[name].default for name in names)
        write_results(output, rows, command, started_at, seconds, info, full, long)
        print(f"wrote {output}", flush=True)
    return 1 if failed else 0


def _run_checks(parser: argparse.ArgumentParser, which: str) -> int:
    from .checks import CHECKS

    names = list(CHECKS) if which == "all" else [n.strip() for n in which.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        parser.error(f"unknown check(s) {', '.join(unknown)}; choose among {', '.join(CHECKS)}")
    failed = 0
    for name in names:
        try:
            CHECKS[name]()
        except AssertionError as exc:
            failed += 1
            print(f"check {name}: FAILED {exc}".rstrip(), flush=True)
        else:
            print(f"check {name}: ok", flush=True)
    return 1 if failed else 0
