"""The command line (``monitor-async``): the demo and the run readers (show, plot, tail, export).

The top layer: it may import the runtime, the core and the sinks.
"""

from .main import main

__all__ = ["main"]
