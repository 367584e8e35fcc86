"""The benchmark suite's entry point: ``python -m benchmarks [--quick] [--only NAME,...]``.

Every scenario runs in a fresh interpreter (``python -m benchmarks --child
NAME``), so one scenario's threads, imports (torch), heap and garbage never
weigh on the next one's figures. Each prints ours, TorchRL's figure (when
torchrl is importable) and the ratio; the full run writes the table, the
machine, the command and its own output to ``benchmarks/RESULTS.md``.
``--quick`` runs every scenario with small sizes in under a minute, for CI:
no figure is asserted anywhere.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import importlib.metadata
import inspect
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._common import Row, has_torchrl

__all__ = ["SCENARIOS", "main"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
MARK = "BENCH-ROWS "
HISTORY = "## History and probes"
"""The heading in RESULTS.md under which earlier measurements are kept by hand; a run keeps it."""


@dataclass(frozen=True)
class Scenario:
    """One scenario: the module and function that measure it, with full and quick sizes."""

    module: str
    function: str
    full: dict[str, Any]
    quick: dict[str, Any]

    def load(self) -> Callable[..., list[Row]]:
        module = importlib.import_module(f"benchmarks.{self.module}")
        fn: Callable[..., list[Row]] = getattr(module, self.function)
        return fn

    def doc(self) -> str:
        """The scenario module's docstring: how it is measured."""
        module = importlib.import_module(f"benchmarks.{self.module}")
        return inspect.cleandoc(module.__doc__ or "")


SCENARIOS: dict[str, Scenario] = {
    "core": Scenario("bench_core", "run", {}, {"steps": 200, "repeat": 2}),
    "files": Scenario("bench_sinks", "run", {}, {"steps": 60, "torchrl_steps": 15, "repeat": 1}),
    "slow_sink": Scenario("bench_cadence", "run_slow_sink", {}, {"seconds": 1.0}),
    "hung_target": Scenario("bench_cadence", "run_hung_target", {}, {"seconds": 1.0}),
    "slow_io": Scenario("bench_cadence", "run_slow_io", {}, {"targets": 50, "seconds": 1.5}),
    "trainer": Scenario("bench_trainer", "run", {}, {"seconds": 1.0, "repeat": 1}),
    "scale": Scenario("bench_scale", "run", {}, {"targets": 2000, "warmup": 1.0, "seconds": 2.0}),
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
}


# ------------------------------------------------------------------ formatting
def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "/s":
        return f"{value:,.0f}/s"
    value = round(value, 3) + 0.0  # no "-0.000"
    if unit == "MB":
        return f"{value:.3f} MB"
    if unit == "us":
        return f"{value:,.1f} us" if abs(value) < 100 else f"{value:,.0f} us"
    if unit == "records":
        return f"{value:,.0f}"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:.3f}"


def fmt_goal(row: Row) -> str:
    if row.goal is None:
        return "reported"
    kind, value = row.goal
    if kind == "floor":
        over = row.over_floor
        now = "" if over is None else f" (now {over:.2f}x)"
        return f"<= {value:g}x floor {fmt(row.floor, row.unit)}{now}"
    unit = " MB" if row.unit == "MB" else ""
    return {"ratio": f"ratio >= {value:g}", "min": f">= {value:g}", "max": f"<= {value:g}"}.get(
        kind, f"< {value:g}{unit}"
    )


def fmt_met(row: Row) -> str:
    met = row.met
    return "-" if met is None else ("yes" if met else "**no**")


def line(row: Row) -> str:
    ratio = "" if row.ratio is None else f"  ratio {row.ratio:.2f}x"
    return (
        f"  {row.measure}: {row.who} {fmt(row.ours, row.unit)}  TorchRL {fmt(row.torchrl, row.unit)}{ratio}"
        f"  [goal {fmt_goal(row)}: {fmt_met(row).strip('*')}]"
    )


def table(rows: Sequence[Row]) -> str:
    out = [
        "| scenario | measure | ours | TorchRL | ratio | goal | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = "" if row.ratio is None else f"{row.ratio:.2f}x"
        out.append(
            f"| {row.scenario} | {row.measure} | {fmt(row.ours, row.unit)} | {fmt(row.torchrl, row.unit)} "
            f"| {ratio} | {fmt_goal(row)} | {fmt_met(row)} |"
        )
    return "\n".join(out)


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


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
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
def run_child(name: str, quick: bool, baseline: bool) -> int:
    """In the child interpreter: runs one scenario and prints its rows as one JSON line."""
    scenario = SCENARIOS[name]
    kwargs = dict(scenario.quick if quick else scenario.full)
    rows = scenario.load()(baseline=baseline, **kwargs)
    print(MARK + json.dumps([row.as_json() for row in rows]), flush=True)
    return 0


def run_scenario(name: str, quick: bool, baseline: bool, timeout: float) -> tuple[list[Row], str]:
    """Runs one scenario in a fresh interpreter; returns its rows and, if it failed, why."""
    command = [sys.executable, "-m", "benchmarks", "--child", name]
    if quick:
        command.append("--quick")
    if not baseline:
        command.append("--no-torchrl")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], f"timed out after {timeout:g} s"
    for text in reversed(done.stdout.splitlines()):
        if text.startswith(MARK):
            return [Row.from_json(data) for data in json.loads(text[len(MARK):])], ""
    tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
    return [], f"exit status {done.returncode}\n{tail}"


