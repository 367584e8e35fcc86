"""Probes: one-off measurements that reach into private modules of monitor_async.

Not part of the suite: ``python -m benchmarks`` and CI never run them, and
their figures are not goals. Each runs on its own, e.g.
``python -m benchmarks.probes.ticks``, ``python -m benchmarks.probes.cold`` or
``python -m benchmarks.probes.queued``.
"""
