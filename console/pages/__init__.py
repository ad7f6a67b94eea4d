"""One module per page of the console, each with ``render(ctx)``; ``PAGES`` is their order in the sidebar
(the seed's troubleshooting order)."""

from console.pages import capacity, kv, latency, overview, releases, routing, workload

PAGES = (
    ("Overview", "overview", overview.render),
    ("Latency", "latency", latency.render),
    ("Workload", "workload", workload.render),
    ("KV & scheduler", "kv", kv.render),
    ("Routing", "routing", routing.render),
    ("Releases", "releases", releases.render),
    ("Capacity", "capacity", capacity.render),
)
