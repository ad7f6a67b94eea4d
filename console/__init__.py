"""The triage console: a Streamlit app (``app.py``) over Prometheus, Alertmanager, the analyzer's DuckDB
database and the plan and load-test files. Data access lives here, one module per page in ``pages/``."""
