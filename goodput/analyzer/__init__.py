"""The analyzer: a DuckDB database of requests, their latency decomposition, regressions and triage.

The public names below are imported on first use, so ``import goodput.analyzer`` does not load DuckDB or pandas.
"""

from goodput.foundation.lazy import lazy_exports

_EXPORTS = {
    "connect": "goodput.analyzer.store",
    "decompose": "goodput.analyzer.decompose",
    "find_regressions": "goodput.analyzer.regressions",
    "ingest": "goodput.analyzer.ingest",
    "load_releases": "goodput.analyzer.releases",
    "triage": "goodput.analyzer.triage",
}
__all__ = lazy_exports(__name__, _EXPORTS)
