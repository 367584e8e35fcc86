"""The runtime: watches, polling, timers, channels, pushes, reductions, the monitor and its sync facade.

Imports the core (``monitor_async._core``) and nothing above it: never the
sinks, never the command line.
"""
