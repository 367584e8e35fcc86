"""EpisodeStats with real Gymnasium envs, SB3's DummyVecEnv and TorchRL's GymWrapper."""

from __future__ import annotations

import pytest

from monitor_async import SyncMonitor
from monitor_async.backends import MemorySink
from monitor_async.targets import EpisodeStats
from tests.support.checks import wait_until_sync

gym = pytest.importorskip("gymnasium")


def random_steps(env: object, n: int, seed: int = 0) -> None:
    """``n`` random steps of a Gymnasium env, resetting after each episode."""
    env.reset(seed=seed)  # type: ignore[attr-defined]
    env.action_space.seed(seed)  # type: ignore[attr-defined]
    for _ in range(n):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())  # type: ignore[attr-defined]
        if terminated or truncated:
            env.reset()  # type: ignore[attr-defined]


def test_a_wrapped_cartpole_reports_what_gymnasiums_own_statistics_record() -> None:
    stats = EpisodeStats(window=20)
    reference = gym.wrappers.RecordEpisodeStatistics(stats.wrap(gym.make("CartPole-v1")), buffer_length=20)
    random_steps(reference, 1000)

    s = stats.stats()
    assert s["steps"] == 1000.0
    assert s["episodes"] == float(reference.episode_count) > 20
    returns, lengths = list(reference.return_queue), list(reference.length_queue)
    assert s["return/mean"] == pytest.approx(sum(returns) / len(returns))
    assert (s["return/min"], s["return/max"], s["return/last"]) == (min(returns), max(returns), returns[-1])
    assert s["length/mean"] == pytest.approx(sum(lengths) / len(lengths))
    assert (s["length/min"], s["length/max"]) == (min(lengths), max(lengths))


def test_the_monitor_polls_from_its_thread_while_the_env_steps() -> None:
    stats = EpisodeStats()
    env = stats.wrap(gym.make("CartPole-v1"))
    sink = MemorySink()
    monitor = SyncMonitor(sink, poll_interval=0.005)
    monitor.watch(stats, name="episodes", **stats.watch_options)
    with monitor:
        random_steps(env, 3000)
        # a loaded machine may starve the monitor's thread while the env steps: three background records
        # (the second on has rates) before the stop, whatever the load
        wait_until_sync(lambda: sum(r.name == "episodes" for r in sink.records) >= 3, what="three polls")
    records = [r for r in sink.records if r.name == "episodes"]
    assert len(records) >= 2
    steps = [r.metrics["episodes/steps"] for r in records]
    assert steps == sorted(steps) and steps[-1] == 3000.0  # counters only go up; the last poll saw them all
    assert records[-1].metrics["episodes/episodes"] == stats.stats()["episodes"]
    assert any("episodes/steps_per_second" in r.metrics for r in records)


def test_record_info_reads_gymnasiums_vector_statistics() -> None:
    envs = gym.wrappers.vector.RecordEpisodeStatistics(gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3))
    stats = EpisodeStats(window=1000)
    envs.reset(seed=1)
    envs.action_space.seed(1)
    for _ in range(300):
        *_, info = envs.step(envs.action_space.sample())
        stats.record_info(info)
    assert stats.stats()["episodes"] == float(envs.episode_count) > 0
    assert stats.stats()["return/mean"] == pytest.approx(sum(envs.return_queue) / len(envs.return_queue))


def test_record_checks_its_input() -> None:
    stats = EpisodeStats()
    with pytest.raises(ValueError, match="finite"):
        stats.record(float("nan"), 3)
    with pytest.raises(ValueError, match="non-negative integer"):
        stats.record(1.0, 2.5)
    with pytest.raises(ValueError, match="window"):
        EpisodeStats(window=0)
    assert stats.stats() == {"episodes": 0.0, "steps": 0.0}


def test_sb3_dummy_vec_env_of_wrapped_envs_and_its_infos_agree() -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.monitor import Monitor as SB3Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    wrapped = EpisodeStats(window=1000)
    from_infos = EpisodeStats(window=1000)
    # one EpisodeStats counts every env of the vector env; SB3's Monitor writes info["episode"]
    venv = DummyVecEnv([lambda: SB3Monitor(wrapped.wrap(gym.make("CartPole-v1")))] * 4)
    venv.seed(3)
    venv.reset()
    for _ in range(250):
        _, _, _, infos = venv.step([venv.action_space.sample() for _ in range(4)])
        from_infos.record_info(infos)
    a, b = wrapped.stats(), from_infos.stats()
    assert a["steps"] == 1000.0
    assert a["episodes"] == b["episodes"] > 0
    assert a["return/mean"] == pytest.approx(b["return/mean"])


def test_torchrl_gym_wrapper_over_a_wrapped_env() -> None:
    pytest.importorskip("torchrl")
    from torchrl.envs import GymWrapper

    stats = EpisodeStats()
    env = GymWrapper(stats.wrap(gym.make("CartPole-v1")))
    env.set_seed(0)
    env.rollout(400, break_when_any_done=False)
    s = stats.stats()
    assert s["steps"] == 400.0
    assert s["episodes"] > 0 and s["length/max"] <= 500
