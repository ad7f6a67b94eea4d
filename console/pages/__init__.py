"""One module per page of the console, each with ``render(ctx)``; ``PAGES`` pairs them with ``console.routes``."""

from console.pages import capacity, kv, latency, overview, releases, routing, workload
from console.routes import ROUTES

_RENDERS = {"overview": overview.render, "latency": latency.render, "workload": workload.render, "kv": kv.render,
            "routing": routing.render, "releases": releases.render, "capacity": capacity.render}
PAGES = tuple((title, path, _RENDERS[path]) for title, path in ROUTES)
