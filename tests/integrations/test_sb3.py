"""Stable-Baselines3's PPO on CartPole with MonitorCallback: the model watched, SB3's own values in real files."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path
from typing import Any

import pytest

from monitor_async import Monitor, SyncMonitor
from monitor_async.backends import CSVSink, JSONLSink, MemorySink

pytest.importorskip("stable_baselines3")
from stable_baselines3 import PPO

from monitor_async.integrations.sb3 import MonitorCallback


def ppo() -> Any:
    return PPO("MlpPolicy", "CartPole-v1", n_steps=512, batch_size=128, n_epochs=2, seed=0, device="cpu")


def test_ppo_on_cartpole_in_two_lines_writes_the_model_and_sb3s_values(tmp_path: Path) -> None:
    jsonl, table = tmp_path / "run.jsonl", tmp_path / "run.csv"
    model = ppo()
    with SyncMonitor([JSONLSink(jsonl), CSVSink(table)], poll_interval=0.05) as monitor:
        model.learn(2048, callback=MonitorCallback(monitor))

    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    keys = {key for line in lines for key in line["metrics"]}
    # every value SB3's own logger records, under SB3's own keys, at SB3's step (num_timesteps)
    for key in ("rollout/ep_rew_mean", "rollout/ep_len_mean", "time/fps", "time/iterations", "train/loss",
                "train/value_loss", "train/entropy_loss", "train/learning_rate"):
        assert key in keys
    losses = [line for line in lines if "train/loss" in line["metrics"]]
    assert len(losses) == 3  # one train phase per rollout after the first: 4 rollouts of 512 steps
    assert all(line["step"] in (1024, 1536, 2048) for line in losses)
    # the model, polled from the monitor's thread while it trained
    watched = [line for line in lines if line["name"] == "sb3"]
    assert len(watched) >= 2
    last = watched[-1]["metrics"]
    assert last["sb3/timesteps"] == model.num_timesteps == watched[-1]["step"] == 2048
    assert last["sb3/episodes"] > 0 and last["sb3/fps"] > 0
    infos = list(model.ep_info_buffer)
    assert last["sb3/ep_rew_mean"] == pytest.approx(sum(i["r"] for i in infos) / len(infos))
    assert any("sb3/timesteps_per_second" in line["metrics"] for line in watched)
    # the CSV file has the same values
    with table.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {"rollout/ep_rew_mean", "train/loss", "sb3/timesteps"} <= {row["metric"] for row in rows}
    # the writer is taken off SB3's logger when learn() ends
    assert not any(type(f).__name__ == "MonitorWriter" for f in model.logger.output_formats)


def test_with_an_async_monitor_learn_runs_off_its_loop() -> None:
    sink = MemorySink()
    model = ppo()

    async def main() -> None:
        async with Monitor(sink, poll_interval=0.05) as monitor:
            callback = MonitorCallback(monitor)
            await asyncio.to_thread(model.learn, 1024, callback=callback)

    asyncio.run(main())
    names = {r.name for r in sink.records}
    assert {"sb3", "rollout", "time", "train"} <= names
    assert max(r.metrics["sb3/timesteps"] for r in sink.records if r.name == "sb3") == 1024


def test_the_writer_keeps_scalars_under_sb3s_sections_and_leaves_the_rest_out() -> None:
    import numpy as np
    from stable_baselines3.common.logger import HParam

    from monitor_async.integrations.sb3 import MonitorWriter

    sink = MemorySink()
    monitor = SyncMonitor(sink, background=False)
    MonitorWriter(monitor).write(
        {"rollout/ep_rew_mean": np.float32(21.5), "n": 3, "text": "x", "done": True,
         "hparams": HParam({"lr": 1e-3}, {"rollout/ep_rew_mean": 0})},
        {}, 512,
    )
    monitor.step()
    monitor.close()
    got = {(r.name, r.step): r.metrics for r in sink.records}
    assert got == {("rollout", 512): {"rollout/ep_rew_mean": 21.5}, ("sb3_logger", 512): {"sb3_logger/n": 3.0}}
