"""The console's pages, in the seed's troubleshooting order: (title, url path). The first is served at ``/``.
Kept apart from the pages themselves so a browser test or benchmark can list them without loading Streamlit."""

ROUTES = (("Overview", "overview"), ("Latency", "latency"), ("Workload", "workload"), ("KV & scheduler", "kv"),
          ("Routing", "routing"), ("Releases", "releases"), ("Capacity", "capacity"))


def url(base: str, path: str) -> str:
    """Where a page is served: the first at the root, the others at their path."""
    return f"{base.rstrip('/')}/{'' if path == ROUTES[0][1] else path}"
