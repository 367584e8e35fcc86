"""EpisodeStats: episode returns and lengths as a watchable target."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from .._core.checks import number
from .._core.values import read_value

__all__ = ["RECENT", "EpisodeStats"]

RECENT = 10_000
"""The most episodes finished between two polls kept for the ``returns`` and ``lengths`` distributions (the latest)."""


class EpisodeStats:
    """A target whose ``stats()`` reports finished episodes: counts, and returns and lengths over the last ones.

    Fed by ``wrap(env)``, ``record_info(info)`` or ``record(return, length)``,
    which may be mixed; the keys are in [Gymnasium episodes](integrations/gymnasium.md).
    Beside them, ``returns`` and ``lengths`` are the episodes finished since the
    last ``stats()`` call (the latest ``RECENT``), which a monitor summarises as
    [distributions](distributions.md) (``returns/p50``...).

    Args:
        window: how many of the latest episodes the returns and lengths are
            taken over (default 100, as SB3's `ep_rew_mean`).

    Raises:
        ConfigError: ``window`` is not a positive int.

    Examples:
        >>> stats = EpisodeStats(window=2)
        >>> stats.record(10.0, 10); stats.record(20.0, 20); stats.record(30.0, 30)
        >>> s = stats.stats()
        >>> s["episodes"], s["steps"], s["return/mean"], s["length/min"]
        (3.0, 60.0, 25.0, 20.0)
    """

    def __init__(self, window: int = 100) -> None:
        number("EpisodeStats", "window", window, integer=True)
        self.window = window
        self._lock = threading.Lock()
        self._returns: deque[float] = deque(maxlen=window)
        self._lengths: deque[int] = deque(maxlen=window)
        self._recent_returns: deque[float] = deque(maxlen=RECENT)  # since the last stats()
        self._recent_lengths: deque[int] = deque(maxlen=RECENT)
        self._episodes = 0
        self._steps = 0

    @property
    def watch_options(self) -> dict[str, Any]:
        """``monitor.watch(stats, **stats.watch_options)``: rates of ``episodes`` and ``steps``."""
        return {"rate_keys": ("episodes", "steps")}

    def record(self, episode_return: float, length: int, *, steps: bool = True) -> None:
        """Counts one finished episode.

        Args:
            episode_return: the sum of the episode's rewards.
            length: the episode's number of steps.
            steps: add ``length`` to ``steps`` (``False`` when they were counted one by one, as ``wrap`` does).

        Raises:
            ValueError: ``episode_return`` is not finite or ``length`` not a non-negative integer.
        """
        value = read_value(episode_return)
        if value is None or value - value != 0.0:
            raise ValueError(f"EpisodeStats.record: episode_return must be finite, got {episode_return!r}")
        n = int(length)
        if n != length or n < 0:
            raise ValueError(f"EpisodeStats.record: length must be a non-negative integer, got {length!r}")
        with self._lock:
            self._returns.append(value)
            self._lengths.append(n)
            self._recent_returns.append(value)
            self._recent_lengths.append(n)
            self._episodes += 1
            if steps:
                self._steps += n

    def count_steps(self, n: int = 1) -> None:
        """Adds ``n`` environment steps to ``steps`` (``wrap`` calls it at each step)."""
        with self._lock:
            self._steps += n

    def record_info(self, info: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> int:
        """Records the episodes an env's ``info`` reports finished; returns how many.

        Args:
            info: an ``info`` with ``info["episode"] = {"r": ..., "l": ...}`` (one
                env, or a vector env's arrays with ``info["_episode"]``), or a list of them (SB3).
        """
        if not isinstance(info, Mapping):
            return sum(self.record_info(one) for one in info)
        episode = info.get("episode")
        if not isinstance(episode, Mapping):
            return 0
        returns, lengths = episode["r"], episode["l"]
        mask = info.get("_episode")
        if mask is None:
            self.record(_one(returns), int(_one(lengths)))
            return 1
        done = 0
        for finished, r, n in zip(mask, returns, lengths, strict=False):
            if finished:
                self.record(float(r), int(n))
                done += 1
        return done

    def wrap(self, env: Any) -> Any:
        """``env`` (a `gymnasium.Env`) wrapped so that its steps and episodes are counted here (the ``[gymnasium]`` extra).

        Args:
            env: a `gymnasium.Env`.

        Returns:
            A `gymnasium.Wrapper` around ``env``.
        """
        return _wrapper_class()(env, self)

    def stats(self) -> dict[str, Any]:
        """The counters and, once an episode finished, returns and lengths over the last ``window``, and
        ``returns`` and ``lengths``: the lists of the episodes finished since the last call (maybe empty)."""
        with self._lock:
            returns = list(self._returns)
            lengths = list(self._lengths)
            out: dict[str, Any] = {"episodes": float(self._episodes), "steps": float(self._steps)}
            if returns:
                out["returns"] = list(self._recent_returns)
                out["lengths"] = [float(n) for n in self._recent_lengths]
                self._recent_returns.clear()
                self._recent_lengths.clear()
        if returns:
            out["return/mean"] = sum(returns) / len(returns)
            out["return/min"] = min(returns)
            out["return/max"] = max(returns)
            out["return/last"] = returns[-1]
            out["length/mean"] = sum(lengths) / len(lengths)
            out["length/min"] = float(min(lengths))
            out["length/max"] = float(max(lengths))
        return out


def _one(value: Any) -> float:
    """A plain float from a number or a one-element array (``ValueError`` otherwise)."""
    number = read_value(value)
    if number is None:
        raise ValueError(f"EpisodeStats.record_info: expected a number in info['episode'], got {value!r}")
    return number


_WRAPPER: list[type] = []


def _wrapper_class() -> type:
    """The Gymnasium wrapper class, made on first use (gymnasium is imported only then)."""
    if _WRAPPER:
        return _WRAPPER[0]
    try:
        import gymnasium
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "EpisodeStats.wrap needs gymnasium: pip install gymnasium (or the extra: monitor-async[gymnasium])"
        ) from exc

    class EpisodeStatsWrapper(gymnasium.Wrapper):  # type: ignore[type-arg, unused-ignore]
        """Counts each step and each finished episode of the env into an `EpisodeStats`."""

        def __init__(self, env: Any, stats: EpisodeStats) -> None:
            super().__init__(env)
            self.episode_stats = stats
            self._return = 0.0
            self._length = 0

        def reset(self, **kwargs: Any) -> Any:
            self._return = 0.0
            self._length = 0
            return self.env.reset(**kwargs)

        def step(self, action: Any) -> Any:
            obs, reward, terminated, truncated, info = self.env.step(action)
            self._return += float(reward)
            self._length += 1
            self.episode_stats.count_steps()
            if terminated or truncated:
                self.episode_stats.record(self._return, self._length, steps=False)
                self._return = 0.0
                self._length = 0
            return obs, reward, terminated, truncated, info

    _WRAPPER.append(EpisodeStatsWrapper)
    return EpisodeStatsWrapper
