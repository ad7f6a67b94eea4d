"""The goodput triage console: ``streamlit run goodput/console/app.py`` (or ``goodput console``).

Reads its sources from the environment (goodput/console/settings.py: GOODPUT_DB, GOODPUT_PROMETHEUS_URL,
GOODPUT_ALERTMANAGER_URL, GOODPUT_PLAN, GOODPUT_RUNS, GOODPUT_RELEASES, GOODPUT_FLEET, ...); the sidebar's filters travel in the
URL's query string, so an alert can link to a page with its deployment and tier set.
"""

import streamlit as st

from goodput.console.settings import Settings
from goodput.console.ui import sidebar
from goodput.console.views import PAGES
from goodput.foundation.errors import ConfigError

WIDE_MARGINS = "<style>.block-container {padding-left: 2rem; padding-right: 2rem}</style>"  # a constant, no data

st.set_page_config(page_title="goodput console", layout="wide")
# Streamlit's wide layout keeps 5rem each side of the page: at 1,400 px that is ~100 px of a table's last columns
st.markdown(WIDE_MARGINS, unsafe_allow_html=True)
try:
    settings = Settings.from_env()
except ConfigError as e:  # a GOODPUT_DB that does not parse, a GOODPUT_PROMETHEUS_* that cannot be used
    st.error(f"Settings: {e}")
    st.stop()
ctx = sidebar(settings)


def _page(render, name):
    def run() -> None:
        render(ctx)

    run.__name__ = name
    return run


nav = st.navigation([st.Page(_page(render, path), title=title, url_path=path, default=i == 0)
                     for i, (title, path, render) in enumerate(PAGES)])
nav.run()
