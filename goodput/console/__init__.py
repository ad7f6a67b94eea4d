"""The triage console: a Streamlit app (``goodput/console/app.py``) over Prometheus, Alertmanager, the analyzer's DuckDB
database and the plan and load-test files. Data access lives here, one module per page in ``views/`` (not
``pages/``: Streamlit would take a ``pages/`` folder beside ``app.py`` for its own multipage app).

The public names below are imported on first use, so ``import goodput.console`` loads neither Streamlit nor DuckDB.
"""

from goodput.foundation.lazy import lazy_exports

_EXPORTS = {
    "Filters": "goodput.console.filters",
    "Settings": "goodput.console.settings",
}
__all__ = lazy_exports(__name__, _EXPORTS)
