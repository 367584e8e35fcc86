"""SystemStats: host, process and GPU figures as a watchable target."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

try:
    import psutil
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "monitor_async.targets.SystemStats needs psutil: pip install psutil (or the extra: monitor-async[system])"
    ) from exc

from .._core.checks import choice, number

__all__ = ["SystemStats"]

_Probe = Callable[[dict[str, float]], None]


class SystemStats:
    """A target whose ``stats()`` reports host and process figures (psutil) and GPU figures (NVML).

    The keys, and what is left out where the platform lacks it, are in
    [the watching guide](watching.md#built-in-targets-systemstats); pass
    ``**system.watch_options`` to ``watch()`` for its rate keys and ``offload``.

    Args:
        gpu: ``"auto"`` (default): GPUs when ``nvidia-ml-py`` finds one, else
            none; ``True``: GPUs or an error; ``False``: never load NVML.
        pid: the process to report on (default: this one).

    Raises:
        ConfigError: ``gpu`` is not one of the above, or ``pid`` not a positive integer.
        ValueError: ``pid`` cannot be watched.
        ImportError: ``gpu=True`` without ``nvidia-ml-py``.
        RuntimeError: ``gpu=True`` and NVML finds no driver or no GPU.

    Examples:
        >>> import asyncio
        >>> from monitor_async import Monitor
        >>> from monitor_async.backends import MemorySink
        >>> system = SystemStats(gpu=False)
        >>> async def main():
        ...     monitor = Monitor(MemorySink())
        ...     monitor.watch(system, name="system", **system.watch_options)
        ...     return await monitor.step()
        >>> snapshot = asyncio.run(main())["system"]
        >>> snapshot["system/process/rss_bytes"] > 0
        True
    """

    RATE_KEYS: tuple[str, ...] = ("disk/read_bytes", "disk/write_bytes", "net/sent_bytes", "net/recv_bytes")
    """Cumulative counters; ``watch(rate_keys=SystemStats.RATE_KEYS)`` adds ``<key>_per_second``."""

    def __init__(self, gpu: bool | Literal["auto"] = "auto", *, pid: int | None = None) -> None:
        choice("SystemStats", "gpu", gpu, ("auto", True, False))
        number("SystemStats", "pid", pid, integer=True, none=True)
        try:
            self.process = psutil.Process(pid)
        except psutil.Error as exc:
            raise ValueError(f"SystemStats: cannot watch process {pid}: {exc}") from exc
        psutil.cpu_percent(None)  # reference points: the first stats() reports since now
        self.process.cpu_percent(None)
        self._probes: list[_Probe] = []
        for probe in (self._cpu, self._load, self._memory, self._proc, self._disk, self._net):
            try:
                probe({})
            # what psutil raises for a figure this platform or container does not offer
            # (NotImplementedError is psutil's "not on this OS", e.g. getloadavg on some systems)
            except (OSError, AttributeError, NotImplementedError, psutil.AccessDenied, _Unavailable):
                continue
            self._probes.append(probe)
        self._gpu_probes: list[_Probe] = []
        self.gpus = 0
        """How many GPUs are reported."""
        if gpu is not False:
            self._open_gpus(required=gpu is True)

    @property
    def offload(self) -> Literal["inline", "thread"]:
        """Where ``stats()`` should run: inline without GPUs, on a thread with them."""
        return "thread" if self._gpu_probes else "inline"

    @property
    def watch_options(self) -> dict[str, Any]:
        """``monitor.watch(system, **system.watch_options)``: the rate keys and the offload mode."""
        return {"rate_keys": self.RATE_KEYS, "offload": self.offload}

    def stats(self) -> dict[str, float]:
        """One snapshot of every available figure (the keys are in docs/watching.md)."""
        out: dict[str, float] = {}
        for probe in self._probes:
            probe(out)
        for probe in self._gpu_probes:
            probe(out)
        return out

    # ----------------------------------------------------------------- host
    @staticmethod
    def _cpu(out: dict[str, float]) -> None:
        out["cpu/percent"] = float(psutil.cpu_percent(None))

    @staticmethod
    def _load(out: dict[str, float]) -> None:
        one, five, fifteen = psutil.getloadavg()
        out["cpu/load1"], out["cpu/load5"], out["cpu/load15"] = float(one), float(five), float(fifteen)

    @staticmethod
    def _memory(out: dict[str, float]) -> None:
        vm = psutil.virtual_memory()
        out["memory/used_bytes"] = float(vm.used)
        out["memory/available_bytes"] = float(vm.available)
        out["memory/percent"] = float(vm.percent)

    def _proc(self, out: dict[str, float]) -> None:
        p = self.process
        with p.oneshot():
            out["process/rss_bytes"] = float(p.memory_info().rss)
            out["process/cpu_percent"] = float(p.cpu_percent(None))
            out["process/threads"] = float(p.num_threads())
            fds = getattr(p, "num_fds", None) or getattr(p, "num_handles", None)
            if fds is not None:
                out["process/open_fds"] = float(fds())

    @staticmethod
    def _disk(out: dict[str, float]) -> None:
        io = psutil.disk_io_counters()
        if io is None:
            raise _Unavailable
        out["disk/read_bytes"] = float(io.read_bytes)
        out["disk/write_bytes"] = float(io.write_bytes)

    @staticmethod
    def _net(out: dict[str, float]) -> None:
        io = psutil.net_io_counters()
        if io is None:
            raise _Unavailable
        out["net/sent_bytes"] = float(io.bytes_sent)
        out["net/recv_bytes"] = float(io.bytes_recv)

    # ------------------------------------------------------------------ GPUs
    def _open_gpus(self, *, required: bool) -> None:
        try:
            import pynvml
        except ImportError as exc:
            if required:
                raise ImportError(
                    "SystemStats(gpu=True) needs nvidia-ml-py: pip install nvidia-ml-py "
                    "(or use gpu='auto' to skip GPUs when it is missing)"
                ) from exc
            return
        try:
            pynvml.nvmlInit()
            count = int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            if required:
                raise RuntimeError(f"SystemStats(gpu=True): NVML found no usable NVIDIA driver: {exc}") from exc
            return
        if count == 0:
            if required:
                raise RuntimeError("SystemStats(gpu=True): NVML reports no NVIDIA GPU on this host")
            return
        for index in range(count):
            device = _Gpu(pynvml, index)
            working = []
            for probe in device.probes():
                try:
                    probe({})
                except pynvml.NVMLError:
                    continue
                working.append(probe)
            if working:
                self.gpus += 1
                self._gpu_probes.extend(working)


class _Unavailable(Exception):
    """A figure this platform does not provide."""


class _Gpu:
    """The NVML readings of one device; each probe fills a few keys."""

    def __init__(self, nvml: Any, index: int) -> None:
        self.nvml = nvml
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self.prefix = f"gpu/{index}/"

    def probes(self) -> list[_Probe]:
        return [self.utilization, self.memory, self.temperature, self.power]

    def utilization(self, out: dict[str, float]) -> None:
        out[self.prefix + "utilization_percent"] = float(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

    def memory(self, out: dict[str, float]) -> None:
        info = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
        out[self.prefix + "memory_used_bytes"] = float(info.used)
        out[self.prefix + "memory_total_bytes"] = float(info.total)

    def temperature(self, out: dict[str, float]) -> None:
        value = self.nvml.nvmlDeviceGetTemperature(self.handle, self.nvml.NVML_TEMPERATURE_GPU)
        out[self.prefix + "temperature_celsius"] = float(value)

    def power(self, out: dict[str, float]) -> None:
        out[self.prefix + "power_watts"] = float(self.nvml.nvmlDeviceGetPowerUsage(self.handle)) / 1000.0

