"""Scenarios: the SummaryWriter drop-in against torch's and tensorboardX's writers.

17. ``SummaryWriter.add_scalar("charts/episodic_return", value, step)`` on the
caller's thread: ours (event files in a temporary folder), torch's
``torch.utils.tensorboard.SummaryWriter`` and ``tensorboardX.SummaryWriter``,
in the same run, each timed over bursts of calls with a short sleep between
bursts (a training step), as scenario 13 times ``log()``; the figure is the
median over the bursts. After the run every value we were given must be in
the event file, read back with TensorBoard's EventAccumulator.

18. CleanRL's ``ppo.py`` (``examples/cleanrl_ppo.py``) on CartPole-v1 as its
users run it, ``python ppo.py --total-timesteps N``, with torch's writer, with
ours writing only the TensorBoard files (the import changed), and with ours
writing TensorBoard + CSV with ``Alert.defaults()``. Each is a fresh process
timed from start to exit; the three run by turns, ``rounds`` times, each
variant first in one round, and the figure is the median of the per-round
ratios ours / torch's; the process's CPU time (user + system) is reported
beside it, which a shared machine's load moves far less. Long (minutes):
not in a run of the whole suite, only with ``--only cleanrl``.
"""

from __future__ import annotations

import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.tensorboard import TORCH, only_run, ppo_script, run_script, steps

from ._common import Row, quiet
from .bench_push import _per_call

__all__ = ["run", "run_cleanrl"]

SCENARIO = "17. SummaryWriter.add_scalar on the caller's thread"
CLEANRL = "18. CleanRL ppo.py on CartPole-v1, wall time of the run"
TAG = "charts/episodic_return"

WITH_SINKS = '''\
"""CleanRL's writer line, with a CSV sink and the default alerts (the guide's second step)."""
from monitor_async import Alert
from monitor_async.backends import CSVSink
from monitor_async.integrations.tensorboard import SummaryWriter as _Writer


class SummaryWriter(_Writer):
    def __init__(self, log_dir, **kwargs):
        super().__init__(log_dir, sinks=[CSVSink(f"{log_dir}/metrics.csv")], alerts=Alert.defaults(), **kwargs)
'''


def _writer_cost(cls: Any, bursts: int, size: int) -> tuple[float, int]:
    """Median seconds per ``add_scalar``, and how many values the event file holds after ``close()``."""
    folder = tempfile.mkdtemp()
    writer = cls(folder)
    try:
        seconds = _per_call(lambda i: writer.add_scalar(TAG, 0.5 * i, i), bursts, size, 0.03)
    finally:
        writer.close()
    written = len(steps(folder).get((".", TAG), []))
    return seconds, written


def run(*, bursts: int = 40, size: int = 500, peer_bursts: int = 20, peer_size: int = 100, baseline: bool = True) -> list[Row]:
    """Ours per call (goal <= 1.5 us), every value written, and ours against torch's and tensorboardX's (goal >= 20x)."""
    quiet()
    import tensorboardX
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    from monitor_async.integrations.tensorboard import SummaryWriter

    ours, written = _writer_cost(SummaryWriter, bursts, size)
    torchs, _ = _writer_cost(TorchWriter, peer_bursts, peer_size)
    tbx, _ = _writer_cost(tensorboardX.SummaryWriter, peer_bursts, peer_size)
    return [
        Row(SCENARIO, "ours: add_scalar at the caller, us a call (goal: <= 1.5 us)", ours * 1e6, unit="us",
            goal=("max", 1.5)),
        Row(SCENARIO, "values in the event file / values added", written / (bursts * size), unit="share",
            goal=("min", 1.0), extra={"added": float(bursts * size), "written": float(written)}),
        Row(SCENARIO, "peer: torch.utils.tensorboard add_scalar, us a call", torchs * 1e6, unit="us", who="peer"),
        Row(SCENARIO, "peer: tensorboardX add_scalar, us a call", tbx * 1e6, unit="us", who="peer"),
        Row(SCENARIO, "ours vs torch's writer, calls/s (goal: >= 20x)", 1 / ours, torchrl=1 / torchs,
            goal=("ratio", 20.0)),
        Row(SCENARIO, "ours vs tensorboardX's writer, calls/s (goal: >= 20x)", 1 / ours, torchrl=1 / tbx,
            goal=("ratio", 20.0)),
    ]


def _timed(script: Path, args: list[str]) -> tuple[float, float]:
    """The run's wall time and its CPU time (user + system, the child's), in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    run_script(script, args, timeout=1800)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_cleanrl(*, total_timesteps: int = 50_000, rounds: int = 3, baseline: bool = True) -> list[Row]:
    """Wall time of ppo.py with torch's writer and with ours (TensorBoard; TensorBoard + CSV + alerts)."""
    quiet()
    root = Path(tempfile.mkdtemp())
    args = ["--total-timesteps", str(total_timesteps), "--seed", "1"]
    variants = {"torch": TORCH, "ours": None, "ours_sinks": "from cleanrl_writer import SummaryWriter\n"}
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants)
    for turn in range(rounds):
        for name in order[turn % 3:] + order[:turn % 3]:  # each variant first in a round in turn
            line = variants[name]
            folder = root / f"{name}-{turn}"
            folder.mkdir()
            if name == "ours_sinks":
                (folder / "cleanrl_writer.py").write_text(WITH_SINKS)
            script = ppo_script(folder, line) if line is not None else ppo_script(folder)
            wall, used = _timed(script, args)
            times[name].append(wall)
            cpu[name].append(used)
            if name == "ours_sinks":
                assert (only_run(folder) / "metrics.csv").stat().st_size > 0
    torch_s = statistics.median(times["torch"])
    rows = [Row(CLEANRL, f"torch's writer, s ({total_timesteps:,} steps)", torch_s, unit="s", who="peer",
                extra={f"round{i}": t for i, t in enumerate(times["torch"])})]
    for name, label in (("ours", "ours, TensorBoard only"), ("ours_sinks", "ours, TensorBoard + CSV + Alert.defaults()")):
        ratios = [mine / theirs for mine, theirs in zip(times[name], times["torch"], strict=True)]
        rows.append(Row(
            CLEANRL, f"{label}: wall time / torch's (goal: <= 1.02)", statistics.median(ratios), unit="share",
            goal=("max", 1.02),
            extra={"seconds": statistics.median(times[name]), **{f"round{i}": t for i, t in enumerate(times[name])}},
            note="per-round wall times, torch's then ours: " + ", ".join(
                f"{theirs:.0f}/{mine:.0f} s" for theirs, mine in zip(times["torch"], times[name], strict=True)
            ),
        ))
        cpu_ratios = [mine / theirs for mine, theirs in zip(cpu[name], cpu["torch"], strict=True)]
        rows.append(Row(CLEANRL, f"{label}: CPU time / torch's (reported)", statistics.median(cpu_ratios),
                        unit="share", extra={"seconds": statistics.median(cpu[name])}))
    rows.append(Row(CLEANRL, "load average during the run", os.getloadavg()[0], unit="share"))
    return rows
