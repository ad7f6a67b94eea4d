"""The analyzer: a DuckDB database of requests, their latency decomposition, regressions and triage.

The public names below are imported on first use, so ``import analyzer`` does not load DuckDB or pandas.
"""

from goodput.foundation.lazy import lazy_exports

_EXPORTS = {
    "connect": "analyzer.store",
    "decompose": "analyzer.decompose",
    "find_regressions": "analyzer.regressions",
    "ingest": "analyzer.ingest",
    "load_releases": "analyzer.releases",
    "triage": "analyzer.triage",
}
__all__ = lazy_exports(__name__, _EXPORTS)
