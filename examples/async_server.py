"""An async RL inference server that monitors itself on its own event loop.

The server batches ``POST /act`` requests (observations from environment
workers) and runs a fake policy on each batch. A :class:`monitor_async.Monitor`
started in the Starlette lifespan polls the server's async ``stats()``, the
host (:class:`~monitor_async.targets.SystemStats`) and itself, on the same
loop that serves requests, and ``/metrics`` is mounted from
``PrometheusSink.asgi_app()``: no extra thread, no extra port.

Run::

    python examples/async_server.py --port 8000
    curl -X POST localhost:8000/act -d '{"observation": [0.1, -0.3, 0.7]}'
    curl localhost:8000/metrics

It binds to 127.0.0.1 unless ``--host`` says otherwise. ``--clients N``
(default 2) runs N simulated environment workers inside the process so the
numbers move without outside traffic.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from monitor_async import Monitor
from monitor_async.backends import PrometheusSink
from monitor_async.targets import SystemStats

N_ACTIONS = 4


class InferenceServer:
    """Dynamic batching: requests wait at most ``max_wait`` seconds to share a forward pass."""

    def __init__(self, max_batch: int = 32, max_wait: float = 0.002, forward_seconds: float = 0.001) -> None:
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.forward_seconds = forward_seconds
        self.pending: asyncio.Queue[tuple[list[float], asyncio.Future[int]]] = asyncio.Queue()
        self.requests = 0
        self.batches = 0
        self.frames = 0
        self._latency_sum = 0.0
        self._latency_n = 0
        self._batch_sizes = 0

    async def act(self, observation: list[float]) -> int:
        """Queues one observation and waits for its action."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        start = time.perf_counter()
        self.pending.put_nowait((observation, future))
        action = await future
        self.requests += 1
        self._latency_sum += time.perf_counter() - start
        self._latency_n += 1
        return action

    async def serve_batches(self) -> None:
        """The batching loop; runs until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.pending.get()]
            deadline = loop.time() + self.max_wait
            while len(batch) < self.max_batch:
                try:
                    batch.append(await asyncio.wait_for(self.pending.get(), deadline - loop.time()))
                except TimeoutError:
                    break
            await asyncio.sleep(self.forward_seconds)  # the "GPU" forward pass
            for observation, future in batch:
                if not future.done():
                    future.set_result(int(sum(observation) * 1000) % N_ACTIONS)
            self.batches += 1
            self.frames += len(batch)
            self._batch_sizes += len(batch)

    async def stats(self) -> dict[str, Any]:
        """What the monitor polls: counters (rates are derived) and gauges."""
        latency = self._latency_sum / self._latency_n if self._latency_n else 0.0
        self._latency_sum, self._latency_n = 0.0, 0
        return {
            "requests": self.requests,
            "batches": self.batches,
            "frames": self.frames,
            "queue_size": self.pending.qsize(),
            "mean_batch_size": self._batch_sizes / self.batches if self.batches else 0.0,
            "latency_ms": latency * 1000.0,
        }


async def environment_worker(server: InferenceServer, seed: int) -> None:
    """A simulated actor: steps a fake environment and asks the server for actions."""
    rng = random.Random(seed)
    while True:
        await server.act([rng.uniform(-1.0, 1.0) for _ in range(8)])
        await asyncio.sleep(rng.uniform(0.001, 0.01))


def build_app(*, poll_interval: float = 1.0, clients: int = 2) -> Starlette:
    """The Starlette app: ``POST /act``, ``GET /metrics``, and the monitor in its lifespan."""
    server = InferenceServer()
    metrics = PrometheusSink(port=None, name="prometheus")  # served by this app, no port of its own
    monitor = Monitor(metrics, poll_interval=poll_interval, close_sinks=True)
    monitor.watch(server, name="inference", rate_keys=["requests", "batches", "frames"])
    system = SystemStats()
    monitor.watch(system, name="system", **system.watch_options)
    monitor.watch(monitor, name="monitor")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        background = [asyncio.create_task(server.serve_batches())]
        background += [asyncio.create_task(environment_worker(server, seed)) for seed in range(clients)]
        polling = asyncio.create_task(monitor.run())  # polls on this server's own loop
        try:
            yield
        finally:
            await monitor.stop()  # final snapshot, drain, flush, close the sink; run() returns
            await polling
            counters = monitor.stats()
            print(
                f"monitor stopped: {counters['polls']:.0f} polls, "
                f"{counters['sink/prometheus/dropped']:.0f} records dropped",
                flush=True,
            )
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)

    async def act(request: Request) -> JSONResponse:
        body = await request.json()
        observation = body.get("observation") if isinstance(body, dict) else None
        if not isinstance(observation, list) or not all(isinstance(x, (int, float)) for x in observation):
            return JSONResponse({"error": "expected {\"observation\": [numbers]}"}, status_code=422)
        return JSONResponse({"action": await server.act([float(x) for x in observation])})

    # Mounted like prometheus_client's own FastAPI recipe: GET /metrics answers with a redirect
    # to /metrics/, which Prometheus and curl -L follow.
    return Starlette(
        routes=[Route("/act", act, methods=["POST"]), Mount("/metrics", app=metrics.asgi_app())],
        lifespan=lifespan,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds between polls")
    parser.add_argument("--clients", type=int, default=2, help="simulated environment workers")
    args = parser.parse_args(argv)
    app = build_app(poll_interval=args.poll_interval, clients=args.clients)
    print(f"serving on http://{args.host}:{args.port} (POST /act, GET /metrics)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
