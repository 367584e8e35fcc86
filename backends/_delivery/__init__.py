"""Network delivery for remote sinks: retries with backoff, a disk spool, and its replay."""

from .resilient import DEFAULT_SPOOL_BYTES, ResilientSink
from .retry import Backoff, Failure, classify, failed, not_the_answer, parse_retry_after, text_of

__all__ = ["DEFAULT_SPOOL_BYTES", "Backoff", "Failure", "ResilientSink", "classify", "failed", "not_the_answer", "parse_retry_after", "text_of"]
