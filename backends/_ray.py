"""RaySink: one sink hosted in a Ray actor, shared by monitors in many processes or on many nodes."""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from monitor_async._core import ConfigError, Ranks, Record, Source, check_ranks
from monitor_async._core.names import sink_label
from monitor_async._core.secrets import redact

from ._delivery import Failure, ResilientSink, text_of

try:
    import ray
    from ray.exceptions import ActorUnavailableError, RayActorError
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("RaySink needs Ray: pip install ray (or the extra: monitor-async[ray])") from exc

__all__ = ["RaySink"]


class _SinkHost:
    """The actor body: owns the real sink; its async methods run on the actor's event loop.

    One lock serialises every call into the hosted sink, so batches from
    different monitors never interleave inside one ``write`` and a lazy open
    happens once.
    """

    def __init__(self, sink_cls: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.sink = sink_cls(*args, **kwargs)
        self.lock = asyncio.Lock()

    async def ready(self) -> None:
        async with self.lock:
            opener = getattr(self.sink, "open", None)
            if callable(opener) and inspect.iscoroutinefunction(opener):
                await opener()

    async def write(self, records: Sequence[Record]) -> None:
        async with self.lock:
            await self.sink.write(records)

    async def flush(self) -> None:
        async with self.lock:
            await self.sink.flush()

    async def close(self) -> None:
        async with self.lock:
            await self.sink.close()

    async def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        async with self.lock:
            result = getattr(self.sink, method)
            if not callable(result):
                return result
            result = result(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result


_RemoteHost: Any = ray.remote(_SinkHost)


def _reconnect(actor: Any, name: str) -> RaySink:
    return RaySink._from_handle(actor, name)


class RaySink(ResilientSink):
    """Builds ``sink_cls(*args, **kwargs)`` inside a Ray actor and forwards writes to it.

    Many monitors (processes, nodes) so share one file or run; records carry
    the sender's host, pid and Ray node. What it promises:
    [Sinks: RaySink](sinks.md#many-processes-one-sink-raysink).

    Args:
        sink_cls: the sink class, or any callable returning a sink, that the
            actor calls as ``sink_cls(*args, **kwargs)``.
        *args: positional arguments of ``sink_cls``, pickled to the actor.
        actor_options: options of ``ray.remote(...).options()`` for the actor,
            over the default ``{"num_cpus": 0}``; ``"name"`` makes it
            reachable by [connect][monitor_async.backends.RaySink.connect].
        ranks: ``"all"`` (default): every rank writes through it; ``"main"``:
            only rank 0.
        delivery: this handle's spool options (``spool_dir``, ``spool_bytes``,
            ``backoff``); ``None`` (default): a temporary folder, 64 MiB, ``Backoff()``.
        **kwargs: keyword arguments of ``sink_cls``, pickled to the actor;
            their ``name`` also names this handle.

    Raises:
        TypeError: ``sink_cls`` is not callable.
        ConfigError: a bad ``ranks`` or ``delivery``.
        ValueError: ``actor_options`` Ray refuses.
        RuntimeError: at the first call, the actor could not build its sink.

    Examples:
        >>> import asyncio, ray
        >>> from monitor_async import Monitor
        >>> from monitor_async.backends import MemorySink
        >>> ray.init(num_cpus=1)  # doctest: +SKIP
        >>> sink = RaySink(MemorySink, actor_options={"name": "metrics"})
        >>> class Buffer:
        ...     def stats(self):
        ...         return {"size": 3}
        >>> async def main():
        ...     monitor = Monitor(sink)
        ...     monitor.watch(Buffer(), name="rb")
        ...     await monitor.step()
        ...     return await sink.call("series", "rb/size")
        >>> asyncio.run(main())
        [3.0]
    """

    ack_wait = None  # write() returns once the hosted sink wrote the batch (or the actor is away)

    def __init__(
        self,
        sink_cls: Callable[..., Any],
        *args: Any,
        actor_options: Mapping[str, Any] | None = None,
        ranks: Ranks = "all",
        delivery: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.ranks = check_ranks(ranks, "RaySink")
        self._stamps: dict[Source, Source] = {}
        if not callable(sink_cls):
            raise TypeError(f"RaySink: sink_cls must be a sink class or factory, got {sink_cls!r}")
        unknown = sorted(set(delivery or {}) - {"spool_dir", "spool_bytes", "backoff"})
        if unknown:
            raise ConfigError(
                f"RaySink: delivery takes spool_dir, spool_bytes and backoff; got {', '.join(unknown)}"
            )
        options = {"num_cpus": 0, **(actor_options or {})}
        inner = options.get("name") or kwargs.get("name") or sink_label(getattr(sink_cls, "__name__", "sink"))
        super().__init__(name=f"ray_{inner}", **(delivery or {}))
        try:
            self._actor: Any = _RemoteHost.options(**options).remote(sink_cls, args, kwargs)
        except (TypeError, ValueError) as exc:
            raise ValueError(redact(f"RaySink {self.label!r}: bad actor_options {dict(options)!r}: {exc}")) from None
        self._owner = True

    @classmethod
    def connect(cls, name: str, *, namespace: str | None = None) -> RaySink:
        """A handle to the RaySink actor created with ``actor_options={"name": name}``.

        The handle writes and flushes; its ``close()`` only flushes (the
        creating handle owns the sink). Raises ``ValueError`` when no such
        actor exists in the namespace.
        """
        try:
            actor = ray.get_actor(name, namespace=namespace)
        except ValueError as exc:
            raise ValueError(
                f"RaySink.connect: no Ray actor named {name!r}"
                f"{'' if namespace is None else f' in namespace {namespace!r}'}; "
                "create it with RaySink(..., actor_options={'name': ...}) first"
            ) from exc
        return cls._from_handle(actor, f"ray_{name}")

    @classmethod
    def _from_handle(cls, actor: Any, name: str) -> RaySink:
        sink = cls.__new__(cls)
        ResilientSink.__init__(sink, name=name)
        sink.ranks = "all"
        sink._stamps = {}
        sink._actor = actor
        sink._owner = False
        return sink

    def __reduce__(self) -> tuple[Callable[..., RaySink], tuple[Any, str]]:
        return _reconnect, (self._actor, self.label)

    @property
    def actor(self) -> Any:
        """The Ray actor handle hosting the sink."""
        return self._actor

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Calls ``method(*args, **kwargs)`` on the hosted sink, in the actor, and returns the result.

        Awaits the result when it is awaitable; a non-callable attribute is
        returned as is. The result must be picklable. Useful to read back a
        hosted [MemorySink][monitor_async.backends.MemorySink] (``await sink.call("records")``) or to ask
        a hosted sink where it writes. Runs under the same lock as writes.
        """
        return await self._remote("call", method, args, kwargs)

    async def _remote(self, method: str, *args: Any) -> Any:
        try:
            return await getattr(self._actor, method).remote(*args)
        except RayActorError as exc:
            raise RuntimeError(
                f"RaySink {self.label!r}: the Ray actor hosting the sink is unavailable "
                f"(it failed to build the sink, was closed by its owner, or died): {_last_line(exc)}"
            ) from exc

    def classify(self, exc: BaseException) -> Failure:
        """An actor restarting (``ActorUnavailableError``) is retried; the hosted sink's errors are not."""
        cause = exc.__cause__ if isinstance(exc, RuntimeError) else exc
        if isinstance(cause, ActorUnavailableError):
            return Failure(True, True, None, None, f"the Ray actor is unavailable for now: {_last_line(cause)}")
        if isinstance(cause, RayActorError):
            return Failure(False, False, None, None, f"the Ray actor is gone: {_last_line(cause)}")
        return super().classify(exc)

    async def open_client(self) -> None:
        await self._remote("ready")

    async def send(self, records: Sequence[Record], destination: str | None) -> None:
        await self._remote("write", self._stamp(records))

    def _stamp(self, records: Sequence[Record]) -> list[Record]:
        """The records with this sender (host, pid, Ray node id) added to their source; one Source per source."""
        stamps = self._stamps
        out = []
        for r in records:
            source = stamps.get(r.source)  # type: ignore[call-overload]
            if source is None:
                if len(stamps) >= 1024:  # sources that keep changing: stay bounded
                    stamps.clear()
                if not stamps:  # first use in this process (a handle may have been pickled over)
                    self._sender = {
                        "host": socket.gethostname(), "pid": os.getpid(),
                        "node": ray.get_runtime_context().get_node_id(),
                    }
                source = stamps[r.source] = Source({**self._sender, **r.source})  # type: ignore[index]
            out.append(Record(r.name, r.step, r.time, r.metrics, source))
        return out

    async def close_client(self) -> None:
        if not self._owner:
            await self._remote("flush")
            return
        try:
            await self._remote("close")
        finally:
            ray.kill(self._actor, no_restart=True)

    async def flush(self) -> None:
        """Flushes the hosted sink (also when this handle wrote nothing: others may have)."""
        if not self._closed:
            if self._opened:
                await self._settled()
            await self._remote("flush")

    async def close(self) -> None:
        """Owner: closes the hosted sink and ends the actor. Other handles: flush only. Idempotent."""
        if self._closed:
            return
        opened = self._opened
        await super().close()  # opened: deliver what it can, stop the delivery task, close_client()
        if not opened:
            await self.close_client()


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in text_of(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
