"""The SummaryWriter drop-in against torch's own writer: the same calls, the same runs, tags, steps and values.

Both writers' event files are read back with TensorBoard's EventAccumulator
([the guarantee](docs/guarantees.md#a-summarywriter-script-keeps-its-runs-integrationstest_summarywriterpy)).
"""

from __future__ import annotations

import csv
import math
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("tyro")
import torch
from torch.utils.tensorboard import SummaryWriter as TorchWriter

from monitor_async import Alert, ConfigError, SyncMonitor
from monitor_async.backends import CSVSink, MemorySink
from monitor_async.integrations.tensorboard import SummaryWriter
from tests.support.sinks import HungThreadSink
from tests.support.tensorboard import TORCH, only_run, others, ppo_script, run_script, scalars, steps
from tests.support.wandb_runs import transaction_log


def both(tmp_path: Path, calls: Callable[[Any], None]) -> tuple[Path, Path]:
    """Makes the same ``calls`` on our writer and on torch's, each closed after; their two log dirs."""
    ours, theirs = tmp_path / "ours", tmp_path / "torch"
    for cls, folder in ((SummaryWriter, ours), (TorchWriter, theirs)):
        writer = cls(str(folder))
        calls(writer)
        writer.close()
    return ours, theirs


@pytest.mark.timeout(900)  # two training runs in child processes: minutes on a loaded machine
def test_cleanrl_ppo_with_only_the_import_changed_writes_torchs_runs(tmp_path: Path) -> None:
    args = ["--total-timesteps", "2048", "--seed", "3"]
    (tmp_path / "ours").mkdir()
    (tmp_path / "torch").mkdir()
    output = run_script(ppo_script(tmp_path / "ours"), args)
    assert not [t for t in output.splitlines() if "SummaryWriter" in t or "fail" in t or "dropp" in t], output
    run_script(ppo_script(tmp_path / "torch", TORCH), args)
    ours, theirs = only_run(tmp_path / "ours"), only_run(tmp_path / "torch")

    mine, torchs = steps(ours), steps(theirs)
    assert set(mine) == set(torchs)
    assert {tag for _, tag in mine} >= {"losses/value_loss", "losses/policy_loss", "charts/learning_rate", "charts/SPS"}
    for key in mine:
        assert [s for s, _ in mine[key]] == [s for s, _ in torchs[key]], key
        if key[1] != "charts/SPS":  # seeded and deterministic: the same values; SPS is a speed
            assert [v for _, v in mine[key]] == pytest.approx([v for _, v in torchs[key]], rel=1e-6), key
    assert others(ours) == others(theirs)  # the hyperparameters text
    assert ("losses/value_loss" in {tag for _, tag in mine}) and len(mine[(".", "losses/value_loss")]) == 4


def test_scalars_of_every_kind_give_torchs_tags_steps_values_and_wall_times(tmp_path: Path) -> None:
    def calls(writer: Any) -> None:
        for i in range(5):
            writer.add_scalar("charts/episodic_return", 1.5 * i, i, walltime=1000.0 + i)
            writer.add_scalar("loss", np.float32(i), np.int64(10 * i), walltime=2000.0 + i)
            writer.add_scalar("a tag with spaces/and more/levels", torch.tensor([[float(i)]]), torch.tensor(i))
            writer.add_scalar("/leading", i, i)
            writer.add_scalar("trailing/", True, i)

    ours, theirs = both(tmp_path, calls)
    assert steps(ours) == steps(theirs)
    assert ("." , "a tag with spaces/and more/levels") in steps(ours)
    wall = {key: [w for _, _, w in events] for key, events in scalars(ours).items()}
    assert wall[(".", "charts/episodic_return")] == [1000.0 + i for i in range(5)]
    assert wall[(".", "loss")] == [2000.0 + i for i in range(5)]


def test_non_finite_values_stay_in_the_event_file_and_fire_the_alert(tmp_path: Path) -> None:
    def calls(writer: Any) -> None:
        writer.add_scalar("losses/value_loss", 0.5, 0)
        writer.add_scalar("losses/value_loss", float("nan"), 1)
        writer.add_scalar("losses/value_loss", np.float64("inf"), 2)
        writer.add_scalar("losses/value_loss", 0.25, 3)

    ours, theirs = both(tmp_path, calls)
    mine, torchs = steps(ours)[(".", "losses/value_loss")], steps(theirs)[(".", "losses/value_loss")]
    assert [s for s, _ in mine] == [s for s, _ in torchs] == [0, 1, 2, 3]
    assert math.isnan(mine[1][1]) and mine[2][1] == math.inf and mine[3][1] == 0.25

    writer = SummaryWriter(str(tmp_path / "alerted"), alerts=[Alert.nonfinite("losses/*")])
    writer.add_scalar("losses/value_loss", float("nan"), 7)
    writer.flush()
    firing = writer.monitor.firing()
    assert [(e.metric, e.rule) for e in firing] == [("losses/value_loss", "nonfinite losses/*")]
    assert writer.monitor.stats()["values_dropped"] == 1.0
    writer.close()


