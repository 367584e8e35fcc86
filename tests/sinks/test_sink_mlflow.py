"""MLflowSink against a real MLflow tracking server (``mlflow server``, SQLite store) on 127.0.0.1.

One server per module. Values are read back with ``MlflowClient.get_metric_history``.
The outage test kills the server with SIGKILL for 10 s mid-run and starts it
again on the same store, while a second training process, killed itself
while the server is down, leaves its spool to a sink started afterwards on
the same ``spool_dir``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mlflow.server")
from mlflow.tracking import MlflowClient

from monitor_async import DeliveryError, Monitor, Record
from monitor_async.backends import Backoff, MLflowSink
from monitor_async.backends._mlflow import MAX_METRICS_PER_BATCH, mlflow_key
from tests.support.checks import wait_until
from tests.support.mlflow_server import MlflowServer
from tests.support.targets import Ticker
from tests.support.timing import slot_share

ROOT = Path(__file__).resolve().parents[2]
FAST = Backoff(first=0.1, cap=1.0)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    with MlflowServer(tmp_path_factory.mktemp("mlflow")) as running:
        yield running


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


async def test_records_become_metric_history_of_a_run_the_sink_creates_and_ends(server: MlflowServer) -> None:
    began = time.time()
    sink = MLflowSink(server.url, experiment="tests", run_name="normal", tags={"team": "rl", "seed": 3})
    monitor = Monitor(sink)
    monitor.watch(Ticker(), name="collector", step="n")
    monitor.watch(Ticker(**{"gpu:0": 1.5}), name="buffer")  # no step: numbered 0, 1, 2...
    for _ in range(4):
        await monitor.step()
    await sink.close()

    client = MlflowClient(server.url)
    run = client.get_run(sink.run_id)
    assert run.info.run_name == "normal" and run.info.status == "FINISHED"
    assert run.data.tags["team"] == "rl" and run.data.tags["seed"] == "3"
    assert client.get_experiment(run.info.experiment_id).name == "tests"
    assert history(client, run.info.run_id, "collector/n") == [(s, float(s)) for s in range(1, 5)]
    assert history(client, run.info.run_id, "buffer/n") == [(s, float(s + 1)) for s in range(4)]
    assert history(client, run.info.run_id, "buffer/gpu_0") == [(s, 1.5) for s in range(4)]
    stamps = [m.timestamp for m in client.get_metric_history(run.info.run_id, "collector/n")]
    assert all(began * 1000 - 1 <= t <= time.time() * 1000 for t in stamps)  # the poll time, in ms


async def test_a_given_run_and_the_active_run_are_logged_to_and_left_running(server: MlflowServer) -> None:
    import mlflow

    client = MlflowClient(server.url)
    existing = client.create_run(client.create_experiment("existing")).info.run_id
    async with MLflowSink(server.url, run_id=existing) as sink:
        await sink.write([Record("w", 7, time.time(), {"w/x": 1.0})])
    assert history(client, existing, "w/x") == [(7, 1.0)]
    assert client.get_run(existing).info.status == "RUNNING"  # not the sink's run: not ended

    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(server.url)
    try:
        with mlflow.start_run() as active:
            sink = MLflowSink()
            assert sink.run_id == active.info.run_id
            async with sink:
                await sink.write([Record("w", 1, time.time(), {"w/y": 2.0})])
            assert client.get_run(active.info.run_id).info.status == "RUNNING"
    finally:
        mlflow.set_tracking_uri(before)
    assert history(client, active.info.run_id, "w/y") == [(1, 2.0)]


async def test_a_record_of_2500_metrics_goes_out_in_requests_of_at_most_1000(server: MlflowServer) -> None:
    big = Record("big", 0, time.time(), {f"big/m{i:04d}": float(i) for i in range(2500)})
    sink = MLflowSink(server.url, experiment="tests")
    parts = sink.prepare([big, big])
    assert [sum(len(r.metrics) for r in part) for part in parts] == [1000] * 5
    async with sink:
        await sink.write([big])  # MLflow refuses more than 1000 metrics in one request
    client = MlflowClient(server.url)
    assert len(client.get_run(sink.run_id).data.metrics) == 2500
    assert sink.counters()["rejected"] == 0


async def test_a_batch_mlflow_refuses_is_an_error_naming_the_status_and_mlflows_message(
    server: MlflowServer,
) -> None:
    sink = MLflowSink(server.url, run_id="0123456789abcdef0123456789abcdef", backoff=FAST)
    monitor = Monitor(sink, on_error="raise")
    monitor.watch(Ticker(), name="w")
    with pytest.raises(DeliveryError, match=r"HTTP 404 RESOURCE_DOES_NOT_EXIST.*0123456789abcdef") as caught:
        await monitor.step()
    assert caught.value.status == 404 and not caught.value.retryable
    assert monitor.stats()["sink/mlflow/rejected"] == 1
    await sink.close()


def test_keys_are_made_valid_for_mlflow_and_long_ones_stay_apart() -> None:
    assert mlflow_key("collector/frames_per_second") == "collector/frames_per_second"
    assert mlflow_key("a b.c-d/e") == "a b.c-d/e"
    assert mlflow_key("w/loss(π)") == "w/loss_π_"
    long_a, long_b = "w/" + "a" * 300, "w/" + "a" * 299 + "b"
    assert len(mlflow_key(long_a)) == 250 and mlflow_key(long_a) != mlflow_key(long_b)
    assert MAX_METRICS_PER_BATCH == 1000


TRAINER = textwrap.dedent(
    """
    import asyncio, sys
    from monitor_async import Monitor
    from monitor_async.backends import Backoff, MLflowSink
    from tests.support.targets import Ticker

    async def main():
        url, folder = sys.argv[1], sys.argv[2]
        sink = MLflowSink(url, experiment="outage", run_name="killed trainer", spool_dir=folder,
                          backoff=Backoff(first=0.2, cap=1.0))
        monitor = Monitor(sink, poll_interval=0.05)
        monitor.watch(Ticker(), name="trainer", step="n")
        async with monitor:
            while not sink.counters()["delivered"]:
                await asyncio.sleep(0.02)
            print("RUN", sink.run_id, flush=True)
            while sink.counters()["spooled"] < 40:
                await asyncio.sleep(0.02)
            print("SPOOLED", flush=True)
            await asyncio.Event().wait()  # SIGKILLed here, still polling

    asyncio.run(main())
    """
)


async def test_a_10s_server_outage_and_a_killed_trainer_lose_no_spooled_record(
    server: MlflowServer, tmp_path: Path
) -> None:
    # a second training process on its own spool_dir; it is SIGKILLed while the server is down
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, server.url, str(tmp_path / "trainer-spool")],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert trainer.stdout is not None
        first = await asyncio.to_thread(trainer.stdout.readline)
        assert first.startswith("RUN "), first
        trainer_run = first.split()[1]

        targets = [Ticker() for _ in range(3)]
        sink = MLflowSink(server.url, experiment="outage", run_name="survivor",
                          spool_dir=tmp_path / "spool", backoff=FAST, name="mlflow")
        monitor = Monitor(sink, poll_interval=0.1)
        for i, target in enumerate(targets):
            monitor.watch(target, name=f"t{i}", step="n")
        async with monitor:
            await wait_until(lambda: sink.counters()["delivered"] >= 6, timeout=30)
            await asyncio.to_thread(server.kill)
            down = time.monotonic()
            second = await asyncio.to_thread(trainer.stdout.readline)
            assert second.strip() == "SPOOLED", second
            os.kill(trainer.pid, signal.SIGKILL)
            await asyncio.sleep(max(0.0, 10.0 - (time.monotonic() - down)))
            assert sink.counters()["spooled"] > 0 and sink.counters()["spool_bytes"] > 0
            restart = time.monotonic()
            await asyncio.to_thread(server.start)
            up = time.monotonic()
            await wait_until(lambda: sink.counters()["pending"] == 0 and sink.counters()["replayed"] > 0, timeout=60)
        figures = sink.counters()
        stats = monitor.stats()
    finally:
        if trainer.poll() is None:
            os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait(timeout=30)

    client = MlflowClient(server.url)
    extra = 0
    for i, target in enumerate(targets):
        got = history(client, sink.run_id or "", f"t{i}/n")
        steps = [s for s, _ in got]
        assert set(steps) == set(range(1, target.n + 1)), f"t{i}: steps missing"
        assert all(value == float(step) for step, value in got)
        extra += len(steps) - len(set(steps))
    assert extra <= figures["duplicates"], "a step logged twice is a counted duplicate"
    assert stats["sink/mlflow/dropped"] == 0 and stats["sink/mlflow/errors"] == 0
    assert figures["retries"] >= 1 and figures["replayed"] == figures["spooled"]
    # polling never waited for the server: the cadence held through the outage. The window ends where
    # the server's restart begins: the restart loads MLflow's server on the same two cores, which tells
    # about the machine, not about the monitor.
    for target in targets:
        hit, slots = slot_share(target.times, down, restart, 0.1)
        assert hit >= 0.8 * slots, ((hit, slots), "during the restart", slot_share(target.times, restart, up, 0.1))

    # the killed trainer's spool goes out when a sink opens on the same spool_dir
    async with MLflowSink(server.url, spool_dir=tmp_path / "trainer-spool", name="heir") as heir:
        await heir.flush()
        replayed = heir.counters()["replayed"]
    steps = [s for s, _ in history(client, trainer_run, "trainer/n")]
    assert replayed >= 40
    assert set(steps) == set(range(1, max(steps) + 1)), "the killed trainer's spooled steps all arrived"
    assert len(steps) - len(set(steps)) <= heir.counters()["duplicates"]
    assert heir.run_id is None  # replayed into the trainer's run; the heir created none of its own


PROXY_PAGE = b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"


async def test_a_200_whose_body_is_not_mlflows_answer_is_retried_naming_the_body(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    from tests.support.network import Receiver

    proxy = Receiver(content_type="text/html")
    proxy.reply = lambda n, request: (200, {}, PROXY_PAGE)
    sink = MLflowSink(proxy.url, run_id="0123456789abcdef0123456789abcdef", backoff=FAST, name="ml")
    try:
        with caplog.at_level(logging.WARNING, logger="monitor_async"):
            for step in range(22):
                await sink.write([Record("w", step, time.time(), {"w/x": float(step)})])
            await wait_until(lambda: sink.counters()["retries"] >= 2)
        figures = sink.counters()
        assert figures["rejected"] == 0 and figures["pending"] == 22, "kept for another try, not refused"
        assert any(r.path.endswith("/runs/log-batch") for r in proxy.requests)
        warned = [r.getMessage() for r in caplog.records if "spool" in r.getMessage()]
        assert warned and "<!DOCTYPE html><html>" in warned[0] and "HTTP 200" in warned[0], warned

        proxy.reply = lambda n, request: (200, {"Content-Type": "application/json"}, b"{}")  # MLflow is back
        await sink.flush()
        assert sink.counters()["delivered"] == 22 and sink.counters()["pending"] == 0
    finally:
        await sink.close()
        proxy.stop()


async def test_an_alert_sets_the_run_tag_alert_rule_to_its_state(server: MlflowServer) -> None:
    from monitor_async import AlertEvent

    def event(state: str) -> AlertEvent:
        return AlertEvent("stalled collector/frames", state, "warning", "collector", "collector/frames",  # type: ignore[arg-type]
                          120.0, 1_700_000_000.0, time.time(), {}, "collector/frames has not increased for 62 s")

    client = MlflowClient(server.url)
    async with MLflowSink(server.url, experiment="alerts", run_name="stall") as sink:
        await sink.alert(event("firing"))  # before any record: the run is created for it
        await sink.flush()
        assert sink.run_id is not None
        assert client.get_run(sink.run_id).data.tags["alert.stalled collector/frames"] == "firing"
        await sink.write([Record("collector", 1, time.time(), {"collector/frames": 120.0})])
        await sink.alert(event("resolved"))
        await sink.flush()
    run = client.get_run(sink.run_id)
    assert run.data.tags["alert.stalled collector/frames"] == "resolved"
    assert history(client, sink.run_id, "collector/frames") == [(1, 120.0)]
    assert sink.counters()["rejected"] == 0


async def test_a_watched_distribution_is_its_summary_keys_in_the_runs_history(server: MlflowServer) -> None:
    class Server:
        def __init__(self) -> None:
            self.n = 0

        def stats(self) -> dict[str, object]:
            self.n += 1
            return {"n": self.n, "latency": [0.01 * self.n * i for i in range(1, 101)]}

    sink = MLflowSink(server.url, experiment="tests", run_name="distributions")
    monitor = Monitor(sink)
    monitor.watch(Server(), name="server", step="n", rate_keys=[])
    for _ in range(2):
        await monitor.step()
    await sink.close()
    client = MlflowClient(server.url)
    assert history(client, sink.run_id, "server/latency/count") == [(1, 100.0), (2, 100.0)]
    assert history(client, sink.run_id, "server/latency/max") == [(1, 1.0), (2, 2.0)]
    assert [s for s, _ in history(client, sink.run_id, "server/latency/p99")] == [1, 2]
    assert monitor.stats()["sink/mlflow/errors"] == 0.0
