"""The GPU, engine and request exporters, publishing the metric catalog (``goodput.contracts.catalog``).

The public names below are imported on first use: normalizing a dump must not load the trace store's
pyarrow or the GPU exporter's NVML.
"""

from goodput.foundation.lazy import lazy_exports

_EXPORTS = {
    "EngineExporter": "goodput.exporters.engine",
    "GpuCollector": "goodput.exporters.gpu",
    "RequestMetrics": "goodput.exporters.requests",
    "TraceReceiver": "goodput.exporters.requests",
    "TraceStore": "goodput.exporters.trace_store",
    "normalize": "goodput.exporters.normalize",
}
__all__ = lazy_exports(__name__, _EXPORTS)
