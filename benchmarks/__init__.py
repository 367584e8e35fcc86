"""Side-by-side benchmarks of monitor-async and TorchRL's ``LoggerMonitor``.

Run ``python -m benchmarks`` from the repository root (``--quick`` for a
smoke run under a minute). Scenarios, one module each:

- ``bench_core``: manual ``step()`` throughput into a no-op sink;
- ``bench_sinks``: ``step()`` throughput into CSV (durable) and TensorBoard;
- ``bench_cadence``: cadence beside a slow sink, a hung target, slow I/O targets;
- ``bench_trainer``: a CPU-bound trainer's speed with the monitor in the background;
- ``bench_scale``: 10,000 targets at 1 Hz on one loop;
- ``bench_memory``: memory while a sink is stalled;
- ``bench_distributions``: values that are many numbers, summarised at the poll and the push.

``python -m benchmarks --write`` records the run in ``benchmarks/RESULTS.md``;
``--against DIR`` compares another checkout with this one by turns. Probes
that reach into private modules are in ``benchmarks/probes/``, outside the
suite.
"""