def test_a_value_torch_refuses_is_refused_the_same_way_and_loses_nothing_else(tmp_path: Path) -> None:
    bad: list[tuple[Any, Any]] = [("x", "abc"), ("x", None), ("x", [1.0]), ("x", torch.ones(2)), (3, 1.0)]
    mine, torchs = SummaryWriter(str(tmp_path / "ours")), TorchWriter(str(tmp_path / "torch"))
    for tag, value in bad:
        with pytest.raises(Exception) as theirs:
            torchs.add_scalar(tag, value, 0)
        with pytest.raises(type(theirs.value)):
            mine.add_scalar(tag, value, 0)
    mine.add_scalar("x", 1.0, 1)
    mine.close()
    torchs.close()
    assert steps(tmp_path / "ours") == {(".", "x"): [(1, 1.0)]}


def test_a_tensorboardx_script_keeps_its_tags_and_steps(tmp_path: Path) -> None:
    import tensorboardX

    for cls, folder in ((SummaryWriter, tmp_path / "ours"), (tensorboardX.SummaryWriter, tmp_path / "tbx")):
        with cls(logdir=str(folder)) as writer:
            for i in range(4):
                writer.add_scalar("rewards/episode_reward", np.float64(2.0 * i), i, display_name="reward")
                writer.add_scalar("fps", 100 + i, i)
    assert steps(tmp_path / "ours") == steps(tmp_path / "tbx")


def test_a_scalar_without_step_takes_the_next_step_of_its_tag(tmp_path: Path) -> None:
    with SummaryWriter(str(tmp_path)) as writer:
        for i in range(3):
            writer.add_scalar("charts/a", float(i))
        writer.add_scalar("charts/b", 9.0)
    assert steps(tmp_path) == {(".", "charts/a"): [(0, 0.0), (1, 1.0), (2, 2.0)], (".", "charts/b"): [(0, 9.0)]}


def test_add_scalars_text_hparams_histogram_and_images_give_torchs_runs(tmp_path: Path) -> None:
    image = np.zeros((3, 8, 8), dtype=np.float32)

    def calls(writer: Any) -> None:
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n|lr|0.1|")
        for i in range(3):
            writer.add_scalars("run", {"x": float(i), "y": 2.0 * i}, i)
            writer.add_histogram("weights", np.arange(10.0) * i, i)
        writer.add_image("frame", image, 2)
        writer.add_hparams({"lr": 0.1, "env": "CartPole-v1"}, {"hparam/return": 100.0}, run_name="hp")

    ours, theirs = both(tmp_path, calls)
    assert steps(ours) == steps(theirs)
    assert {("run_x", "run"), ("run_y", "run"), ("hp", "hparam/return")} <= set(steps(ours))
    assert others(ours) == others(theirs)
    assert (".", "histograms", "weights") in others(ours)


def test_every_value_also_reaches_the_sinks_given(tmp_path: Path) -> None:
    table = tmp_path / "metrics.csv"
    with SummaryWriter(str(tmp_path / "tb"), sinks=[CSVSink(table)]) as writer:
        for i in range(3):
            writer.add_scalar("charts/episodic_return", 10.0 * i, 100 * i)
        writer.add_scalar("loss", 0.5, 7)
        writer.add_scalars("run", {"x": 1.0}, 4)
        writer.add_histogram("weights", torch.arange(5.0), 9)
    rows = list(csv.DictReader(table.open()))
    got = {(r["metric"], int(r["step"]), float(r["value"])) for r in rows}
    # a histogram is a distribution: the CSV gets its summary, the event file the histogram alone
    assert {("weights/count", 9, 5.0), ("weights/mean", 9, 2.0), ("weights/max", 9, 4.0)} <= got
    got = {row for row in got if not row[0].startswith("weights/")}
    assert got == {
        ("charts/episodic_return", 0, 0.0), ("charts/episodic_return", 100, 10.0),
        ("charts/episodic_return", 200, 20.0), ("loss", 7, 0.5), ("run/x", 4, 1.0),
    }
    # add_scalars' values are in their own runs, as torch writes them, not also in the main one
    assert set(steps(tmp_path / "tb")) == {(".", "charts/episodic_return"), (".", "loss"), ("run_x", "run")}
    assert others(tmp_path / "tb") == {(".", "histograms", "weights"): [9]}


