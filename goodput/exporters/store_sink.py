"""The seam between the trace store and where its spans go: the ``Sink`` protocol and the one error a sink raises.

``goodput.exporters.parquet_sink`` and ``goodput.exporters.clickhouse_sink`` implement it;
``goodput.exporters.trace_store`` drives it (write-ahead log, batching, retries), so a sink only stores a batch or
says what it could not.
"""

from __future__ import annotations

from typing import Protocol

from goodput.exporters.otlp import Span

__all__ = ["Sink", "SinkFailed"]


class SinkFailed(Exception):
    """The sink's destination refused or did not answer: ``rows`` (a suffix of the batch, in order) were not
    stored; ``rejected`` are rows found unstorable before it failed."""

    def __init__(self, rows: list[Span], cause: Exception,
                 rejected: list[tuple[Span, Exception]] | None = None) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.rows = rows
        self.rejected = rejected or []


class Sink(Protocol):
    """Where flushed spans go. ``write`` stores a batch, or raises ``SinkFailed`` with the unstored suffix;
    it returns the spans that can never be stored (each with why), which the store quarantines. ``stop_by``
    bounds the writes of a shutdown.
    ``kind`` names the sink in metrics; ``str(sink)`` names its destination in health and logs."""

    kind: str

    def write(self, spans: list[Span]) -> list[tuple[Span, Exception]]: ...

    def stop_by(self, deadline: float) -> None:
        """Shutdown: end every write by ``deadline`` (``time.monotonic``), stored or failed."""

    def close(self) -> None: ...
