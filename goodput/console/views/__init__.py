"""One module per page of the console, each with ``render(ctx)``; ``PAGES`` pairs them with ``goodput.console.routes``."""

from goodput.console.routes import ROUTES
from goodput.console.views import capacity, kv, latency, overview, releases, routing, workload

__all__ = ["PAGES"]

_RENDERS = {"overview": overview.render, "latency": latency.render, "workload": workload.render, "kv": kv.render,
            "routing": routing.render, "releases": releases.render, "capacity": capacity.render}
PAGES = tuple((title, path, _RENDERS[path]) for title, path in ROUTES)
