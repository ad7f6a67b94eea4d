"""The triage console: a Streamlit app (``app.py``) over Prometheus, Alertmanager, the analyzer's DuckDB
database and the plan and load-test files. Data access lives here, one module per page in ``pages/``.

The public names below are imported on first use, so ``import console`` loads neither Streamlit nor DuckDB.
"""

from goodput.foundation.lazy import lazy_exports

_EXPORTS = {
    "Filters": "console.filters",
    "Settings": "console.settings",
}
__all__ = lazy_exports(__name__, _EXPORTS)
