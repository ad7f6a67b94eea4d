"""The GPU, engine and request exporters, and the metric catalog they all publish.

The public names below are imported on first use: normalizing a dump must not load the trace store's
pyarrow or the GPU exporter's NVML.
"""

from goodput.foundation.lazy import lazy_exports

_EXPORTS = {
    "CATALOG": "exporters.catalog",
    "EngineExporter": "exporters.engine",
    "GpuCollector": "exporters.gpu",
    "MetricSpec": "exporters.catalog",
    "RequestMetrics": "exporters.requests",
    "TraceReceiver": "exporters.requests",
    "TraceStore": "exporters.trace_store",
    "normalize": "exporters.normalize",
}
__all__ = lazy_exports(__name__, _EXPORTS)