def write_results(
    path: Path, rows: Sequence[Row], log: Sequence[str], command: str, started: dt.datetime, seconds: float,
    info: dict[str, str], names: Sequence[str],
) -> None:
    modules = dict.fromkeys(SCENARIOS[name].module for name in names)
    methods = "\n\n".join(
        f"### {module}.py\n\n{next(SCENARIOS[n].doc() for n in names if SCENARIOS[n].module == module)}"
        for module in modules
    )
    notes = "\n".join(f"- {row.scenario}, {row.measure}: {row.note}" for row in rows if row.note)
    machine_lines = "\n".join(f"- {key}: {value}" for key, value in info.items())
    met = [row.met for row in rows if row.met is not None]
    summary = f"{sum(met)} of {len(met)} goals met." if met else "No goals checked."
    text = f"""# Benchmark results

Written by the benchmark suite itself; do not edit by hand.

- Command: `{command}` (run from the repository root)
- Date: {started.strftime("%Y-%m-%d %H:%M %Z").strip()}, {seconds:.0f} s in all
{machine_lines}

Ours is monitor-async; TorchRL is `torchrl.record.loggers.monitoring.LoggerMonitor` with its
own loggers, driving the same target classes in the same run on the same machine. Ratio is
ours / TorchRL. A goal against a floor (`<= 1.2x floor ...`) holds ours to a multiple of the
same work done the plain way with no monitor, measured in the same run (see each scenario).
Every scenario ran in a fresh interpreter. {summary}

{table(rows)}

## Notes on the figures

{notes}

## How each scenario is measured

{methods}

## Output of the run

```
{chr(10).join(log)}
```
"""
    # measurement history and one-off probes, written by hand below this heading, are kept
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    at = old.find(HISTORY)
    if at >= 0:
        text += "\n" + old[at:]
    path.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="monitor-async benchmarks, side by side with TorchRL's LoggerMonitor.",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, under a minute in all (CI smoke run)")
    parser.add_argument("--only", default="", help=f"comma-separated scenarios among: {', '.join(SCENARIOS)}")
    parser.add_argument("--no-torchrl", action="store_true", help="skip the TorchRL baseline")
    parser.add_argument(
        "--output", type=Path, default=None,
        help="where to write the results (default: benchmarks/RESULTS.md for a full run, nothing for --quick)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one scenario may take")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    baseline = not args.no_torchrl
    if args.child:
        return run_child(args.child, args.quick, baseline)

    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose among {', '.join(SCENARIOS)}")
    output = args.output if args.output is not None else (None if args.quick or args.only else RESULTS)
    command = shlex.join(["python", "-m", "benchmarks", *(argv if argv is not None else sys.argv[1:])])
    started_at = dt.datetime.now(dt.UTC).astimezone()
    started = time.perf_counter()
    info = machine()
    log = [f"monitor-async benchmarks ({'quick' if args.quick else 'full'}), {command}"]
    log += [f"{key}: {value}" for key, value in info.items()]
    for text in log:
        print(text, flush=True)
    rows: list[Row] = []
    failed = False
    for name in names:
        begun = time.perf_counter()
        got, error = run_scenario(name, args.quick, baseline, args.timeout)
        header = f"[{name}] {got[0].scenario if got else ''} ({time.perf_counter() - begun:.1f} s)"
        lines = [header, *(line(row) for row in got)]
        if error:
            failed = True
            lines.append(f"  FAILED: {error}")
        for text in lines:
            print(text, flush=True)
        log += lines
        rows += got
    seconds = time.perf_counter() - started
    met = [row.met for row in rows if row.met is not None]
    log.append(f"{sum(met)} of {len(met)} goals met; {seconds:.0f} s in all")
    print(log[-1], flush=True)
    if output is not None:
        write_results(output, rows, log, command, started_at, seconds, info, names)
        print(f"wrote {output}", flush=True)
    return 1 if failed else 0
