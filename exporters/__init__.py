"""The GPU, engine and request exporters, and the metric catalog they all publish."""

from exporters.catalog import CATALOG, MetricSpec
from exporters.engine import EngineExporter
from exporters.gpu import GpuCollector
from exporters.normalize import normalize
from exporters.requests import RequestMetrics, TraceReceiver
from exporters.trace_store import TraceStore

__all__ = ["CATALOG", "EngineExporter", "GpuCollector", "MetricSpec", "RequestMetrics", "TraceReceiver", "TraceStore",
           "normalize"]