def test_a_hung_sink_holds_up_neither_the_script_nor_the_event_file(tmp_path: Path) -> None:
    hung = HungThreadSink()
    writer = SummaryWriter(str(tmp_path), sinks=[hung])
    writer.add_scalar("charts/sps", 0.0, 0)
    assert hung.entered.wait(30)
    for i in range(1, 1000):  # each returns while the sink's write hangs
        writer.add_scalar("charts/sps", float(i), i)
    hung.release.set()
    writer.close()
    assert [s for s, _ in steps(tmp_path)[(".", "charts/sps")]] == list(range(1000))


def test_an_existing_monitor_gets_the_pushes(tmp_path: Path) -> None:
    sink = MemorySink()
    with SyncMonitor(sink) as monitor:
        writer = SummaryWriter(str(tmp_path), monitor=monitor)
        writer.add_scalar("charts/sps", 1000.0, 5)
        writer.close()
        with pytest.raises(ConfigError, match="monitor="):
            SummaryWriter(str(tmp_path), monitor=monitor, sinks=[MemorySink()])
    assert [(r.name, r.step, r.metrics) for r in sink.records] == [("charts", 5, {"charts/sps": 1000.0})]


def test_no_log_dir_makes_torchs_folder_and_close_writes_everything(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    before = time.strftime("%b%d_%H-%M")
    writer = SummaryWriter(comment="-ppo")
    assert writer.get_logdir() == writer.log_dir
    run = Path(writer.log_dir)
    assert run.parent == Path("runs") and run.name.endswith(f"_{socket.gethostname()}-ppo")
    assert run.name.startswith(before) or run.name.startswith(time.strftime("%b%d_%H-%M"))
    for i in range(8192):  # a burst of the writer's whole sink queue, at once: close() writes it all
        writer.add_scalar("losses/loss", float(i), i)
    writer.close()
    assert [s for s, _ in steps(run)[(".", "losses/loss")]] == list(range(8192))
    with pytest.raises(ValueError, match="closed"):  # not a value silently lost
        writer.add_scalar("losses/loss", 1.0, 9000)
    writer.close()  # idempotent


def test_purge_step_hides_the_earlier_runs_later_events_as_torchs_does(tmp_path: Path) -> None:
    for cls, folder in ((SummaryWriter, tmp_path / "ours"), (TorchWriter, tmp_path / "torch")):
        first = cls(str(folder))
        for i in range(10):
            first.add_scalar("loss", float(i), i)
        first.close()
        time.sleep(1.1)  # a restart: the new event files are named after a later second
        again = cls(str(folder), purge_step=5)
        for i in range(5, 8):
            again.add_scalar("loss", 100.0 + i, i)
        again.close()
    assert steps(tmp_path / "ours") == steps(tmp_path / "torch")
    assert [s for s, _ in steps(tmp_path / "ours")[(".", "loss")]] == [0, 1, 2, 3, 4, 5, 6, 7]


def test_a_key_of_empty_name_is_the_push_name_itself() -> None:
    sink = MemorySink()
    with SyncMonitor(sink) as monitor:
        monitor.log("loss", {"": 0.5}, step=3, time=1234.5)
    assert [(r.name, r.step, r.time, r.metrics) for r in sink.records] == [("loss", 3, 1234.5, {"loss": 0.5})]


WANDB_SCRIPT = """
import sys

import torch  # a torch script: the real writer is torch's
import wandb

if sys.argv[1] == "ours":
    from monitor_async.integrations.tensorboard import SummaryWriter
else:
    from torch.utils.tensorboard import SummaryWriter

run = wandb.init(project="summarywriter", sync_tensorboard=True)
writer = SummaryWriter("runs/ppo")
for i in range(20):
    writer.add_scalar("charts/episodic_return", float(i), 10 * i)
    writer.add_scalar("losses/value_loss", 1.0 / (i + 1), 10 * i)
writer.close()
run.finish()
"""


@pytest.mark.timeout(600)
def test_wandb_sync_tensorboard_reads_our_event_files_as_torchs(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    rows = {}
    for which in ("ours", "torch"):
        folder = tmp_path / which
        folder.mkdir()
        script = folder / "train.py"
        script.write_text(WANDB_SCRIPT)
        run_script(script, [which], env={"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(folder)})
        [run_dir] = (folder / "wandb").glob("offline-run-*")
        history = [r["history"]["item"] for r in transaction_log(run_dir) if r["type"] == "history"]
        rows[which] = [{k: v for k, v in row.items() if not k.startswith("_")} for row in history]
    assert len(rows["ours"]) == 20
    assert rows["ours"] == rows["torch"]
    assert rows["ours"][3] == {"global_step": 30, "charts/episodic_return": 3, "losses/value_loss": 0.25}
